"""The daemon as a launchd agent (macOS) or a systemd user unit (Linux), for
the supervisor to drive instead of a process of its own. Both run
`tensorfold serve @<args file>`, so a restart picks up the settings the
supervisor wrote there (packaging/ holds the agent and the unit)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Protocol

SYSTEMD_UNIT = "tensorfold.service"
LAUNCHD_LABEL = "dev.tensorfold.daemon"


class Service(Protocol):
    name: str

    def installed(self) -> bool: ...
    def active(self) -> bool: ...
    def start(self) -> None: ...
    def stop(self) -> None: ...
    def restart(self) -> None: ...
    def log_tail(self, lines: int) -> list[str]: ...


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)


def _checked(*argv: str) -> None:
    done = _run(*argv)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {(done.stderr or done.stdout).strip()}")


class SystemdUserService:
    name = "systemd"

    def __init__(self, unit: str = SYSTEMD_UNIT, systemctl: str = "systemctl",
                 journalctl: str = "journalctl") -> None:
        self.unit, self.systemctl, self.journalctl = unit, systemctl, journalctl

    def installed(self) -> bool:
        try:
            done = _run(self.systemctl, "--user", "show", self.unit, "-p", "LoadState", "--value")
        except (OSError, subprocess.TimeoutExpired):
            return False
        return done.returncode == 0 and done.stdout.strip() == "loaded"

    def active(self) -> bool:
        return _run(self.systemctl, "--user", "is-active", "--quiet", self.unit).returncode == 0

    def start(self) -> None:
        _checked(self.systemctl, "--user", "start", self.unit)

    def stop(self) -> None:
        _checked(self.systemctl, "--user", "stop", self.unit)

    def restart(self) -> None:
        _checked(self.systemctl, "--user", "restart", self.unit)

    def log_tail(self, lines: int) -> list[str]:
        done = _run(self.journalctl, "--user", "-u", self.unit, "-n", str(lines), "--no-pager", "-o", "cat")
        return done.stdout.splitlines()[-lines:]


class LaunchdAgent:
    name = "launchd"

    def __init__(self, log_file: Path, label: str = LAUNCHD_LABEL, launchctl: str = "launchctl",
                 agents: Path | None = None) -> None:
        self.label, self.launchctl, self.log_file = label, launchctl, log_file
        self.plist = (agents or Path.home() / "Library" / "LaunchAgents") / f"{label}.plist"
        self.domain = f"gui/{os.getuid()}"

    def installed(self) -> bool:
        return self.plist.is_file()

    def active(self) -> bool:
        done = _run(self.launchctl, "print", f"{self.domain}/{self.label}")
        return done.returncode == 0 and "state = running" in done.stdout

    def start(self) -> None:
        if _run(self.launchctl, "print", f"{self.domain}/{self.label}").returncode != 0:
            _checked(self.launchctl, "bootstrap", self.domain, str(self.plist))
        _checked(self.launchctl, "kickstart", f"{self.domain}/{self.label}")

    def stop(self) -> None:
        _checked(self.launchctl, "bootout", f"{self.domain}/{self.label}")

    def restart(self) -> None:
        if _run(self.launchctl, "print", f"{self.domain}/{self.label}").returncode != 0:
            self.start()
        else:
            _checked(self.launchctl, "kickstart", "-k", f"{self.domain}/{self.label}")

    def log_tail(self, lines: int) -> list[str]:
        return tail(self.log_file, lines)


def detect_service(log_file: Path) -> Service | None:
    """The installed service manager entry for the daemon, if any."""
    candidate: Service = LaunchdAgent(log_file) if sys.platform == "darwin" else SystemdUserService()
    return candidate if candidate.installed() else None


def tail(path: Path, lines: int) -> list[str]:
    """The last `lines` lines of a text file (empty when it does not exist)."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 256 * lines))
            data = f.read()
    except FileNotFoundError:
        return []
    return data.decode("utf-8", "replace").splitlines()[-lines:]
