"""The Quart app factory: blueprints per route family, API-key check, and
error handlers that turn every failure into the OpenAI error envelope.

    400 invalid_request_error   malformed body or field (param names it)
    401 invalid_request_error   /v1/* without `Authorization: Bearer <key>` when a key is set
    403 invalid_request_error   a cross-origin or DNS-rebound request (guard.py; --allowed-origins
                                pages may call /v1: origins.py)
    404 invalid_request_error   unknown route, unknown model (code model_not_found),
                                unknown stored response (code not_found)
    405 invalid_request_error   wrong method (with an Allow header)
    413 invalid_request_error   body over config.limits.body_bytes (--limit body_bytes=N)
    429 rate_limit_error        too many grammars compiling or queued (code grammar_busy)
    500 server_error            generation failed, or a bug
    503 server_error            the server is shutting down (lifecycle.py)

Every request leaves one line on the serve log (access_log.py).
"""

from __future__ import annotations

import hmac
import logging

from quart import Quart, Response, request
from werkzeug.exceptions import HTTPException

from ..config import ServerConfig
from ..store import MemoryStore, ResponseStore
from . import errors
from .edge import guard
from .edge.access_log import AccessLog
from .edge.origins import AllowedOrigins, install as install_cors
from .errors import APIError
from .reply.sse import json_response
from .routes import chat, completions, console, health, models, responses
from .server import ServerThread, serve, serve_async
from .state import EXTENSION, AppState

log = logging.getLogger(__name__)

__all__ = ["create_app", "serve", "serve_async", "ServerThread"]

_HTTP_CODES = {401: errors.INVALID_API_KEY, 404: "not_found", 405: "method_not_allowed",
               413: "request_too_large"}


def create_app(engine, config: ServerConfig, store: ResponseStore | None = None) -> Quart:
    """The HTTP edge for `engine` (an AsyncEngine). The caller owns the
    engine: starting and stopping it is not the app's business. `store` keeps
    finished responses (/v1/responses); default: a new MemoryStore."""
    app = Quart("tensorfold.api")
    app.url_map.merge_slashes = False          # /v1//models is a JSON 404, not an HTML redirect
    app.config["MAX_CONTENT_LENGTH"] = config.limits.body_bytes
    served_id = config.served_model_name or engine.model_name
    app.extensions[EXTENSION] = AppState(engine, config, served_id, tuple(config.aliases),
                                         responses=store if store is not None else MemoryStore())
    for module in (models, health, chat, completions, responses, console):
        app.register_blueprint(module.bp)
    origins = AllowedOrigins.parse(config.allowed_origins)
    guard.install(app, config, origins)
    install_cors(app, origins)
    if config.api_key:
        app.before_request(_require_key(config.api_key))
    app.register_error_handler(APIError, _api_error)
    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(Exception, _crash)
    app.asgi_app = AccessLog(app.asgi_app)
    return app


def _require_key(key: str):
    expected = key.encode()

    async def check() -> None:
        if not request.path.startswith("/v1/"):
            return
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        # the scheme is case-insensitive (RFC 9110); the key is compared in constant time
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), expected):
            raise APIError("Missing or incorrect API key: send 'Authorization: Bearer <key>'",
                           status=401, code=errors.INVALID_API_KEY)
    return check


async def _api_error(exc: APIError) -> Response:
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else {}
    return json_response(exc.envelope(), exc.status, _closing(exc.status, headers) or None)


async def _http_error(exc: HTTPException) -> Response:
    status = exc.code or 500
    if status == 404:
        message = f"Invalid URL ({request.method} {request.path})"
    elif status == 405:
        message = f"Method {request.method} is not allowed for {request.path}"
    elif status == 413:
        message = (f"The request body is larger than the server's limit of {request.max_content_length} bytes "
                   "(--limit body_bytes=N)")
    else:
        message = exc.description or exc.name
    kind = errors.SERVER_ERROR if status >= 500 else errors.INVALID_REQUEST
    headers = {k: v for k, v in exc.get_headers() if k.lower() != "content-type"}
    return json_response(errors.envelope(message, kind, None, _HTTP_CODES.get(status)), status,
                         _closing(status, headers))


_UNREAD = (401, 403, 413)       # refused before the body was read


def _closing(status: int, headers: dict[str, str]) -> dict[str, str]:
    """`headers`, with Connection: close for a refusal sent before the body was read:
    the connection cannot carry another request."""
    if status in _UNREAD:
        headers["Connection"] = "close"
    return headers


async def _crash(exc: Exception) -> Response:
    log.exception("unhandled error in %s %s", request.method, request.path, exc_info=exc)
    return json_response(errors.envelope("The server had an error while processing the request",
                                         errors.SERVER_ERROR), 500)
