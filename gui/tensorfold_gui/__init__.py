"""TensorFold's menu-bar / tray app (`tensorfold-tray`): start, stop and
restart the local daemon, pick its model, open its console and logs, and
launch at login. A client of the daemon's HTTP API through
`tensorfold.client`; it never imports the engine."""

__all__ = ["__version__"]

__version__ = "0.1.0"
