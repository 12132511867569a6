"""release_freed_memory: what the C allocator holds free goes back to the system, a
thread arena's free top included (glibc)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tensorfold.backends.host import _glibc

# In a fresh interpreter (no arena left over from other tests), a new thread allocates,
# writes and frees 32 MiB in blocks under any mmap threshold, with nothing allocated
# between them, so they merge into its arena's free top; then release_freed_memory.
SCENARIO = """
import ctypes, json, sys, threading
from tensorfold.backends.host import KEPT_TOP, M_TRIM_THRESHOLD, _glibc, release_freed_memory
from tensorfold.bench.decode import rss_mib as rss
libc = _glibc()
libc.mallopt(M_TRIM_THRESHOLD, KEPT_TOP)          # as glibc's threshold after large frees
BLOCK, BLOCKS = 96 * 1024, 341
seen = {"start": rss()}
def work():
    blocks = (ctypes.c_void_p * BLOCKS)()
    for i in range(BLOCKS):
        blocks[i] = libc.malloc(BLOCK)
    for i in range(BLOCKS):
        ctypes.memset(blocks[i], 1, BLOCK)
    for i in reversed(range(BLOCKS)):
        libc.free(blocks[i])
    seen["freed"] = rss()
    release_freed_memory(this_thread=sys.argv[1] == "1")
    seen["released"] = rss()
t = threading.Thread(target=work)
t.start()
t.join()
print(json.dumps(seen))
"""


def _scenario(this_thread: bool) -> dict[str, float]:
    """RSS in MiB at the start, once the blocks are freed, and after the release."""
    out = subprocess.run([sys.executable, "-c", SCENARIO, "1" if this_thread else "0"], check=True,
                         capture_output=True, text=True, timeout=120).stdout
    return json.loads(out)


glibc_linux = pytest.mark.skipif(_glibc() is None or not os.path.exists("/proc/self/status"),
                                 reason="glibc on Linux")


@glibc_linux
def test_a_thread_arenas_free_top_goes_back():
    seen = _scenario(this_thread=True)
    assert seen["freed"] - seen["start"] > 24, "free() gave the arena's top back itself"
    assert seen["released"] - seen["start"] < 8


@glibc_linux
def test_malloc_trim_alone_keeps_it():
    """Why the engine thread asks for its own arena: malloc_trim leaves a thread arena's top."""
    seen = _scenario(this_thread=False)
    assert seen["released"] - seen["start"] > 24
