"""GET /health and GET /metrics: the engine's counters (busy, requests
running and waiting, token and time totals a poller can difference into
rates, streams under --parallel), the served model and the served window;
as JSON, and as Prometheus text (metrics.py). Neither asks for the API key:
only /v1/* routes do."""

from __future__ import annotations

from quart import Blueprint, Response

from ... import __version__
from ..reply import metrics
from ..reply.sse import json_response
from ..state import get_state

bp = Blueprint("health", __name__)


@bp.get("/health")
async def health() -> Response:
    state = get_state()
    return json_response(metrics.health_body(
        state.engine.health(), model=state.served_id, aliases=list(state.aliases), version=__version__,
        context_length=state.engine.context_length, uptime_seconds=state.uptime_seconds))


@bp.get("/metrics")
async def prometheus() -> Response:
    state = get_state()
    text = metrics.exposition(state.engine.health(), model=state.served_id, version=__version__,
                              context_length=state.engine.context_length, uptime_seconds=state.uptime_seconds)
    return Response(text, status=200, content_type=metrics.CONTENT_TYPE)
