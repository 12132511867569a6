"""GET /health: status, the served model, the served window and the engine's
counters (busy, requests_running, requests_total, token and time totals) that
a poller can difference into rates."""

from __future__ import annotations

from quart import Blueprint, Response

from .sse import json_response
from .state import get_state

bp = Blueprint("health", __name__)


@bp.get("/health")
async def health() -> Response:
    state = get_state()
    body = {**state.engine.health(), "status": "ok", "model": state.served_id,
            "aliases": list(state.aliases), "context_length": state.engine.context_length}
    return json_response(body)
