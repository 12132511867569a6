"""The server's side of the grammar host (host.py): compiles and constraints held there.

`GrammarHost` has the interface of compile.py's `GrammarCompiler` the server uses
(compile_async, compile, constraint_for, constraint, close, join, and the timeout and
max_pending settings), and `RemoteConstraint` the engine's Constraint protocol, so
xgrammar, and torch with it, never load into the server's process:
- the host starts on the first grammar (`start()`, off the event loop: it takes a few
  seconds to import xgrammar and load the tokenizer) and again after it ended;
- it is stopped once no compile is pending, no compiled grammar or constraint is held,
  and nothing was asked of it for `idle` seconds;
- a constraint's call sends only what its reply gained since the last call (how many
  tokens it keeps, and the new ones), and the host answers with the same values
  GrammarConstraint gives in-process: masks as packed bits;
- when the host ends under a request (killed, out of memory), that request's calls
  fail with GrammarError; the next grammar starts a new host.
"""

from __future__ import annotations

import importlib.util
import itertools
import logging
import os
import select
import subprocess
import threading
import time
import weakref
from collections import OrderedDict, deque
from collections.abc import Sequence
from concurrent.futures import Future, InvalidStateError
from typing import Any

import numpy as np

from . import errors
from .constraint import forbid_others, start_rule
from .errors import GrammarError, GrammarUnavailable
from .pipe import read_message, start_child, write_message

log = logging.getLogger(__name__)

IDLE_SECONDS = 120.0            # the host is stopped after this long with nothing held or asked
EARLY_KEPT = 32                 # masks read before they were wanted, kept per constraint
ENDED = "the grammar process ended (out of memory?)"
START_TIMEOUT = 120.0           # seconds for the host to import xgrammar and load the tokenizer


def _settle(answer: tuple[Any, ...]) -> Any:
    """An answer's value, or its error raised."""
    kind, *rest = answer
    if kind == "ok":
        return rest[0]
    raise _error(*rest)


def _error(name: str, message: str, reason: str) -> GrammarError:
    """The host's error as the GrammarError class it named."""
    cls = getattr(errors, name, None)
    if not (isinstance(cls, type) and issubclass(cls, GrammarError)):
        cls = GrammarError
    exc = cls.__new__(cls)
    GrammarError.__init__(exc, message, reason)     # their own __init__ takes other arguments
    return exc


class _Process:
    """One run of the host: its process, and the requests waiting for its answers."""

    def __init__(self, proc: subprocess.Popen[bytes], calls: Any) -> None:
        self.proc = proc
        self.calls = calls                    # the calls' answers (host.py), read by the caller
        self.pending: dict[int, Future[Any]] = {}
        self.alive = True


class GrammarHost:
    """Grammars for the tokenizer in model folder `folder` and logits `vocab_size` wide,
    compiled and matched in the host process (see the module's text)."""

    def __init__(self, folder: str | os.PathLike[str], vocab_size: int, *, threads: int = 2,
                 timeout: float = 20.0, max_pending: int = 16, idle: float = IDLE_SECONDS) -> None:
        if importlib.util.find_spec("xgrammar") is None:
            raise GrammarUnavailable("xgrammar is not installed")
        self.folder = str(folder)
        self.vocab_size = vocab_size
        self.idle = idle
        self._settings: dict[str, Any] = {"threads": threads, "timeout": timeout, "max_pending": max_pending}
        self._lock = threading.RLock()        # RLock: the finalizers of handles may run under it
        self._write = threading.Lock()
        self._calling = threading.Lock()      # one constraint call at a time, with its answer
        self._ahead: deque[tuple[_Process, int, tuple[int, ...]]] = deque()   # masks asked, not read
        self._early: dict[int, OrderedDict[tuple[int, ...], tuple[Any, ...]]] = {}  # read, not yet wanted
        self._starting = threading.Lock()
        self._run: _Process | None = None
        self._ids = itertools.count(1)
        self._held = 0                        # compiled handles and constraints alive
        self._gone: list[tuple[_Process, str, int]] = []    # ("forget" | "drop", id) to send
        self._last = time.monotonic()
        self._closed = False
        self._wake = threading.Condition(self._lock)
        self._threads: list[threading.Thread] = []
        self._watch = threading.Thread(target=self._stop_when_idle, name="tensorfold-grammar-idle", daemon=True)
        self._watch.start()

    # -- settings ------------------------------------------------------------------------
    @property
    def timeout(self) -> float:
        return self._settings["timeout"]

    @timeout.setter
    def timeout(self, value: float) -> None:
        self._set("timeout", value)

    @property
    def max_pending(self) -> int:
        return self._settings["max_pending"]

    @max_pending.setter
    def max_pending(self, value: int) -> None:
        self._set("max_pending", value)

    def _set(self, name: str, value: Any) -> None:
        with self._lock:
            self._settings[name] = value
            run = self._run
        if run is not None:
            self._send(run, (0, "set", name, value))

    # -- the compiler interface -------------------------------------------------------------
    def start(self) -> None:
        """Start the host if it is not running (blocks for its start: off the event loop)."""
        self._process()

    def compile_async(self, spec: Any) -> Future[Any]:
        """A future of the compiled grammar for `spec` (a handle for constraint_for); the
        host's GrammarError when it cannot compile. Cancelling it says this caller no
        longer waits. Never blocks: a host that is not running is started on a thread."""
        outer: Future[Any] = Future()
        with self._lock:
            run = self._run
        if run is not None and run.alive:
            self._ask_compile(run, spec, outer)
        else:
            threading.Thread(target=self._start_and_compile, args=(spec, outer), daemon=True,
                             name="tensorfold-grammar-start").start()
        return outer

    def compile(self, spec: Any) -> Any:
        return self.compile_async(spec).result()

    def constraint_for(self, compiled: Any, think: Any = None) -> "RemoteConstraint":
        """A constraint for one request from its compiled grammar (compile.py's rules)."""
        if not isinstance(compiled, _Compiled) or compiled.host is not self:
            raise GrammarError("not a grammar compiled by this host")
        start_after, may_open = start_rule(think)
        nid = next(self._ids)
        vocab_size, stops = self._ask(compiled.run, "new", compiled.cid, start_after, may_open, rid=nid)
        return RemoteConstraint(self, compiled.run, nid, vocab_size, stops)

    def constraint(self, spec: Any, think: Any = None) -> "RemoteConstraint":
        return self.constraint_for(self.compile(spec), think)

    def host_pid(self) -> int | None:
        """The host's process id while it runs."""
        with self._lock:
            return self._run.proc.pid if self._run is not None and self._run.alive else None

    def close(self) -> None:
        """Stop the host (its compile workers end with it) and fail whatever waits; at once."""
        with self._lock:
            self._closed = True
            run, self._run = self._run, None
            self._wake.notify_all()
        if run is not None:
            self._end(run, kill=True)

    def join(self, timeout: float = 10.0) -> None:
        """After close(): wait (at most `timeout` s) for this side's threads to end."""
        deadline = time.monotonic() + timeout
        for thread in [self._watch, *self._threads]:
            thread.join(max(0.0, deadline - time.monotonic()))

    # -- compiles ---------------------------------------------------------------------------
    def _start_and_compile(self, spec: Any, outer: Future[Any]) -> None:
        try:
            run = self._process()
        except GrammarError as exc:
            if outer.set_running_or_notify_cancel():
                outer.set_exception(exc)
            return
        self._ask_compile(run, spec, outer)

    def _ask_compile(self, run: _Process, spec: Any, outer: Future[Any]) -> None:
        cid = next(self._ids)
        inner: Future[Any] = Future()
        with self._lock:
            run.pending[cid] = inner
            self._last = time.monotonic()

        def answered(f: Future[Any]) -> None:
            exc = f.exception()
            try:
                if exc is not None:
                    outer.set_exception(exc)
                else:
                    outer.set_result(_Compiled(self, run, cid))
            except InvalidStateError:          # the caller left meanwhile (`left` told the host)
                pass

        def left(f: Future[Any]) -> None:
            if f.cancelled():
                with self._lock:
                    run.pending.pop(cid, None)
                self._send(run, (0, "leave", cid))
                self._send(run, (0, "forget", cid))

        inner.add_done_callback(answered)
        outer.add_done_callback(left)
        self._send(run, (cid, "compile", *spec.key))

    # -- requests ---------------------------------------------------------------------------
    def _ask(self, run: _Process, op: str, *args: Any, rid: int | None = None) -> Any:
        """Send (rid, op, *args) to `run` (rid: a new id by default) and wait for its answer."""
        rid = next(self._ids) if rid is None else rid
        fut: Future[Any] = Future()
        with self._lock:
            if not run.alive:
                raise GrammarError(ENDED)
            run.pending[rid] = fut
            self._last = time.monotonic()
        self._send(run, (rid, op, *args))
        try:
            return fut.result()
        finally:
            del fut          # else an error's traceback holds its future, which holds the error

    def _call(self, c: "RemoteConstraint", method: str, reply: Sequence[int], arg: Any = None) -> Any:
        """Constraint `c`'s `method` on `reply` (host.py's "call"), its answer read here: a
        mask asked for ahead is taken from the pipe (answers asked before it kept for later)."""
        key = tuple(reply)
        with self._calling:
            mine = (c.run, c.nid, key) if method == "mask_allowed" else None
            early = self._early.get(c.nid)
            if mine and early is not None and key in early:
                return _settle(early.pop(key))
            while self._ahead:                  # answers come in the order asked
                asked = self._ahead.popleft()
                answer = self._answer(asked[0])
                if asked == mine:
                    return _settle(answer)
                self._keep_early(asked, answer)
            if not c.run.alive:
                raise GrammarError(ENDED)
            self._last = time.monotonic()
            self._send(c.run, (0, "call", *c.delta(method, reply, arg)))
            answer = self._answer(c.run)
        return _settle(answer)

    def _ask_ahead(self, c: "RemoteConstraint", reply: Sequence[int]) -> None:
        """Ask for `c`'s mask after `reply` now; `_call` reads the answer when it is wanted."""
        key = tuple(reply)
        with self._calling:
            if not c.run.alive or key in self._early.get(c.nid, ()) or (c.run, c.nid, key) in self._ahead:
                return
            self._last = time.monotonic()
            self._send(c.run, (0, "call", *c.delta("mask_allowed", reply, None)))
            self._ahead.append((c.run, c.nid, key))

    def _answer(self, run: _Process) -> tuple[Any, ...]:
        """The next answer on `run`'s calls pipe (a failure when it ended)."""
        try:
            return read_message(run.calls)
        except (OSError, EOFError, ValueError):
            self._ended(run)
            return ("failed", "GrammarError", ENDED, ENDED)

    def _keep_early(self, asked: tuple[_Process, int, tuple[int, ...]], answer: tuple[Any, ...]) -> None:
        """Keep an answer read before it was wanted (a constraint's last EARLY_KEPT)."""
        _, nid, key = asked
        early = self._early.setdefault(nid, OrderedDict())
        early[key] = answer
        while len(early) > EARLY_KEPT:
            early.popitem(last=False)

    def _send(self, run: _Process, message: tuple[Any, ...]) -> None:
        """Write `message` to `run` (the ids gone since the last write first)."""
        with self._lock:
            gone = [(op, i) for r, op, i in self._gone if r is run]
            self._gone = [g for g in self._gone if g[0] is not run and g[0].alive]
        try:
            with self._write:
                for op, i in gone:
                    write_message(run.proc.stdin, (0, op, i))
                write_message(run.proc.stdin, message)
        except (OSError, ValueError):          # it ended: the reader fails what waits on it
            self._ended(run)

    def _hold(self, holder: Any, run: _Process, op: str, ident: int) -> None:
        """Count `holder` (a compiled handle, or a constraint) as held until it is gone, and
        then tell `run` (op "forget" or "drop" `ident`)."""
        with self._lock:
            self._held += 1
        weakref.finalize(holder, self._release, run, op, ident)

    def _release(self, run: _Process, op: str, ident: int) -> None:
        """A handle (op "forget") or constraint ("drop") is gone (a finalizer: no I/O here)."""
        with self._lock:
            self._held -= 1
            self._last = time.monotonic()
            if op == "drop":
                self._early.pop(ident, None)
            if run.alive:
                self._gone.append((run, op, ident))
            self._wake.notify_all()

    # -- the process ------------------------------------------------------------------------
    def _process(self) -> _Process:
        """The running host, started if needed."""
        with self._starting:
            with self._lock:
                if self._closed:
                    raise GrammarError("the grammar compiler is closed")
                if self._run is not None and self._run.alive:
                    return self._run
            answers, theirs = os.pipe()
            try:
                proc = start_child("tensorfold.grammar.host", "--calls", str(theirs), pass_fds=(theirs,))
            finally:
                os.close(theirs)
            run = _Process(proc, os.fdopen(answers, "rb"))
            try:
                write_message(proc.stdin, (self.folder, self.vocab_size, dict(self._settings)))
                if not select.select([proc.stdout], [], [], START_TIMEOUT)[0]:
                    raise EOFError("no answer")
                answer = read_message(proc.stdout)
            except (OSError, EOFError, ValueError) as exc:
                self._end(run, kill=True)
                raise GrammarError(f"the grammar process did not start ({exc})") from exc
            if answer != ("ready",):
                self._end(run, kill=True)
                raise _error(*answer[1:]) if answer[0] == "failed" else GrammarError("the grammar process "
                                                                                      "did not start")
            reader = threading.Thread(target=self._read, args=(run,), name="tensorfold-grammar-host", daemon=True)
            with self._lock:
                if self._closed:
                    self._end(run, kill=True)
                    raise GrammarError("the grammar compiler is closed")
                self._run = run
                self._last = time.monotonic()
                self._wake.notify_all()
                self._threads = [t for t in self._threads if t.is_alive()] + [reader]
            reader.start()
            log.info("grammar host started (pid %d)", proc.pid)
            return run

    def _read(self, run: _Process) -> None:
        """Hand the host's answers to whoever waits for them, until it ends."""
        while True:
            try:
                rid, kind, *rest = read_message(run.proc.stdout)
            except (OSError, EOFError, ValueError):
                break
            with self._lock:
                fut = run.pending.pop(rid, None)
                self._last = time.monotonic()
            if fut is None or fut.done():
                continue
            if kind == "ok":
                fut.set_result(rest[0])
            else:
                fut.set_exception(_error(*rest))
            del fut          # not kept while this waits for the next answer
        self._ended(run)

    def _ended(self, run: _Process) -> None:
        """`run` ended (or its pipe broke): fail what waits on it; the next grammar starts anew."""
        with self._lock:
            run.alive = False
            if self._run is run:
                self._run = None
            waiting = list(run.pending.values())
            run.pending.clear()
            self._gone = [g for g in self._gone if g[0] is not run]
        for fut in waiting:
            if not fut.done():
                fut.set_exception(GrammarError(ENDED))
        self._end(run, kill=True)

    def _end(self, run: _Process, kill: bool = False) -> None:
        """End the host and reap it: killed, or (`kill` False) by closing its stdin, which it
        exits on after stopping its compile workers (a killed host's workers see their own
        stdin close). Its pipes are closed after it ended: a thread blocked on one of them
        (writing a message, reading an answer) has its error or end of file by then."""
        run.alive = False
        if kill:
            run.proc.kill()
        else:
            try:
                run.proc.stdin.close()
            except OSError:
                pass
        try:
            run.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            run.proc.kill()
            run.proc.wait()
        for pipe in (run.proc.stdin, run.calls):
            try:
                pipe.close()
            except (OSError, ValueError):
                pass
        with self._lock:
            waiting = list(run.pending.values())
            run.pending.clear()
        for fut in waiting:
            if not fut.done():
                fut.set_exception(GrammarError("the grammar process was stopped"))

    def _stop_when_idle(self) -> None:
        """Stop the host once it holds nothing and was not asked anything for `idle` seconds."""
        with self._lock:
            while not self._closed:
                run = self._run
                quiet = time.monotonic() - self._last
                if run is not None and not self._held and not run.pending and quiet >= self.idle:
                    log.info("grammar host stopped after %.0f s unused (pid %d)", quiet, run.proc.pid)
                    self._run = None
                    self._lock.release()
                    try:
                        self._end(run)
                    finally:
                        self._lock.acquire()
                    continue
                self._wake.wait(max(0.05, self.idle - quiet) if run is not None else None)


class _Compiled:
    """A grammar compiled in the host (compile id `cid` of run `run`), held there while this
    handle lives."""

    def __init__(self, host: GrammarHost, run: _Process, cid: int) -> None:
        self.host, self.run, self.cid = host, run, cid
        host._hold(self, run, "forget", cid)


class RemoteConstraint:
    """One request's grammar in the host, as the engine's Constraint (constraint.py's
    GrammarConstraint: the same questions, the same answers), and `ask_ahead`: start on
    the mask after a reply now, for `mask` to take later (engine/constraints.py)."""

    FORBIDS_ONLY = True

    def __init__(self, host: GrammarHost, run: _Process, nid: int, vocab_size: int,
                 stop_token_ids: Sequence[int]) -> None:
        self.host, self.run, self.nid = host, run, nid
        self.vocab_size = int(vocab_size)
        self.stop_token_ids = tuple(stop_token_ids)
        self._sent: list[int] = []             # the reply the host last synced to
        host._hold(self, run, "drop", nid)

    def delta(self, method: str, reply: Sequence[int], arg: Any) -> tuple[Any, ...]:
        """A "call" message's arguments: what `reply` keeps of the last one sent, and the rest."""
        reply = list(reply)
        sent, keep = self._sent, 0
        n = min(len(sent), len(reply))
        if sent[:n] == reply[:n]:
            keep = n
        else:
            while sent[keep] == reply[keep]:
                keep += 1
        self._sent = reply
        return self.nid, method, keep, reply[keep:], arg

    def _bits(self, packed: bytes | None) -> np.ndarray | None:
        if packed is None:
            return None
        return np.unpackbits(np.frombuffer(packed, np.uint8), count=self.vocab_size, bitorder="little").astype(bool)

    def ask_ahead(self, reply: Sequence[int]) -> None:
        self.host._ask_ahead(self, reply)

    def allows(self, reply: Sequence[int], token: int) -> bool:
        return bool(self.host._call(self, "allows", reply, int(token)))

    def allowed_run(self, reply: Sequence[int], drafts: Sequence[int]) -> int:
        return int(self.host._call(self, "allowed_run", reply, [int(d) for d in drafts]))

    def mask(self, reply: Sequence[int], logits: np.ndarray, offset: int = 0) -> None:
        allowed = self.mask_allowed(reply)
        if allowed is not None:
            forbid_others(logits, allowed, offset)

    def mask_allowed(self, reply: Sequence[int]) -> np.ndarray | None:
        return self._bits(self.host._call(self, "mask_allowed", reply))

    def allowed_tokens(self, reply: Sequence[int]) -> np.ndarray:
        allowed = self._bits(self.host._call(self, "allowed_tokens", reply))
        assert allowed is not None
        return allowed

    def check(self, reply: Sequence[int]) -> None:
        self.host._call(self, "check", reply)

    def started(self, reply: Sequence[int]) -> bool:
        return bool(self.host._call(self, "started", reply))

    def is_complete(self, reply: Sequence[int]) -> bool:
        return bool(self.host._call(self, "is_complete", reply))
