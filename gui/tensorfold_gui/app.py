"""`tensorfold-tray`: the menu-bar / tray app for a local TensorFold daemon.

It supervises the daemon at `--url` through `tensorfold.client.Supervisor`:
an installed launchd agent or systemd user unit when there is one, else a
background process of its own. Quitting the app leaves the daemon running."""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import logging
import signal
import sys
import time
from collections.abc import Sequence

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QSystemTrayIcon

from tensorfold.client import Supervisor
from tensorfold.client.http import DEFAULT_URL

from .controller import DEFAULT_POLL_MS
from .tray import TrayApp

log = logging.getLogger("tensorfold_gui")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="tensorfold-tray", description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=DEFAULT_URL, help=f"the daemon's address (default {DEFAULT_URL})")
    parser.add_argument("--api-key", default=None, help="the daemon's --api-key, if it has one")
    parser.add_argument("--service", choices=["auto", "none"], default="auto",
                        help="auto: drive an installed launchd agent or systemd unit when there is one; "
                             "none: always run the daemon as a process of the app's own")
    parser.add_argument("--window", action="store_true", help="show the status window even when a tray exists")
    parser.add_argument("--tray-wait", type=float, default=5.0, metavar="SECONDS",
                        help="how long to wait for a system tray at login before showing the window")
    parser.add_argument("--poll-ms", type=int, default=DEFAULT_POLL_MS, help="state poll interval")
    parser.add_argument("--log-level", default="INFO")
    return parser.parse_args(argv)


def hide_dock_icon() -> None:
    """macOS: run as a menu-bar-only app (no Dock icon, no app menu), whether or
    not it was started from the app bundle whose Info.plist says LSUIElement."""
    path = ctypes.util.find_library("objc")
    if not path:
        return
    objc = ctypes.cdll.LoadLibrary(path)
    ctypes.cdll.LoadLibrary("/System/Library/Frameworks/AppKit.framework/AppKit")
    objc.objc_getClass.restype = ctypes.c_void_p
    objc.objc_getClass.argtypes = [ctypes.c_char_p]
    objc.sel_registerName.restype = ctypes.c_void_p
    objc.sel_registerName.argtypes = [ctypes.c_char_p]
    send = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(("objc_msgSend", objc))
    send_long = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long)(
        ("objc_msgSend", objc))
    app = send(objc.objc_getClass(b"NSApplication"), objc.sel_registerName(b"sharedApplication"))
    accessory = 1   # NSApplicationActivationPolicyAccessory
    send_long(app, objc.sel_registerName(b"setActivationPolicy:"), accessory)


def wait_for_tray(app: QApplication, seconds: float) -> bool:
    """At login the panel's tray may come up after us: give it a moment."""
    deadline = time.monotonic() + seconds
    while not QSystemTrayIcon.isSystemTrayAvailable():
        if time.monotonic() >= deadline:
            return False
        app.processEvents()
        time.sleep(0.25)
    return True


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = QApplication(["tensorfold-tray"])      # the X11 class instance, however it was started
    app.setApplicationName("TensorFold")
    app.setDesktopFileName("tensorfold-tray")
    app.setQuitOnLastWindowClosed(False)
    if sys.platform == "darwin":
        try:
            hide_dock_icon()
        except (OSError, AttributeError) as exc:
            log.warning("cannot hide the Dock icon: %s", exc)
    use_tray = not args.window and wait_for_tray(app, args.tray_wait)
    supervisor = Supervisor(args.url, api_key=args.api_key, service="auto" if args.service == "auto" else None)
    tray = TrayApp(supervisor, poll_ms=args.poll_ms, use_tray=use_tray)
    tray.show()
    signal.signal(signal.SIGINT, lambda *_: tray.quit())
    signal.signal(signal.SIGTERM, lambda *_: tray.quit())
    wake = QTimer()                 # lets Python run its signal handlers while Qt waits
    wake.timeout.connect(lambda: None)
    wake.start(500)
    code = app.exec()
    tray.close()
    return code
