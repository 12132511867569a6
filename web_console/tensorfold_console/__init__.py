"""The browser console's page and assets, served by the daemon at /console.

`STATIC_DIR` holds index.html, the console's scripts and stylesheet, and
`vendor/`: the chart library (uPlot) that `scripts/build-console` brings in
from npm. Nothing in `vendor/` is committed, so `vendor_built()` tells the
daemon whether the console can be served or must answer 503.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["STATIC_DIR", "VENDOR_DIR", "VENDOR_FILES", "BUILD_SCRIPT", "missing_vendor_files", "vendor_built"]

STATIC_DIR = Path(__file__).resolve().parent / "static"
VENDOR_DIR = STATIC_DIR / "vendor"
VENDOR_FILES = ("uPlot.iife.min.js", "uPlot.min.css")
BUILD_SCRIPT = "scripts/build-console"


def missing_vendor_files(vendor_dir: Path = VENDOR_DIR) -> list[str]:
    """The vendor files the page loads that are not in `vendor_dir`."""
    return [name for name in VENDOR_FILES if not (vendor_dir / name).is_file()]


def vendor_built(vendor_dir: Path = VENDOR_DIR) -> bool:
    """Whether `scripts/build-console` has put the chart library in place."""
    return not missing_vendor_files(vendor_dir)
