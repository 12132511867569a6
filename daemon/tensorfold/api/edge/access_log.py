"""One line per request on the serve log (logger tensorfold.api.access_log,
level INFO), written when the answer's last byte is sent:

    POST /v1/chat/completions 200 412.7 ms prompt_tokens=31 completion_tokens=24
    GET /v1/models 200 0.9 ms
    POST /v1/chat/completions 200 2033.5 ms prompt_tokens=31 completion_tokens=96 client gone

method, path, status, the time from the request's arrival to its answer's
end (a stream's included), and the reply's token counts when it generated
one (`note_usage`, called where the engine's Finish arrives). `client gone`:
the client left before the answer ended (a request refused before any
answer has status `-`).

`AccessLog` wraps the app's ASGI callable; a context variable carries the
request's note to the route, whose tasks inherit it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from ...engine.types import Usage

log = logging.getLogger(__name__)

ASGIApp = Callable[[dict[str, Any], Callable[[], Awaitable[Any]], Callable[[dict[str, Any]], Awaitable[None]]],
                   Awaitable[None]]


@dataclass(slots=True)
class Note:
    status: int | None = None
    ended: bool = False
    usage: Usage | None = None


_note: ContextVar[Note | None] = ContextVar("tensorfold_access_note", default=None)


def note_usage(usage: Usage) -> None:
    """Put the reply's token counts on this request's access line."""
    note = _note.get()
    if note is not None:
        note.usage = usage


def access_line(method: str, path: str, note: Note, ms: float) -> str:
    line = f"{method} {path} {note.status or '-'} {ms:.1f} ms"
    if note.usage is not None:
        line += f" prompt_tokens={note.usage.prompt_tokens} completion_tokens={note.usage.completion_tokens}"
    return line if note.ended else line + " client gone"


class AccessLog:
    """ASGI middleware that logs one access line per HTTP request."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Callable[[], Awaitable[Any]],
                       send: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        note = Note()
        start = time.perf_counter()

        async def watched(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                note.status = message["status"]
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                note.ended = True
            await send(message)

        token = _note.set(note)
        try:
            await self.app(scope, receive, watched)
        finally:
            _note.reset(token)
            log.info("%s", access_line(scope["method"], scope["path"], note, (time.perf_counter() - start) * 1e3))
