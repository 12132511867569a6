"""Reading Hugging Face style model folders.

A model folder holds ``config.json`` and either ``model.safetensors``,
shards ``model-00001-of-0000N.safetensors`` listed by
``model.safetensors.index.json``, or (made from a GGUF) ``model.gguf``.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import torch

from .errors import CheckpointError

log = logging.getLogger(__name__)

SINGLE_FILE = "model.safetensors"
GGUF_FILE = "model.gguf"
INDEX_FILE = "model.safetensors.index.json"



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


def iter_safetensors_f32(folder: str | Path) -> Iterator[tuple[str, np.ndarray]]:
    """Yield ``(name, float32 array)`` for every tensor of the folder, read with numpy alone
    (the CPU engine's load: safetensors' own reader needs torch for bf16, and torch kept
    mapped costs a server hundreds of MiB)."""
    import numpy as np

    for path in safetensors_files(folder):
        log.debug("reading %s", path)
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            header_len = int.from_bytes(fh.read(8), "little")
            if size < 8 or header_len > size - 8:
                raise CheckpointError(f"{path.name} is not a safetensors file (its header runs past its end)")
            try:
                header = json.loads(fh.read(header_len))
            except ValueError as exc:
                raise CheckpointError(f"{path.name} is not a safetensors file: {exc}") from exc
            start = 8 + header_len
            for name, info in header.items():
                if name == "__metadata__":
                    continue
                dtype = _SAFETENSORS_DTYPES.get(info["dtype"])
                if dtype is None:
                    raise CheckpointError(f"{path.name}: {name} is {info['dtype']}; the CPU engine reads "
                                          f"{', '.join(_SAFETENSORS_DTYPES)} safetensors weights")
                begin, end = info["data_offsets"]
                count = math.prod(info["shape"])
                if end - begin != count * np.dtype(dtype).itemsize or start + end > size:
                    raise CheckpointError(f"{path.name}: {name}'s data does not match its shape {info['shape']}")
                fh.seek(start + begin)
                raw = np.fromfile(fh, dtype, count)      # writable, as torch's arrays were
                if dtype == "<u2":                       # bfloat16: the upper half of a float32
                    raw = (raw.astype(np.uint32) << 16).view(np.float32)
                yield name, raw.astype(np.float32, copy=False).reshape(info["shape"])


_SAFETENSORS_DTYPES = {"BF16": "<u2", "F16": "<f2", "F32": "<f4"}


def gguf_file(folder: str | Path) -> Path | None:
    """The GGUF whose weights a converted folder serves (``model.gguf``), or None for a safetensors folder."""
    path = Path(folder) / GGUF_FILE
    if not path.is_symlink() and not path.exists():
        return None
    if not path.exists():
        raise CheckpointError(f"{folder} was made from {os.readlink(path)}, which is gone; "
                              "pass the GGUF file again with --model")
    return path.resolve()


def iter_weights(folder: str | Path) -> Iterator[tuple[str, torch.Tensor]]:
    """Every weight of a model folder as a float tensor (a GGUF's dequantized to float32)."""
    import numpy as np
    import torch

    source = gguf_file(folder)
    if source is None:
        yield from iter_safetensors(folder)
        return
    from .gguf_convert import dequantized_weights

    for name, array in dequantized_weights(source):
        yield name, torch.from_numpy(np.require(array, requirements="W"))
