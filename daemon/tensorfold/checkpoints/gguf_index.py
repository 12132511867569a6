"""A GGUF file's tensor table and small metadata, read in one pass over its header.

`gguf.GGUFReader` turns every element of every metadata array into numpy views;
a chat model's tokenizer arrays (its vocabulary and merges: about 100,000
strings on SmolLM2) make that the larger part of loading the weights (2.0 of
3.3 s).  Loading needs only the scalars and the tensor table, so this reads the
header itself (the GGUF layout: magic, version, counts, key/value pairs, tensor
infos, aligned data), steps over long arrays without building them, and maps
each tensor's bytes from the file exactly as GGUFReader gives them: float and
integer types as their numpy dtype, quantized types as raw bytes, one row of
blocks per output row.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .errors import CheckpointError
from .ggml_types import BLOCK_SIZES, GGMLType

_MAGIC = b"GGUF"
_STRING, _ARRAY = 8, 9
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_SMALL = 64          # arrays up to this many elements are kept in the metadata; longer ones skipped


@dataclass(frozen=True, slots=True)
class IndexedTensor:
    name: str
    tensor_type: GGMLType
    shape: tuple[int, ...]    # GGUF order (fastest-varying dimension first), as GGUFReader's
    data: np.ndarray          # a read-only view of the file


class _Cursor:
    def __init__(self, buf: memoryview) -> None:
        self.buf, self.pos = buf, 0

    def scalar(self, fmt: str) -> Any:
        value = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        n = self.scalar("<Q")
        text = bytes(self.buf[self.pos:self.pos + n]).decode("utf-8", errors="replace")
        self.pos += n
        return text

    def value(self, vtype: int) -> Any:
        """A key's value; None for an array longer than _SMALL (stepped over)."""
        if vtype == _STRING:
            return self.string()
        if vtype != _ARRAY:
            return self.scalar(_SCALARS[vtype])
        etype, count = self.scalar("<I"), self.scalar("<Q")
        if count <= _SMALL:
            return [self.value(etype) for _ in range(count)]
        if etype in _SCALARS:
            self.pos += count * struct.calcsize(_SCALARS[etype])
        elif etype == _STRING:
            for _ in range(count):
                self.pos += 8 + struct.unpack_from("<Q", self.buf, self.pos)[0]
        else:
            for _ in range(count):
                self.value(etype)
        return None


def _item(ggml_type: Any, dims: tuple[int, ...]) -> tuple[Any, tuple[int, ...], int]:
    """(numpy dtype, numpy shape, bytes) of a tensor, as GGUFReader maps it."""
    T = GGMLType
    plain = {T.F16: np.float16, T.F32: np.float32, T.F64: np.float64, T.I8: np.int8, T.I16: np.int16,
             T.I32: np.int32, T.I64: np.int64}
    n = int(np.prod(dims))
    block, size = BLOCK_SIZES[ggml_type]
    shape = tuple(reversed(dims))
    if ggml_type in plain:
        return plain[ggml_type], shape, n * size // block
    return np.uint8, (*shape[:-1], shape[-1] // block * size), n * size // block


def read_index(path: str | Path) -> tuple[dict[str, Any], list[IndexedTensor]]:
    """(metadata: scalars, strings and arrays of up to 64 elements; the tensors in file order)."""
    data = np.memmap(path, dtype=np.uint8, mode="r")
    c = _Cursor(memoryview(data))
    try:
        if bytes(data[:4]) != _MAGIC:
            raise CheckpointError(f"{path} is not a GGUF file")
        c.pos = 4
        version, n_tensors, n_kv = c.scalar("<I"), c.scalar("<Q"), c.scalar("<Q")
        if version < 2:
            raise CheckpointError(f"{path}: GGUF version {version} is too old (2 and later are read)")
        meta: dict[str, Any] = {}
        for _ in range(n_kv):
            key = c.string()
            value = c.value(c.scalar("<I"))
            if value is not None:
                meta[key] = value
        infos = []
        for _ in range(n_tensors):
            name = c.string()
            dims = tuple(c.scalar("<Q") for _ in range(c.scalar("<I")))
            infos.append((name, GGMLType(c.scalar("<I")), dims, c.scalar("<Q")))
        align = int(meta.get("general.alignment", 32))
        start = -(-c.pos // align) * align
        tensors = []
        for name, ggml_type, dims, offset in infos:
            dtype, shape, nbytes = _item(ggml_type, dims)
            at = start + offset
            if at + nbytes > len(data):
                raise CheckpointError(f"{path}: tensor {name} runs past the end of the file (truncated?)")
            tensors.append(IndexedTensor(name, ggml_type, dims, data[at:at + nbytes].view(dtype).reshape(shape)))
    except (struct.error, KeyError, ValueError) as exc:
        raise CheckpointError(f"{path} is not a readable GGUF file: {exc}") from None
    return meta, tensors
