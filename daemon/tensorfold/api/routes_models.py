"""GET /v1/models: the served model id and each configured alias."""

from __future__ import annotations

from quart import Blueprint, Response

from .sse import json_response
from .state import get_state

bp = Blueprint("models", __name__)


@bp.get("/v1/models")
async def list_models() -> Response:
    state = get_state()
    data = [{"id": name, "object": "model", "created": int(state.started_at), "owned_by": "tensorfold",
             "root": state.served_id, "max_model_len": state.engine.context_length}
            for name in state.model_names]
    return json_response({"object": "list", "data": data})
