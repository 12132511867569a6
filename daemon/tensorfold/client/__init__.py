"""The client side of the daemon, shared by the TUI and the tray app: an HTTP
client for its API (http.py), /health rates from counter differences
(rates.py), and the supervisor that starts, stops and restarts a local daemon
(supervisor.py), as a background process or through launchd or systemd
(services.py). Nothing here imports the engine."""

from .http import DaemonClient, DaemonError
from .paths import DaemonPaths
from .rates import RATES, RateTracker
from .supervisor import State, Supervisor

__all__ = ["DaemonClient", "DaemonError", "DaemonPaths", "RATES", "RateTracker", "State", "Supervisor"]
