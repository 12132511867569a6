"""The OpenAI error envelope and the exception every refusal raises.

Every error the server sends, whatever its cause (a bad field, an unknown
route, a body too large, a crash), has the shape

    {"error": {"message": str, "type": str, "param": str | None, "code": str | None}}

`APIError` carries that envelope plus the HTTP status; the app's error
handlers turn it (and Quart's own HTTP exceptions) into a JSON response.
"""

from __future__ import annotations

from typing import Any

INVALID_REQUEST = "invalid_request_error"
SERVER_ERROR = "server_error"
RATE_LIMIT = "rate_limit_error"

# Codes the API uses in `error.code` (OpenAI's where OpenAI has one).
INVALID_VALUE = "invalid_value"
INVALID_JSON = "invalid_json"
MISSING = "missing_required_parameter"
UNSUPPORTED = "unsupported_parameter"
CONTEXT_LENGTH = "context_length_exceeded"
MODEL_NOT_FOUND = "model_not_found"
INVALID_API_KEY = "invalid_api_key"
TEMPLATE_ERROR = "chat_template_error"
GRAMMAR_BUSY = "grammar_busy"


def envelope(message: str, type: str = INVALID_REQUEST, param: str | None = None,
             code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


class APIError(Exception):
    """A refusal or failure that the client sees as an OpenAI error envelope."""

    def __init__(self, message: str, *, status: int = 400, type: str = INVALID_REQUEST,
                 param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.type = type
        self.param = param
        self.code = code

    def envelope(self) -> dict[str, Any]:
        return envelope(self.message, self.type, self.param, self.code)

    def __repr__(self) -> str:
        return f"APIError({self.status}, {self.message!r}, param={self.param!r}, code={self.code!r})"


def invalid(message: str, param: str | None = None, code: str = INVALID_VALUE) -> APIError:
    """A 400 for a malformed request."""
    return APIError(message, status=400, param=param, code=code)


def unsupported(message: str, param: str | None) -> APIError:
    """A 400 for a feature this server does not run."""
    return APIError(message, status=400, param=param, code=UNSUPPORTED)


def busy(message: str, param: str | None = None, code: str = GRAMMAR_BUSY) -> APIError:
    """A 429: the server cannot take this request now; the same request may succeed later."""
    return APIError(message, status=429, type=RATE_LIMIT, param=param, code=code)


def server_error(message: str) -> APIError:
    """A 500: the request was valid but generating its reply failed."""
    return APIError(message, status=500, type=SERVER_ERROR)
