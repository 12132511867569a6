"""What a response sends to the chat template and the engine, and how engine
failures and disconnects surface, on the FakeEngine test double (which
records renders and requests and fails on request)."""

from __future__ import annotations

import time

import httpx
import pytest

from tensorfold.engine.types import Priority
from tests.api.api_helpers import assert_envelope
from tests.api.test_responses_types import check_response, check_stream, parse_sse

RESPONSES = "/v1/responses"


def last_render(fake_server) -> dict:
    return fake_server.engine.tokenizer.renders[-1]


def create(fake_http, **body) -> dict:
    r = fake_http.post(RESPONSES, json=body)
    assert r.status_code == 200, r.text
    check_response(r.json())
    return r.json()


def test_fields_reach_the_engine_as_chat_sends_them(fake_http, fake_server):
    body = create(fake_http, input="Hi.", max_output_tokens=7, temperature=0.3, top_p=0.9, top_k=2, min_p=0.05,
                  seed=1234, stop=["xyz"], ignore_eos=True, priority="background", draft=False)
    request = fake_server.engine.request(body["id"])
    assert (request.sampling.temperature, request.sampling.top_p, request.sampling.top_k, request.sampling.min_p,
            request.sampling.seed) == (0.3, 0.9, 2, 0.05, 1234)
    assert request.max_tokens == 7 and request.stop == ("xyz",) and request.ignore_eos is True
    assert request.priority is Priority.BACKGROUND and request.draft is False
    assert (body["temperature"], body["top_p"]) == (0.3, 0.9)


def test_defaults_are_echoed(fake_http, fake_server):
    body = create(fake_http, input="Hi.")
    defaults = fake_server.config.sampling
    assert (body["temperature"], body["top_p"]) == (defaults.temperature, defaults.top_p)
    assert body["tool_choice"] == "auto" and body["tools"] == [] and body["parallel_tool_calls"] is True
    assert body["text"] == {"format": {"type": "text"}} and body["truncation"] == "disabled"


def test_instructions_are_this_turns_system_message_only(fake_http, fake_server):
    first = create(fake_http, input="First question.", instructions="Be terse.")
    assert last_render(fake_server)["messages"] == [{"role": "system", "content": "Be terse."},
                                                    {"role": "user", "content": "First question."}]
    create(fake_http, input="Second question.", previous_response_id=first["id"])
    reply = first["output"][0]["content"][0]["text"]
    assert last_render(fake_server)["messages"] == [
        {"role": "user", "content": "First question."},
        {"role": "assistant", "content": reply},
        {"role": "user", "content": "Second question."},
    ]


def test_a_chain_of_turns_keeps_the_whole_conversation(fake_http, fake_server):
    one = create(fake_http, input="One.")
    two = create(fake_http, input="Two.", previous_response_id=one["id"], instructions="New rules.")
    create(fake_http, input=[{"role": "user", "content": [{"type": "input_text", "text": "Three."}]}],
           previous_response_id=two["id"])
    messages = last_render(fake_server)["messages"]
    assert [(m["role"], m["content"]) for m in messages if m["role"] == "user"] == \
        [("user", "One."), ("user", "Two."), ("user", "Three.")]
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant", "user"]
    fake_http.delete(f"{RESPONSES}/{one['id']}")         # each stored response holds its whole chain
    create(fake_http, input="Four.", previous_response_id=two["id"])
    assert [m["content"] for m in last_render(fake_server)["messages"] if m["role"] == "user"] == \
        ["One.", "Two.", "Four."]


def test_reasoning_and_tool_items_reach_the_template_as_chat_messages(fake_http, fake_server):
    tools = [{"type": "function", "name": "get_weather", "description": "Weather",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]
    items = [
        {"role": "developer", "content": "Use tools."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "Look it up."}]},
        {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather",
         "arguments": '{"city": "Paris"}', "status": "completed"},
        {"type": "function_call_output", "call_id": "call_1", "output": "18C"},
    ]
    body = create(fake_http, input=items, tools=tools, parallel_tool_calls=False)
    render = last_render(fake_server)
    assert render["messages"] == [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "reasoning_content": "Look it up.",
         "tool_calls": [{"id": "call_1", "type": "function",
                         "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "18C", "tool_call_id": "call_1"},
    ]
    assert render["tools"] == [{"type": "function", "function": {k: v for k, v in tools[0].items() if k != "type"}}]
    assert body["tools"] == tools and body["parallel_tool_calls"] is False


def test_tool_choice_none_hides_the_tools_as_chat_does(fake_http, fake_server):
    create(fake_http, input="Hi.", tools=[{"type": "function", "name": "f"}], tool_choice="none")
    assert last_render(fake_server)["tools"] is None


def test_a_failed_whole_reply_is_a_500_and_not_stored(fake_http, fake_server):
    before = len(fake_http.get(RESPONSES, params={"limit": 100}).json()["data"])
    error = assert_envelope(fake_http.post(RESPONSES, json={"input": "[[fail-finish]]"}), 500, type="server_error")
    assert "injected failure" in error["message"]
    assert_envelope(fake_http.post(RESPONSES, json={"input": "[[fail-raise]]"}), 500, type="server_error")
    assert len(fake_http.get(RESPONSES, params={"limit": 100}).json()["data"]) == before


@pytest.mark.parametrize("marker", ["[[fail-finish]]", "[[fail-raise]]"])
def test_a_failed_stream_ends_with_response_failed(fake_http, marker):
    r = fake_http.post(RESPONSES, json={"input": marker, "stream": True})
    events = parse_sse(r.text)
    final = check_stream(events)
    assert events[-1]["type"] == "response.failed" and final["status"] == "failed"
    assert final["error"]["code"] == "server_error" and final["usage"] is None
    assert all(item["status"] == "incomplete" for item in final["output"])
    stored = fake_http.get(f"{RESPONSES}/{final['id']}")
    assert stored.status_code == 200 and stored.json() == final


def test_a_client_that_leaves_aborts_the_request_and_nothing_is_stored(fake_server):
    engine = fake_server.engine
    with httpx.Client(base_url=fake_server.url, timeout=30) as http:
        with http.stream("POST", RESPONSES, json={"input": "[[slow]]", "stream": True,
                                                  "max_output_tokens": 400}) as r:
            for line in r.iter_lines():
                if "response.output_text.delta" in line:
                    break                      # the reply is streaming: leave
        request_id = engine.requests[-1].id
        for _ in range(200):
            if request_id in engine.aborted:
                break
            time.sleep(0.02)
        assert request_id in engine.aborted
        assert_envelope(http.get(f"{RESPONSES}/{request_id}"), 404)


def test_the_engine_request_is_named_by_the_response_id(fake_http, fake_server):
    body = create(fake_http, input="Hi.")
    assert fake_server.engine.requests[-1].id == body["id"] and body["id"].startswith("resp_")


def test_the_app_keeps_the_store_it_is_given_and_evicts_the_oldest():
    from tensorfold.api.app import create_app
    from tensorfold.api.server import ServerThread
    from tensorfold.store import MemoryStore
    from tests.api.conftest import api_config
    from tests.api.fake_engine import FakeEngine

    store = MemoryStore(max_count=2)
    thread = ServerThread(create_app(FakeEngine(), api_config(), store=store))
    try:
        with httpx.Client(base_url=thread.start(), timeout=30) as http:
            ids = [http.post(RESPONSES, json={"input": f"Turn {n}."}).json()["id"] for n in range(3)]
            assert len(store) == 2 and store.get(ids[0]) is None
            assert_envelope(http.get(f"{RESPONSES}/{ids[0]}"), 404)
            error = assert_envelope(http.post(RESPONSES, json={"input": "More.", "previous_response_id": ids[0]}),
                                    400, param="previous_response_id")
            assert error["code"] == "previous_response_not_found"
            assert [e["id"] for e in http.get(RESPONSES).json()["data"]] == ids[:0:-1]
    finally:
        thread.stop()


def test_input_items_list_the_conversation_a_response_answered(fake_http):
    one = create(fake_http, input="One.", instructions="Be terse.")
    two = create(fake_http, input="Two.", previous_response_id=one["id"])
    url = f"{RESPONSES}/{two['id']}/input_items"
    asc = fake_http.get(url, params={"order": "asc"}).json()
    texts = [(item["type"], item.get("role")) for item in asc["data"]]
    assert texts == [("message", "user"), ("message", "assistant"), ("message", "user")]
    assert asc["data"][0]["content"] in ("One.", [{"type": "input_text", "text": "One."}])
    assert len({item["id"] for item in asc["data"]}) == 3 and asc["has_more"] is False
    desc = fake_http.get(url).json()
    assert [i["id"] for i in desc["data"]] == [i["id"] for i in reversed(asc["data"])]
    first = fake_http.get(url, params={"order": "asc", "limit": 1}).json()
    assert first["has_more"] is True and first["data"] == asc["data"][:1]
    rest = fake_http.get(url, params={"order": "asc", "after": first["last_id"]}).json()
    assert rest["data"] == asc["data"][1:]
    assert_envelope(fake_http.get(url, params={"order": "sideways"}), 400, param="order")
    assert_envelope(fake_http.get(url, params={"after": "nope"}), 400, param="after")
    assert_envelope(fake_http.get(url, params={"limit": "0"}), 400, param="limit")
    assert_envelope(fake_http.get(f"{RESPONSES}/resp_missing/input_items"), 404)


def test_keys_an_input_item_does_not_define_are_not_stored(fake_http):
    """Unknown keys (here 40 KB of them) are dropped, so the store keeps only what the
    Responses API defines."""
    junk = "x" * 40_000
    item = {"type": "message", "role": "user", "junk": junk,
            "content": [{"type": "input_text", "text": "Hi.", "junk": junk}]}
    call = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}", "junk": junk}
    output = {"type": "function_call_output", "call_id": "c1", "output": "ok", "junk": junk}
    made = create(fake_http, input=[item, call, output])
    items = fake_http.get(f"{RESPONSES}/{made['id']}/input_items", params={"order": "asc"}).json()["data"]
    assert [{k for k in i if k != "id"} for i in items] == [
        {"type", "role", "content"}, {"type", "call_id", "name", "arguments"}, {"type", "call_id", "output"}]
    assert items[0]["content"] == [{"type": "input_text", "text": "Hi."}]
    listed = fake_http.get(RESPONSES).json()["data"]
    assert listed[0]["id"] == made["id"] and junk not in str(listed)
