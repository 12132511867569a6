"""The chat flow: a chat body validated, its engine request built, its reply generated.
POST /v1/chat/completions runs it, and so does POST /v1/completions for a body with a
nonempty messages list (SPEC.md), so neither route imports the other."""

from __future__ import annotations

import time
from typing import Any

from quart import Response

from .reply.chat_reply import ChatReply, reply_parser
from .reply.generation import respond
from .reply.payloads import ChatShape
from .request.build import prepare_chat
from .request.limits import check_generation
from .request.parsing import off_loop, validate
from .request.schemas import ChatCompletionRequest
from .state import get_state, new_id


def _validated(raw: dict[str, Any]) -> ChatCompletionRequest:
    check_generation(raw, get_state().config.limits)
    return validate(ChatCompletionRequest, raw)


async def run_chat(raw: dict[str, Any]) -> Response:
    """Validate, render and fit the request (every refusal is a 400 before a
    stream opens), then generate."""
    body = await off_loop(_validated, raw)
    state = get_state()
    model = state.resolve_model(body.model)
    request_id = new_id("chatcmpl")
    engine_request = await prepare_chat(state, body, request_id)
    parser = reply_parser(state.chat_format, body, engine_request)
    shape = ChatShape(request_id, model, int(time.time()), ChatReply(parser), body.ignored_fields)
    return await respond(state.engine, engine_request, shape, body.stream, body.include_usage)
