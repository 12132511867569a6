"""The Responses output builder on its own: reply events in the parsers'
language (reasoning, answer text, tool calls; synthetic, from chat deltas,
and from a real ReplyParser) in, output items and typed stream events out,
all validated against the openai package's types; streamed == whole."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai import omit
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import Response

from tensorfold.api.responses.builder import EventLog, OutputBuilder, PlainText, chat_delta_events
from tensorfold.api.responses.items import items_to_messages
from tensorfold.api.responses.objects import ResponseHead, response_json
from tensorfold.engine.types import Finish, FinishReason, Stats, Usage
from tensorfold.parsers import build_reply_parser
from tensorfold.parsers.types import ContentDelta, ReasoningDelta, ToolCallArgsDelta, ToolCallEnd, ToolCallStart
from tests.api.test_responses_types import EVENT_TYPES, check_response, check_stream

ARGS = '{"city": "Paris", "unit": "C"}'

# Reasoning, an answer, then two calls, each in fragments.
FULL = [
    ReasoningDelta("The user wants "), ReasoningDelta("the weather."),
    ContentDelta("Let me "), ContentDelta("check."),
    ToolCallStart(0, "call_a", "get_weather"), ToolCallArgsDelta(0, '{"city": '),
    ToolCallArgsDelta(0, '"Paris", "unit": "C"}'), ToolCallEnd(0),
    ToolCallStart(1, "call_b", "get_time"), ToolCallArgsDelta(1, "{}"),
]


def finish(reason: FinishReason = FinishReason.STOP, completion: int = 30) -> Finish:
    return Finish(reason, Usage(prompt_tokens=12, completion_tokens=completion, cached_tokens=4,
                                reasoning_tokens=5),
                  Stats(token_sha="ab" * 32, time_to_first_token=0.1, prefill_seconds=0.1,
                        decode_seconds=0.2, decode_tokens_per_second=100.0))


def run(events: list[Any], status: str = "completed", streamed: bool = True
        ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Stream events (the created/in_progress/final ones as the route adds
    them) and the final Response."""
    head = ResponseHead(id="resp_test", model="tiny")
    log = EventLog() if streamed else None
    builder = OutputBuilder(log)
    out: list[dict[str, Any]] = []
    if log is not None:
        started = response_json(head, "in_progress", [])
        out += [log.make("response.created", response=started), log.make("response.in_progress", response=started)]
    for event in events:
        out += builder.feed(event)
    out += builder.finish(status)
    reason = FinishReason.LENGTH if status == "incomplete" else FinishReason.STOP
    body = response_json(head, status, builder.output, finish(reason))
    if log is not None:
        out.append(log.make(f"response.{status}", response=body))
    return out, body


def without_ids(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in item.items() if k != "id"} for item in output]


def test_reasoning_message_and_calls_stream_and_whole():
    events, body = run(FULL)
    final = check_stream(events)
    assert final == body
    model = check_response(body)
    assert [item["type"] for item in body["output"]] == ["reasoning", "message", "function_call", "function_call"]
    reasoning, message, call_a, call_b = body["output"]
    assert reasoning["content"] == [{"type": "reasoning_text", "text": "The user wants the weather."}]
    assert reasoning["summary"] == []
    assert model.output_text == "Let me check."
    assert (call_a["call_id"], call_a["name"], call_a["arguments"]) == ("call_a", "get_weather", ARGS)
    assert (call_b["call_id"], call_b["name"], call_b["arguments"]) == ("call_b", "get_time", "{}")
    assert all(item["status"] == "completed" for item in body["output"])
    assert body["usage"] == {"input_tokens": 12, "input_tokens_details": {"cached_tokens": 4, "cache_write_tokens": 0},
                             "output_tokens": 30, "output_tokens_details": {"reasoning_tokens": 5},
                             "total_tokens": 42}
    _, whole = run(FULL, streamed=False)
    check_response(whole)
    assert without_ids(whole["output"]) == without_ids(body["output"])


def test_event_order_per_item():
    events, _ = run(FULL)
    kinds = [e["type"].removeprefix("response.") for e in events]
    assert kinds == [
        "created", "in_progress",
        "output_item.added", "content_part.added", "reasoning_text.delta", "reasoning_text.delta",
        "reasoning_text.done", "content_part.done", "output_item.done",
        "output_item.added", "content_part.added", "output_text.delta", "output_text.delta",
        "output_text.done", "content_part.done", "output_item.done",
        "output_item.added", "function_call_arguments.delta", "function_call_arguments.delta",
        "function_call_arguments.done", "output_item.done",
        "output_item.added", "function_call_arguments.delta", "function_call_arguments.done", "output_item.done",
        "completed",
    ]
    added = [e for e in events if e["type"] == "response.output_item.added"]
    assert all(e["item"]["status"] == "in_progress" for e in added)
    assert added[2]["item"]["arguments"] == "" and added[1]["item"]["content"] == []
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta"
                     and e["output_index"] == 2)
    assert deltas == ARGS


def test_the_openai_stream_accumulator_rebuilds_the_response():
    """The openai client's own stream state, fed our events, ends with our Response."""
    events, body = run(FULL)
    state = ResponseStreamState(input_tools=[], text_format=omit)
    handled = [state.handle_event(EVENT_TYPES[e["type"]].model_validate(e)) for e in events]
    assert [e.type for e in handled[-1]] == ["response.completed"]
    final = handled[-1][0].response.model_dump(mode="json", exclude_unset=True)
    for item in final["output"]:              # the client's own additions
        item.pop("parsed_arguments", None)
        for part in item.get("content") or ():
            part.pop("parsed", None)
    assert final["output"] == body["output"]


def test_cut_reply_is_incomplete_and_its_open_item_too():
    events, body = run([ReasoningDelta("thinking"), ContentDelta("half an ans")], status="incomplete")
    check_stream(events)
    assert events[-1]["type"] == "response.incomplete"
    assert body["status"] == "incomplete" and body["incomplete_details"] == {"reason": "max_output_tokens"}
    assert [i["status"] for i in body["output"]] == ["completed", "incomplete"]
    assert body["completed_at"] is None


def test_empty_reply_is_one_empty_message():
    events, body = run([ContentDelta("")])
    check_stream(events)
    assert without_ids(body["output"]) == [{"type": "message", "role": "assistant", "status": "completed",
                                            "content": [{"type": "output_text", "text": "", "annotations": [],
                                                         "logprobs": []}]}]


def test_text_after_a_call_and_reasoning_after_text_start_new_items():
    events, body = run([ContentDelta("a"), ReasoningDelta("r"), ToolCallStart(0, "c", "f"), ContentDelta("b")])
    check_stream(events)
    assert [i["type"] for i in body["output"]] == ["message", "reasoning", "function_call", "message"]
    assert body["output"][2]["arguments"] == ""


def test_a_call_item_closes_at_its_end_event():
    builder = OutputBuilder(EventLog())
    builder.feed(ToolCallStart(0, "c", "f"))
    events = builder.feed(ToolCallEnd(0))
    assert [e["type"] for e in events] == ["response.function_call_arguments.done", "response.output_item.done"]
    assert builder.output[0]["status"] == "completed"
    assert builder.finish() == []


def test_misordered_tool_call_fragments_are_refused():
    builder = OutputBuilder(EventLog())
    with pytest.raises(ValueError):
        builder.feed(ToolCallArgsDelta(0, "{}"))
    builder.feed(ToolCallStart(0, "c", "f"))
    builder.feed(ContentDelta("x"))
    with pytest.raises(ValueError):
        builder.feed(ToolCallArgsDelta(0, "{}"))
    with pytest.raises(ValueError):
        builder.feed(ToolCallEnd(0))
    with pytest.raises(ValueError):
        builder.feed(ToolCallStart(0, "c", "f"))


# -- chat deltas -> events ---------------------------------------------------------

CHAT_STREAM = [
    {"role": "assistant", "content": ""},
    {"reasoning_content": "The user wants "}, {"reasoning_content": "the weather."},
    {"content": "Let me "}, {"content": "check."},
    {"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                     "function": {"name": "get_weather", "arguments": ""}}]},
    {"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]},
    {"tool_calls": [{"index": 0, "function": {"arguments": '"Paris", "unit": "C"}'}}]},
    {"tool_calls": [{"index": 1, "id": "call_b", "type": "function",
                     "function": {"name": "get_time", "arguments": "{}"}}]},
]
CHAT_MESSAGE = {"role": "assistant", "reasoning_content": "The user wants the weather.", "content": "Let me check.",
                "tool_calls": [{"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": ARGS}},
                               {"id": "call_b", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]}


def test_chat_stream_deltas_and_a_whole_chat_message_give_the_same_items():
    streamed_events = [e for d in CHAT_STREAM for e in chat_delta_events(d)]
    events, streamed = run(streamed_events)
    check_stream(events)
    _, whole = run(list(chat_delta_events(CHAT_MESSAGE)), streamed=False)
    _, synthetic = run(FULL, streamed=False)
    assert without_ids(streamed["output"]) == without_ids(whole["output"]) == without_ids(synthetic["output"])


def test_a_reply_parsers_events_build_the_same_items_in_any_chunking():
    """The parsers' ReplyParser (here a <think> + Hermes template) feeds the
    builder directly: reasoning, message and function_call items."""
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string"}}}}}]
    text = ('<think>The user wants the weather.</think>Let me check.<tool_call>\n'
            '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "C"}}\n</tool_call>')
    outputs = []
    for size in (1, 5, len(text)):
        parser = build_reply_parser(tools, tool_format="hermes", reasoning_format="think", new_id=lambda: "call_1")
        events = [e for i in range(0, len(text), size) for e in parser.feed(text[i:i + size])] + parser.end()
        stream_events, body = run(events)
        check_stream(stream_events)
        outputs.append(without_ids(body["output"]))
        assert [i["type"] for i in body["output"]] == ["reasoning", "message", "function_call"]
    assert outputs[0] == outputs[1] == outputs[2]
    reasoning, message, call = outputs[0]
    assert reasoning["content"][0]["text"] == "The user wants the weather."
    assert message["content"][0]["text"] == "Let me check."
    assert call["name"] == "get_weather" and json.loads(call["arguments"]) == {"city": "Paris", "unit": "C"}


def test_plain_text_is_all_answer_text():
    plain = PlainText()
    assert [e for t in ("Hel", "", "lo") for e in plain.feed(t)] + plain.end() == \
        [ContentDelta("Hel"), ContentDelta("lo")]


def test_output_items_come_back_as_the_chat_messages_of_the_turn():
    """A response's output, sent back as input, is the assistant message a
    chat client would send: reasoning_content, content and tool_calls."""
    _, body = run(FULL, streamed=False)
    outputs = [{"type": "function_call_output", "call_id": "call_a", "output": "18C"},
               {"type": "function_call_output", "call_id": "call_b", "output": "noon"}]
    messages = items_to_messages([{"type": "message", "role": "user", "content": "Weather?"},
                                  *body["output"], *outputs])
    assert messages == [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "Let me check.", "reasoning_content": "The user wants the weather.",
         "tool_calls": [{"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": ARGS}},
                        {"id": "call_b", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_a", "content": "18C"},
        {"role": "tool", "tool_call_id": "call_b", "content": "noon"},
    ]
    json.dumps(messages)


@pytest.mark.parametrize("message", [
    CHAT_MESSAGE,
    {"role": "assistant", "content": None, "tool_calls": CHAT_MESSAGE["tool_calls"][:1]},
    {"role": "assistant", "content": "Just text."},
    {"role": "assistant", "content": "", "reasoning_content": "Cut while thinking."},
], ids=["everything", "only a call", "only text", "only reasoning"])
def test_a_chat_reply_round_trips_through_output_items(message):
    """chat message -> reply events -> output items -> the chat message again:
    a later turn sends back exactly what chat returned."""
    _, body = run(list(chat_delta_events(message)), streamed=False)
    assert items_to_messages(body["output"]) == [message]


def test_one_turn_is_one_assistant_message_whatever_its_item_order():
    items = [{"type": "message", "role": "user", "content": "Go."},
             {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "[",
                                                                   "annotations": []}]},
             {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
             {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "hm"}]},
             {"type": "message", "role": "assistant", "content": "]"},
             {"type": "function_call_output", "call_id": "c1", "output": "ok"},
             {"type": "reasoning", "summary": []}]
    assert items_to_messages(items) == [
        {"role": "user", "content": "Go."},
        {"role": "assistant", "content": "[]", "reasoning_content": "hm",
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        {"role": "assistant", "content": ""},
    ]


def test_response_type_round_trip():
    _, body = run(FULL, streamed=False)
    assert Response.model_validate(body).output_text == "Let me check."
