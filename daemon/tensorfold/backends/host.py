"""What the host machine has: its cores, the KV budget of CPU runners; and handing
freed memory back to it.

On the CPU (and on unified-memory GPUs, whose allocations come out of the
host's RAM) the budget is MemAvailable less a tenth of RAM, at least 4 GiB.

The C allocator keeps memory that was freed (loading a model leaves ~50 MB of
it, tokenizing 7 MB of text ~450 MB); `release_freed_memory` hands it back
(glibc's malloc_trim, and on request the calling thread's arena top; elsewhere nothing).
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


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3   # mallopt's parameters
KEPT_TOP = 64 << 20                  # the free top an arena keeps: the most glibc's own rule keeps
OWN_PAGES = 32 << 20                 # blocks this large get pages of their own: glibc's own ceiling


@functools.cache
def _glibc() -> Any:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    if libc is None or not all(hasattr(libc, f) for f in ("malloc_trim", "mallopt", "malloc", "free")):
        return None                  # not glibc
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    return libc


def release_freed_memory(this_thread: bool = False) -> None:
    """Give the memory the C allocator holds free back to the system, where it can; with
    `this_thread`, the free top of the calling thread's own arena too."""
    libc = _glibc()
    if libc is None:
        return
    if this_thread:
        # malloc_trim leaves a thread arena's free top alone, and glibc lets that top grow
        # to twice the largest block freed (up to 64 MiB): freeing 64 KiB or more shrinks it
        # to the trim threshold, so free a block under that one and put it back. Setting a
        # threshold stops glibc moving both by itself, so both are set where its own rule
        # ends up once large blocks have come and gone (as loading a model does): a step's
        # buffers then stay in the arena, not faulted in again each time.
        libc.mallopt(M_TRIM_THRESHOLD, 0)
        libc.free(libc.malloc(96 << 10))
        libc.mallopt(M_TRIM_THRESHOLD, KEPT_TOP)
        libc.mallopt(M_MMAP_THRESHOLD, OWN_PAGES)
    libc.malloc_trim(0)


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
