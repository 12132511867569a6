"""--allowed-origins: browser pages on other origins that may call /v1.

Without the flag the guard (guard.py) refuses every browser request whose
Origin is not the server's own. Each --allowed-origins value (an origin as a
browser writes it, scheme://host[:port]; repeatable) or `*` (any origin) lets
such pages call the /v1 routes:

- their requests pass the guard: the Origin check, and the Host check (the
  Host is whatever address the page called, a LAN name say). A rebound page
  sends its own site as Origin, which is not allowed unless by `*`, and `*`
  lets any site call /v1 anyway;
- every answer they get, errors included, carries
  Access-Control-Allow-Origin (the page's origin) and `Vary: Origin`, so the
  page can read it;
- a preflight (OPTIONS with Access-Control-Request-Method) is answered 204
  with the methods, the headers the page asked for and a max age, before the
  API-key check (a preflight never carries the key).

Other routes (/health, /metrics, the console) keep the same-origin rule, and
the console keeps its Host check.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from quart import Quart, Response, request

ANY = "*"
API_PREFIX = "/v1"
DEFAULT_PORTS = {"http": 80, "https": 443}
ALLOW_METHODS = "GET, POST, DELETE, OPTIONS"
DEFAULT_ALLOW_HEADERS = "Authorization, Content-Type"
MAX_AGE_SECONDS = "600"
_HEADER_LIST = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+(?:\s*,\s*[!#$%&'*+.^_`|~0-9A-Za-z-]+)*")


def normalize_origin(value: str) -> str:
    """`value` as a browser writes an Origin: scheme and host lowercased, the
    scheme's default port and a trailing slash dropped. ValueError when it is
    not scheme://host[:port]."""
    try:
        parts = urlsplit(value.strip())
        host, port = parts.hostname, parts.port
    except ValueError:
        host = port = None
    if not (parts.scheme and host) or "@" in parts.netloc or parts.path not in ("", "/") or parts.query \
            or parts.fragment:
        raise ValueError(f"'{value}' is not an origin (scheme://host[:port], e.g. http://localhost:3000)")
    scheme = parts.scheme.lower()
    host = f"[{host}]" if ":" in host else host
    return f"{scheme}://{host}" + (f":{port}" if port is not None and port != DEFAULT_PORTS.get(scheme) else "")


def is_api_path(path: str) -> bool:
    return path == API_PREFIX or path.startswith(API_PREFIX + "/")


@dataclass(frozen=True, slots=True)
class AllowedOrigins:
    any: bool = False
    origins: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, values: Iterable[str]) -> AllowedOrigins:
        """The --allowed-origins values; ValueError names a malformed one."""
        values = [v.strip() for v in values]
        return cls(ANY in values, frozenset(normalize_origin(v) for v in values if v != ANY))

    def allows(self, origin: str | None, path: str) -> bool:
        """Whether a page on `origin` may call `path`."""
        if origin is None or not is_api_path(path) or not (self.any or self.origins):
            return False
        if self.any:
            return True
        try:
            return normalize_origin(origin) in self.origins
        except ValueError:
            return False


def install(app: Quart, allowed: AllowedOrigins) -> None:
    """Answer allowed pages' preflights and put CORS headers on their answers.
    Installed after the guard and before the API-key check."""
    if not (allowed.any or allowed.origins):
        return

    def allowed_origin() -> str | None:
        origin = request.headers.get("Origin")
        return origin if allowed.allows(origin, request.path) else None

    async def preflight() -> Response | None:
        origin = allowed_origin()
        if origin is None or request.method != "OPTIONS" or "Access-Control-Request-Method" not in request.headers:
            return None
        asked = request.headers.get("Access-Control-Request-Headers", "").strip()
        return Response("", status=204, headers={
            "Access-Control-Allow-Methods": ALLOW_METHODS,
            "Access-Control-Allow-Headers": asked if _HEADER_LIST.fullmatch(asked) else DEFAULT_ALLOW_HEADERS,
            "Access-Control-Max-Age": MAX_AGE_SECONDS})

    async def add_headers(response: Response) -> Response:
        origin = allowed_origin()
        if origin is not None:
            response.headers["Access-Control-Allow-Origin"] = origin
            response.vary.add("Origin")
        return response

    app.before_request(preflight)
    app.after_request(add_headers)
