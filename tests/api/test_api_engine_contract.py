"""What reaches the engine, and how engine failures and disconnects surface.

These run against the FakeEngine test double (`fake_server`), which records
each Request and fails on request.
"""

from __future__ import annotations

import httpx
import openai
import pytest

from tensorfold.engine.sampler import derive_seed
from tensorfold.engine.types import Priority
from tests.api.api_helpers import CHAT, COMPLETIONS, HELLO, assert_envelope, sse_events
from tests.servers import wait_for

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                           "parameters": {"type": "object",
                                                          "properties": {"city": {"type": "string"}}}}}]


def sent(fake_server, reply_id: str):
    return fake_server.engine.request(reply_id)


def test_sampling_fields_and_flags_reach_the_engine(fake_http, fake_server):
    r = fake_http.post(CHAT, json={"messages": HELLO, "temperature": 0.3, "top_p": 0.9, "top_k": 2.0,
                                   "min_p": 0.05, "seed": 1234, "stop": ["xyz", "END"], "ignore_eos": True,
                                   "priority": "background", "max_tokens": 7})
    req = sent(fake_server, r.json()["id"])
    assert (req.sampling.temperature, req.sampling.top_p, req.sampling.top_k, req.sampling.min_p,
            req.sampling.seed) == (0.3, 0.9, 2, 0.05, 1234)
    assert isinstance(req.sampling.top_k, int)
    assert req.stop == ("xyz", "END")
    assert req.ignore_eos is True
    assert req.priority is Priority.BACKGROUND
    assert req.max_tokens == 7


def test_null_and_absent_fields_keep_server_defaults(fake_http, fake_server):
    defaults = fake_server.config.sampling
    r = fake_http.post(CHAT, json={"messages": HELLO, "temperature": None, "top_k": None})
    req = sent(fake_server, r.json()["id"])
    assert (req.sampling.temperature, req.sampling.top_p, req.sampling.top_k, req.sampling.min_p) == \
        (defaults.temperature, defaults.top_p, defaults.top_k, defaults.min_p)
    assert req.priority is Priority.FOREGROUND and req.stop == () and req.ignore_eos is False


def test_seed_is_derived_from_the_prompt_when_absent(fake_http, fake_server):
    a = sent(fake_server, fake_http.post(CHAT, json={"messages": HELLO}).json()["id"])
    b = sent(fake_server, fake_http.post(CHAT, json={"messages": HELLO, "seed": None}).json()["id"])
    assert a.sampling.seed == b.sampling.seed == derive_seed(a.prompt)


def test_single_stop_string_passes_as_a_tuple(fake_http, fake_server):
    r = fake_http.post(COMPLETIONS, json={"prompt": "x", "stop": "fake"})
    assert sent(fake_server, r.json()["id"]).stop == ("fake",)
    assert r.json()["choices"][0]["text"] == "Hello from the "
    assert r.json()["choices"][0]["finish_reason"] == "stop"


def test_stop_list_through_openai_client_stream_and_whole(fake_client):
    kw = dict(model="fake-model", messages=HELLO, stop=["engine", "Hello"])
    assert fake_client.chat.completions.create(**kw).choices[0].message.content == ""
    kw["stop"] = ["deterministic", "reply"]
    whole = fake_client.chat.completions.create(**kw).choices[0].message.content
    streamed = "".join(c.choices[0].delta.content or "" for c in
                       fake_client.chat.completions.create(stream=True, **kw) if c.choices)
    assert whole == streamed == "Hello from the fake engine. This "


def test_default_reply_limit_is_the_remaining_context(fake_http, fake_server):
    r = fake_http.post(CHAT, json={"messages": HELLO}).json()
    req = sent(fake_server, r["id"])
    assert req.max_tokens == fake_server.engine.context_length - len(req.prompt)


def test_max_completion_tokens_wins_over_max_tokens(fake_http, fake_server):
    r = fake_http.post(CHAT, json={"messages": HELLO, "max_tokens": 9, "max_completion_tokens": 5})
    assert sent(fake_server, r.json()["id"]).max_tokens == 5


def test_raw_prompt_gets_no_template_and_tokenizer_bos(fake_http, fake_server):
    r = fake_http.post(COMPLETIONS, json={"prompt": "Once"})
    tok = fake_server.engine.tokenizer
    assert sent(fake_server, r.json()["id"]).prompt == tok.encode("Once", add_special_tokens=True)
    r = fake_http.post(COMPLETIONS, json={"prompt": [[5, 6, 7]]})
    assert sent(fake_server, r.json()["id"]).prompt == [5, 6, 7]


def test_out_of_vocabulary_token_names_the_limit(fake_http, fake_server):
    vocab = fake_server.engine.tokenizer.vocab_size
    error = assert_envelope(fake_http.post(COMPLETIONS, json={"prompt": [1, vocab]}), 400, "prompt")
    assert str(vocab - 1) in error["message"]


def test_tools_and_template_kwargs_reach_the_template(fake_http, fake_server):
    renders = fake_server.engine.tokenizer.renders
    fake_http.post(CHAT, json={"messages": HELLO, "tools": TOOLS, "chat_template_kwargs": {"enable_thinking": False}})
    assert renders[-1]["tools"] == TOOLS
    assert renders[-1]["kwargs"] == {"enable_thinking": False}
    fake_http.post(CHAT, json={"messages": HELLO, "tools": TOOLS, "tool_choice": "none"})
    assert renders[-1]["tools"] is None          # tool_choice none hides the tools
    fake_http.post(CHAT, json={"messages": HELLO, "tools": TOOLS, "tool_choice": "auto"})
    assert renders[-1]["tools"] == TOOLS


def test_later_system_message_renders_as_user_through_the_server(fake_http, fake_server):
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"},
            {"role": "system", "content": "Now be terse."}]
    r = fake_http.post(CHAT, json={"messages": msgs})
    assert r.status_code == 200, r.text
    prompt = fake_server.engine.tokenizer.decode(sent(fake_server, r.json()["id"]).prompt)
    assert "<|im_start|>user\nNow be terse.<|im_end|>" in prompt


@pytest.mark.parametrize("marker", ["[[fail-finish]]", "[[fail-raise]]"])
def test_generation_error_whole_is_500(fake_http, marker):
    assert_envelope(fake_http.post(CHAT, json={"messages": [{"role": "user", "content": marker}]}),
                    500, None, type="server_error")
    assert_envelope(fake_http.post(COMPLETIONS, json={"prompt": marker}), 500, None, type="server_error")


@pytest.mark.parametrize("marker", ["[[fail-finish]]", "[[fail-raise]]"])
@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_generation_error_stream_is_error_event_then_done(fake_http, marker, path):
    body = {"messages": [{"role": "user", "content": marker}]} if path == CHAT else {"prompt": marker}
    r = fake_http.post(path, json={**body, "stream": True})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r)
    assert events[-1] == "[DONE]"
    error = events[-2]["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == "server_error"
    assert not any(e != "[DONE]" and "usage" in e for e in events)


def test_openai_client_raises_on_stream_error_event(fake_client):
    with pytest.raises(openai.APIError):
        for _ in fake_client.chat.completions.create(model="fake-model", stream=True,
                                                     messages=[{"role": "user", "content": "[[fail-finish]]"}]):
            pass


def test_stream_disconnect_aborts_the_engine_request(fake_server):
    engine = fake_server.engine
    before = len(engine.requests)
    body = {"messages": [{"role": "user", "content": "[[slow]]"}], "stream": True, "max_tokens": 400}
    with httpx.Client(base_url=fake_server.url, timeout=10) as http:
        with http.stream("POST", CHAT, json=body) as r:
            assert r.headers["content-type"].startswith("text/event-stream")
            lines = r.iter_lines()
            next(line for line in lines if '"content":"."' in line)     # tokens are flowing
    assert len(engine.requests) == before + 1
    rid = engine.requests[before].id
    assert wait_for(lambda: rid in engine.aborted), "closing the stream did not abort the request"
    assert rid not in engine.finished


def test_whole_request_disconnect_aborts_the_engine_request(fake_server):
    engine = fake_server.engine
    before = len(engine.requests)
    body = {"messages": [{"role": "user", "content": "[[slow]]"}], "max_tokens": 400}
    with httpx.Client(base_url=fake_server.url, timeout=0.3) as http:
        with pytest.raises(httpx.ReadTimeout):
            http.post(CHAT, json=body)
    assert wait_for(lambda: len(engine.requests) > before)
    rid = engine.requests[before].id
    assert wait_for(lambda: rid in engine.aborted), "a closed connection did not abort the request"
