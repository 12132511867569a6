"""Serving the app with Hypercorn (asyncio).

`serve` runs until SIGINT/SIGTERM, then shuts down gracefully (lifecycle.py:
running replies end with an error event, new requests get 503) and returns; a
second signal ends the process at once. `serve_async` binds the socket itself,
so port 0 picks a free port that `on_bound` reports before serving starts (the
socket already listens: early clients wait in its backlog). `ServerThread`
runs `serve_async` on a background thread with its own event loop and stops
it cleanly: what the API tests, the e2e tests and embedders use.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from hypercorn.asyncio import serve as hypercorn_serve
from hypercorn.config import Config as HypercornConfig

from ..config import ServerConfig

log = logging.getLogger(__name__)


def bind_socket(host: str, port: int, backlog: int = 128) -> socket.socket:
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    return sock


def url_for(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


async def serve_async(app: Any, host: str = "127.0.0.1", port: int = 0, *,
                      shutdown_trigger: Callable[[], Awaitable[Any]] | None = None,
                      on_bound: Callable[[str, int], None] | None = None,
                      graceful_timeout: float = 5.0) -> None:
    """Serve `app` on host:port until `shutdown_trigger` returns (or a signal
    arrives, when none is given and this is the main thread)."""
    sock = bind_socket(host, port)
    bound_host, bound_port = sock.getsockname()[:2]
    config = HypercornConfig()
    config.bind = [f"fd://{sock.detach()}"]       # Hypercorn owns the descriptor from here
    config.graceful_timeout = graceful_timeout
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")
    log.info("listening on %s", url_for(bound_host, bound_port))
    if on_bound is not None:
        on_bound(bound_host, bound_port)
    await hypercorn_serve(app, config, shutdown_trigger=shutdown_trigger)


async def drain_then_stop(app: Any, stop: asyncio.Event, grace: float = 5.0) -> None:
    """End the app's requests gracefully (lifecycle.Drain), then let the server close."""
    state = getattr(app, "extensions", {}).get("tensorfold")
    try:
        if state is not None:
            await state.drain.begin(grace)
    finally:
        stop.set()


def serve(app: Any, config: ServerConfig) -> None:
    """Serve `app` on config.host:config.port until SIGINT or SIGTERM, saying where
    it listens and which model it serves; then shut down gracefully."""
    state = getattr(app, "extensions", {}).get("tensorfold")
    model = f", serving {state.served_id}" if state is not None else ""

    def announce(host: str, port: int) -> None:
        print(f"tensorfold listening on {url_for(host, port)}/v1{model}", flush=True)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        draining: list[asyncio.Task[None]] = []

        def on_signal(name: str) -> None:
            if draining:
                print(f"tensorfold: {name} again: exiting now", flush=True)
                os._exit(1)
            print(f"tensorfold: {name}: shutting down (again to exit at once)", flush=True)
            draining.append(loop.create_task(drain_then_stop(app, stop)))

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, on_signal, sig.name)
        await serve_async(app, config.host, config.port, shutdown_trigger=stop.wait, on_bound=announce,
                          graceful_timeout=2.0)

    asyncio.run(main())


class ServerThread:
    """A real Hypercorn server on a background thread: start() returns its URL."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0) -> None:
        self.app, self.host, self.port = app, host, port
        self.url: str | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._bound = threading.Event()
        self._error: BaseException | None = None

    def start(self, timeout: float = 30.0) -> str:
        self._thread = threading.Thread(target=self._main, name="tensorfold-http", daemon=True)
        self._thread.start()
        if not self._bound.wait(timeout):
            raise TimeoutError(f"the server did not bind within {timeout} s")
        if self._error is not None:
            raise RuntimeError("the server failed to start") from self._error
        return self.url

    def stop(self, timeout: float = 30.0, graceful: bool = False) -> None:
        """Stop serving; `graceful` first ends the app's requests as SIGTERM does
        (and leaves its engine refusing requests)."""
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            loop, stop = self._loop, self._stop
            try:
                if graceful:
                    loop.call_soon_threadsafe(lambda: loop.create_task(drain_then_stop(self.app, stop)))
                else:
                    loop.call_soon_threadsafe(stop.set)
            except RuntimeError:        # the loop closed meanwhile
                pass
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise TimeoutError(f"the server did not stop within {timeout} s")

    def __enter__(self) -> ServerThread:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _main(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:     # reported to start(), or logged once running
            self._error = exc
            if self._bound.is_set():
                log.exception("the server thread failed")
        finally:
            self._bound.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()

        def bound(host: str, port: int) -> None:
            self.url = url_for(host, port)
            self._bound.set()

        await serve_async(self.app, self.host, self.port, shutdown_trigger=self._stop.wait, on_bound=bound)
