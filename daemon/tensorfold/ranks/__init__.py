"""One model across several ranks (--ranks N) on torch.distributed's gloo.

Rank 0 runs the HTTP server, the scheduler and the draw's merge; every rank runs
every forward on its own part of each linear (native/shard.py), the
activations all-gathered between the steps, so the logits have the bits
of one rank's; draws.py makes the keyed draw across the vocabulary split.
group.py holds the process groups and the gather the C
forward calls; leader.py is rank 0's Backend; follower.py the other ranks'
loop; launch.py starts the followers (or finds torchrun's ranks).
"""
