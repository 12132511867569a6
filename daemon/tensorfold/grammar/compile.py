"""Compile structured-output specs with xgrammar, once per (kind, text), in worker processes.

One `GrammarCompiler` per tokenizer (and model vocabulary width). Specs
(spec.py) have canonical text, so equal requests share one compiled grammar
from an LRU cache bounded by count (`cache_size`) and bytes (`cache_bytes`).

Compiles run in `threads` worker processes (worker.py), each fed by its own
daemon thread here (a slot) and started on a slot's first compile, then kept.
The process that holds this compiler (the server's grammar host, host.py)
never compiles a grammar first in its own, so a grammar can be stopped:
- a compile past `timeout` seconds is killed and fails with GrammarTimeout;
- equal specs share one compilation, but each `compile_async` call gets its
  own future: cancelling it means that caller left (the API's request task was
  cancelled because its client went away). When every caller of a spec has
  left, its compile is dropped if still queued, or its worker killed if running;
- at most `max_pending` distinct specs queue or run; one more fails at once
  with GrammarBusy (the API answers 429);
- a worker that took over `recycle_after` (1 s) on a spec is killed afterwards,
  which gives the memory that compile used back to the system, and a worker
  idle for IDLE_SECONDS is stopped (one holds about 280 MB: xgrammar imports torch);
- `close()` kills every worker and fails whatever is pending, at once; `join()`
  then waits for the slot threads, so none is inside xgrammar when the
  interpreter exits (that aborts the process).
A worker killed for any reason is started again for the slot's next compile.
Starting one takes a few seconds, not counted in `timeout`.

A spec the worker compiled within worker.LOCAL_SECONDS is compiled again here,
on the slot's thread (xgrammar releases the GIL), since moving a compiled
grammar between processes costs several times its compile; a slower one is
sent over, serialized. Either way the worker has shown it compiles in time.
"""

from __future__ import annotations

import inspect
import select
import subprocess
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Iterable
from concurrent.futures import Future, InvalidStateError
from typing import Any

from .build import build
from .errors import GrammarBusy, GrammarError, GrammarTimeout, GrammarUnavailable, clean_reason, load_xgrammar
from .pipe import read_message, start_child, write_message
from .spec import KINDS, MAX_BLANKS, GrammarSpec, choice_ebnf

__all__ = ["KINDS", "MAX_BLANKS", "GrammarCompiler", "GrammarSpec", "choice_ebnf"]

RECYCLE_AFTER = 1.0           # seconds: a worker that took this long on a spec is replaced afterwards
IDLE_SECONDS = 300.0          # a worker without a compile for this long is stopped (as a model keep-alive)
START_TIMEOUT = 120.0         # seconds for a new worker to import xgrammar and load the tokenizer


class _Job:
    """One spec being compiled (or queued) and the futures of the callers waiting for it."""

    __slots__ = ("spec", "waiters", "proc", "killed")

    def __init__(self, spec: GrammarSpec) -> None:
        self.spec = spec
        self.waiters: list[Future[Any]] = []
        self.proc: subprocess.Popen[bytes] | None = None      # the worker running it, once sent
        self.killed = False                                     # its waiters left and killed that worker


class GrammarCompiler:
    """xgrammar compiles for one tokenizer, in killable worker processes, with an LRU cache.

    `tokenizer` is a transformers tokenizer, or tensorfold's `Tokenizer` (its
    `.hf` and `.eos_token_ids` are used). `vocab_size` is the width of the
    model's logits, which may exceed len(tokenizer): ids past the tokenizer are
    never allowed. `stop_token_ids` are the end tokens a grammar allows once
    its value is complete (default: the tokenizer's end tokens). `threads`:
    worker processes (slots); `timeout`: seconds one compile may take;
    `max_pending`: distinct specs queued or compiling at most; `cache_size`,
    `cache_bytes`: bounds of the cache of compiled grammars.
    """

    def __init__(self, tokenizer: Any, vocab_size: int | None = None, *,
                 stop_token_ids: Iterable[int] | None = None, threads: int = 2,
                 cache_size: int = 128, cache_bytes: int = 256 << 20, timeout: float = 20.0,
                 max_pending: int = 16) -> None:
        xg = load_xgrammar()
        if any("max_whitespace_cnt" not in inspect.signature(f).parameters      # build.py calls both
               for f in (xg.GrammarCompiler.compile_json_schema, xg.Grammar.from_json_schema)):
            raise GrammarUnavailable("the installed xgrammar is too old (no max_whitespace_cnt); "
                                     "upgrade it")
        hf = getattr(tokenizer, "hf", None)
        if hf is None:
            hf = tokenizer
        elif stop_token_ids is None:           # tensorfold's Tokenizer: all of the model's end tokens
            stop_token_ids = getattr(tokenizer, "eos_token_ids", None)
        if isinstance(stop_token_ids, int):
            stop_token_ids = [stop_token_ids]
        stops = sorted({int(t) for t in stop_token_ids}) if stop_token_ids is not None else None
        try:
            self.tokenizer_info = xg.TokenizerInfo.from_huggingface(
                hf, vocab_size=vocab_size or len(hf), stop_token_ids=stops or None)
        except Exception as exc:
            raise GrammarError(f"cannot prepare grammars for this tokenizer: {clean_reason(exc)}",
                               clean_reason(exc)) from exc
        self.vocab_size: int = int(self.tokenizer_info.vocab_size)
        self.stop_token_ids: tuple[int, ...] = tuple(self.tokenizer_info.stop_token_ids)
        self.cache_size = cache_size
        self.cache_bytes = cache_bytes
        self.timeout = timeout
        self.max_pending = max_pending
        self.recycle_after = RECYCLE_AFTER
        self._info_json: str | None = None              # the tokenizer info each worker gets
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)    # a job was queued, or close()
        self._cache: OrderedDict[tuple[str, str], tuple[Any, int]] = OrderedDict()
        self._cache_used = 0                            # bytes
        self._jobs: dict[tuple[str, str], _Job] = {}    # queued or running, by spec
        self._queue: deque[_Job] = deque()
        self._closed = False
        self._local: Any = None                         # xgrammar's compiler here, for fast specs
        self._procs: list[subprocess.Popen[bytes] | None] = [None] * max(1, threads)
        self._busy: set[int] = set()                    # slots running a job
        self._slots = [threading.Thread(target=self._serve, args=(slot,), name=f"tensorfold-grammar-{slot}",
                                        daemon=True) for slot in range(len(self._procs))]
        for thread in self._slots:
            thread.start()

    # -- public ------------------------------------------------------------------------
    def compile(self, spec: GrammarSpec) -> Any:
        """The compiled grammar for `spec` (an xgrammar CompiledGrammar), waiting for its compile.

        Raises GrammarError with xgrammar's reason when it cannot compile
        (GrammarTimeout past the time budget, GrammarBusy when too many are pending).
        """
        return self.compile_async(spec).result()

    def compile_async(self, spec: GrammarSpec) -> Future[Any]:
        """A future of the compiled grammar for `spec` (done at once on a cache hit).

        Each call gets its own future; cancelling it says this caller no longer
        waits. Raises GrammarBusy at once when `max_pending` other specs are pending.
        """
        fut: Future[Any] = Future()
        with self._lock:
            if self._closed:
                raise GrammarError("the grammar compiler is closed")
            hit = self._hit(spec.key)
            if hit is not None:
                fut.set_result(hit)
                return fut
            job = self._jobs.get(spec.key)
            if job is None:
                if len(self._jobs) >= self.max_pending:
                    raise GrammarBusy(f"{len(self._jobs)} grammars are already compiling or queued")
                job = self._jobs[spec.key] = _Job(spec)
                self._queue.append(job)
                self._work.notify_all()
            job.waiters.append(fut)
        fut.add_done_callback(lambda f: self._leave(job) if f.cancelled() else None)
        return fut

    def constraint(self, spec: GrammarSpec, think: Any = None) -> Any:
        """A GrammarConstraint for one request (waits for the compile if needed): see constraint_for."""
        return self.constraint_for(self.compile(spec), think)

    def constraint_for(self, compiled: Any, think: Any = None) -> Any:
        """A GrammarConstraint for one request from its compiled grammar.
        `think` (engine.types.Think, when the request thinks): the grammar starts
        after the think end, whether the prompt opened the block or the reply
        opens it (a one-token opener) with its first token."""
        from .constraint import GrammarConstraint, start_rule

        return GrammarConstraint(compiled, *start_rule(think))

    def cached(self, spec: GrammarSpec) -> bool:
        with self._lock:
            return spec.key in self._cache

    def worker_pids(self) -> list[int]:
        """The process ids of the workers started now (some may have just been killed)."""
        with self._lock:
            return [p.pid for p in self._procs if p is not None]

    def close(self) -> None:
        """Kill every worker and fail every pending compile with GrammarError; returns at once."""
        with self._lock:
            self._closed = True
            jobs = list(self._jobs.values())
            self._jobs.clear()
            self._queue.clear()
            procs = [p for p in self._procs if p is not None]
            self._work.notify_all()
        for proc in procs:
            proc.kill()
        closed = GrammarError("the grammar compiler was closed")
        for job in jobs:
            _deliver(job, closed)
        for proc in procs:                     # SIGKILL is immediate: reap them, so none is left
            try:
                proc.wait(timeout=1)
            except subprocess.TimeoutExpired:
                pass

    def join(self, timeout: float = 10.0) -> None:
        """After close(): wait (at most `timeout` s) for the slot threads to end."""
        deadline = time.monotonic() + timeout
        for thread in self._slots:
            thread.join(max(0.0, deadline - time.monotonic()))

    # -- the cache -------------------------------------------------------------------------
    def _hit(self, key: tuple[str, str]) -> Any:
        hit = self._cache.get(key)
        if hit is None:
            return None
        self._cache.move_to_end(key)
        return hit[0]

    def _store(self, key: tuple[str, str], compiled: Any) -> None:
        """Cache `compiled` (under the lock), evicting the least recently used past either bound."""
        size = int(compiled.memory_size_bytes)
        if size > self.cache_bytes or key in self._cache:
            return
        self._cache[key] = (compiled, size)
        self._cache_used += size
        while len(self._cache) > self.cache_size or self._cache_used > self.cache_bytes:
            _, (_, dropped) = self._cache.popitem(last=False)
            self._cache_used -= dropped

    # -- waiters ---------------------------------------------------------------------------
    def _leave(self, job: _Job) -> None:
        """A waiter's future was cancelled: drop the job when no waiter is left."""
        with self._lock:
            if self._jobs.get(job.spec.key) is not job or not all(f.cancelled() for f in job.waiters):
                return
            del self._jobs[job.spec.key]
            if job in self._queue:
                self._queue.remove(job)
            if job.proc is not None:
                job.proc.kill()                # its slot sees the pipe close, then reaps it
                job.killed = True

    def _finish(self, job: _Job, outcome: Any) -> None:
        with self._lock:
            job.proc = None
            if self._jobs.get(job.spec.key) is not job:
                return                         # every waiter left, or close() failed them
            del self._jobs[job.spec.key]
            if not isinstance(outcome, BaseException):
                self._store(job.spec.key, outcome)
        _deliver(job, outcome)

    # -- slots -----------------------------------------------------------------------------
    def _take(self, slot: int) -> _Job | None:
        """The next job for `slot`, waiting for one; None once closed. A slot without a
        worker leaves a job to an idle slot that has one (starting a worker takes
        seconds); a worker idle for IDLE_SECONDS is stopped."""
        with self._lock:
            while not self._closed:
                warm = self._procs[slot] is not None
                if self._queue and (warm or not any(
                        p is not None and s not in self._busy for s, p in enumerate(self._procs))):
                    self._busy.add(slot)
                    return self._queue.popleft()
                if not self._work.wait(IDLE_SECONDS) and warm and not self._queue:
                    self._lock.release()       # _kill takes the lock
                    try:
                        self._kill(slot)
                    finally:
                        self._lock.acquire()
            return None

    def _serve(self, slot: int) -> None:
        """A slot's thread: run queued jobs on the slot's worker, one at a time."""
        while (job := self._take(slot)) is not None:
            try:
                outcome: Any = self._run(slot, job)
            except GrammarError as exc:
                outcome = exc
            except Exception as exc:           # a bug here must not leave the waiters hanging
                self._kill(slot)
                outcome = GrammarError(f"grammar compile failed: {clean_reason(exc)}", clean_reason(exc))
            self._finish(job, outcome)
            if job.killed:                     # even if the answer came first: that worker is dying
                self._kill(slot)
            with self._lock:
                self._busy.discard(slot)
                self._work.notify_all()        # a job left to this slot may be waiting
        self._kill(slot)

    def _run(self, slot: int, job: _Job) -> Any:
        """Compile `job` on the slot's worker: the compiled grammar, or None when dropped."""
        proc = self._worker(slot)
        with self._lock:
            if self._jobs.get(job.spec.key) is not job:
                return None                    # every waiter left while it was queued
            job.proc = proc
        sent = time.monotonic()
        try:
            write_message(proc.stdin, job.spec.key)
            answered = select.select([proc.stdout], [], [], self.timeout)[0]
            reply = read_message(proc.stdout) if answered else None
        except (OSError, EOFError, ValueError) as exc:      # killed (left, closed) or crashed
            self._kill(slot)
            raise GrammarError("the grammar compiler process ended while compiling "
                               "(out of memory?)") from exc
        if reply is None:
            self._kill(slot)
            raise GrammarTimeout(self.timeout)
        if time.monotonic() - sent > self.recycle_after:
            self._kill(slot)                   # give the memory that compile took back
        if reply[0] == "error":
            raise GrammarError(reply[1], reply[2])
        if reply[0] == "fast":
            return build(self._local_compiler(), *job.spec.key)
        return load_xgrammar().CompiledGrammar.deserialize_json(reply[1], self.tokenizer_info)

    def _local_compiler(self) -> Any:
        with self._lock:
            if self._local is None:
                self._local = load_xgrammar().GrammarCompiler(self.tokenizer_info, max_threads=1,
                                                              cache_enabled=False)
            return self._local

    def _worker(self, slot: int) -> subprocess.Popen[bytes]:
        """The slot's worker, started (and handed the tokenizer) if it is not running."""
        proc = self._procs[slot]
        if proc is not None and proc.poll() is None:
            return proc
        self._kill(slot)
        if self._info_json is None:
            self._info_json = self.tokenizer_info.serialize_json()
        proc = start_child("tensorfold.grammar.worker")
        with self._lock:
            self._procs[slot] = proc
            closed = self._closed
        try:
            if closed:
                raise EOFError("closed")
            write_message(proc.stdin, self._info_json)
            if not select.select([proc.stdout], [], [], START_TIMEOUT)[0]:
                raise EOFError("no answer")
            if read_message(proc.stdout) != ("ready",):
                raise EOFError("a wrong answer")
        except (OSError, EOFError, ValueError) as exc:
            self._kill(slot)
            raise GrammarError(f"the grammar compiler process did not start ({exc})") from exc
        return proc

    def _kill(self, slot: int) -> None:
        """End the slot's worker (if any) and reap it; the next compile starts a new one."""
        with self._lock:
            proc, self._procs[slot] = self._procs[slot], None
        if proc is None:
            return
        proc.kill()
        proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            try:
                pipe.close()
            except OSError:
                pass


def _deliver(job: _Job, outcome: Any) -> None:
    for fut in job.waiters:
        try:
            if isinstance(outcome, BaseException):
                fut.set_exception(outcome)
            else:
                fut.set_result(outcome)
        except InvalidStateError:              # that waiter left (its future was cancelled)
            pass
