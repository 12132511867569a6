"""POST /v1/responses end to end on the real engine (tiny random checkpoint),
through the official openai client and raw HTTP: every body and event
checked strictly against the openai package's types."""

from __future__ import annotations

from typing import Literal

import openai
import pytest
from pydantic import BaseModel

from tests.api.api_helpers import CHAT, assert_envelope
from tests.api.test_responses_types import check_response, check_stream, needs_real_engine, parse_sse

RESPONSES = "/v1/responses"
LONG = ("Here is a long note about the history of lighthouses, kept so that the prompt spans several "
        "cache blocks. Lighthouses guided ships along dangerous coasts for centuries; their keepers "
        "trimmed wicks, wound clockwork and logged the weather every night. Fresnel lenses later "
        "focused the light into beams seen for miles. Summarize the note in one sentence.")


def create(http, **body) -> dict:
    r = http.post(RESPONSES, json=body)
    assert r.status_code == 200, r.text
    return r.json()


def stream(http, **body) -> list[dict]:
    r = http.post(RESPONSES, json={**body, "stream": True})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream")
    return parse_sse(r.text)


def test_create_retrieve_delete_with_the_openai_client(client, server):
    response = client.responses.create(model=server.served_id, input="Say hello.", instructions="Be brief.",
                                       max_output_tokens=12, metadata={"topic": "greeting"},
                                       extra_body={"seed": 3})
    raw = response.model_dump(mode="json", exclude_unset=True)
    check_response(raw)
    assert response.status in ("completed", "incomplete")
    assert response.model == server.served_id and response.instructions == "Be brief."
    assert response.metadata == {"topic": "greeting"}
    assert response.output[-1].type == "message" and isinstance(response.output_text, str)
    usage = response.usage
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens and 1 <= usage.output_tokens <= 12
    if response.status == "incomplete":
        assert response.incomplete_details.reason == "max_output_tokens" and usage.output_tokens == 12
    again = client.responses.retrieve(response.id)
    assert again.model_dump(mode="json", exclude_unset=True) == raw
    assert client.responses.delete(response.id) is None
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response.id)


def test_stream_with_the_openai_client_equals_whole(client, server):
    kwargs = dict(model=server.served_id, input="Tell me a story.", max_output_tokens=20, temperature=0.8,
                  extra_body={"seed": 5})
    whole = client.responses.create(**kwargs)
    with client.responses.stream(**kwargs) as events:
        seen = list(events)
        if seen[-1].type == "response.completed":    # the client's accumulated response
            assert events.get_final_response().output_text == whole.output_text
    assert seen[0].type == "response.created" and seen[-1].type in ("response.completed", "response.incomplete")
    final = seen[-1].response
    assert final.output_text == whole.output_text
    assert "".join(e.delta for e in seen if e.type == "response.output_text.delta") == whole.output_text
    assert final.status == whole.status
    assert (final.usage.input_tokens, final.usage.output_tokens) == (whole.usage.input_tokens,
                                                                     whole.usage.output_tokens)
    streamed = client.responses.retrieve(final.id).model_dump()
    assert streamed["tensorfold"]["token_sha"] == whole.model_dump()["tensorfold"]["token_sha"]


def test_raw_stream_events_are_strict_and_match_the_stored_response(http):
    events = stream(http, input="Count to five.", max_output_tokens=16, seed=1)
    final = check_stream(events)
    assert final["status"] in ("completed", "incomplete")
    stored = http.get(f"{RESPONSES}/{final['id']}")
    assert stored.status_code == 200 and stored.json() == final
    whole = create(http, input="Count to five.", max_output_tokens=16, seed=1)
    assert whole["tensorfold"]["token_sha"] == final["tensorfold"]["token_sha"]
    assert whole["output"][0]["content"] == final["output"][0]["content"]


def test_incomplete_at_max_output_tokens(http):
    body = create(http, input="Go on forever.", max_output_tokens=5, ignore_eos=True)
    check_response(body)
    assert body["status"] == "incomplete" and body["incomplete_details"] == {"reason": "max_output_tokens"}
    assert body["usage"]["output_tokens"] == 5 and body["output"][-1]["status"] == "incomplete"
    events = stream(http, input="Go on forever.", max_output_tokens=5, ignore_eos=True)
    assert events[-1]["type"] == "response.incomplete" and check_stream(events)["status"] == "incomplete"


def test_a_response_is_its_chat_completion(http):
    """Same prompt, same tokens: token_sha and text equal the chat completion's,
    drafted or not."""
    response = create(http, instructions="You answer in French.", input="What is a cat?",
                      max_output_tokens=24, temperature=0.7, top_k=50, seed=17)
    chat = http.post(CHAT, json={"messages": [{"role": "system", "content": "You answer in French."},
                                              {"role": "user", "content": "What is a cat?"}],
                                 "max_tokens": 24, "temperature": 0.7, "top_k": 50, "seed": 17}).json()
    assert response["tensorfold"]["token_sha"] == chat["tensorfold"]["token_sha"]
    assert response["output"][0]["content"][0]["text"] == chat["choices"][0]["message"]["content"]
    assert response["usage"]["input_tokens"] == chat["usage"]["prompt_tokens"]
    serial = create(http, instructions="You answer in French.", input="What is a cat?",
                    max_output_tokens=24, temperature=0.7, top_k=50, seed=17, draft=False)
    assert serial["tensorfold"]["token_sha"] == response["tensorfold"]["token_sha"]


def test_multi_turn_with_previous_response_id_resumes_the_cached_prefix(client, http, server):
    needs_real_engine(server)
    first = client.responses.create(model=server.served_id, input=LONG, max_output_tokens=8, extra_body={"seed": 2})
    assert first.usage.input_tokens > 64
    second = client.responses.create(model=server.served_id, previous_response_id=first.id,
                                     input="Now in three words.", max_output_tokens=8,
                                     extra_body={"seed": 2})
    check_response(second.model_dump(mode="json", exclude_unset=True))
    assert second.previous_response_id == first.id
    assert second.usage.input_tokens_details.cached_tokens >= 64
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
    # The second turn is the chat completion a chat client would send.
    chat = http.post(CHAT, json={"messages": [{"role": "user", "content": LONG},
                                              {"role": "assistant", "content": first.output_text},
                                              {"role": "user", "content": "Now in three words."}],
                                 "max_tokens": 8, "seed": 2}).json()
    assert chat["usage"]["prompt_tokens"] == second.usage.input_tokens
    assert chat["tensorfold"]["token_sha"] == second.model_dump()["tensorfold"]["token_sha"]


def test_store_false_keeps_nothing(http):
    body = create(http, input="Hi.", max_output_tokens=4, store=False)
    check_response(body)
    assert_envelope(http.get(f"{RESPONSES}/{body['id']}"), 404)
    assert body["id"] not in [e["id"] for e in http.get(RESPONSES, params={"limit": 100}).json()["data"]]
    error = assert_envelope(http.post(RESPONSES, json={"input": "More.", "previous_response_id": body["id"]}),
                            400, param="previous_response_id")
    assert error["code"] == "previous_response_not_found"
    events = stream(http, input="Hi.", max_output_tokens=4, store=False)
    assert_envelope(http.get(f"{RESPONSES}/{events[-1]['response']['id']}"), 404)


def test_listing_pages_newest_first(http):
    made = [create(http, input=f"Note {n}.", max_output_tokens=3)["id"] for n in range(3)]
    page = http.get(RESPONSES, params={"limit": 2}).json()
    assert page["object"] == "list" and [e["id"] for e in page["data"]] == made[::-1][:2]
    assert page["has_more"] is True and page["first_id"] == made[2] and page["last_id"] == made[1]
    entry = page["data"][0]
    assert set(entry) == {"id", "object", "created_at", "model", "status", "usage", "preview"}
    assert entry["preview"]["input"] == "Note 2." and isinstance(entry["preview"]["output"], str)
    after = http.get(RESPONSES, params={"limit": 1, "after": made[1]}).json()
    assert [e["id"] for e in after["data"]] == [made[0]]
    for bad in ("0", "101", "x", "-1", "\u00b2", "\u0663"):           # superscript two, Arabic-Indic three
        assert_envelope(http.get(RESPONSES, params={"limit": bad}), 400, param="limit")


@pytest.mark.parametrize("method", ["GET", "DELETE"])
def test_unknown_ids_are_404_with_the_envelope(http, method):
    error = assert_envelope(http.request(method, f"{RESPONSES}/resp_nope"), 404)
    assert error["code"] == "not_found" and "resp_nope" in error["message"]


def test_deleted_response_is_gone(client, http):
    body = create(http, input="Bye.", max_output_tokens=3)
    r = http.delete(f"{RESPONSES}/{body['id']}")
    assert r.status_code == 200 and r.json() == {"id": body["id"], "object": "response", "deleted": True}
    assert_envelope(http.delete(f"{RESPONSES}/{body['id']}"), 404)


class Answer(BaseModel):
    answer: Literal["yes", "no"]
    confidence: int


def test_parse_with_a_pydantic_model_runs_the_structured_output_path(client, server, http):
    """responses.parse sends text.format json_schema, which runs as chat's
    response_format: the same tokens as the chat request, parsed into the
    model (or, on a server whose chat refuses it, the same refusal)."""
    needs_real_engine(server)
    chat = http.post(CHAT, json={"messages": [{"role": "user", "content": "Is the sky blue?"}], "max_tokens": 64,
                                 "seed": 1, "response_format": {"type": "json_schema", "json_schema": {
                                     "name": "Answer", "schema": Answer.model_json_schema(), "strict": True}}})
    if chat.status_code == 400:
        with pytest.raises(openai.BadRequestError) as info:
            client.responses.parse(model=server.served_id, input="Is the sky blue?", text_format=Answer,
                                   max_output_tokens=64, extra_body={"seed": 1})
        assert info.value.body["param"] == "text.format"
        assert info.value.body["code"] == chat.json()["error"]["code"]
        return
    parsed = client.responses.parse(model=server.served_id, input="Is the sky blue?", text_format=Answer,
                                    max_output_tokens=64, extra_body={"seed": 1})
    assert parsed.status == "completed" and isinstance(parsed.output_parsed, Answer)
    assert parsed.output_text == chat.json()["choices"][0]["message"]["content"]
    stored = http.get(f"{RESPONSES}/{parsed.id}").json()
    check_response(stored)
    assert stored["tensorfold"]["token_sha"] == chat.json()["tensorfold"]["token_sha"]
    assert stored["text"]["format"]["type"] == "json_schema" and stored["text"]["format"]["name"] == "Answer"


def test_unknown_fields_are_listed_as_ignored(client, server):
    response = client.responses.create(model=server.served_id, input="Hi.", max_output_tokens=3, temperature=0,
                                       extra_body={"fancy_option": 1, "top_k": 5})
    assert response.model_extra["tensorfold"]["ignored_fields"] == ["fancy_option"]
    plain = client.responses.create(model=server.served_id, input="Hi.", max_output_tokens=3, temperature=0)
    assert "ignored_fields" not in plain.model_extra["tensorfold"]
