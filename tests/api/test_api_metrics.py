"""GET /metrics (Prometheus text) and GET /health: the same engine counters,
every key the engine reports, the served window, and no API key needed.

These run against the FakeEngine (`fake_server`), whose health() has the
engine's Counters keys and lets a test add keys (`extra_health`)."""

from __future__ import annotations

import math

import httpx
import pytest

import tensorfold
from tensorfold.api.reply import metrics
from tests.api.api_helpers import (CHAT, COMPLETIONS, HELLO, MetricFamily, assert_envelope, parse_prometheus,
                                  sse_events)
from tests.api.conftest import API_KEY

ENGINE_KEYS = ("requests_running", "requests_waiting", "requests_total", "prompt_tokens_total",
               "cached_tokens_total", "completion_tokens_total", "prefill_seconds_total",
               "decode_seconds_total", "rounds_total", "preemptions_total", "streams_decoding",
               "streams_prefilling", "streams_maximum", "kv_blocks_used", "busy")


def scrape(http: httpx.Client) -> dict[str, MetricFamily]:
    r = http.get("/metrics")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    return parse_prometheus(r.text)


def as_number(value) -> float:
    return float(int(value)) if isinstance(value, bool) else float(value)


def test_metrics_exports_every_health_key_with_its_type(fake_http, fake_server):
    families = scrape(fake_http)
    health = fake_server.engine.health()
    assert set(ENGINE_KEYS) <= set(health)
    for key, value in health.items():
        family = families[f"tensorfold_{key}"]
        assert family.type == ("counter" if key.endswith("_total") else "gauge"), key
        assert family.help
        assert family.value == as_number(value), key
    assert families["tensorfold_busy"].value in (0.0, 1.0)
    assert families["tensorfold_context_length"].type == "gauge"
    assert families["tensorfold_context_length"].value == fake_server.engine.context_length
    info = families["tensorfold_info"]
    assert info.type == "gauge"
    assert info.samples == [({"model": fake_server.served_id, "version": tensorfold.__version__}, 1.0)]
    assert families["tensorfold_uptime_seconds"].value > 0
    exported = {f"tensorfold_{k}" for k in health} | {"tensorfold_context_length", "tensorfold_uptime_seconds",
                                                        "tensorfold_info"}
    assert set(families) == exported


def test_metrics_move_after_a_request(fake_http):
    before = scrape(fake_http)
    usage = fake_http.post(CHAT, json={"messages": HELLO, "max_tokens": 9}).json()["usage"]
    streamed = sse_events(fake_http.post(COMPLETIONS, json={"prompt": "Once", "max_tokens": 3, "stream": True}))
    usage2 = streamed[-2]["usage"]
    after = scrape(fake_http)

    def moved(name: str) -> float:
        return after[f"tensorfold_{name}"].value - before[f"tensorfold_{name}"].value

    assert moved("requests_total") == 2
    assert moved("prompt_tokens_total") == usage["prompt_tokens"] + usage2["prompt_tokens"]
    assert moved("completion_tokens_total") == usage["completion_tokens"] + usage2["completion_tokens"] > 0
    assert moved("decode_seconds_total") > 0
    assert after["tensorfold_requests_running"].value == 0
    assert after["tensorfold_busy"].value == 0


def test_unknown_engine_keys_are_exported_by_their_names(fake_http, fake_server, monkeypatch):
    monkeypatch.setattr(fake_server.engine, "extra_health", {
        "drafted_total": 120, "accepted_total": 97, "lanes_idle": 3, "spec_ratio": 0.8083,
        "odd-key.name": 5, "backend": "torch", "nested": {"a": 1}, "missing": None,
    })
    families = scrape(fake_http)
    assert (families["tensorfold_drafted_total"].type, families["tensorfold_drafted_total"].value) == ("counter", 120)
    assert (families["tensorfold_accepted_total"].type, families["tensorfold_accepted_total"].value) == ("counter", 97)
    assert (families["tensorfold_lanes_idle"].type, families["tensorfold_lanes_idle"].value) == ("gauge", 3)
    assert families["tensorfold_spec_ratio"].value == 0.8083
    assert families["tensorfold_odd_key_name"].value == 5          # made a valid metric name
    for skipped in ("backend", "nested", "missing"):
        assert f"tensorfold_{skipped}" not in families
    body = fake_http.get("/health").json()                          # /health carries them all as sent
    assert (body["drafted_total"], body["backend"], body["nested"], body["missing"]) == (120, "torch", {"a": 1}, None)


def test_health_has_every_engine_key_the_window_and_streams(fake_http, fake_server):
    body = fake_http.get("/health").json()
    health = fake_server.engine.health()
    for key, value in health.items():
        assert body[key] == value, key
    assert body["status"] == "ok"
    assert body["model"] == fake_server.served_id
    assert body["context_length"] == fake_server.engine.context_length
    assert body["version"] == tensorfold.__version__
    assert body["streams"] == {"decoding": health["streams_decoding"],
                               "prefilling": health["streams_prefilling"],
                               "maximum": health["streams_maximum"]}


def test_metrics_and_health_need_no_api_key(auth_server):
    with httpx.Client(base_url=auth_server.url, timeout=30) as http:
        assert parse_prometheus(http.get("/metrics").text)["tensorfold_info"].samples[0][1] == 1
        assert http.get("/health").json()["status"] == "ok"
        assert_envelope(http.get("/v1/models"), 401)
        assert http.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 200
        assert http.get("/v1/models", headers={"Authorization": f"Bearer {API_KEY}"}).status_code == 200


def test_metrics_only_answers_get(fake_http):
    r = fake_http.post("/metrics")
    assert_envelope(r, 405)
    assert "GET" in r.headers["allow"]


def test_metrics_failure_is_a_500_envelope(fake_server, fake_http, monkeypatch):
    def broken() -> dict:
        raise RuntimeError("bug")
    monkeypatch.setattr(fake_server.engine, "health", broken)
    error = assert_envelope(fake_http.get("/metrics"), 500, None, type="server_error")
    assert "bug" not in error["message"]


# -- the metrics module ---------------------------------------------------------

def test_exposition_escapes_labels_and_writes_special_values():
    text = metrics.exposition({"weird_total": math.inf, "ratio": math.nan, "low": -math.inf, "busy": True,
                               "tiny": 1e-7, "big": 10**15, "context_length": 7},
                              model='my "model"\\v2\nx', version="0.1.0", context_length=4096)
    families = parse_prometheus(text)
    assert families["tensorfold_weird_total"].value == math.inf
    assert math.isnan(families["tensorfold_ratio"].value)
    assert families["tensorfold_low"].value == -math.inf
    assert families["tensorfold_busy"].value == 1
    assert families["tensorfold_tiny"].value == 1e-7
    assert families["tensorfold_big"].value == 10**15
    assert families["tensorfold_context_length"].value == 4096       # the server's, not the engine key
    assert families["tensorfold_info"].samples[0][0] == {"model": 'my "model"\\v2\nx', "version": "0.1.0"}


def test_exposition_skips_a_second_key_with_the_same_metric_name():
    families = parse_prometheus(metrics.exposition({"a.b": 1, "a_b": 2}, model="m", version="v", context_length=1))
    assert families["tensorfold_a_b"].value == 1


@pytest.mark.parametrize("counters, streams", [
    ({"streams_decoding": 2, "streams_prefilling": 1, "streams_maximum": 8},
     {"decoding": 2, "prefilling": 1, "maximum": 8}),
    ({"requests_running": 0}, None),
])
def test_health_body_streams_view(counters, streams):
    body = metrics.health_body(counters, model="m", aliases=[], version="v", context_length=9)
    assert body.get("streams") == streams
    assert body["context_length"] == 9 and body["status"] == "ok"


def test_health_body_server_fields_win_a_clash():
    body = metrics.health_body({"status": "draining", "model": "x", "busy": False},
                               model="m", aliases=["a"], version="v", context_length=9)
    assert (body["status"], body["model"], body["aliases"], body["busy"]) == ("ok", "m", ["a"], False)
