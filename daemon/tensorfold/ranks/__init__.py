"""One model across several ranks (--ranks N) on torch.distributed's gloo.

Rank 0 runs the HTTP server, the scheduler and the draw's merge; every rank runs
every forward on its own part of each linear (native/shard.py), the
activations all-gathered between the steps, so the logits have the bits
of one rank's; draws.py makes the keyed draw across the vocabulary split.
group.py holds the process groups and the gather the C
forward calls; leader.py is rank 0's Backend; follower.py the other ranks'
loop; launch.py starts the followers (or finds torchrun's ranks).
"""

import os


def torchrun_rank() -> tuple[int, int, str, int] | None:
    """(rank, world size, store host, store port) when torchrun started this process."""
    if "TORCHELASTIC_RUN_ID" not in os.environ and "LOCAL_RANK" not in os.environ:
        return None
    env = os.environ
    return int(env["RANK"]), int(env["WORLD_SIZE"]), env["MASTER_ADDR"], int(env["MASTER_PORT"])
