"""The grammar's child processes (the host, the compile workers) and their messages: each
pickled, after its 8-byte length.

The protocols (who sends what, when) are in host.py's and worker.py's docstrings.
"""

from __future__ import annotations

import os
import pickle
import signal
import struct
import subprocess
import sys
from typing import IO, Any

_HEADER = struct.Struct(">Q")
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def child_streams() -> tuple[IO[bytes], IO[bytes]]:
    """In a child (the host, a compile worker): its input, and its answer stream on what was
    fd 1. SIGINT is ignored (a Ctrl-C reaches the whole process group; the parent decides
    when its children end), and stray writes to fd 1 go to stderr."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return sys.stdin.buffer, out


def start_child(module: str, *args: str, pass_fds: tuple[int, ...] = ()) -> subprocess.Popen[bytes]:
    """`python -m module *args` with pipes on its stdin and stdout, this package importable."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
    return subprocess.Popen([sys.executable, "-m", module, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            env=env, pass_fds=pass_fds)


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
