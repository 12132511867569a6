"""The Textual TUI at 80x24, driven by its pilot against a real daemon on the
tiny model: rates plotted after real requests, stored responses browsed,
viewed, paged and deleted, a daemon that does not answer, a remote daemon
without controls, and start / stop / restart of a daemon of the test's own
with models chosen in the picker and the log tail shown."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable

import httpx
import pytest
from textual.widgets import Button, DataTable, Input, OptionList, RichLog

from tensorfold.checkpoints.resolve import CachedModel
from tensorfold.client import State
from tensorfold_tui import app as app_module
from tensorfold_tui.app import TensorFoldApp
from tensorfold_tui.daemon_view import DaemonView
from tensorfold_tui.data import RateHistory, is_local
from tensorfold_tui.rates import RatePlot
from tensorfold_tui.responses import ResponseScreen, ResponsesView, response_text
from tensorfold_tui.screens import ConfirmScreen, ModelPicker

from .conftest import SERVE_ARGS, free_port, make_supervisor

pytestmark = [pytest.mark.ui, pytest.mark.anyio]
SIZE = (80, 24)


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


async def wait_until(pilot, predicate: Callable[[], object], what: str, timeout: float = 90.0) -> None:
    """Let the app run until `predicate()` holds; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        await pilot.pause(0.1)


def header(app: TensorFoldApp) -> str:
    return str(app.header_text())


def braille(text: str) -> int:
    """How many plotted braille dots a rendered plot holds."""
    return sum(1 for ch in text if 0x2801 <= ord(ch) <= 0x28FF)


# -- plain helpers -----------------------------------------------------------------

@pytest.mark.parametrize("url, local", [
    ("http://127.0.0.1:8080", True), ("http://127.0.0.2:9000/v1", True), ("http://[::1]:8080", True),
    ("http://localhost:8080", True), ("127.0.0.1:8080", True), ("http://10.0.0.5:8080", False),
    ("http://[2001:db8::1]:8080", False), ("https://gpu-box.example:443", False),
])
def test_local_means_a_loopback_host(url, local):
    assert is_local(url) is local


def test_rate_history_starts_from_a_baseline_and_rebases():
    history = RateHistory(keep=3)
    body = {"completion_tokens_total": 0, "prompt_tokens_total": 0, "requests_total": 0}
    assert history.add(body, 10.0) is False and len(history) == 0
    for i in range(1, 5):
        assert history.add({**body, "completion_tokens_total": 100 * i, "requests_total": i}, 10.0 + i)
    assert len(history) == 3                                    # only the last `keep` samples
    assert history.series("decode_tps", 14.0) == ([-2.0, -1.0, 0.0], [100.0, 100.0, 100.0])
    assert history.series("cached_ratio", 14.0) == ([], [])     # no prompt tokens: no ratio
    history.rebase()
    assert history.add(body, 20.0) is False                     # a new baseline, not a negative rate


def test_the_tui_imports_no_engine():
    code = ("import sys, tensorfold_tui.app; "
            "print(sorted(m for m in ('torch', 'tensorfold.engine', 'tensorfold.api') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"


def test_main_reads_url_and_api_key(monkeypatch):
    seen = {}
    monkeypatch.setattr(TensorFoldApp, "run", lambda self: seen.update(
        url=self.url, auth=self.client._http.headers.get("authorization"), local=self.local))
    app_module.main(["--url", "http://10.9.8.7:9000/v1", "--api-key", "sekret"])
    assert seen == {"url": "http://10.9.8.7:9000", "auth": "Bearer sekret", "local": False}


def test_a_response_with_reasoning_and_a_tool_call_reads_whole():
    response = {"id": "resp_1", "model": "m", "status": "completed", "created_at": 0,
                "usage": {"input_tokens": 9, "output_tokens": 4, "input_tokens_details": {"cached_tokens": 3}},
                "output": [{"type": "reasoning", "content": [{"type": "reasoning_text", "text": "think"}]},
                           {"type": "function_call", "name": "get_weather", "arguments": '{"city":"Oslo"}'}]}
    inputs = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "weather?"}]},
              {"type": "function_call_output", "call_id": "c1", "output": "sunny"}]
    text = response_text(response, inputs).plain
    assert "user: weather?" in text and "tool result: sunny" in text
    assert "reasoning: think" in text and 'call get_weather: {"city":"Oslo"}' in text
    assert "9 in (3 cached), 4 out" in text


# -- against the live daemon ---------------------------------------------------------

async def test_rates_plots_get_data_after_requests(live_daemon):
    app = TensorFoldApp(live_daemon.url, supervisor=None, poll_interval=0.2)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: len(app.history) >= 1, "two /health samples")
        assert "serving" in header(app) or "busy" in header(app)
        decode = app.query_one("#plot-decode", RatePlot)
        async with httpx.AsyncClient(base_url=live_daemon.url, timeout=60) as http:
            for _ in range(3):
                reply = await http.post("/v1/chat/completions", json={
                    "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16})
                assert reply.status_code == 200
        await wait_until(pilot, lambda: max(app.history.series("decode_tps", 0)[1], default=0) > 0,
                         "a decode rate above zero")
        await wait_until(pilot, lambda: max(app.history.series("requests_ps", 0)[1], default=0) > 0,
                         "a request rate above zero")
        await pilot.pause()
        assert decode.points > 0
        assert decode.caption.startswith("decode ")
        assert braille(str(decode.render())) > 0                  # the line is drawn
        assert braille(str(app.query_one("#plot-requests", RatePlot).render())) > 0
        assert "served" in str(app.query_one("#running-now").render())
        assert app.query_one("#plot-load", RatePlot).caption.startswith("running ")


async def test_browse_view_page_and_delete_stored_responses(live_daemon):
    questions = [f"question number {i} about boats" for i in range(3)]
    with httpx.Client(base_url=live_daemon.url, timeout=60) as http:
        ids = [http.post("/v1/responses", json={"input": q, "max_output_tokens": 16}).json()["id"]
               for q in questions]
    app = TensorFoldApp(live_daemon.url, supervisor=None, poll_interval=None, page_size=2)
    async with app.run_test(size=SIZE) as pilot:
        view = app.query_one(ResponsesView)
        table = app.query_one("#responses-table", DataTable)
        await pilot.press("2")
        await wait_until(pilot, lambda: table.row_count == 2, "the first page")
        assert [str(k.value) for k in table.rows] == ids[::-1][:2]  # newest first
        await wait_until(pilot, lambda: app.responses_more, "has_more")
        await pilot.press("n")
        await wait_until(pilot, lambda: table.row_count == 3, "the next page")
        assert ids[0] in table.rows

        # view the middle one
        table.move_cursor(row=table.get_row_index(ids[1]))
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, ResponseScreen), "the response screen")
        body = app.screen.query_one("#response-body")
        await wait_until(pilot, lambda: questions[1] in str(body.render()), "the conversation")
        shown = str(body.render())
        assert ids[1] in shown and "output" in shown and "assistant:" in shown
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, ResponseScreen), "the table again")

        # delete it: d, then y
        assert view.selected_id() == ids[1]
        await pilot.press("d")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the question")
        await pilot.press("y")
        await wait_until(pilot, lambda: ids[1] not in table.rows and table.row_count == 2, "the row to go")
    with httpx.Client(base_url=live_daemon.url, timeout=10) as http:
        assert http.get(f"/v1/responses/{ids[1]}").status_code == 404
        assert http.get(f"/v1/responses/{ids[0]}").status_code == 200


async def test_a_daemon_that_does_not_answer_is_shown_calmly(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"
    app = TensorFoldApp(url, supervisor=None, poll_interval=0.2)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.snapshot is not None, "the first poll")
        assert "unreachable" in header(app)
        assert len(app.history) == 0
        await pilot.press("2")
        await wait_until(pilot, lambda: "could not be read" in str(app.query_one("#responses-note").render()),
                         "the note that responses could not be read")
        await pilot.press("3")
        await pilot.press("s")                                   # no supervisor: no controls, nothing happens
        assert not app.query("#controls")
        await wait_until(pilot, lambda: "no answer" in str(app.query_one("#daemon-message").render()),
                         "the daemon tab's note")
        assert app.is_running

    # the same port with a supervisor of our own: the daemon is "stopped", not an error
    sup = make_supervisor(tmp_path, port=int(url.rsplit(":", 1)[1]))
    app = TensorFoldApp(url, supervisor=sup, poll_interval=0.2)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.snapshot is not None, "the first poll")
        assert "stopped" in header(app)


async def test_a_remote_daemon_has_no_controls():
    app = TensorFoldApp("http://192.0.2.1:8080", poll_interval=None)  # TEST-NET-1: never answers
    assert app.supervisor is None and not app.local
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("3")
        await pilot.pause()
        assert "192.0.2.1" in header(app)
        assert not app.query("#controls") and not app.query(Button)
        assert "not on this machine" in str(app.query_one("#remote-note").render())
        for key in ("s", "x", "R", "m"):
            assert app.check_action({"s": "start", "x": "stop", "R": "restart", "m": "model"}[key], ()) is False
            await pilot.press(key)
        assert not isinstance(app.screen, ModelPicker)


async def test_start_restart_stop_with_the_model_picker(tmp_path, tiny_model, echo_model):
    sup = make_supervisor(tmp_path / "state")
    models = [CachedModel(str(path), path, 1, "tensorfold") for path in (tiny_model, echo_model)]
    app = TensorFoldApp(sup.url, supervisor=sup, poll_interval=0.25, list_models=lambda: models,
                        serve_args=SERVE_ARGS)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("3")
            await wait_until(pilot, lambda: app.snapshot and app.snapshot.state == "stopped", "stopped")

            # type a model folder into the picker, then start with s
            await pilot.press("m")
            await wait_until(pilot, lambda: isinstance(app.screen, ModelPicker) and app.screen.values, "the list")
            assert [o.prompt for o in app.screen.query_one(OptionList).options][0].strip().startswith(str(tiny_model))
            await pilot.press("tab")
            path_input = app.screen.query_one("#picker-path", Input)
            assert path_input.has_focus
            path_input.value = str(tiny_model)
            await pilot.press("enter")
            await wait_until(pilot, lambda: app.chosen == str(tiny_model), "the typed choice")
            await pilot.press("s")
            await wait_until(pilot, lambda: app.snapshot.state == "serving" and app.snapshot.model == tiny_model.name
                             and not app.running_action, "serving the tiny model", timeout=120)
            assert "serving" in header(app) and tiny_model.name in header(app)
            assert app.snapshot.status.managed_by == "process" and app.snapshot.status.pid

            # the log tail shows where it listens
            view = app.query_one(DaemonView)
            await wait_until(pilot, lambda: any("listening on" in line for line in view.log_lines), "the log tail")
            shown = [strip.text for strip in app.query_one("#daemon-log", RichLog).lines]
            assert any("listening on" in line for line in shown)

            # pick the other model from the list, restart with R
            await pilot.press("m")
            await wait_until(pilot, lambda: isinstance(app.screen, ModelPicker) and app.screen.values, "the list")
            await pilot.press("down", "enter")
            await wait_until(pilot, lambda: app.chosen == str(echo_model), "the listed choice")
            await pilot.press("R")
            await wait_until(pilot, lambda: app.snapshot.state == "serving" and app.snapshot.model == echo_model.name
                             and not app.running_action, "serving the echo model", timeout=120)
            assert sup.chosen_model() == str(echo_model) and "--kv-memory" in sup.settings()

            # stop with the button
            await pilot.click("#btn-stop")
            await wait_until(pilot, lambda: app.snapshot.state == "stopped" and not app.running_action, "stopped")
            assert sup.status().state is State.STOPPED and not sup.paths.pid_file.exists()
            assert "stopped" in header(app)
    finally:
        sup.stop()
