"""The MLX backend: mlx-lm's model implementations, run one row at a time over a paged KV
pool the engine owns (see runner.py for why one row)."""
