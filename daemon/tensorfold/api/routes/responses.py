"""The Responses API: POST /v1/responses, GET and DELETE /v1/responses/{id},
and GET /v1/responses (the console's listing, an extension).

A response runs as the equivalent chat completion (responses/to_chat.py)
through chat's schema, the chat request's one building step
(request/build.py prepare_chat: render, fit, grammar) and the engine, so its
prompt, tokens (token_sha), drafting, constraints and refusals are the chat
ones. Its reply text goes through chat's reply parser (chat_reply.reply_parser:
reasoning, tool calls) and OutputBuilder (responses/builder.py) into output items: one body, or
typed events (response.created, response.in_progress, each item's events,
then response.completed / response.incomplete / response.failed) each with
the next sequence number. With store true the finished response is put in the
store before its body or last event is sent.

Failures: a request the server refuses is a 400 before any event; an unknown
previous_response_id is a 400 (previous_response_not_found). A generation
failure is a 500 for a whole reply and response.failed in a stream.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from quart import Blueprint, Response, request

from ...engine.types import Finish, FinishReason, Request
from ...store import ResponseStore, StoredResponse
from .. import errors
from ..lifecycle import counted, tracked
from ..reply.chat_reply import reply_parser
from ..reply.generation import GenerationFailed, check_finish, run_engine
from ..reply.sse import json_response, sse_response
from ..request.build import prepare_chat
from ..request.limits import check_responses
from ..request.names import speaking
from ..request.parsing import off_loop, read_body, validate
from ..request.schemas import ChatCompletionRequest
from ..responses.builder import EventLog, OutputBuilder, PlainText, ReplyEvent, item_id
from ..responses.items import normalize_input
from ..responses.objects import ResponseHead, listing_entry, response_json, sse_frame
from ..responses.schemas import ResponsesRequest
from ..responses.to_chat import RESPONSES_NAMES, chat_body, head as response_head
from ..state import get_state

log = logging.getLogger(__name__)

bp = Blueprint("responses", __name__)

DEFAULT_LIMIT, MAX_LIMIT = 20, 100
NOT_FOUND = "not_found"
PREVIOUS_NOT_FOUND = "previous_response_not_found"


@bp.post("/v1/responses")
@tracked
async def create_response() -> Response:
    state = get_state()
    raw = await read_body(state.config.limits.depth)
    body, model, history, chat = await off_loop(_validated, raw)
    response_id = item_id("resp")
    with speaking(RESPONSES_NAMES):
        engine_request = await prepare_chat(state, chat, response_id)
    parser = reply_parser(state.chat_format, chat, engine_request) or PlainText()
    run = ResponseRun(state.engine, engine_request, parser,
                      response_head(body, chat, model, response_id, state.config.sampling),
                      state.responses, history)
    if body.stream:
        return sse_response(counted(run.stream()))
    return json_response(await run.whole())


def _validated(raw: dict[str, Any]) -> tuple[ResponsesRequest, str, list[dict[str, Any]], ChatCompletionRequest]:
    """The body, its model name, the conversation it continues and its equivalent chat body."""
    state = get_state()
    check_responses(raw, state.config.limits)
    body = validate(ResponsesRequest, raw)
    model = state.resolve_model(body.model)
    history = _conversation(state.responses, body)
    with speaking(RESPONSES_NAMES):
        chat = validate(ChatCompletionRequest, chat_body(body, raw, history))
    return body, model, history, chat


def _conversation(store: ResponseStore, body: ResponsesRequest) -> list[dict[str, Any]]:
    """The items this turn continues (a stored response's conversation and
    output, instructions left out) followed by its own input."""
    items = normalize_input(body.input)
    if body.previous_response_id is None:
        return items
    previous = store.get(body.previous_response_id)
    if previous is None:
        raise errors.invalid(f"Previous response with id '{body.previous_response_id}' not found: it was "
                             "never stored (store: false), was deleted, or was evicted from the store",
                             param="previous_response_id", code=PREVIOUS_NOT_FOUND)
    return [*previous.history, *previous.response["output"], *items]


def _status(finish: Finish) -> str:
    return "incomplete" if finish.reason is FinishReason.LENGTH else "completed"


@dataclass(slots=True)
class ResponseRun:
    engine: Any
    request: Request
    parser: Any                        # the reply parser: feed(text), end() -> reply events
    head: ResponseHead
    store: ResponseStore
    history: list[dict[str, Any]]

    async def _reply(self) -> AsyncIterator[ReplyEvent | Finish]:
        """The reply's events (its text through the chat path's reply parser:
        reasoning, answer text, tool calls), then its Finish; GenerationFailed
        when it fails."""
        finish: Finish | None = None
        async with aclosing(run_engine(self.engine, self.request)) as deltas:
            async for delta in deltas:
                for event in self.parser.feed(delta.text):
                    yield event
                finish = delta.finish
        finish = check_finish(finish)
        for event in self.parser.end():
            yield event
        yield finish

    def _keep(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.head.store and not self.store.put(
                StoredResponse(body["id"], body, self.history, listing_entry(body, self.history))):
            log.warning("response %s is larger than the whole store; not kept", body["id"])
        return body

    async def whole(self) -> dict[str, Any]:
        builder = OutputBuilder()
        try:
            async with aclosing(self._reply()) as reply:
                async for event in reply:
                    if isinstance(event, Finish):
                        builder.finish(_status(event))
                        return self._keep(response_json(self.head, _status(event), builder.output, event))
                    builder.feed(event)
        except GenerationFailed as exc:
            raise exc.api_error() from None
        raise AssertionError("unreachable: a reply ends with its Finish or GenerationFailed")

    async def stream(self) -> AsyncIterator[bytes]:
        events = EventLog()
        builder = OutputBuilder(events)
        started = response_json(self.head, "in_progress", [])
        yield sse_frame(events.make("response.created", response=started))
        yield sse_frame(events.make("response.in_progress", response=started))
        try:
            async with aclosing(self._reply()) as reply:
                async for event in reply:
                    if isinstance(event, Finish):
                        finish = event
                        break
                    for frame in builder.feed(event):
                        yield sse_frame(frame)
        except GenerationFailed as exc:
            for frame in builder.finish("incomplete"):
                yield sse_frame(frame)
            body = self._keep(response_json(self.head, "failed", builder.output,
                                            error={"code": exc.error_type, "message": str(exc)}))
            yield sse_frame(events.make("response.failed", response=body))
            return
        for frame in builder.finish(_status(finish)):
            yield sse_frame(frame)
        body = self._keep(response_json(self.head, _status(finish), builder.output, finish))
        yield sse_frame(events.make(f"response.{body['status']}", response=body))


# -- the store -------------------------------------------------------------------

def _stored(response_id: str) -> StoredResponse:
    record = get_state().responses.get(response_id)
    if record is None:
        raise errors.APIError(f"Response with id '{response_id}' not found", status=404, code=NOT_FOUND)
    return record


@bp.get("/v1/responses/<response_id>")
async def retrieve_response(response_id: str) -> Response:
    if request.args.get("stream", "false").lower() not in ("false", "0", ""):
        raise errors.unsupported("Streaming a stored response is not supported by this server", "stream")
    return json_response(_stored(response_id).response)


@bp.delete("/v1/responses/<response_id>")
async def delete_response(response_id: str) -> Response:
    if not get_state().responses.delete(response_id):
        _stored(response_id)                   # the 404
    return json_response({"id": response_id, "object": "response", "deleted": True})


@bp.get("/v1/responses")
async def list_responses() -> Response:
    """Stored responses, newest first: ?limit (1 to 100, default 20) and
    ?after=<id> for the next page. An extension for the console."""
    records, more = get_state().responses.page(_limit(), request.args.get("after") or None)
    data = [r.summary for r in records]
    return json_response({"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
                          "last_id": data[-1]["id"] if data else None, "has_more": more})


@bp.get("/v1/responses/<response_id>/input_items")
async def list_input_items(response_id: str) -> Response:
    """The conversation items a stored response answered (previous turns
    included, instructions not), as OpenAI lists them: ?order (desc by
    default, or asc), ?limit (1 to 100, default 20), ?after=<item id>. Items
    without an id of their own get `<response id>_in_<position>`; a message's
    text content is listed as one text part, as OpenAI's items carry it."""
    history = _stored(response_id).history
    items = [_listed_item(item, item.get("id") or f"{response_id}_in_{i}") for i, item in enumerate(history)]
    order = request.args.get("order", "desc")
    if order not in ("asc", "desc"):
        raise errors.invalid(f"Invalid 'order': must be 'asc' or 'desc', not {order!r}", param="order")
    if order == "desc":
        items.reverse()
    after = request.args.get("after")
    if after:
        ids = [item["id"] for item in items]
        if after not in ids:
            raise errors.invalid(f"Invalid 'after': no input item '{after}' in response '{response_id}'",
                                 param="after")
        items = items[ids.index(after) + 1:]
    limit = _limit()
    data = items[:limit]
    return json_response({"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
                          "last_id": data[-1]["id"] if data else None, "has_more": len(items) > limit})


def _listed_item(item: dict[str, Any], item_id: str) -> dict[str, Any]:
    out = {"id": item_id, **item}
    if item["type"] == "message" and isinstance(item["content"], str):
        part = "output_text" if item["role"] == "assistant" else "input_text"
        out["content"] = [{"type": part, "text": item["content"]}]
    return out


def _limit() -> int:
    text = request.args.get("limit")
    if text is None:
        return DEFAULT_LIMIT
    digits = text.strip()
    if not (digits.isascii() and digits.isdigit() and len(digits) <= 6) or not 1 <= int(digits) <= MAX_LIMIT:
        raise errors.invalid(f"Invalid 'limit': must be an integer from 1 to {MAX_LIMIT}, not {text!r}",
                             param="limit")
    return int(text)
