"""Where the supervisor keeps its files: the pid file under the platformdirs
runtime directory, the log under the log directory, and the serve arguments a
launchd agent or systemd unit reads (`tensorfold serve @FILE`) under the
config directory. `TENSORFOLD_STATE_DIR` puts all three in one folder
(tests, or several daemons side by side)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import platformdirs

APP_NAME = "tensorfold"
STATE_ENV = "TENSORFOLD_STATE_DIR"


@dataclass(frozen=True)
class DaemonPaths:
    pid_file: Path
    log_file: Path
    args_file: Path

    @classmethod
    def default(cls) -> DaemonPaths:
        override = os.environ.get(STATE_ENV, "").strip()
        if override:
            return cls.under(Path(override).expanduser())
        runtime = Path(platformdirs.user_runtime_dir(APP_NAME, appauthor=False))
        logs = Path(platformdirs.user_log_dir(APP_NAME, appauthor=False))
        config = Path(platformdirs.user_config_dir(APP_NAME, appauthor=False))
        return cls(runtime / "daemon.pid", logs / "daemon.log", config / "serve.args")

    @classmethod
    def under(cls, folder: Path) -> DaemonPaths:
        return cls(folder / "daemon.pid", folder / "daemon.log", folder / "serve.args")
