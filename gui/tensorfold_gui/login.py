"""The "Launch at login" switch for the tray app.

macOS: a LaunchAgent `~/Library/LaunchAgents/dev.tensorfold.tray.plist`
(RunAtLoad) that runs the tray program. Linux and other XDG desktops: an
autostart entry `$XDG_CONFIG_HOME/autostart/tensorfold-tray.desktop`.
Enabling writes the file, disabling removes it; nothing else is touched."""

from __future__ import annotations

import os
import plistlib
import sys
from pathlib import Path

from tensorfold.client.supervisor import program

TRAY_LABEL = "dev.tensorfold.tray"
AUTOSTART_NAME = "tensorfold-tray.desktop"
BUNDLE_NAME = "TensorFold.app"


def tray_command() -> list[str]:
    """The command that runs the tray app in this environment."""
    return program("tensorfold-tray", "tensorfold_gui")


def _desktop_quote(arg: str) -> str:
    """One Exec= argument, quoted the way the Desktop Entry spec asks."""
    if arg and not any(c in arg for c in ' \t\n"\'\\><~|&;$*?#()`%'):
        return arg
    escaped = arg.replace("\\", "\\\\").replace('"', '\\"').replace("`", "\\`").replace("$", "\\$")
    return '"' + escaped.replace("%", "%%") + '"'


def desktop_exec(command: list[str]) -> str:
    """An Exec= value; the spec's string escaping doubles each backslash again."""
    return " ".join(_desktop_quote(a) for a in command).replace("\\", "\\\\")


class LoginItem:
    """Turns launching the tray app at login on and off for one user."""

    def __init__(self, platform: str = sys.platform, home: Path | None = None,
                 config_home: Path | None = None, command: list[str] | None = None) -> None:
        self.platform = platform
        self.home = home or Path.home()
        xdg = os.environ.get("XDG_CONFIG_HOME", "").strip()
        self.config_home = config_home or (Path(xdg) if xdg else self.home / ".config")
        self.command = command or self._default_command()

    def _default_command(self) -> list[str]:
        if self.platform == "darwin":
            for apps in (self.home / "Applications", Path("/Applications")):
                launcher = apps / BUNDLE_NAME / "Contents" / "MacOS" / "TensorFold"
                if launcher.is_file():
                    return [str(launcher)]
        return tray_command()

    @property
    def path(self) -> Path:
        if self.platform == "darwin":
            return self.home / "Library" / "LaunchAgents" / f"{TRAY_LABEL}.plist"
        return self.config_home / "autostart" / AUTOSTART_NAME

    def content(self) -> bytes:
        """What `enable` writes: the LaunchAgent plist or the autostart entry."""
        if self.platform == "darwin":
            return plistlib.dumps({
                "Label": TRAY_LABEL,
                "ProgramArguments": self.command,
                "RunAtLoad": True,
                "ProcessType": "Interactive",
                "LimitLoadToSessionType": "Aqua",
            })
        lines = [
            "[Desktop Entry]",
            "Type=Application",
            "Name=TensorFold",
            "Comment=Local LLM server: menu-bar controls",
            f"Exec={desktop_exec(self.command)}",
            "Icon=utilities-system-monitor",
            "Terminal=false",
            "X-GNOME-Autostart-enabled=true",
            "X-GNOME-Autostart-Delay=5",
        ]
        return ("\n".join(lines) + "\n").encode()

    def is_enabled(self) -> bool:
        try:
            text = self.path.read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            return False
        if self.platform == "darwin":
            return True
        entries = [line.strip().replace(" ", "") for line in text.decode("utf-8", "replace").splitlines()]
        return "Hidden=true" not in entries and "X-GNOME-Autostart-enabled=false" not in entries

    def enable(self) -> Path:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_name(self.path.name + ".part")
        partial.write_bytes(self.content())
        partial.replace(self.path)
        return self.path

    def disable(self) -> None:
        self.path.unlink(missing_ok=True)

    def set_enabled(self, on: bool) -> bool:
        self.enable() if on else self.disable()
        return self.is_enabled()
