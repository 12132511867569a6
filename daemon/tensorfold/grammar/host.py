"""The grammar host: the child process that holds a server's xgrammar state.

xgrammar (0.2.9) imports torch at module level, and so does the tvm-ffi it is built on,
so a process that builds one grammar matcher holds about 250 MB more for as long as it
lives. The server keeps its own process free of both: remote.py starts this one as
`python -m tensorfold.grammar.host` on the first grammar and stops it once nothing has
used it for a while. It holds the compiler (compile.py: its cache and its own killable
compile workers) and every request's GrammarConstraint (constraint.py), so the masks
are those of the same code in the server's process. The messages (pipe.py), each a
tuple:

    server -> host  (folder, vocab_size, settings)      first: the model folder whose
                                                        tokenizer the grammars are for
    host -> server  ("ready",) or ("failed", class name, message, reason)

then, server -> host, (rid, op, *args), where rid numbers a request (0: no answer):

    (rid, "compile", kind, text)    a GrammarSpec; answered once compiled
    (0, "leave", cid)               nobody waits any more for compile cid
    (0, "forget", cid)              compile cid's grammar is no longer needed
    (0, "set", name, value)         the compiler's timeout or max_pending
    (rid, "new", cid, start_after, may_open)
                                    a constraint of compile cid's grammar; answers
                                    (vocab_size, stop_token_ids)
    (0, "drop", nid)                the constraint made by request nid is gone
    (0, "call", nid, method, keep, tail, arg)
                                    constraint nid's `method` on its last reply's first
                                    `keep` tokens plus `tail`: allows (`arg` a token),
                                    allowed_run (`arg` drafts), mask_allowed and
                                    allowed_tokens (bits packed, or None), check,
                                    started, is_complete

host -> server: (rid, "ok", value) or (rid, "failed", class name, message, reason); a
call's answer goes, without its rid, on the pipe whose fd the command line names
(`--calls FD`), which the caller reads itself, in the order the calls came (Answers).
Compiles are answered as they finish. The host exits when
its stdin closes (the server stopped it, or died) and ignores SIGINT, as the compile
workers do.
"""

from __future__ import annotations

import os
import select
import sys
import threading
from collections import deque
from concurrent.futures import Future
from pathlib import Path
from typing import IO, Any

import numpy as np

from ..engine.constraints import allowed_run
from .errors import GrammarError
from .pipe import child_streams, frame, read_message, write_message
from .spec import GrammarSpec

SETTINGS = ("timeout", "max_pending")          # what "set" may change on the compiler
CALLS = ("allows", "allowed_run", "mask_allowed", "allowed_tokens", "check", "started", "is_complete")


def failure(exc: BaseException) -> tuple[Any, ...]:
    """An error as answered: a GrammarError's class, message and reason (else GrammarError's)."""
    if isinstance(exc, GrammarError):
        return ("failed", type(exc).__name__, str(exc), exc.reason)
    return ("failed", "GrammarError", f"the grammar host failed: {exc}", str(exc))


def pack(allowed: np.ndarray | None) -> bytes | None:
    """A bool vector as bits, token i at bit i % 8 of byte i // 8 (None stays None)."""
    return None if allowed is None else np.packbits(allowed, bitorder="little").tobytes()


class Host:
    """The compiles and constraints of one server, answered through `send`."""

    def __init__(self, compiler: Any, send: Any, answer: Any) -> None:
        self.compiler = compiler
        self.send = send
        self.answer = answer                            # a call's answer (on the calls pipe)
        self.lock = threading.Lock()                    # compiles finish on the compiler's threads
        self.waiting: dict[int, Future[Any]] = {}       # compile id -> the compiler's future
        self.compiled: dict[int, Any] = {}              # compile id -> CompiledGrammar
        self.left: set[int] = set()                     # compiles the server no longer waits for
        self.constraints: dict[int, tuple[Any, list[int]]] = {}    # id -> (constraint, its last reply)

    def serve(self, inp: IO[bytes]) -> None:
        """Answer the server's messages until its pipe closes."""
        while True:
            try:
                rid, op, *args = read_message(inp)
            except EOFError:
                return
            try:
                getattr(self, "op_" + op)(rid, *args)
            except Exception as exc:                  # a bug here fails that request, not the host
                if rid:
                    self.send((rid, *failure(exc)))

    def op_compile(self, rid: int, kind: str, text: str) -> None:
        try:
            fut = self.compiler.compile_async(GrammarSpec(kind, text))
        except GrammarError as exc:
            self.send((rid, *failure(exc)))
            return
        with self.lock:
            self.waiting[rid] = fut
        fut.add_done_callback(lambda f: self._compiled(rid, f))

    def _compiled(self, rid: int, fut: Future[Any]) -> None:
        with self.lock:
            self.waiting.pop(rid, None)
            if rid in self.left or fut.cancelled():     # the server left it: it waits for no answer
                self.left.discard(rid)
                return
        exc = fut.exception()
        if exc is not None:
            self.send((rid, *failure(exc)))
            return
        with self.lock:
            self.compiled[rid] = fut.result()
        self.send((rid, "ok", None))

    def op_leave(self, rid: int, cid: int) -> None:
        with self.lock:
            fut = self.waiting.get(cid)
            if fut is not None:
                self.left.add(cid)
        if fut is not None:
            fut.cancel()

    def op_forget(self, rid: int, cid: int) -> None:
        with self.lock:
            self.compiled.pop(cid, None)

    def op_set(self, rid: int, name: str, value: Any) -> None:
        if name in SETTINGS:
            setattr(self.compiler, name, value)

    def op_new(self, rid: int, cid: int, start_after: tuple[int, ...], may_open: int | None) -> None:
        from .constraint import GrammarConstraint

        with self.lock:
            compiled = self.compiled.get(cid)
        if compiled is None:
            raise GrammarError("the compiled grammar is no longer held")
        c = GrammarConstraint(compiled, start_after, may_open)
        self.constraints[rid] = (c, [])
        self.send((rid, "ok", (c.vocab_size, c.stop_token_ids)))

    def op_drop(self, rid: int, nid: int) -> None:
        self.constraints.pop(nid, None)

    def op_call(self, rid: int, nid: int, method: str, keep: int, tail: list[int], arg: Any) -> None:
        if method not in CALLS:
            raise ValueError(f"no constraint call {method!r}")
        try:
            c, reply = self.constraints[nid]
            del reply[keep:]
            reply.extend(tail)
            if method == "allows":
                value: Any = c.allows(reply, arg)
            elif method == "allowed_run":
                value = allowed_run(c, reply, arg)
            elif method in ("mask_allowed", "allowed_tokens"):
                value = pack(getattr(c, method)(reply))
            else:
                value = getattr(c, method)(reply)
        except Exception as exc:
            self.answer(failure(exc))
            return
        self.answer(("ok", value))


class Answers:
    """The calls' answers on their pipe (fd), in order: written at once while the pipe has
    room, else by a thread once the server reads, so the host goes on reading its input
    (the engine asks for a round's masks before its forward and reads them after: more
    than a pipe holds, with several constrained replies)."""

    def __init__(self, fd: int) -> None:
        os.set_blocking(fd, False)
        self.fd = fd
        self.backlog: deque[bytes] = deque()
        self.lock = threading.Lock()
        self.more = threading.Condition(self.lock)
        threading.Thread(target=self._drain, name="answers", daemon=True).start()

    def put(self, message: tuple[Any, ...]) -> None:
        data = frame(message)
        with self.lock:
            if not self.backlog:
                data = data[self._write(data):]
                if not data:
                    return
            self.backlog.append(data)
            self.more.notify()

    def _write(self, data: bytes) -> int:
        try:
            return os.write(self.fd, data)
        except BlockingIOError:
            return 0
        except OSError:                          # the server is gone
            os._exit(0)

    def _drain(self) -> None:
        while True:
            with self.lock:
                while not self.backlog:
                    self.more.wait()
            select.select([], [self.fd], [])       # room in the pipe
            with self.lock:
                data = self.backlog[0]
                n = self._write(data)
                if n == len(data):
                    self.backlog.popleft()
                else:
                    self.backlog[0] = data[n:]


def main() -> None:
    inp, out = child_streams()
    lock = threading.Lock()

    def send(message: tuple[Any, ...]) -> None:
        with lock:
            try:
                write_message(out, message)
            except OSError:                     # the server is gone
                os._exit(0)

    answers = Answers(int(sys.argv[sys.argv.index("--calls") + 1]))
    try:
        folder, vocab_size, settings = read_message(inp)
    except EOFError:
        return
    from ..checkpoints.hf_tokenizer import hf_tokenizer
    from ..checkpoints.tokenizer import end_token_ids
    from .compile import GrammarCompiler

    try:        # xgrammar reads the transformers tokenizer; the server's own codec is not needed here
        hf = hf_tokenizer(Path(folder))
        stops = end_token_ids(Path(folder), hf.eos_token_id)
        compiler = GrammarCompiler(hf, vocab_size=vocab_size, stop_token_ids=stops, **settings)
    except Exception as exc:
        send(failure(exc))
        os._exit(0)
    send(("ready",))
    Host(compiler, send, answers.put).serve(inp)
    compiler.close()
    compiler.join(timeout=2.0)
    os._exit(0)


if __name__ == "__main__":
    main()
