"""The same-origin guard: Host and Origin checks against DNS rebinding and
cross-site requests from web pages.

A page on another site can make a browser send requests to the daemon on
127.0.0.1 in two ways, and each check closes one:

- Cross-origin requests carry an `Origin` header. On every route, a request
  whose Origin (scheme://host[:port]) is not the request's own
  `http://<Host>` is refused. Clients that send no Origin (the openai
  package, curl, the TUI) pass.
- DNS rebinding: the attacker's name resolves to 127.0.0.1, so the page's
  requests are same-origin for the browser but carry the attacker's name in
  `Host`. While the server listens on loopback only (the default 127.0.0.1,
  or localhost, ::1), every request must name a loopback name (127.0.0.1,
  localhost, [::1], any port) in `Host`: nothing else can reach it but a
  rebound page, and a browser that sends neither Origin nor Sec-Fetch-Site
  (a simple GET from an older one) is held too. On any other --host clients
  may use names the server cannot know, so there the console routes
  (/console, /console/...) and a browser's requests (those carrying `Origin`
  or `Sec-Fetch-Site`) get the Host check, against the loopback names and
  the --host itself unless it is a wildcard.

Each refusal is a 403 OpenAI error envelope. Pages on the --allowed-origins
(origins.py) pass both checks on the /v1 routes.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from quart import Quart, request

from ...config import ServerConfig
from ..errors import APIError
from .origins import AllowedOrigins, normalize_origin

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::", "*"})
CONSOLE_PREFIX = "/console"
FORBIDDEN_HOST = "forbidden_host"
CROSS_ORIGIN = "cross_origin_request"


def split_authority(value: str) -> tuple[str, int | None] | None:
    """(host, port) of a Host header value such as `localhost:8080` or
    `[::1]:8080`: host lowercased without brackets, port None when absent;
    None when the value is not a valid authority."""
    value = value.strip()
    if not value or any(c in value for c in "/?#@ \\"):
        return None
    try:
        parts = urlsplit(f"//{value}")
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    return (host, port) if host else None


def allowed_hosts(config_host: str | None) -> frozenset[str]:
    """The host names the console answers to: loopback, plus the configured
    --host unless it listens on every interface."""
    host = (config_host or "").strip().strip("[]").lower()
    return LOOPBACK_HOSTS | ({host} if host not in WILDCARD_HOSTS else set())


def host_allowed(host_header: str | None, allowed: frozenset[str]) -> bool:
    authority = split_authority(host_header or "")
    return authority is not None and authority[0] in allowed


def same_origin(origin: str, host_header: str | None) -> bool:
    """Whether `origin` is `http://<host_header>` (80 and no port being the same)."""
    if split_authority(host_header or "") is None:
        return False
    try:
        return normalize_origin(origin) == normalize_origin(f"http://{host_header.strip()}")
    except ValueError:
        return False


def is_console_path(path: str) -> bool:
    return path == CONSOLE_PREFIX or path.startswith(CONSOLE_PREFIX + "/")


def install(app: Quart, config: ServerConfig, origins: AllowedOrigins) -> None:
    """Refuse cross-origin and rebound requests before any route (and before
    the API-key check) runs; pages on `origins` pass on /v1."""
    allowed = allowed_hosts(config.host)
    every_request = (config.host or "").strip().strip("[]").lower() in LOOPBACK_HOSTS

    async def check() -> None:
        host = request.headers.get("Host")
        origin = request.headers.get("Origin")
        if origins.allows(origin, request.path):
            return
        from_browser = origin is not None or "Sec-Fetch-Site" in request.headers
        if (every_request or from_browser or is_console_path(request.path)) and not host_allowed(host, allowed):
            raise APIError(f"Host '{host or ''}' is not allowed: open the console at "
                           "http://127.0.0.1:<port>/console (or the server's --host)",
                           status=403, code=FORBIDDEN_HOST)
        if origin is not None and not same_origin(origin, host):
            raise APIError(f"Cross-origin request from '{origin}' refused: only pages served by this "
                           "server may call it from a browser (start it with --allowed-origins "
                           f"'{origin}' to let that page call /v1)", status=403, code=CROSS_ORIGIN)

    app.before_request(check)
