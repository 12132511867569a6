"""Server-sent events framing: `data: {json}\\n\\n` per event, then `data: [DONE]\\n\\n`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from quart import Response

DONE = b"data: [DONE]\n\n"


def dumps(obj: Any) -> str:
    """Compact JSON, UTF-8 text kept as is (NaN would be a bug: refuse it)."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def event(obj: Any) -> bytes:
    return f"data: {dumps(obj)}\n\n".encode()


def sse_response(events: AsyncIterator[bytes]) -> Response:
    """A streaming response: no body timeout, no proxy buffering."""
    response = Response(events, status=200, mimetype="text/event-stream",
                        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    response.timeout = None
    return response


def json_response(obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(dumps(obj), status=status, mimetype="application/json", headers=headers)
