"""The Rates tab: one line with the running requests now, and a grid of
textual-plotext plots of the /health rates over the recent samples (decode and
prompt tok/s, requests/s, the cached share of prompts, draft acceptance, and
running / queued requests)."""

from __future__ import annotations

import math
from typing import Any

from textual.app import ComposeResult
from textual.containers import Grid, Vertical
from textual.widgets import Static
from textual_plotext import PlotextPlot

from tensorfold.client import RATES

from .data import RateHistory, fmt_number, fmt_rate

# plot id -> the rates it draws (keys of RATES)
PLOTS: dict[str, tuple[str, ...]] = {
    "plot-decode": ("decode_tps",),
    "plot-prompt": ("prompt_tps",),
    "plot-requests": ("requests_ps",),
    "plot-cached": ("cached_ratio",),
    "plot-acceptance": ("acceptance",),
    "plot-load": ("running", "queued"),
}
COUNT_UNITS = ("streams", "requests")


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 times a power of ten that is at least `value`."""
    if value <= 0:
        return 1.0
    scale = 10.0 ** math.floor(math.log10(value))
    for step in (1.0, 2.0, 2.5, 5.0, 10.0):
        if step * scale >= value * 0.9999:
            return step * scale
    return 10.0 * scale


def rate_title(key: str, value: float | None) -> str:
    label, unit = RATES[key]
    text = fmt_number(value) if unit in COUNT_UNITS else fmt_rate(value, unit)
    return f"{label} {text}"


def running_line(health: dict[str, Any] | None) -> str:
    """The running requests now: requests_running, the streams, the queue."""
    if health is None:
        return "no answer from the daemon: no requests to show"
    streams = health.get("streams") or {}
    running = health.get("requests_running", 0)
    parts = [f"running {running}"]
    if streams:
        parts[0] += (f" (decoding {streams.get('decoding', 0)}, prefilling {streams.get('prefilling', 0)},"
                     f" {streams.get('maximum', '?')} streams)")
    parts.append(f"queued {health.get('requests_waiting', 0)}")
    parts.append(f"served {health.get('requests_total', 0)}")
    return " · ".join(parts)


class RatePlot(PlotextPlot):
    """A plot of one or two rates against seconds before the latest sample."""

    def __init__(self, keys: tuple[str, ...], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.keys = keys
        self.points = 0
        self.caption = "  ".join(rate_title(k, None) for k in keys)

    def on_mount(self) -> None:
        super().on_mount()
        self._draw_frame([], 1.0)

    def _draw_frame(self, titles: list[str], top: float) -> None:
        plt = self.plt
        plt.title("  ".join(titles) or self.caption)
        plt.xticks([])
        plt.ylim(0, top)
        plt.yticks([0, top], ["0", f"{top:g}" if top < 1000 else fmt_number(top)])

    def show(self, history: RateHistory, now: float) -> None:
        plt = self.plt
        plt.clear_data()
        titles: list[str] = []
        top = 0.0
        self.points = 0
        for key in self.keys:
            label, unit = RATES[key]
            xs, ys = history.series(key, now)
            if unit == "ratio":
                ys = [y * 100 for y in ys]
            if xs:
                plt.plot(xs, ys, marker="braille", label=label if len(self.keys) > 1 else None)
                top = max(top, *ys)
            self.points += len(xs)
            titles.append(rate_title(key, history.latest.get(key)))
        unit = RATES[self.keys[0]][1]
        top = 100.0 if unit == "ratio" else nice_ceiling(top)
        self.caption = "  ".join(titles)
        self._draw_frame(titles, top)
        self.refresh()


class RatesView(Vertical):
    """The running-requests line above the grid of rate plots."""

    def compose(self) -> ComposeResult:
        yield Static("waiting for the first answer…", id="running-now")
        with Grid(id="plots"):
            for plot_id, keys in PLOTS.items():
                yield RatePlot(keys, id=plot_id)

    def show(self, health: dict[str, Any] | None, history: RateHistory, now: float) -> None:
        self.query_one("#running-now", Static).update(running_line(health))
        for plot in self.query(RatePlot):
            plot.show(history, now)
