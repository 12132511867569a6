"""POST /v1/completions: a raw prompt (text or token ids), no chat template.

A body with a nonempty `messages` list is handled exactly as a chat request
(SPEC.md, MLX behaviour built on both backends): it gets the chat template and
a chat.completion reply, since that is what a chat handler returns.
"""

from __future__ import annotations

import time
from typing import Any

from quart import Blueprint, Response

from ..chat import run_chat
from ..lifecycle import tracked
from ..reply.generation import respond
from ..reply.payloads import CompletionShape
from ..request.build import prepare_completion
from ..request.limits import check_generation
from ..request.parsing import off_loop, read_body, validate
from ..request.schemas import CompletionRequest, wants_chat
from ..state import get_state, new_id

bp = Blueprint("completions", __name__)


def _validated(raw: dict[str, Any]) -> CompletionRequest:
    check_generation(raw, get_state().config.limits)
    return validate(CompletionRequest, raw)


@bp.post("/v1/completions")
@tracked
async def completions() -> Response:
    state = get_state()
    raw = await read_body(state.config.limits.depth)
    if wants_chat(raw):
        return await run_chat(raw)
    body = await off_loop(_validated, raw)
    model = state.resolve_model(body.model)
    request_id = new_id("cmpl")
    engine_request = await prepare_completion(state, body, request_id)
    shape = CompletionShape(request_id, model, int(time.time()), body.ignored_fields)
    return await respond(state.engine, engine_request, shape, body.stream, body.include_usage)
