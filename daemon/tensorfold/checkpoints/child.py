"""Checkpoint work that imports transformers (and torch with it) runs in a child
process, so a serving process never maps them: resolving a tokenizer, converting a
GGUF.  A child's `CheckpointError` comes back whole; any other failure comes back as
its last line of stderr."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable

from .errors import CheckpointError

_ERROR = "tensorfold-checkpoint-error: "


def run_module(module: str, args: list[str], what: str, timeout: float) -> str:
    """`python -m module args`; its stdout, or a CheckpointError saying `what` failed."""
    try:
        out = subprocess.run([sys.executable, "-m", module, *args], capture_output=True, timeout=timeout,
                             check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CheckpointError(f"{what}: {exc}") from exc
    if out.returncode == 0:
        return out.stdout.decode()
    lines = out.stderr.decode(errors="replace").strip().splitlines()
    for line in reversed(lines):
        if line.startswith(_ERROR):
            raise CheckpointError(json.loads(line[len(_ERROR):]))
    raise CheckpointError(f"{what}: {lines[-1] if lines else f'exit status {out.returncode}'}")


def child_main(work: Callable[[list[str]], str]) -> None:
    """A child's entry: `work(argv)` written to stdout, a CheckpointError to stderr for
    run_module."""
    try:
        text = work(sys.argv[1:])
    except CheckpointError as exc:
        sys.stderr.write(f"\n{_ERROR}{json.dumps(str(exc))}\n")
        sys.exit(2)
    sys.stdout.write(text)
