"""Run an engine request and write its deltas as one body or as SSE.

The engine iterator is always closed on the way out (`aclosing`), so a
client that goes away (a CancelledError in the handler or the stream
generator, or Quart closing the stream) aborts the request at the engine's
next round.

Failures: a `Finish` with reason error (or abort: the engine gave up on a
client that is still here), an exception from the engine, or an iterator
that ends without a `Finish` are server errors: HTTP 500 for a whole reply;
after a stream has opened, an error event of type server_error, then [DONE].
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any, Protocol

from ...engine.types import Delta, Finish, FinishReason, Request
from .. import errors
from ..edge.access_log import note_usage
from ..lifecycle import counted
from .sse import DONE, event, json_response, sse_response

log = logging.getLogger(__name__)


class Generator(Protocol):
    def generate(self, request: Request) -> AsyncIterator[Delta]: ...


class Shape(Protocol):
    def whole(self, text: str, finish: Finish) -> dict[str, Any]: ...
    def first_chunk(self) -> dict[str, Any] | None: ...
    def text_chunks(self, text: str) -> list[dict[str, Any]]: ...
    def end_chunks(self) -> list[dict[str, Any]]: ...
    def finish_chunk(self, finish: Finish) -> dict[str, Any]: ...
    def usage_chunk(self, finish: Finish) -> dict[str, Any]: ...


class GenerationFailed(Exception):
    """The engine could not finish the reply; the message is for the client."""

    def api_error(self) -> Exception:
        return errors.server_error(str(self))

    error_type = errors.SERVER_ERROR


class GenerationRefused(GenerationFailed):
    """The server cannot take this request as sent (its KV cache would not fit in memory): a 400."""

    def api_error(self) -> Exception:
        return errors.invalid(str(self))

    error_type = errors.INVALID_REQUEST


def check_finish(finish: Finish | None) -> Finish:
    if finish is None:
        raise GenerationFailed("the engine stopped without finishing the reply")
    if finish.reason is FinishReason.ERROR and finish.refused:
        raise GenerationRefused(finish.error or "the request was refused")
    if finish.reason is FinishReason.ERROR:
        raise GenerationFailed(f"generation failed: {finish.error or 'unknown engine error'}")
    if finish.reason is FinishReason.ABORT:
        raise GenerationFailed("the engine aborted the request")
    return finish


async def run_engine(engine: Generator, request: Request) -> AsyncIterator[Delta]:
    """The engine's deltas through the last one (whose usage goes on the
    access line); engine exceptions become GenerationFailed (cancellation
    passes through untouched)."""
    try:
        async with aclosing(engine.generate(request)) as deltas:
            async for delta in deltas:
                if delta.finish is not None:
                    note_usage(delta.finish.usage)
                yield delta
                if delta.finish is not None:
                    return
    except GenerationFailed:
        raise
    except Exception as exc:
        log.exception("request %s: engine error", request.id)
        raise GenerationFailed(f"generation failed: {type(exc).__name__}: {exc}") from exc


async def whole_reply(engine: Generator, request: Request, shape: Shape) -> dict[str, Any]:
    """The reply as one body, or an APIError 500."""
    parts: list[str] = []
    finish: Finish | None = None
    try:
        async with aclosing(run_engine(engine, request)) as deltas:
            async for delta in deltas:
                parts.append(delta.text)
                finish = delta.finish
        finish = check_finish(finish)
    except GenerationFailed as exc:
        raise exc.api_error() from None
    return shape.whole("".join(parts), finish)


async def respond(engine: Generator, request: Request, shape: Shape, stream: bool,
                  usage_chunk: bool = False) -> Any:
    """The HTTP response for `request`: server-sent events when `stream` (counted by the
    app's shutdown drain), else one JSON body."""
    if stream:
        return sse_response(counted(stream_reply(engine, request, shape, usage_chunk=usage_chunk)))
    return json_response(await whole_reply(engine, request, shape))


async def stream_reply(engine: Generator, request: Request, shape: Shape,
                       usage_chunk: bool = False) -> AsyncIterator[bytes]:
    """SSE events: the first chunk, text chunks, the finish chunk (which
    carries usage, so the last event always does), then, when the client
    asked for stream_options.include_usage (`usage_chunk`), OpenAI's chunk
    with empty choices and the same usage; then [DONE]. A client that reads
    `chunk.choices[0]` of every chunk never meets an empty list unless it
    asked for one."""
    first = shape.first_chunk()
    if first is not None:
        yield event(first)
    finish: Finish | None = None
    try:
        async with aclosing(run_engine(engine, request)) as deltas:
            async for delta in deltas:
                for chunk in shape.text_chunks(delta.text):
                    yield event(chunk)
                finish = delta.finish
        finish = check_finish(finish)
        for chunk in shape.end_chunks():
            yield event(chunk)
    except GenerationFailed as exc:
        yield event(errors.envelope(str(exc), type=exc.error_type))
        yield DONE
        return
    yield event(shape.finish_chunk(finish))
    if usage_chunk:
        yield event(shape.usage_chunk(finish))
    yield DONE
