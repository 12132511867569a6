"""Routes and HTTP-level errors: /v1/models (list and retrieve), / (to the console), /health, /metrics,
404, 405, 413, 401, unknown model."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.api.api_helpers import CHAT, COMPLETIONS, HELLO, assert_envelope, parse_prometheus
from tensorfold.config import ServerConfig
from tests.api.conftest import ALIAS, API_KEY, MAX_BODY
from tests.api.fake_engine import FakeEngine
from tests.servers import running


def test_models_lists_served_id_and_aliases(http, server):
    r = http.get("/v1/models")
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "list"
    assert [m["id"] for m in body["data"]] == [server.served_id, ALIAS]
    for m in body["data"]:
        assert m["object"] == "model" and isinstance(m["created"], int) and m["owned_by"]


def test_models_through_openai_client(client, server):
    assert [m.id for m in client.models.list()] == [server.served_id, ALIAS]


def test_models_retrieve_the_served_id_and_each_alias(client, http, server):
    listed = http.get("/v1/models").json()["data"]
    for name, entry in zip([server.served_id, ALIAS], listed, strict=True):
        model = client.models.retrieve(name)
        assert model.id == name and model.object == "model" and model.owned_by
        assert http.get(f"/v1/models/{name}").json() == entry


def test_models_retrieve_an_unknown_id_is_404_naming_alias(client, http):
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-4o")
    error = assert_envelope(http.get("/v1/models/gpt-4o"), 404, "model")
    assert error["code"] == "model_not_found"
    assert "--alias" in error["message"] and "gpt-4o" in error["message"]


def test_models_retrieve_an_id_with_a_slash():
    with running(FakeEngine(), ServerConfig(aliases=("org/model-x",))) as served:
        with openai.OpenAI(base_url=served.base_url, api_key="unused", max_retries=0, timeout=30) as c:
            assert c.models.retrieve("org/model-x").id == "org/model-x"
            with pytest.raises(openai.NotFoundError):
                c.models.retrieve("org/model-y")


@pytest.mark.parametrize("method", ["GET", "HEAD"])
def test_root_redirects_to_the_console(http, method):
    r = http.request(method, "/")
    assert r.status_code == 302
    assert r.headers["location"] == "/console/"


def test_health_reports_model_window_and_counters(http, server):
    r = http.get("/health")
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "ok"
    assert body["model"] == server.served_id
    assert body["context_length"] == server.engine.context_length
    for key in ("busy", "requests_running", "requests_total", "prompt_tokens_total",
                "completion_tokens_total", "prefill_seconds_total", "decode_seconds_total"):
        assert key in body, key
    streams = {k[len("streams_"):]: v for k, v in body.items() if k.startswith("streams_")}
    assert body.get("streams") == (streams or None)


def test_metrics_are_the_health_counters_as_prometheus_text(http, server):
    r = http.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    families = parse_prometheus(r.text)
    health = http.get("/health").json()
    for key, value in health.items():
        if isinstance(value, (bool, int, float)) and key != "context_length":
            assert families[f"tensorfold_{key}"].type == ("counter" if key.endswith("_total") else "gauge"), key
    assert families["tensorfold_context_length"].value == server.engine.context_length
    assert families["tensorfold_info"].samples[0][0]["model"] == server.served_id


@pytest.mark.parametrize("method, path", [("GET", "/v1/nope"), ("POST", "/v1/chat"), ("GET", "/index.html"),
                                          ("GET", "/v1/model/x")])
def test_unknown_route_is_404_envelope(http, method, path):
    assert_envelope(http.request(method, path), 404)


@pytest.mark.parametrize("method, path", [("GET", CHAT), ("PUT", COMPLETIONS), ("POST", "/v1/models"),
                                          ("POST", "/v1/models/x"), ("DELETE", "/health"), ("POST", "/")])
def test_wrong_method_is_405_envelope(http, method, path):
    r = http.request(method, path)
    assert_envelope(r, 405)
    assert "allow" in r.headers


def test_body_too_large_is_413_envelope(http):
    big = {"messages": [{"role": "user", "content": "x" * (MAX_BODY + 10)}]}
    assert_envelope(http.post(CHAT, json=big), 413)


def test_body_just_under_the_limit_is_read(http):
    r = http.post(CHAT, content=b'{"messages": 5}' + b" " * (MAX_BODY - 100),
                  headers={"content-type": "application/json"})
    assert_envelope(r, 400, "messages")


def test_unknown_model_is_404_model_not_found(http):
    error = assert_envelope(http.post(CHAT, json={"model": "gpt-4o", "messages": HELLO}), 404, "model")
    assert error["code"] == "model_not_found"
    assert "--alias 'gpt-4o'" in error["message"]
    error = assert_envelope(http.post(COMPLETIONS, json={"model": "nope", "prompt": "hi"}), 404, "model")
    assert error["code"] == "model_not_found"


@pytest.mark.parametrize("path, body", [(CHAT, {"messages": HELLO}), (COMPLETIONS, {"prompt": "Once"})])
def test_reply_names_the_alias_it_was_asked_for(http, server, path, body):
    assert http.post(path, json={**body, "model": ALIAS, "max_tokens": 4}).json()["model"] == ALIAS
    assert http.post(path, json={**body, "model": server.served_id, "max_tokens": 4}).json()["model"] \
        == server.served_id
    assert http.post(path, json={**body, "max_tokens": 4}).json()["model"] == server.served_id


def test_api_key_required_on_v1_routes(auth_server):
    with httpx.Client(base_url=auth_server.url, timeout=30) as http:
        error = assert_envelope(http.post(CHAT, json={"messages": HELLO}), 401)
        assert error["code"] == "invalid_api_key"
        assert_envelope(http.get("/v1/models", headers={"Authorization": "Bearer wrong"}), 401)
        assert_envelope(http.get("/v1/models", headers={"Authorization": API_KEY}), 401)
        assert http.get("/health").status_code == 200            # not under /v1
        ok = http.get("/v1/models", headers={"Authorization": f"Bearer {API_KEY}"})
        assert ok.status_code == 200
        # a refusal before the body is read closes the connection; the client's next request works
        refused = http.post(CHAT, json={"messages": HELLO, "pad": "x" * 100_000})
        assert refused.status_code == 401 and refused.headers["connection"] == "close"
        assert http.get("/v1/models", headers={"Authorization": f"Bearer {API_KEY}"}).status_code == 200
        # the scheme is case-insensitive; another scheme with the right key is still refused
        assert http.get("/v1/models", headers={"Authorization": f"bearer {API_KEY}"}).status_code == 200
        assert_envelope(http.get("/v1/models", headers={"Authorization": f"Basic {API_KEY}"}), 401)
    with openai.OpenAI(base_url=auth_server.base_url, api_key=API_KEY, max_retries=0) as good:
        assert good.chat.completions.create(model="fake-model", messages=HELLO).choices[0].message.content
    with openai.OpenAI(base_url=auth_server.base_url, api_key="bad", max_retries=0) as bad:
        with pytest.raises(openai.AuthenticationError):
            bad.models.list()


def test_unexpected_error_is_500_server_error_envelope(fake_server, fake_http, monkeypatch):
    def broken() -> dict:
        raise RuntimeError("bug")
    monkeypatch.setattr(fake_server.engine, "health", broken)
    error = assert_envelope(fake_http.get("/health"), 500, None, type="server_error")
    assert "bug" not in error["message"]          # internals are logged, not sent


def test_doubled_slash_is_a_json_404(fake_http):
    assert_envelope(fake_http.get("/v1//models"), 404)
