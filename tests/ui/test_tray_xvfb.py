"""End to end under Xvfb with a real tray host (Debian's `trayer`): the
`tensorfold-tray` program finds a system tray, its icon is embedded in the
tray and shown, a right click on it opens the menu, and menu entries chosen
there with the keyboard work ("Launch at login" on and off, then Quit).
Everything is seen from outside the app, with xwininfo and xdotool."""

from __future__ import annotations

import os
import re
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from .conftest import free_port

pytestmark = pytest.mark.ui

TOOLS = ("Xvfb", "trayer", "xdotool", "xwininfo")
missing = [tool for tool in TOOLS if shutil.which(tool) is None]
if missing:
    pytest.skip(f"needs {', '.join(missing)} (scripts/test-system-packages installs them)",
                allow_module_level=True)
pytest.importorskip("PySide6")

_LINE = re.compile(r"^(\s*)(0x[0-9a-f]+) (.*?): \((.*?)\)\s+(\d+)x(\d+)\+-?\d+\+-?\d+\s+\+(-?\d+)\+(-?\d+)")


@dataclass
class XWindow:
    id: str
    name: str
    classes: str
    width: int
    height: int
    x: int            # absolute position on the screen
    y: int
    ancestors: list[XWindow]


def x_windows(display: str) -> list[XWindow]:
    """Every window under the root, with its ancestors (from `xwininfo -root -tree`)."""
    text = subprocess.run(["xwininfo", "-root", "-tree"], env={**os.environ, "DISPLAY": display},
                          capture_output=True, text=True, timeout=30, check=True).stdout
    windows: list[XWindow] = []
    stack: list[tuple[int, XWindow]] = []
    for line in text.splitlines():
        found = _LINE.match(line)
        if not found:
            continue
        indent, wid, name, classes, w, h, x, y = found.groups()
        while stack and stack[-1][0] >= len(indent):
            stack.pop()
        window = XWindow(wid, name, classes, int(w), int(h), int(x), int(y), [s[1] for s in stack])
        windows.append(window)
        stack.append((len(indent), window))
    return windows


def viewable(display: str, window: XWindow) -> bool:
    info = subprocess.run(["xwininfo", "-id", window.id], env={**os.environ, "DISPLAY": display},
                          capture_output=True, text=True, timeout=30).stdout
    return "Map State: IsViewable" in info


def wait_for(what: str, probe: Callable[[], object], timeout: float = 60.0, log: Path | None = None):
    deadline = time.monotonic() + timeout
    while True:
        found = probe()
        if found:
            return found
        if time.monotonic() > deadline:
            extra = f"\n--- app log ---\n{log.read_text()}" if log and log.exists() else ""
            raise AssertionError(f"gave up waiting for {what}{extra}")
        time.sleep(0.2)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def display() -> Iterator[str]:
    """A fresh Xvfb server on a display number it picks itself."""
    read_end, write_end = os.pipe()
    server = subprocess.Popen(["Xvfb", "-displayfd", str(write_end), "-screen", "0", "1024x768x24",
                               "-nolisten", "tcp"], pass_fds=(write_end,),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(write_end)
    try:
        ready, _, _ = select.select([read_end], [], [], 30)
        number = os.read(read_end, 32).decode().strip() if ready else ""
        if not number:
            pytest.fail("Xvfb did not report a display number")
        yield f":{number}"
    finally:
        os.close(read_end)
        _stop(server)


@pytest.fixture
def tray_host(display) -> Iterator[str]:
    """trayer, a freedesktop system tray, docked at the top right."""
    host = subprocess.Popen(["trayer", "--edge", "top", "--align", "right", "--widthtype", "pixel",
                             "--width", "200", "--heighttype", "pixel", "--height", "32"],
                            env={**os.environ, "DISPLAY": display},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for("trayer's panel", lambda: any('"trayer"' in w.classes for w in x_windows(display)))
        yield display
    finally:
        _stop(host)


def test_the_icon_sits_in_the_tray_and_its_menu_works(tray_host, tmp_path):
    display = tray_host
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    env = {**os.environ, "DISPLAY": display, "QT_QPA_PLATFORM": "xcb", "XDG_RUNTIME_DIR": str(runtime),
           "XDG_CONFIG_HOME": str(tmp_path / "config"), "TENSORFOLD_STATE_DIR": str(tmp_path / "state")}
    env.pop("WAYLAND_DISPLAY", None)
    log = tmp_path / "tray.log"
    argv = [sys.executable, "-m", "tensorfold_gui", "--url", f"http://127.0.0.1:{free_port()}",
            "--service", "none", "--poll-ms", "200", "--tray-wait", "30"]
    with log.open("wb") as out:
        app = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for("the app's report", lambda: "system tray" in log.read_text() or app.poll() is not None,
                 log=log)
        assert "tray icon shown in the system tray" in log.read_text(), log.read_text()

        def icon() -> XWindow | None:
            return next((w for w in x_windows(display) if '"tensorfold-tray"' in w.classes
                         and any('"trayer"' in a.classes for a in w.ancestors)), None)

        # embedded in trayer's panel, with a real size, and shown
        tray_icon = wait_for("the icon inside trayer's panel", icon, log=log)
        assert tray_icon.width > 0 and tray_icon.height > 0
        wait_for("the icon to be viewable", lambda: viewable(display, icon()), log=log)
        assert not any(w.name == '"TensorFold"' and w.width > 100 and not w.ancestors
                       and viewable(display, w) for w in x_windows(display)), "the status window is up"

        def menu_shown() -> bool:
            return any('"tensorfold-tray"' in w.classes and w.height > 100 and not w.ancestors
                       and viewable(display, w) for w in x_windows(display))

        def choose(key: str) -> None:
            """Right-click the icon until its menu shows, then press an entry's mnemonic.
            (A click that lands while Qt is still closing the last menu only closes it.)"""
            wait_for("the last menu to close", lambda: not menu_shown(), log=log)
            target = icon()
            centre = (str(target.x + target.width // 2), str(target.y + target.height // 2))
            for _attempt in range(5):
                xdotool(display, "mousemove", *centre, "click", "3")
                try:
                    wait_for("the menu", menu_shown, timeout=3)
                    break
                except AssertionError:
                    continue
            else:
                wait_for("the menu", menu_shown, timeout=0, log=log)
            xdotool(display, "key", key)

        entry = tmp_path / "config" / "autostart" / "tensorfold-tray.desktop"
        choose("l")                                   # &Launch at login
        wait_for("the autostart entry", entry.is_file, log=log)
        assert any(line.startswith("Exec=") and "tensorfold" in line for line in entry.read_text().splitlines())
        choose("l")                                   # and off again
        wait_for("the autostart entry to go", lambda: not entry.exists(), log=log)
        choose("q")                                   # &Quit
        assert app.wait(timeout=30) == 0, log.read_text()
    finally:
        _stop(app)


def xdotool(display: str, *args: str) -> None:
    subprocess.run(["xdotool", *args], env={**os.environ, "DISPLAY": display}, check=True, timeout=30)
