"""tensorfold-tui: a Textual terminal client of the TensorFold daemon (rates,
stored responses, and start / stop / restart of a daemon on this machine).
It talks to the daemon only over HTTP, through `tensorfold.client`."""

from .app import TensorFoldApp, main

__all__ = ["TensorFoldApp", "main"]
