"""Atomic, build-once folders in the model cache.

A finished folder holds a marker file, ``.tensorfold.json``, written last.
A folder is built under a hidden temporary name in the same parent and
renamed into place, so a reader never sees half a model, and a crash leaves
only a hidden ``.partial-*`` folder that a later build sweeps away.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .errors import CheckpointError
from .files import GGUF_FILE

log = logging.getLogger(__name__)

MARKER = ".tensorfold.json"
FORMAT_VERSION = 2     # 2: GGUF weights stay in model.gguf, as stored
_PARTIAL_PREFIX = ".partial-"
_STALE_AFTER_S = 6 * 3600


def is_complete(folder: Path) -> bool:
    """True when ``folder`` is a finished build of the current format (marker, config, weights)."""
    return (
        read_marker(folder).get("format") == FORMAT_VERSION
        and (folder / "config.json").is_file()
        and (any(folder.glob("*.safetensors")) or (folder / GGUF_FILE).exists())
    )


def read_marker(folder: Path) -> dict[str, Any]:
    """The marker's contents, or {} when missing or unreadable."""
    try:
        data = json.loads((folder / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _sweep_partials(parent: Path) -> None:
    now = time.time()
    for entry in parent.glob(f"{_PARTIAL_PREFIX}*"):
        try:
            if now - entry.stat().st_mtime > _STALE_AFTER_S:
                log.info("removing leftover %s", entry)
                shutil.rmtree(entry, ignore_errors=True)
        except OSError:
            pass


def partial_dir(parent: Path, name: str) -> Path:
    """A fresh hidden work folder next to ``parent / name`` (same filesystem)."""
    parent.mkdir(parents=True, exist_ok=True)
    path = parent / f"{_PARTIAL_PREFIX}{name}-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    return path


def build_atomically(dest: Path, build: Callable[[Path], object], info: dict[str, Any]) -> Path:
    """Return ``dest``, building it first with ``build(tmp_folder)`` unless it is complete.

    ``info`` goes into the marker (source, sizes, hashes). If another process
    finishes the same folder first, its result is kept and ours discarded.
    """
    if is_complete(dest):
        return dest
    parent = dest.parent
    parent.mkdir(parents=True, exist_ok=True)
    _sweep_partials(parent)
    work = partial_dir(parent, dest.name)
    try:
        build(work)
        marker = {"format": FORMAT_VERSION, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **info}
        (work / MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
        if dest.exists() and not is_complete(dest):
            log.warning("replacing incomplete folder %s", dest)
            stale = parent / f"{_PARTIAL_PREFIX}stale-{dest.name}-{uuid.uuid4().hex[:8]}"
            os.replace(dest, stale)
            shutil.rmtree(stale, ignore_errors=True)
        try:
            os.rename(work, dest)
        except OSError:
            if is_complete(dest):  # someone else won the race
                log.info("%s was completed concurrently; keeping that copy", dest)
            else:
                raise
    except CheckpointError:
        raise
    except OSError as exc:
        raise CheckpointError(f"could not write {dest}: {exc} (check free disk space and permissions)") from exc
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    return dest


def folder_size(folder: Path) -> int:
    """Total bytes of the regular files under ``folder`` (following HF cache symlinks)."""
    total = 0
    for path in folder.rglob("*"):
        try:
            if path.is_file():
                total += path.stat().st_size
        except OSError:
            pass
    return total
