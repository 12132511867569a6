"""The client side of the daemon, shared by the TUI and the tray app: an HTTP
client for its API (http.py), /health rates from counter differences
(rates.py), and the supervisor that starts, stops and restarts a local daemon
(supervisor.py), as a background process or through launchd or systemd
(services.py), and the locally cached models (models.py). Nothing here
imports the engine."""

from .http import DaemonClient, DaemonError
from .models import cached_models
from .paths import DaemonPaths
from .rates import RATES, RateTracker
from .supervisor import State, Supervisor

__all__ = ["DaemonClient", "DaemonError", "DaemonPaths", "RATES", "RateTracker", "State", "Supervisor",
           "cached_models"]
