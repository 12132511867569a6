"""The engine thread: admit -> plan -> forward -> sample -> emit, one round at a time."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ..backends import thread_mode
from ..backends.host import release_freed_memory
from .cache import BlockCache, give_back_unused
from .constraints import apply as apply_constraints
from .constraints import ask_ahead, cut_drafts, for_shards
from .constraints import replace as replace_token
from .counters import Counters
from .drafting import Drafter
from .drafting.ngram import NgramDrafter
from .sampler import host_row, sample
from .scheduler import Plan, Scheduler
from .sequence import Sequence
from .states import FRESH, StatePool, state_bytes, state_slots
from .text import ReplyText
from .types import Delta, FinishReason, Request

log = logging.getLogger(__name__)


class Backend(Protocol):
    vocab_size: int

    def allocate_kv(self, num_blocks: int, block_size: int) -> None: ...
    def trim_kv(self, blocks: list[int]) -> None: ...          # unused blocks: their memory may go
    # trims_kv (optional, default False): trim_kv returns memory to the system
    def segment(self, blocks: list[int], start: int, rows: int) -> Any: ...
    def forward(self, tokens: list[int], segments: list[Any], out_rows: list[int]) -> Any: ...
    # fp32 logits [len(out_rows), vocab]: a numpy array, or a torch tensor on the CPU
    # a hybrid model's backend also has: state_bytes() > 0; allocate_state(slots); trim_state(slots);
    # copy_state(src, dst);
    # segment(blocks, start, rows, src, dst) with the state slots of its rows (engine/states.py)


@dataclass(frozen=True, slots=True)
class EngineLimits:
    lanes: int
    num_blocks: int
    block_size: int
    prefill_chunk: int = 256
    background_chunk: int = 64
    decode_share: float = 0.25
    max_draft: int = 12              # longest draft one round verifies
    snapshots: int = 8               # a hybrid's prefix-cache state snapshots (engine/states.py)
    cache_idle: float | None = None  # seconds idle, then the prefix cache is forgotten; None: kept


class Engine:
    def __init__(self, backend: Backend, tokenizer: Any, limits: EngineLimits,
                 drafter: Drafter | None = None) -> None:
        self.backend = backend
        self.drafter: Drafter = drafter or NgramDrafter()
        self.tokenizer = tokenizer
        self.limits = limits
        self.cache = BlockCache(limits.num_blocks, limits.block_size)
        backend.allocate_kv(limits.num_blocks, limits.block_size)
        self.states: StatePool | None = None
        if state_bytes(backend):
            self.states = StatePool(state_slots(limits.lanes, limits.snapshots))
            backend.allocate_state(self.states.slots)
            self.cache.on_drop = lambda slot: self.states.give([slot])
        self.scheduler = Scheduler(limits.lanes, limits.decode_share)
        self.counters = Counters(streams_maximum=limits.lanes)
        self._inbox: queue.SimpleQueue[Sequence | Callable[[], None] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="tensorfold-engine", daemon=True)
        self._stopping = False
        self._refusal: str | None = None    # set by end_all: every request fails with it
        self._busy_at = time.monotonic()    # the last step with work: --cache-idle counts from it

    # -- called from other threads -------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping = True
        self._inbox.put(None)
        self._thread.join(timeout=30)

    def submit(self, request: Request, emit: Callable[[Delta], None]) -> Sequence:
        text = ReplyText(self.tokenizer, request.stop, skip_special_tokens=not request.ignore_eos)
        seq = Sequence(request=request, emit=emit, text=text, eos_ids=self.tokenizer.eos_token_ids)
        self._inbox.put(seq)
        return seq

    def abort(self, seq: Sequence) -> None:
        seq.aborted = True
        self._inbox.put(None)        # wake the loop if it is idle

    def end_all(self, message: str) -> None:
        """Fail every request, running, waiting or submitted later, with `message`
        (the server is shutting down); returns at once."""
        def fail_all() -> None:
            self._refusal = message
            for seq in [*self.scheduler.running, *self.scheduler.waiting]:
                self._fail(seq, message)
        self._inbox.put(fail_all)

    def call(self, fn: Callable[[], None]) -> None:
        """Run `fn` on the engine thread between rounds (maintenance, tests)."""
        done = threading.Event()
        self._inbox.put(lambda: (fn(), done.set()))
        done.wait()

    # -- the engine thread ---------------------------------------------------------
    def _run(self) -> None:
        with thread_mode(self.backend):
            self._loop()

    def _loop(self) -> None:
        while not self._stopping:
            self._step()

    def _step(self) -> None:
        """Take what came in, then run a round if there is work.  A method of its own so that
        nothing of the last round (a finished reply's request and its rules: a grammar held in
        the grammar host) stays referenced while the loop waits for more."""
        if not self.scheduler.idle:
            self._busy_at = time.monotonic()
        else:
            give_back_unused(self.backend, self.cache, self.states)
            self.drafter.idle()
        if not self._take_inbox(block=self.scheduler.idle):
            self._forget_cache()
            return                   # the next step, idle, returns the forgotten blocks' pages
        for seq in self.scheduler.drop_aborted():
            self._release(seq)
        self._admit()
        self._sync_counts()
        plan = self.scheduler.plan()
        if plan.prefill is not None or plan.decode:
            self._round(plan)

    def _take_inbox(self, block: bool) -> bool:
        """Take what came in, waiting for something when `block`; False when an idle engine
        with a prefix cache reached `cache_idle` seconds since its last work with nothing."""
        idle = None
        if block and self.cache.idle_blocks and self.limits.cache_idle is not None:
            idle = max(0.0, self._busy_at + self.limits.cache_idle - time.monotonic())
        try:
            item = self._inbox.get(block=block, timeout=idle)
        except queue.Empty:
            return not block
        try:
            while True:
                if isinstance(item, Sequence) and self._refusal is not None:
                    self._fail(item, self._refusal)
                elif isinstance(item, Sequence):
                    self.scheduler.add(item)
                    self.counters.requests_total += 1
                elif item is not None:
                    item()
                item = self._inbox.get_nowait()
        except queue.Empty:
            return True

    def _forget_cache(self) -> None:
        """No request for `cache_idle` seconds: forget the cached prefix blocks (the next step
        returns their pages, as it does a finished reply's) and the allocator's free memory."""
        blocks = self.cache.idle_blocks
        self.cache.clear_idle()
        release_freed_memory(this_thread=True)
        log.info("prefix cache: %d idle blocks forgotten after %g s without requests", blocks,
                 self.limits.cache_idle)

    def _admit(self) -> None:
        s = self.scheduler
        while (seq := s.next_waiting()) is not None:
            if s.lane_free and self._reserve(seq):
                s.admit(seq)
                seq.t_start = seq.t_start or time.perf_counter()
                self.drafter.start(seq.request.id, seq.request.prompt, seq.request.sampling)
                continue
            victim = None if seq.background else s.victim()
            if victim is None:
                return
            self._preempt(victim)

    def _reserve(self, seq: Sequence) -> bool:
        """Take the KV blocks `seq` needs: cached prompt blocks, then fresh ones for the rest."""
        cache, prompt, states = self.cache, seq.request.prompt, self.states
        # a hybrid resumes only where a state snapshot was kept
        matched, cid = cache.match(seq.key_prompt, limit=(len(prompt) - 1) // cache.block_size, snapshots=states is not None)
        need = cache.blocks_for(len(prompt) + seq.request.max_tokens) - len(matched)
        if states is not None and not states.available:
            cache.drop_snapshot(keep=cid)
        if need > cache.available or (states is not None and not states.available):
            cache.release(matched)
            return False
        blocks = matched + cache.allocate(need)
        if (missing := self._memory_short(blocks)) > 0:
            cache.release(blocks)
            if not self.scheduler.running:      # nothing running will free memory: refuse it
                self._fail(seq, f"not enough memory for this request's KV cache: it needs {missing / 2**20:.0f} "
                                "MiB more than the machine has free; free memory, or send a shorter prompt or "
                                "a lower max_tokens", refused=True)
            return False
        seq.blocks = blocks
        if states is not None:
            seq.state = states.take()[0]
            if matched:
                self.backend.copy_state(cache.snapshot(cid), seq.state)
        seq.computed = len(matched) * cache.block_size
        seq.parent_cid, seq.registered = cid, len(matched)
        if not seq.counted_prompt:
            seq.cached_tokens = seq.computed
        return True

    def _memory_short(self, blocks: list[int]) -> int:
        """Bytes the backend's KV memory would lack for `blocks` (backends that grow their
        pool as used project it: MLX); 0 when they fit or the backend does not say."""
        shortfall = getattr(self.backend, "kv_shortfall", None)
        return shortfall(blocks) if shortfall is not None else 0

    def _preempt(self, seq: Sequence) -> None:
        log.info("request %s (background) yields its lane; it will replay", seq.request.id)
        self.scheduler.requeue(seq)
        self.cache.release(seq.blocks)
        self._give_state(seq)
        seq.preempt()
        self.counters.preemptions_total += 1

    def _round(self, plan: Plan) -> None:
        t0 = time.perf_counter()
        seqs = [plan.prefill] if plan.prefill is not None else plan.decode or []
        try:
            if plan.prefill is not None:
                sampled = self._prefill_chunk(plan.prefill)
            else:
                sampled = self._decode(plan.decode or [])
        except Exception as exc:  # a failed forward ends the replies in it, nothing else
            log.exception("round failed")
            for seq in seqs:
                self._fail(seq, f"generation failed: {exc}")
            if down := getattr(self.backend, "down", None):     # ranks out of step: nothing can run
                self._refusal = f"generation failed: {down}"
                for seq in [*self.scheduler.running, *self.scheduler.waiting]:
                    self._fail(seq, self._refusal)
            return
        elapsed = time.perf_counter() - t0
        self.scheduler.spent(plan, elapsed)
        c = self.counters
        c.rounds_total += 1
        if plan.prefill is not None:
            plan.prefill.prefill_seconds += elapsed
            c.prefill_seconds_total += elapsed
        else:
            c.decode_seconds_total += elapsed
        for seq, taken in sampled:
            for token in taken:
                if seq.done:
                    break
                self._take(seq, token)
            if not seq.done:
                self._register(seq)

    def _prefill_chunk(self, seq: Sequence) -> list[tuple[Sequence, list[int]]]:
        prompt, lim = seq.request.prompt, self.limits
        start = seq.computed
        end = min(len(prompt), start + (lim.background_chunk if seq.background else lim.prefill_chunk))
        snap_at = self._snapshot_at(seq)
        if start < snap_at < end:         # a chunk ends where the snapshot is taken (the bits do not change)
            end = snap_at
        seg = self._segment(seq, start, end - start)
        if end == len(prompt) and seq.request.constraints:
            ask_ahead([(seq.request.constraints, seq.generated)])
        logits, drawn = self._forward(prompt[start:end], [seg], [end - start - 1], lambda: [(seq, seq.generated)])
        seq.computed = end
        self._register(seq)
        if end == snap_at:
            self._snapshot(seq)
        if end < len(prompt):
            return []
        token = self._draw(seq, seq.generated, logits[0], drawn[0])
        return [(seq, [token])]

    def _drafts(self, seq: Sequence) -> list[int]:
        """This round's draft tokens for `seq`: the replayed reply, else the drafter's guess."""
        k = min(seq.draft_k, seq.remaining - 1)
        if not seq.request.draft or k <= 0:
            return []
        n = len(seq.generated)
        drafts = seq.replay[n:n + k] if seq.replaying else self.drafter.propose(seq.request.id, seq.tokens, k)
        return cut_drafts(seq.request.constraints, seq.generated, drafts)

    def _decode(self, seqs: list[Sequence]) -> list[tuple[Sequence, list[int]]]:
        """One verify forward for every decoding sequence: its last token and its drafts.

        Each row gets the keyed draw for its reply position (constraints first,
        by the row's path); a draft is kept while it equals the draw, and the
        first differing draw (or the one after the last draft) ends the row's run.
        """
        feeds = [[s.generated[-1], *self._drafts(s)] for s in seqs]
        scratch: list[list[int]] = [[] for _ in seqs]
        if self.states is not None:     # a drafted row's state goes to a scratch slot: drafts as slots allow
            scratch = [self.states.take(len(f) - 1) for f in feeds]
            feeds = [f[:1 + len(sc)] for f, sc in zip(feeds, scratch)]
        try:
            tokens = [t for feed in feeds for t in feed]
            segments = [self._segment(s, s.computed, len(f), [s.state, *sc]) for s, f, sc in zip(seqs, feeds, scratch)]

            def rows() -> list[tuple[Sequence, list[int]]]:     # each row's sequence and its reply before it
                return [(s, s.generated + f[1:j + 1]) for s, f in zip(seqs, feeds) for j in range(len(f))]

            if any(s.request.constraints for s in seqs):
                ask_ahead((s.request.constraints, reply) for s, reply in rows() if s.request.constraints)
            logits, drawn = self._forward(tokens, segments, list(range(len(tokens))), rows)
        except Exception:
            if self.states is not None:
                self.states.give([slot for sc in scratch for slot in sc])
            raise
        out, row = [], 0
        for seq, feed, sc in zip(seqs, feeds, scratch):
            drafts, reply, taken = feed[1:], list(seq.generated), []
            for j in range(len(feed)):
                token = self._draw(seq, reply, logits[row + j], drawn[row + j])
                taken.append(token)
                reply.append(token)
                if j == len(drafts) or token != drafts[j]:
                    break
            row += len(feed)
            seq.computed += len(taken)        # the fed token and the kept drafts hold valid KV
            if self.states is not None:       # the state after the last kept row is the sequence's
                keep = [seq.state, *sc][len(taken) - 1]
                self.states.give([slot for slot in [seq.state, *sc] if slot != keep])
                seq.state = keep
            if drafts and not seq.replaying:
                seq.drafted += len(drafts)
                seq.accepted_drafts += len(taken) - 1
                self.counters.drafted_total += len(drafts)
                self.counters.accepted_total += len(taken) - 1
                seq.adapt_draft(len(drafts), len(taken) - 1, self.limits.max_draft)
            out.append((seq, taken))
        return out

    def _segment(self, seq: Sequence, start: int, rows: int, dst: list[int] | None = None) -> Any:
        """The backend's segment for `rows` positions of `seq` from `start`; for a hybrid,
        with the state slots its rows read and write (by default its own slot, in place)."""
        images = {"images": seq.request.images} if seq.request.images else {}
        if self.states is None:
            return self.backend.segment(seq.blocks, start, rows, **images)
        return self.backend.segment(seq.blocks, start, rows, FRESH if start == 0 else seq.state,
                                    dst or [seq.state] * rows, **images)

    def _snapshot_at(self, seq: Sequence) -> int:
        """A hybrid's snapshot position in its prompt: the last block boundary before the
        prompt's last token (what a later prompt that begins the same way can resume
        from); 0 for none."""
        if self.states is None:
            return 0
        return (len(seq.request.prompt) - 1) // self.cache.block_size * self.cache.block_size

    def _snapshot(self, seq: Sequence) -> None:
        """Keep a copy of `seq`'s state under its last registered block (the least recently
        used snapshot goes first when there are as many as the limits allow)."""
        cache, states = self.cache, self.states
        if cache.snapshot(seq.parent_cid) is not None or seq.registered * cache.block_size != seq.computed:
            return
        if cache.snapshots >= self.limits.snapshots:
            cache.drop_snapshot()
        for slot in states.take(1):
            self.backend.copy_state(seq.state, slot)
            cache.attach(seq.parent_cid, slot)

    def _give_state(self, seq: Sequence) -> None:
        if self.states is not None and seq.state != FRESH:
            self.states.give([seq.state])
            seq.state = FRESH

    def _forward(self, tokens: list[int], segments: list[Any], out_rows: list[int],
                 rows: Callable[[], list[tuple[Sequence, list[int]]]]) -> tuple[Any, list[int | None]]:
        """The logits of `out_rows`, and the tokens a backend on several ranks drew across them
        (None for a row to draw here).  `rows()`: each out row's sequence and the reply before
        it (drafts included); the ranks apply a row's rules to their own columns where they
        can (constraints.for_shards), else the row is drawn here from its whole logits."""
        if not getattr(self.backend, "draws_on_ranks", False):
            return self.backend.forward(tokens, segments, out_rows), [None] * len(out_rows)
        draws = []
        for seq, reply in rows():
            rules = seq.request.constraints
            shard = for_shards(rules, reply, self.backend.vocab_size) if rules else None
            draws.append(None if rules and shard is None else (seq.request.sampling, len(reply), shard))
        return self.backend.forward(tokens, segments, out_rows, draws)

    @staticmethod
    def _draw(seq: Sequence, reply: list[int], logits: Any, drawn: int | None) -> int:
        """The keyed draw for reply position len(reply): the rules' masks, the sampler, then the
        rules that replace a drawn token."""
        rules = seq.request.constraints
        if drawn is None:                  # else drawn across the ranks, masks applied there
            logits = host_row(logits)
            if rules:
                apply_constraints(rules, reply, logits)
            drawn = sample(logits, seq.request.sampling, len(reply))
        return replace_token(rules, reply, drawn)

    def _register(self, seq: Sequence) -> None:
        """Offer every newly completed block of `seq` to the prefix cache."""
        B, tokens = self.cache.block_size, seq.key_tokens
        while seq.registered < min(seq.computed, len(tokens)) // B:
            i = seq.registered
            seq.parent_cid = self.cache.register(seq.blocks[i], seq.parent_cid, tokens[i * B:(i + 1) * B])
            seq.registered += 1

    def _take(self, seq: Sequence, token: int) -> None:
        """One sampled token: check it when replaying, else send it."""
        c = self.counters
        if not seq.t_first:
            seq.t_first = time.perf_counter()
        if not seq.counted_prompt:
            seq.counted_prompt = True
            c.prompt_tokens_total += len(seq.request.prompt)
            c.cached_tokens_total += seq.cached_tokens
        try:
            delta = seq.accept(token)
        except Exception as exc:
            log.exception("request %s failed", seq.request.id)
            self._fail(seq, str(exc))
            return
        if delta is None:
            return
        c.completion_tokens_total += 1
        if seq.done:           # counters settle before the client hears the end
            self._register(seq)
            self._release(seq)
        seq.emit(delta)

    def _fail(self, seq: Sequence, message: str, refused: bool = False) -> None:
        delta = seq.finish(FinishReason.ERROR, error=message, refused=refused)
        self._release(seq)
        seq.emit(delta)

    def _release(self, seq: Sequence) -> None:
        """Free a finished or abandoned sequence."""
        if seq in self.scheduler.running:
            self.scheduler.retire(seq)
        elif seq in self.scheduler.waiting:
            self.scheduler.waiting.remove(seq)
        if seq.blocks:
            self.cache.release(seq.blocks)
            seq.blocks = []
        self._give_state(seq)
        seq.done = True
        self.drafter.finish(seq.request.id)
        self._sync_counts()

    def _sync_counts(self) -> None:
        """Running, waiting and stream counts from the scheduler (before any reply ends)."""
        s, c = self.scheduler, self.counters
        c.requests_running, c.requests_waiting = len(s.running), len(s.waiting)
        c.streams_decoding, c.streams_prefilling = len(s.decoding()), len(s.prefilling())
        c.kv_blocks_used = self.cache.used
