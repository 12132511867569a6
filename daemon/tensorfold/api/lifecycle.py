"""Graceful shutdown: what the server does between SIGTERM (or SIGINT) and its exit;
and memory handed back after a large request.

`Drain.begin()` stops the server taking requests (each new one is a 503), ends
the requests still being prepared (validation, rendering, a grammar compile:
a 503), tells the engine to fail every reply in flight with SHUTDOWN (a stream
ends with a server_error event and [DONE]; Responses with response.failed; a
whole reply is an error), stops the grammar compiles, and waits until every
stream has sent its last event, at most `grace` seconds. Then the server closes.

A request whose body is LARGE_BODY or more leaves the memory its preparation
freed (tokenizing 7 MB of text takes about 450 MB) with the C allocator, which
keeps it: it is handed back after the request (backends/host.py).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from ..backends.host import release_freed_memory
from . import errors

log = logging.getLogger(__name__)

SHUTDOWN = "the server is shutting down"
LARGE_BODY = 1 << 20


def tracked(handler: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """A POST route that shutdown ends (Drain.run)."""
    @functools.wraps(handler)
    async def route(*args: Any, **kwargs: Any) -> Any:
        from .state import get_state

        return await get_state().drain.run(handler, *args, **kwargs)
    return route


def counted(events: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """A stream's events, counted by the app's Drain until the last one is sent."""
    from .state import get_state

    return get_state().drain.stream(events)


def _shutting_down() -> errors.APIError:
    return errors.APIError("The server is shutting down; retry once it is back", status=503,
                           type=errors.SERVER_ERROR, code="server_shutting_down")


class Drain:
    """The requests in progress, so shutdown can end them."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.closing = False
        self._preparing: set[asyncio.Task[Any]] = set()
        self._streams = 0

    async def run(self, handler: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Any:
        """`handler(*args, **kwargs)`: a 503 once closing, or when shutdown comes before
        it has returned its response."""
        if self.closing:
            raise _shutting_down()
        if down := getattr(self.engine, "down", None):
            raise errors.APIError(f"The server cannot generate: {down}", status=503, type=errors.SERVER_ERROR,
                                  code="engine_down")
        from quart import has_request_context, request

        task = asyncio.current_task()
        assert task is not None
        self._preparing.add(task)
        try:
            return await handler(*args, **kwargs)
        except asyncio.CancelledError as exc:
            if exc.args != (SHUTDOWN,):
                raise
            task.uncancel()
            raise _shutting_down() from None
        finally:
            self._preparing.discard(task)
            if has_request_context() and (request.content_length or 0) >= LARGE_BODY:
                await asyncio.to_thread(release_freed_memory)

    async def stream(self, events: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """`events`, counted until their last one is sent (or the client leaves)."""
        self._streams += 1
        try:
            async for chunk in events:
                yield chunk
        finally:
            self._streams -= 1

    async def begin(self, grace: float = 5.0) -> None:
        """End every request (see the module's text); returns once the streams have
        closed, or after `grace` seconds."""
        if self.closing:
            return
        self.closing = True
        log.info("shutting down: ending %d request(s) being prepared and %d stream(s)",
                 len(self._preparing), self._streams)
        for task in list(self._preparing):
            task.cancel(SHUTDOWN)
        self.engine.end_all(SHUTDOWN)
        deadline = time.monotonic() + grace
        while (self._streams or self._preparing) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
