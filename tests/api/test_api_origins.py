"""--allowed-origins: pages on the listed origins (or any, with `*`) call /v1
from a browser with CORS headers, preflight included, before the API-key
check; other origins, other routes and the console keep the guard."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest

from tensorfold.api.app import create_app
from tensorfold.api.edge.origins import AllowedOrigins, normalize_origin
from tensorfold.cli import main as cli_main
from tests.api.api_helpers import CHAT, HELLO, assert_envelope
from tests.api.conftest import API_KEY, api_config
from tests.api.fake_engine import FakeEngine
from tests.servers import Served, running

UI = "http://localhost:3000"
LISTED = (UI, "https://Chat.Example/")
PREFLIGHT = {"Access-Control-Request-Method": "POST",
             "Access-Control-Request-Headers": "authorization, content-type, x-stainless-os"}


@pytest.fixture(scope="module")
def listed_server() -> Iterator[Served]:
    with running(FakeEngine(), api_config(allowed_origins=LISTED, api_key=API_KEY)) as served:
        yield served


@pytest.fixture(scope="module")
def any_server() -> Iterator[Served]:
    with running(FakeEngine(), api_config(allowed_origins=("*",))) as served:
        yield served


@pytest.fixture
def listed(listed_server: Served) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=listed_server.url, timeout=30,
                      headers={"Authorization": f"Bearer {API_KEY}"}) as http:
        yield http


def allowed(response: httpx.Response, origin: str) -> bool:
    return (response.headers.get("access-control-allow-origin") == origin
            and "origin" in response.headers.get("vary", "").lower())


def test_the_openai_client_on_an_allowed_page_gets_cors_headers(listed_server: Served):
    with openai.OpenAI(base_url=listed_server.base_url, api_key=API_KEY, max_retries=0, timeout=30,
                       default_headers={"Origin": UI}) as client:
        raw = client.chat.completions.with_raw_response.create(model="fake-model", messages=HELLO, max_tokens=4)
        assert raw.parse().choices[0].message.content
        assert allowed(raw.http_response, UI)
        with client.chat.completions.with_streaming_response.create(model="fake-model", messages=HELLO,
                                                                   max_tokens=4, stream=True) as streamed:
            assert allowed(streamed.http_response, UI)
            assert [c.choices[0].finish_reason for c in streamed.parse()][-1] in ("stop", "length")
        raw = client.models.with_raw_response.list()
        assert [m.id for m in raw.parse()] and allowed(raw.http_response, UI)


@pytest.mark.parametrize("origin", [UI, "HTTP://LOCALHOST:3000", "https://chat.example", "https://chat.example:443"])
def test_a_preflight_from_an_allowed_origin_is_answered_before_the_key(listed_server: Served, origin: str):
    with httpx.Client(base_url=listed_server.url, timeout=30) as http:       # a preflight has no key
        r = http.options(CHAT, headers={"Origin": origin, **PREFLIGHT})
    assert r.status_code == 204, r.text
    assert allowed(r, origin)
    assert "POST" in r.headers["access-control-allow-methods"]
    assert r.headers["access-control-allow-headers"] == PREFLIGHT["Access-Control-Request-Headers"]
    assert int(r.headers["access-control-max-age"]) > 0


def test_errors_to_an_allowed_page_carry_cors_headers(listed_server: Served, listed: httpx.Client):
    with httpx.Client(base_url=listed_server.url, timeout=30) as keyless:
        r = keyless.post(CHAT, json={"messages": HELLO}, headers={"Origin": UI})
    assert_envelope(r, 401)
    assert allowed(r, UI)
    r = listed.post(CHAT, json={"model": "nope", "messages": HELLO}, headers={"Origin": UI})
    assert_envelope(r, 404, "model")
    assert allowed(r, UI)


@pytest.mark.parametrize("origin", ["http://evil.example", "https://localhost:3000", "http://localhost:3001",
                                    "http://chat.example", "null"])
def test_other_origins_are_still_refused_preflight_included(listed: httpx.Client, origin: str):
    for r in (listed.options(CHAT, headers={"Origin": origin, **PREFLIGHT}),
              listed.post(CHAT, json={"messages": HELLO, "max_tokens": 4}, headers={"Origin": origin})):
        error = assert_envelope(r, 403)
        assert error["code"] == "cross_origin_request" and "--allowed-origins" in error["message"]
        assert "access-control-allow-origin" not in r.headers


def test_routes_outside_v1_keep_the_same_origin_rule(listed: httpx.Client):
    for path in ("/health", "/metrics", "/console/"):
        r = listed.get(path, headers={"Origin": UI})
        assert assert_envelope(r, 403)["code"] == "cross_origin_request"
        assert "access-control-allow-origin" not in r.headers


def test_an_allowed_page_may_call_v1_under_any_host_but_the_console_may_not(listed: httpx.Client):
    lan = {"Host": "192.168.1.20:8080"}
    r = listed.get("/v1/models", headers={**lan, "Origin": UI})
    assert r.status_code == 200 and allowed(r, UI)
    r = listed.get("/console/", headers={**lan, "Sec-Fetch-Site": "same-origin"})
    assert assert_envelope(r, 403)["code"] == "forbidden_host"
    r = listed.get("/v1/models", headers={**lan, "Sec-Fetch-Site": "same-origin"})    # a rebound page
    assert assert_envelope(r, 403)["code"] == "forbidden_host"


@pytest.mark.parametrize("origin", [UI, "https://anything.example:8443", "null", "tauri://localhost"])
def test_a_star_lets_any_page_call_v1(any_server: Served, origin: str):
    with httpx.Client(base_url=any_server.url, timeout=30) as http:
        r = http.options(CHAT, headers={"Origin": origin, **PREFLIGHT})
        assert r.status_code == 204 and allowed(r, origin)
        r = http.post(CHAT, json={"messages": HELLO, "max_tokens": 4}, headers={"Origin": origin})
        assert r.status_code == 200 and allowed(r, origin)
        assert assert_envelope(http.get("/health", headers={"Origin": origin}), 403)


def test_without_the_flag_there_are_no_cors_headers(fake_server: Served, fake_http: httpx.Client):
    own = fake_server.url
    r = fake_http.post(CHAT, json={"messages": HELLO, "max_tokens": 4}, headers={"Origin": own})
    assert r.status_code == 200 and "access-control-allow-origin" not in r.headers
    r = fake_http.options(CHAT, headers={"Origin": UI, **PREFLIGHT})
    assert assert_envelope(r, 403)["code"] == "cross_origin_request"


@pytest.mark.parametrize(("value", "origin"), [
    ("http://localhost:3000", "http://localhost:3000"),
    ("HTTP://LocalHost:3000/", "http://localhost:3000"),
    ("http://localhost:80", "http://localhost"),
    ("https://chat.example:443", "https://chat.example"),
    ("http://[::1]:3000", "http://[::1]:3000"),
    ("tauri://localhost", "tauri://localhost"),
])
def test_origins_are_read_as_browsers_write_them(value: str, origin: str):
    assert normalize_origin(value) == origin


@pytest.mark.parametrize("value", ["localhost:3000", "http://localhost:3000/app", "http://u@localhost",
                                   "http://localhost:99999", "null", "", "http://localhost?x=1"])
def test_a_malformed_origin_is_refused_at_start(value: str):
    with pytest.raises(ValueError):
        AllowedOrigins.parse([UI, value])
    with pytest.raises(ValueError):
        create_app(FakeEngine(), api_config(allowed_origins=(value,)))
    with pytest.raises(SystemExit, match="--allowed-origins"):
        cli_main(["serve", "--allowed-origins", value, "--model", "/nonexistent"])
