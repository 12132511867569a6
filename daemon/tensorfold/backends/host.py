"""What the host machine has free: the KV budget of CPU runners.

On the CPU (and on unified-memory GPUs, whose allocations come out of the
host's RAM) the budget is MemAvailable less a tenth of RAM, at least 4 GiB.
"""

from __future__ import annotations

from pathlib import Path

GiB = 1 << 30


def host_memory() -> tuple[int, int]:
    """(MemTotal, MemAvailable) in bytes, from /proc/meminfo (or psutil-free fallbacks)."""
    try:
        info = {}
        for line in Path("/proc/meminfo").read_text().splitlines():
            name, value = line.split(":", 1)
            info[name] = int(value.split()[0]) * 1024
        return info["MemTotal"], info["MemAvailable"]
    except (OSError, KeyError, ValueError):
        import os

        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        return pages * size, pages * size // 2


def host_budget() -> int:
    total, available = host_memory()
    return max(0, available - max(total // 10, 4 * GiB))
