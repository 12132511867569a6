"""The engines' backends: native (the CPU kernels), torch (CUDA) and MLX."""

from __future__ import annotations

import contextlib
from typing import Any


def thread_mode(backend: Any) -> contextlib.AbstractContextManager:
    """The mode a backend's calls run in on the engine thread (torch's: inference mode); none
    for a backend without one."""
    mode = getattr(backend, "thread_mode", None)
    return mode() if mode is not None else contextlib.nullcontext()
