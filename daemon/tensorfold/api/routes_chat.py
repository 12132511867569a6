"""POST /v1/chat/completions: text chat, streamed or whole."""

from __future__ import annotations

import time
from typing import Any

from quart import Blueprint, Response

from . import convert
from .chat_reply import ChatReply, reply_parser
from .structured import attach_grammar
from .tool_prompt import tool_format
from .generation import stream_reply, whole_reply
from .limits import check_generation
from .lifecycle import counted, tracked
from .parsing import off_loop, read_body, validate
from .payloads import ChatShape
from .schemas import ChatCompletionRequest, GenerationRequest
from .sse import json_response, sse_response
from .state import get_state, new_id

bp = Blueprint("chat", __name__)


@bp.post("/v1/chat/completions")
@tracked
async def chat_completions() -> Response:
    return await run_chat(await read_body(get_state().config.limits.depth))


def _validated(raw: dict[str, Any]) -> ChatCompletionRequest:
    check_generation(raw, get_state().config.limits)
    return validate(ChatCompletionRequest, raw)


async def run_chat(raw: dict[str, Any]) -> Response:
    """Validate, render and fit the request (every refusal is a 400 before a
    stream opens), then generate. Also serves completions bodies that carry
    a nonempty messages list."""
    body = await off_loop(_validated, raw)
    state = get_state()
    model = state.resolve_model(body.model)
    request_id = new_id("chatcmpl")
    engine_request = await chat_engine_request(body, request_id)
    parser = reply_parser(state.engine, body, engine_request, state.config)
    shape = ChatShape(request_id, model, int(time.time()), ChatReply(parser), body.ignored_fields)
    return await respond(state.engine, engine_request, shape, body)


async def chat_engine_request(body: ChatCompletionRequest, request_id: str) -> Any:
    """The engine request for a validated chat body: rendered, fitted and
    constrained, every refusal a 400. /v1/responses runs through it too."""
    state = get_state()
    engine_request = await off_loop(convert.chat_request, body, state.engine, state.config, request_id)
    fmt = tool_format(getattr(state.engine.tokenizer, "chat_template", ""), state.config.tool_parser)
    return await attach_grammar(engine_request, body, state.engine, state.config.limits, fmt)


async def respond(engine: Any, request: Any, shape: Any, body: GenerationRequest) -> Response:
    """Generate `request`: as server-sent events when `body` asks to stream, or one JSON body."""
    if body.stream:
        return sse_response(counted(stream_reply(engine, request, shape, usage_chunk=body.include_usage)))
    return json_response(await whole_reply(engine, request, shape))
