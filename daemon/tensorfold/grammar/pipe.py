"""Messages between the grammar compiler and its workers: each pickled, after its 8-byte length.

The protocol itself (who sends what, when) is in worker.py's docstring.
"""

from __future__ import annotations

import pickle
import struct
from typing import IO, Any

_HEADER = struct.Struct(">Q")


def frame(message: Any) -> bytes:
    """A message as written: its 8-byte length, then the pickle."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(data)) + data


def write_message(stream: IO[bytes], message: Any) -> None:
    stream.write(frame(message))
    stream.flush()


def read_message(stream: IO[bytes]) -> Any:
    """The next message; EOFError when the other side closed its end."""
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        raise EOFError("the pipe closed")
    size, = _HEADER.unpack(header)
    data = stream.read(size)
    if len(data) < size:
        raise EOFError("the pipe closed in the middle of a message")
    return pickle.loads(data)
