"""Response objects as the Responses API returns them.

`ResponseHead` holds what a response echoes of its request; `response_json`
puts a head, a status, output items and the engine's Finish together into a
Response object (plus the `tensorfold` statistics block every reply carries).
`listing_entry` is one row of GET /v1/responses, the console's listing (an
extension: OpenAI has no such route).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ...engine.types import Finish, Usage
from ..reply.payloads import stats_json
from ..reply.sse import dumps

PREVIEW_CHARS = 200


@dataclass(slots=True, frozen=True)
class ResponseHead:
    id: str
    model: str
    created_at: int = field(default_factory=lambda: int(time.time()))
    instructions: str | None = None
    max_output_tokens: int | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    parallel_tool_calls: bool = True
    previous_response_id: str | None = None
    reasoning: dict[str, Any] = field(default_factory=lambda: {"effort": None, "summary": None})
    store: bool = True
    temperature: float | None = None
    top_p: float | None = None
    text: dict[str, Any] = field(default_factory=lambda: {"format": {"type": "text"}})
    tool_choice: Any = "auto"
    tools: list[dict[str, Any]] = field(default_factory=list)
    user: str | None = None
    ignored: tuple[str, ...] = ()          # request fields no schema field takes


def response_usage_json(usage: Usage) -> dict[str, Any]:
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_tokens, "cache_write_tokens": 0},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.total_tokens,
    }


def response_json(head: ResponseHead, status: str, output: list[dict[str, Any]],
                  finish: Finish | None = None, error: dict[str, Any] | None = None) -> dict[str, Any]:
    """The Response object. `status`: in_progress, completed, incomplete
    (the reply limit cut it) or failed (with `error`). Every field is one of
    the openai package's `Response` fields (it has no `store`), except the
    `tensorfold` statistics block of a finished reply."""
    body: dict[str, Any] = {
        "id": head.id,
        "object": "response",
        "created_at": head.created_at,
        "status": status,
        "background": False,
        "completed_at": int(time.time()) if status == "completed" else None,
        "error": error,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": head.instructions,
        "max_output_tokens": head.max_output_tokens,
        "max_tool_calls": None,
        "metadata": dict(head.metadata),
        "model": head.model,
        "output": output,
        "parallel_tool_calls": head.parallel_tool_calls,
        "previous_response_id": head.previous_response_id,
        "reasoning": dict(head.reasoning),
        "temperature": head.temperature,
        "text": head.text,
        "tool_choice": head.tool_choice,
        "tools": head.tools,
        "top_p": head.top_p,
        "truncation": "disabled",
        "usage": response_usage_json(finish.usage) if finish is not None else None,
        "user": head.user,
    }
    if finish is not None:
        body["tensorfold"] = stats_json(finish.stats, head.ignored)
    return body


def output_text(response: dict[str, Any]) -> str:
    """The answer text of a Response object's message items."""
    return "".join(part.get("text", "") for item in response.get("output", ())
                   if item.get("type") == "message" for part in item.get("content", ()))


def listing_entry(response: dict[str, Any], history: list[dict[str, Any]]) -> dict[str, Any]:
    """One row of GET /v1/responses: id, created_at, model, status, usage and a
    short preview of the last user input and of the output."""
    calls = [f"{item['name']}({item['arguments']})" for item in response.get("output", ())
             if item.get("type") == "function_call"]
    return {
        "id": response["id"],
        "object": "response",
        "created_at": response["created_at"],
        "model": response["model"],
        "status": response["status"],
        "usage": response.get("usage"),
        "preview": {"input": _clip(_last_user_text(history)),
                    "output": _clip(output_text(response) or " ".join(calls))},
    }


def _last_user_text(history: list[dict[str, Any]]) -> str:
    for item in reversed(history):
        if item.get("type") == "message" and item.get("role") == "user":
            content = item.get("content")
            if isinstance(content, str):
                return content
            return "".join(p.get("text", "") for p in content or () if isinstance(p, dict))
    return ""


def _clip(text: str) -> str:
    return text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS - 1] + "\u2026"


def sse_frame(event: dict[str, Any]) -> bytes:
    """One typed server-sent event: `event: <type>` and its JSON data."""
    return f"event: {event['type']}\ndata: {dumps(event)}\n\n".encode()
