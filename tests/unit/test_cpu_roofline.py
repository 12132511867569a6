"""scripts/cpu-roofline: it builds here and reports each ceiling as a positive number."""

from __future__ import annotations

import platform
import re
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "cpu-roofline"


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64") or shutil.which("cc") is None,
                    reason="x86-64 with a C compiler only")
def test_reports_every_ceiling():
    out = subprocess.run([str(SCRIPT)], capture_output=True, text=True, timeout=300, check=True).stdout
    for label in ("clock", "read, 1 stream", "read, 8 streams", "read, 8 KB blocks in random order"):
        line = next(l for l in out.splitlines() if l.startswith(label + ":"))
        assert float(re.search(r": ([0-9.]+)", line).group(1)) > 0, line
    vnni = "avx512_vnni" in Path("/proc/cpuinfo").read_text()
    assert ("zmm vpdpbusd:" in out) == vnni
    if vnni:
        assert float(re.search(r"zmm vpdpbusd: ([0-9.]+) a cycle", out).group(1)) > 0
