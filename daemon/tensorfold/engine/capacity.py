"""How many KV positions the machine can give, and the window that follows.

The budget is what the machine has free less a reserve: on the CPU (and on
unified-memory GPUs, whose allocations come out of the host's RAM)
MemAvailable less a tenth of RAM, at least 4 GiB; on a discrete GPU its free
memory less a tenth of its total. `--kv-memory` replaces the estimate.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

GiB = 1 << 30
log = logging.getLogger(__name__)


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


@dataclass(frozen=True, slots=True)
class KVPlan:
    num_blocks: int
    block_size: int
    context_length: int
    budget_bytes: int
    limited_by_memory: bool

    @property
    def pool_tokens(self) -> int:
        return self.num_blocks * self.block_size


def plan_kv(bytes_per_token: int, model_limit: int, context: int | None, lanes: int, block_size: int,
            budget_bytes: int) -> KVPlan:
    """Size the pool for `lanes` full windows plus one of prefix cache, within the budget."""
    if context is not None and context > model_limit:
        raise ValueError(f"--context {context} exceeds the model's limit of {model_limit} positions")
    window = context or model_limit
    wanted = (lanes + 1) * window
    affordable = budget_bytes // bytes_per_token
    tokens = min(wanted, affordable)
    num_blocks = tokens // block_size
    if num_blocks * block_size < 2 * block_size:
        raise MemoryError(f"only {budget_bytes / GiB:.2f} GiB is free for the KV cache, not enough for "
                          f"any context; free memory or pass --kv-memory")
    limited = num_blocks * block_size < window
    plan = KVPlan(num_blocks, block_size, min(window, num_blocks * block_size), budget_bytes, limited)
    log.info("KV estimate: %.2f GiB budget, %d B/position -> %d positions in %d blocks; window %d%s",
             budget_bytes / GiB, bytes_per_token, plan.pool_tokens, num_blocks, plan.context_length,
             " (limited by memory)" if limited else "")
    return plan
