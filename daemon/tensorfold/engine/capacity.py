"""How many KV positions the machine can give, and the window that follows.

The budget is the runner's `free_memory()` (what the machine has free less a
reserve: backends/host.py on the CPU, the GPU's own free memory on CUDA);
`--kv-memory` replaces the estimate.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ..backends.host import GiB

log = logging.getLogger(__name__)


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
