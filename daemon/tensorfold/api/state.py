"""What every route needs: the engine, the settings and the served names."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from quart import current_app

from ..config import ServerConfig
from ..store import MemoryStore, ResponseStore
from . import errors
from .lifecycle import Drain
from .request.chat_format import ChatFormat

EXTENSION = "tensorfold"


@dataclass(slots=True)
class AppState:
    engine: Any                      # tensorfold.engine.async_engine.AsyncEngine or a stand-in
    config: ServerConfig
    served_id: str
    aliases: tuple[str, ...]
    started_at: float = field(default_factory=time.time)
    responses: ResponseStore = field(default_factory=MemoryStore)   # the Responses store
    drain: Drain = field(init=False)                                 # shutdown (lifecycle.py)
    chat_format: ChatFormat = field(init=False)                      # the model's, read once

    def __post_init__(self) -> None:
        self.drain = Drain(self.engine)
        self.chat_format = ChatFormat.of(self.engine.tokenizer, self.config.tool_parser)

    @property
    def uptime_seconds(self) -> float:
        return round(time.time() - self.started_at, 3)

    @property
    def model_names(self) -> tuple[str, ...]:
        return (self.served_id, *(a for a in self.aliases if a != self.served_id))

    def resolve_model(self, requested: str | None) -> str:
        """The name a reply reports: the requested one when it is the served id
        or an alias, the served id when none was sent. Any other name is a 404
        model_not_found, as vLLM and OpenAI answer it."""
        if requested is None:
            return self.served_id
        if requested in self.model_names:
            return requested
        served = ", ".join(repr(n) for n in self.model_names)
        raise errors.APIError(f"The model '{requested}' does not exist; this server serves {served} "
                              f"(start it with --alias '{requested}' to answer to that name too)",
                              status=404, param="model", code=errors.MODEL_NOT_FOUND)


def get_state() -> AppState:
    return current_app.extensions[EXTENSION]


def new_id(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(12)}"
