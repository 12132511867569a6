"""What the host machine has: its cores, the KV budget of CPU runners; and handing
freed memory back to it.

On the CPU (and on unified-memory GPUs, whose allocations come out of the
host's RAM) the budget is MemAvailable less a tenth of RAM, at least 4 GiB.

The C allocator keeps memory that was freed (loading a model leaves ~50 MB of
it, tokenizing 7 MB of text ~450 MB); `release_freed_memory` hands it back
(glibc's malloc_trim; elsewhere nothing).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
from pathlib import Path
from typing import Any

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
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        return pages * size, pages * size // 2


def default_threads() -> int:
    """The machine's cores available to this process."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        return os.cpu_count() or 1


def host_budget() -> int:
    total, available = host_memory()
    return max(0, available - max(total // 10, 4 * GiB))


@functools.cache
def _malloc_trim() -> Any:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):       # not glibc
        return None


def release_freed_memory() -> None:
    """Give the memory the C allocator holds free back to the system, where it can."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def gpu_driver() -> bool:
    """Whether this host has a GPU driver torch could use (NVIDIA's, or ROCm's), found without
    importing torch."""
    return any(Path(p).exists() for p in ("/proc/driver/nvidia/version", "/dev/nvidiactl", "/dev/kfd"))


def device_kind(name: str) -> str:
    """--device's kind ("cpu", "cuda", ...); auto is cuda where torch sees a GPU.  torch is
    imported only to ask that, and only on a host with a GPU driver, so a CPU serve runs
    without it."""
    if name != "auto":
        return name.split(":")[0]
    if not gpu_driver():
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
