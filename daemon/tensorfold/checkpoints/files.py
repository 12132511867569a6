"""Reading (and streaming out) Hugging Face style model folders.

A model folder holds ``config.json`` and either ``model.safetensors`` or
shards ``model-00001-of-0000N.safetensors`` listed by
``model.safetensors.index.json``.
"""

from __future__ import annotations

import json
import logging
import struct
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

from .errors import CheckpointError

log = logging.getLogger(__name__)

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"

_NP_TO_ST = {
    np.dtype(np.float32): "F32",
    np.dtype(np.float16): "F16",
    np.dtype(np.int32): "I32",
    np.dtype(np.int64): "I64",
}


def read_config(folder: str | Path) -> dict[str, Any]:
    """The folder's ``config.json`` as a dict."""
    path = Path(folder) / "config.json"
    try:
        with open(path, encoding="utf-8") as fh:
            config = json.load(fh)
    except FileNotFoundError:
        raise CheckpointError(f"{folder} has no config.json; it is not a model folder") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"could not read {path}: {exc}") from exc
    if not isinstance(config, dict):
        raise CheckpointError(f"{path} does not hold a JSON object")
    return config


def safetensors_files(folder: str | Path) -> list[Path]:
    """The weight files of a folder, in a stable order (index shards or the single file)."""
    folder = Path(folder)
    index = folder / INDEX_FILE
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CheckpointError(f"could not read {index}: {exc}") from exc
        files = [folder / name for name in sorted(set(weight_map.values()))]
        missing = [p.name for p in files if not p.is_file()]
        if missing:
            raise CheckpointError(f"{folder} is missing weight shards: {', '.join(missing)}")
        return files
    single = folder / SINGLE_FILE
    if single.is_file():
        return [single]
    shards = sorted(folder.glob("model-*.safetensors"))
    if shards:
        return shards
    raise CheckpointError(
        f"{folder} has no safetensors weights ({SINGLE_FILE} or {INDEX_FILE}); "
        "TensorFold loads only safetensors checkpoints or GGUF files"
    )


def iter_safetensors(folder: str | Path) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield ``(name, tensor)`` for every tensor of the folder, one at a time."""
    from safetensors import safe_open

    for path in safetensors_files(folder):
        log.debug("reading %s", path)
        with safe_open(str(path), framework="pt") as fh:
            for name in fh.keys():  # noqa: SIM118 (safe_open is not a dict)
                yield name, fh.get_tensor(name)


def write_safetensors_stream(
    path: str | Path,
    layout: Sequence[tuple[str, tuple[int, ...], np.dtype]],
    arrays: Iterable[np.ndarray],
    metadata: dict[str, str] | None = None,
) -> None:
    """Write a safetensors file whose tensors arrive one at a time.

    ``layout`` names every tensor with its shape and dtype up front (the
    header comes first in the file); ``arrays`` then yields the tensors in
    that same order. Only one tensor is in memory at a time.
    """
    header: dict[str, Any] = {"__metadata__": {"format": "pt", **(metadata or {})}}
    offset = 0
    for name, shape, dtype in layout:
        dtype = np.dtype(dtype)
        if dtype not in _NP_TO_ST:
            raise ValueError(f"unsupported dtype {dtype} for {name}")
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        header[name] = {
            "dtype": _NP_TO_ST[dtype],
            "shape": list(shape),
            "data_offsets": [offset, offset + nbytes],
        }
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)))
        fh.write(raw)
        count = 0
        for (name, shape, dtype), array in zip(layout, arrays, strict=True):
            if tuple(array.shape) != tuple(shape) or array.dtype != np.dtype(dtype):
                raise ValueError(
                    f"{name}: got {array.dtype}{tuple(array.shape)}, expected {np.dtype(dtype)}{tuple(shape)}"
                )
            little = np.ascontiguousarray(array, dtype=np.dtype(dtype).newbyteorder("<"))
            fh.write(little.reshape(-1).view(np.uint8).data)
            count += 1
    log.debug("wrote %d tensors (%d bytes) to %s", count, offset, path)
