"""SIGTERM to a real `tensorfold serve` on the default model, with a stream and a grammar
compile in flight: the stream ends with a server_error event and [DONE], the compile's
request gets a 503, and the process exits within seconds, with no traceback."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import httpx

from tests.servers import serve_default

BIG_REGEX = "(" + "|".join(f"w{i}x{i * 7919 % 10007}y" for i in range(6000)) + ")"   # compiles for many seconds


def test_sigterm_ends_streams_and_compiles_then_exits():
    server, url = serve_default()
    try:
        compiled: list[httpx.Response] = []
        compile_thread = threading.Thread(target=lambda: compiled.append(httpx.post(
            url + "/v1/chat/completions", timeout=60,
            json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "guided_regex": BIG_REGEX})))
        body = {"messages": [{"role": "user", "content": "Count to a million."}], "max_tokens": 4000,
                "ignore_eos": True, "stream": True}
        lines: list[str] = []
        with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=60) as stream:
            assert stream.status_code == 200
            for line in stream.iter_lines():
                if not line.startswith("data: "):
                    continue
                lines.append(line[6:])
                if len(lines) == 5:
                    compile_thread.start()
                    time.sleep(0.5)
                    server.send_signal(signal.SIGTERM)
                    signalled = time.monotonic()
        assert lines[-1] == "[DONE]"
        error = json.loads(lines[-2])["error"]
        assert error["type"] == "server_error" and "shutting down" in error["message"]
        compile_thread.join(30)
        assert compiled and compiled[0].status_code == 503, compiled and compiled[0].text
        server.wait(timeout=15)
        took = time.monotonic() - signalled
        err = server.stderr.read()
        assert server.returncode == 0, err[-3000:]
        assert "Traceback" not in err, err
        assert took < 10, took
    finally:
        if server.poll() is None:
            os.kill(server.pid, signal.SIGKILL)
            server.wait()
