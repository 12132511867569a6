"""POST /v1/chat/completions: text chat, streamed or whole (the chat flow: api/chat.py)."""

from __future__ import annotations

from quart import Blueprint, Response

from ..chat import run_chat
from ..lifecycle import tracked
from ..request.parsing import read_body
from ..state import get_state

bp = Blueprint("chat", __name__)


@bp.post("/v1/chat/completions")
@tracked
async def chat_completions() -> Response:
    return await run_chat(await read_body(get_state().config.limits.depth))
