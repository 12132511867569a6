"""The console routes and the same-origin guard over raw HTTP: /console's page
and static files (content types, no-cache, the Content-Security-Policy), paths
outside the static folder refused, the 503 when the chart library is not
built, the Host check (DNS rebinding) and the Origin check (cross-site pages),
and the API key next to them.

The static folder is a copy with stand-in vendor files (routes/console.py's
STATIC_DIR and VENDOR_DIR point at it), so these tests hold without npm."""

from __future__ import annotations

import http.client
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from tensorfold.api.edge import guard
from tensorfold.api.routes import console as console_route
from tests.api.api_helpers import CHAT, HELLO, assert_envelope
from tests.api.conftest import API_KEY, api_config
from tests.api.fake_engine import FakeEngine
from tests.servers import Served, running

tensorfold_console = pytest.importorskip("tensorfold_console", reason="the console package is not importable")

VENDOR = {"uPlot.iife.min.js": b"/* stand-in uPlot */", "uPlot.min.css": b".uplot{}", "uPlot.LICENSE": b"MIT"}
SECRET = "not-for-the-browser"


@pytest.fixture
def static(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the console's static folder with stand-in vendor files, a
    hidden file and a link out of the folder; served in place of the real one."""
    root = tmp_path / "static"
    shutil.copytree(tensorfold_console.STATIC_DIR, root, ignore=shutil.ignore_patterns("vendor"))
    (root / "vendor").mkdir()
    for name, body in VENDOR.items():
        (root / "vendor" / name).write_bytes(body)
    (tmp_path / "secret.txt").write_text(SECRET)
    (root / ".hidden").write_text(SECRET)
    (root / "leak.txt").symlink_to(tmp_path / "secret.txt")
    monkeypatch.setattr(console_route, "STATIC_DIR", root)
    monkeypatch.setattr(console_route, "VENDOR_DIR", root / "vendor")
    return root


def port_of(served: Served) -> int:
    return urlsplit(served.url).port


def raw_get(served: Served, path: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    """GET `path` exactly as written (httpx would resolve its dot segments)."""
    parts = urlsplit(served.url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        connection.request("GET", path, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.read().decode(errors="replace")
    finally:
        connection.close()


# -- the page and its files ----------------------------------------------------

@pytest.mark.parametrize("path", ["/console", "/console/"])
def test_the_page_is_served_with_a_strict_policy(fake_http: httpx.Client, static: Path, path: str):
    r = fake_http.get(path)
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/html; charset=utf-8"
    assert r.headers["cache-control"] == "no-cache"
    assert r.headers["x-content-type-options"] == "nosniff"
    policy = dict(part.strip().split(" ", 1) for part in r.headers["content-security-policy"].split(";"))
    assert policy["script-src"] == "'self'" and policy["default-src"] == "'none'"
    assert "unsafe" not in r.headers["content-security-policy"]
    assert r.content == (static / "index.html").read_bytes()
    scripts = re.findall(r"<script\b[^>]*>", r.text)
    assert scripts and all(' src="/console/' in tag for tag in scripts), scripts   # no inline scripts
    assert not re.search(r"\son[a-z]+\s*=", r.text)                                 # no inline handlers


@pytest.mark.parametrize(("name", "content_type"), [
    ("console.js", "text/javascript; charset=utf-8"),
    ("rates.js", "text/javascript; charset=utf-8"),
    ("responses.js", "text/javascript; charset=utf-8"),
    ("api.js", "text/javascript; charset=utf-8"),
    ("console.css", "text/css; charset=utf-8"),
    ("vendor/uPlot.iife.min.js", "text/javascript; charset=utf-8"),
    ("vendor/uPlot.min.css", "text/css; charset=utf-8"),
    ("vendor/uPlot.LICENSE", "text/plain; charset=utf-8"),
])
def test_static_files_have_their_content_types(fake_http: httpx.Client, static: Path, name: str,
                                               content_type: str):
    r = fake_http.get(f"/console/{name}")
    assert r.status_code == 200
    assert r.headers["content-type"] == content_type
    assert r.headers["cache-control"] == "no-cache"
    assert r.content == (static / name).read_bytes()


def test_every_file_the_page_names_is_served(fake_http: httpx.Client, static: Path):
    page = fake_http.get("/console").text
    named = re.findall(r'(?:src|href)="(/console/[^"]+)"', page)
    assert len(named) == 4
    for path in named:
        assert fake_http.get(path).status_code == 200, path


def test_an_unknown_console_file_is_a_404_envelope(fake_http: httpx.Client, static: Path):
    assert_envelope(fake_http.get("/console/nope.js"), 404)


@pytest.mark.parametrize("path", [
    "/console/../pyproject.toml",
    "/console/%2e%2e/secret.txt",
    "/console/..%2fsecret.txt",
    "/console/vendor/%2e%2e/%2e%2e/secret.txt",
    "/console/vendor/..%5c..%5csecret.txt",
    "/console/.hidden",
    "/console/leak.txt",
    "/console/%2e%2e%2f%2e%2e%2fpyproject.toml",
])
def test_paths_outside_the_static_folder_are_refused(fake_server: Served, static: Path, path: str):
    status, body = raw_get(fake_server, path)
    assert status == 404, (path, body)
    assert SECRET not in body and "root:" not in body


def test_without_the_chart_library_the_console_is_a_503_naming_the_build(
        fake_http: httpx.Client, static: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(console_route, "VENDOR_DIR", static.parent / "empty-vendor")
    for path in ("/console", "/console/", "/console/console.js", "/console/vendor/uPlot.min.css"):
        r = fake_http.get(path)
        body = assert_envelope(r, 503, type="server_error")
        assert "scripts/build-console" in body["message"]
        assert body["code"] == "console_not_built"
    assert fake_http.get("/health").status_code == 200


def test_the_package_tells_whether_the_vendor_files_are_built(tmp_path: Path):
    assert not tensorfold_console.vendor_built(tmp_path)
    assert tensorfold_console.missing_vendor_files(tmp_path) == list(tensorfold_console.VENDOR_FILES)
    for name in tensorfold_console.VENDOR_FILES:
        (tmp_path / name).write_text("x")
    assert tensorfold_console.vendor_built(tmp_path)


# -- the Host check --------------------------------------------------------------

@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "127.0.0.1", "localhost:{port}", "LocalHost",
                                  "[::1]:{port}", "[::1]"])
def test_the_console_answers_loopback_names(fake_server: Served, fake_http: httpx.Client, static: Path,
                                            host: str):
    r = fake_http.get("/console/", headers={"Host": host.format(port=port_of(fake_server))})
    assert r.status_code == 200


@pytest.mark.parametrize("host", ["evil.example", "evil.example:{port}", "127.0.0.1.evil.example:{port}",
                                  "0.0.0.0:{port}", "192.168.1.20:{port}", "localhost.:{port}"])
def test_the_console_refuses_other_hosts(fake_server: Served, fake_http: httpx.Client, static: Path, host: str):
    r = fake_http.get("/console/console.js", headers={"Host": host.format(port=port_of(fake_server))})
    body = assert_envelope(r, 403)
    assert body["code"] == "forbidden_host"


@pytest.fixture(scope="module")
def lan_server() -> Iterator[Served]:
    with running(FakeEngine(), api_config(host="tf.lan")) as served:
        yield served


@pytest.fixture(scope="module")
def wildcard_server() -> Iterator[Served]:
    with running(FakeEngine(), api_config(host="0.0.0.0")) as served:
        yield served


def test_the_configured_host_is_allowed_but_not_a_wildcard(lan_server: Served, wildcard_server: Served,
                                                          static: Path):
    with httpx.Client(base_url=lan_server.url, timeout=30) as lan:
        assert lan.get("/console", headers={"Host": "tf.lan:8080"}).status_code == 200
        assert lan.get("/console", headers={"Host": "TF.LAN"}).status_code == 200
        assert_envelope(lan.get("/console", headers={"Host": "other.lan:8080"}), 403)
    with httpx.Client(base_url=wildcard_server.url, timeout=30) as anywhere:
        assert anywhere.get("/console").status_code == 200
        assert_envelope(anywhere.get("/console", headers={"Host": "0.0.0.0:8080"}), 403)
        assert_envelope(anywhere.get("/console", headers={"Host": "10.0.0.5:8080"}), 403)


def test_a_loopback_server_answers_loopback_names_only(fake_http: httpx.Client):
    # on 127.0.0.1 only a rebound page can send another name, with or without browser headers
    for path in ("/health", "/v1/models", "/v1/responses"):
        assert assert_envelope(fake_http.get(path, headers={"Host": "evil.example:8080"}), 403)["code"] \
            == "forbidden_host"
    assert fake_http.get("/v1/models", headers={"Host": "localhost:9000"}).status_code == 200   # a tunnel


def test_elsewhere_api_clients_may_use_any_host_but_a_browser_may_not(wildcard_server: Served):
    with httpx.Client(base_url=wildcard_server.url, timeout=30) as http:
        # a client that is not a browser cannot be rebound: another name is fine
        assert http.get("/health", headers={"Host": "gpu-box.lan:8080"}).status_code == 200
        assert http.get("/v1/models", headers={"Host": "gpu-box.lan:8080"}).status_code == 200
        # a browser's same-origin request under another name is a rebound page
        r = http.get("/v1/responses", headers={"Host": "evil.example:8080", "Sec-Fetch-Site": "same-origin"})
        assert assert_envelope(r, 403)["code"] == "forbidden_host"


# -- the Origin check ------------------------------------------------------------

@pytest.mark.parametrize("origin", ["http://evil.example", "http://127.0.0.1:{other}", "https://127.0.0.1:{port}",
                                    "http://localhost:{port}", "null", "http://127.0.0.1:{port}/path",
                                    "not a url"])
def test_cross_origin_requests_are_refused_on_every_route(fake_server: Served, fake_http: httpx.Client,
                                                          static: Path, origin: str):
    port = port_of(fake_server)
    headers = {"Origin": origin.format(port=port, other=port + 1)}
    for r in (fake_http.get("/health", headers=headers),
              fake_http.get("/console/", headers=headers),
              fake_http.post(CHAT, json={"messages": HELLO, "max_tokens": 4}, headers=headers)):
        body = assert_envelope(r, 403)
        assert body["code"] == "cross_origin_request"


def test_same_origin_requests_pass(fake_server: Served, fake_http: httpx.Client, static: Path):
    port = port_of(fake_server)
    r = fake_http.post(CHAT, json={"messages": HELLO, "max_tokens": 4},
                       headers={"Origin": f"http://127.0.0.1:{port}"})
    assert r.status_code == 200, r.text
    r = fake_http.get("/console/", headers={"Origin": f"http://localhost:{port}", "Host": f"localhost:{port}"})
    assert r.status_code == 200


@pytest.mark.parametrize(("origin", "host", "same"), [
    ("http://localhost", "localhost", True),
    ("http://localhost:80", "localhost", True),
    ("http://[::1]:8080", "[::1]:8080", True),
    ("HTTP://LOCALHOST:8080", "localhost:8080", True),
    ("http://localhost:8081", "localhost:8080", False),
    ("https://localhost:8080", "localhost:8080", False),
    ("http://localhost:8080", None, False),
    ("http://user@localhost:8080", "localhost:8080", False),
])
def test_same_origin_rule(origin: str, host: str | None, same: bool):
    assert guard.same_origin(origin, host) is same


# -- the API key ------------------------------------------------------------------

def test_with_a_key_the_page_loads_and_the_api_asks_for_the_key(auth_server: Served, static: Path):
    port = port_of(auth_server)
    with httpx.Client(base_url=auth_server.url, timeout=30) as http:
        assert http.get("/console/").status_code == 200
        assert http.get("/console/console.js").status_code == 200
        assert http.get("/health").status_code == 200
        refused = http.get("/v1/responses")
        assert_envelope(refused, 401)
        assert refused.headers["www-authenticate"] == "Bearer"
        keyed = {"Authorization": f"Bearer {API_KEY}"}
        assert http.get("/v1/responses", headers={**keyed, "Origin": f"http://127.0.0.1:{port}"}).status_code == 200
        # the key does not let another site in
        r = http.get("/v1/responses", headers={**keyed, "Origin": "http://evil.example"})
        assert assert_envelope(r, 403)["code"] == "cross_origin_request"
        r = http.get("/v1/responses", headers={**keyed, "Host": "evil.example", "Sec-Fetch-Site": "same-origin"})
        assert assert_envelope(r, 403)["code"] == "forbidden_host"
