"""GET /v1/models: the served model id and each configured alias;
GET /v1/models/{id}: one of them (`client.models.retrieve`), any other id a
404 model_not_found."""

from __future__ import annotations

from typing import Any

from quart import Blueprint, Response

from ..reply.sse import json_response
from ..state import AppState, get_state

bp = Blueprint("models", __name__)


def model_json(state: AppState, name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": int(state.started_at), "owned_by": "tensorfold",
            "root": state.served_id, "max_model_len": state.engine.context_length}


@bp.get("/v1/models")
async def list_models() -> Response:
    state = get_state()
    return json_response({"object": "list", "data": [model_json(state, name) for name in state.model_names]})


@bp.get("/v1/models/<path:model_id>")          # an id may hold a slash (org/name)
async def retrieve_model(model_id: str) -> Response:
    state = get_state()
    return json_response(model_json(state, state.resolve_model(model_id)))
