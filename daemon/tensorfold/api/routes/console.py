"""GET /console: the browser console's page and its static files; GET /
redirects there.

/console and /console/ answer index.html; /console/<path> answers a file of
the console's static folder (tensorfold_console.STATIC_DIR) with its content
type and `Cache-Control: no-cache`, and never a file outside that folder
(dot segments, hidden names and backslashes are a 404). Every console answer
carries a Content-Security-Policy that allows scripts, styles and fetches
from this origin only (no inline scripts). When `scripts/build-console` has
not brought the chart library in, every console route is a 503 that says so.

The guard (guard.py) checks these routes' Host header before they run.
"""

from __future__ import annotations

import asyncio
from pathlib import Path, PurePosixPath

from quart import Blueprint, Response, redirect

from .. import errors
from ..errors import APIError

try:
    import tensorfold_console
except ImportError:                        # installed without the console package
    tensorfold_console = None

bp = Blueprint("console", __name__)

# Read at request time, so a test can point them elsewhere.
STATIC_DIR: Path | None = tensorfold_console.STATIC_DIR if tensorfold_console else None
VENDOR_DIR: Path | None = tensorfold_console.VENDOR_DIR if tensorfold_console else None

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".json": "application/json",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".txt": "text/plain; charset=utf-8",
    ".LICENSE": "text/plain; charset=utf-8",
}
CONTENT_SECURITY_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                           "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'self'; "
                           "frame-ancestors 'none'")
HEADERS = {
    "Cache-Control": "no-cache",
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
NOT_BUILT = "console_not_built"
CONSOLE_PAGE = "/console/"


@bp.get("/")
async def root() -> Response:
    """The server's bare address leads to the console."""
    return redirect(CONSOLE_PAGE)


@bp.get("/console")
@bp.get("/console/")
async def console_page() -> Response:
    return await _serve("index.html")


@bp.get("/console/<path:name>")
async def console_file(name: str) -> Response:
    return await _serve(name)


def _check_built() -> Path:
    """The static folder, or a 503 naming the build script when the console
    package or its chart library is missing."""
    if tensorfold_console is None or STATIC_DIR is None or VENDOR_DIR is None:
        raise APIError("The browser console is not installed: reinstall TensorFold with its "
                       "web_console package (scripts/setup)", status=503, type=errors.SERVER_ERROR,
                       code=NOT_BUILT)
    missing = tensorfold_console.missing_vendor_files(VENDOR_DIR)
    if missing:
        raise APIError(f"The browser console's chart library is not built (missing {', '.join(missing)}): "
                       f"run {tensorfold_console.BUILD_SCRIPT} (it needs npm), then reload",
                       status=503, type=errors.SERVER_ERROR, code=NOT_BUILT)
    return STATIC_DIR


def resolve_static(root: Path, name: str) -> Path | None:
    """The file `name` names under `root`, or None when it is not a plain
    relative path to a file inside `root`."""
    if not name or "\\" in name or "\x00" in name:
        return None
    parts = PurePosixPath(name).parts
    if not parts or parts[0] == "/" or any(p.startswith(".") for p in parts):
        return None
    root = root.resolve()
    path = root.joinpath(*parts).resolve()
    if not path.is_relative_to(root) or not path.is_file():
        return None
    return path


def content_type(path: Path) -> str:
    return CONTENT_TYPES.get(path.suffix, "application/octet-stream")


async def _serve(name: str) -> Response:
    root = _check_built()
    path = resolve_static(root, name)
    if path is None:
        raise APIError(f"No console file '{name}'", status=404, code="not_found")
    body = await asyncio.to_thread(path.read_bytes)
    return Response(body, status=200, content_type=content_type(path), headers=HEADERS)
