"""Grammar compiles in worker processes: time budget, waiters leaving, bounded queue, close, memory."""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import time

import numpy as np
import pytest

xg = pytest.importorskip("xgrammar")

from tensorfold.api.request.tool_prompt import CALL_CLOSE, CALL_OPEN
from tensorfold.grammar import GrammarBusy, GrammarCompiler, GrammarError, GrammarSpec, GrammarTimeout
from tensorfold.grammar.constraint import GrammarConstraint
from tensorfold.grammar.pipe import read_message, write_message

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads process states in /proc")

SMALL = GrammarSpec.regex("[a-z]{1,5}")


def slow(tag: str = "") -> GrammarSpec:
    """A regex that takes many seconds to compile (4.7 s here for 80k words; this is 150k)."""
    return GrammarSpec.regex("(" + "|".join(f"w{i}x{tag}" for i in range(150_000)) + ")")


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def dies_within(pid: int, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not alive(pid):
            return True
        time.sleep(0.02)
    return not alive(pid)


@pytest.fixture(scope="module")
def tok(default_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(default_model))


@pytest.fixture
def make(tok):
    made: list[GrammarCompiler] = []

    def build(**kw) -> GrammarCompiler:
        made.append(GrammarCompiler(tok, len(tok) + 64, **kw))
        return made[-1]

    yield build
    for c in made:
        pids = c.worker_pids()
        c.close()
        assert not any(alive(p) for p in pids)


@pytest.fixture(scope="module")
def shared(tok):
    """One compiler for the tests that leave its worker alone."""
    c = GrammarCompiler(tok, len(tok) + 64, threads=1)
    yield c
    c.close()


def warm(c: GrammarCompiler) -> int:
    """Start the (single) worker with a small compile; its pid."""
    c.compile(SMALL)
    pid, = c.worker_pids()
    return pid


def test_a_compile_past_the_time_budget_is_killed_and_the_next_one_works(make):
    c = make(threads=1, timeout=0.5)
    pid = warm(c)
    spec = slow()
    start = time.monotonic()
    with pytest.raises(GrammarTimeout, match=r"longer than 0\.5 s to compile") as err:
        c.compile(spec)
    assert time.monotonic() - start < 1.5
    assert isinstance(err.value, GrammarError)           # the API's 400
    assert not alive(pid) and not c.cached(spec)
    assert c.compile(GrammarSpec.regex("[0-9]+")) is not None
    new, = c.worker_pids()
    assert new != pid and alive(new)


def test_when_every_waiter_leaves_a_running_compile_is_killed(make):
    c = make(threads=1)
    pid = warm(c)
    spec = slow()
    first, second = c.compile_async(spec), c.compile_async(spec)
    time.sleep(0.5)                                       # the worker is compiling it now
    assert first.cancel()
    time.sleep(1.0)
    assert alive(pid) and not second.done()              # the second waiter keeps it going
    assert second.cancel()
    assert dies_within(pid, 1.0)
    assert c.compile(GrammarSpec.regex("[0-9]{2}")) is not None   # the slot serves the next one


def test_cancelling_the_task_that_awaits_a_compile_leaves_it(make):
    """What the API does: a request task awaits asyncio.wrap_future(compile_async(spec));
    its client leaving cancels the task, which cancels the future."""
    c = make(threads=1)
    pid = warm(c)

    async def compile_for_request() -> object:
        return await asyncio.wrap_future(c.compile_async(slow()))

    async def request() -> None:
        task = asyncio.create_task(compile_for_request())
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(request())
    assert dies_within(pid, 1.0)


def test_a_queued_compile_whose_waiters_left_never_runs(make):
    c = make(threads=1)
    pid = warm(c)
    running, queued_spec = c.compile_async(slow()), GrammarSpec.regex("[a-z]{3}q")
    queued = c.compile_async(queued_spec)
    time.sleep(0.3)
    assert queued.cancel()
    assert running.cancel()
    assert dies_within(pid, 1.0)
    time.sleep(0.5)             # had it been kept, the slot would be starting a worker for it now
    assert c.worker_pids() == [] and not c.cached(queued_spec)


def test_past_max_pending_a_new_spec_is_busy_at_once(make):
    c = make(threads=1, max_pending=2)
    a, b = c.compile_async(slow("a")), c.compile_async(slow("b"))
    start = time.monotonic()
    with pytest.raises(GrammarBusy):
        c.compile_async(slow("c"))
    assert time.monotonic() - start < 0.5
    same = c.compile_async(slow("a"))                     # a spec already pending shares it
    assert not same.done()
    assert a.cancel() and same.cancel()                   # all of a's waiters left: its place is free
    c.compile_async(slow("c"))
    assert not b.done()


def test_close_kills_every_worker_at_once(make):
    c = make(threads=2)
    c.compile(SMALL)
    futures = [c.compile_async(slow(tag)) for tag in "abc"]       # two running (or starting), one queued
    time.sleep(0.5)
    pids = c.worker_pids()
    assert pids
    start = time.monotonic()
    c.close()
    assert time.monotonic() - start < 1.0
    for f in futures:
        with pytest.raises(GrammarError, match="closed"):
            f.result(timeout=1)
    assert not any(alive(p) for p in pids)
    with pytest.raises(GrammarError, match="closed"):
        c.compile_async(SMALL)


def test_a_worker_exits_when_its_stdin_closes_even_mid_compile(shared):
    proc = subprocess.Popen([sys.executable, "-m", "tensorfold.grammar.worker"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        write_message(proc.stdin, shared.tokenizer_info.serialize_json())
        assert read_message(proc.stdout) == ("ready",)
        write_message(proc.stdin, slow().key)
        time.sleep(0.5)
        proc.stdin.close()
        assert proc.wait(timeout=1.5) == 0
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


def test_a_worker_that_dies_fails_its_compile_and_is_replaced(make):
    c = make(threads=1)
    pid = warm(c)
    fut = c.compile_async(slow())
    time.sleep(0.3)
    os.kill(pid, 9)
    with pytest.raises(GrammarError, match="ended while compiling"):
        fut.result(timeout=2)
    assert c.compile(GrammarSpec.regex("[0-9]{3}")) is not None


def test_a_worker_that_compiled_long_is_replaced_and_a_quick_one_kept(make):
    c = make(threads=1)
    pid = warm(c)
    c.compile(GrammarSpec.regex("[a-z]{2}"))
    assert c.worker_pids() == [pid]                      # quick compiles keep their worker
    c.recycle_after = 0.0                                # every compile now counts as long
    c.compile(GrammarSpec.regex("[a-z]{3}"))
    assert dies_within(pid, 1.0) and c.worker_pids() == []


def test_the_cache_is_bounded_by_bytes(shared):
    c, bound = shared, shared.cache_bytes
    try:
        check_the_byte_bound(c)
    finally:
        c.cache_bytes = bound


def check_the_byte_bound(c: GrammarCompiler) -> None:
    specs = [GrammarSpec.regex(f"[a-z]{{{n}}}") for n in (2, 3, 4, 5)]
    sizes = [c.compile(s).memory_size_bytes for s in specs[:3]]
    assert all(c.cached(s) for s in specs[:3])
    c.cache_bytes = sizes[1] + sizes[2]                   # the next store must make room
    last = c.compile(specs[3])
    assert c.cached(specs[3]) and not c.cached(specs[0])
    kept = [s for s, n in zip(specs[:3], sizes) if c.cached(s)]
    assert sum(n for s, n in zip(specs[:3], sizes) if c.cached(s)) + last.memory_size_bytes <= c.cache_bytes
    assert len(kept) < 3
    c.cache_bytes = 1                                     # a grammar bigger than the bound: not cached
    big = GrammarSpec.regex("[a-z]{6}")
    assert c.compile(big) is not None and not c.cached(big) and c.cached(specs[3])


def test_the_forced_tool_call_grammar_equals_the_ebnf_it_replaces(shared, tok):
    c = shared
    schema = {"type": "object", "additionalProperties": False, "required": ["name", "arguments"],
              "properties": {"name": {"const": "set_alarm"}, "arguments": {
                  "type": "object", "properties": {"hour": {"type": "integer", "minimum": 0, "maximum": 23},
                                                   "label": {"enum": ["wake", "tea"]}},
                  "required": ["hour"], "additionalProperties": False}}}
    new = c.compile(GrammarSpec.wrapped_json(CALL_OPEN, schema, CALL_CLOSE))
    # what api/request/tool_strict.py compiled before: the EBNF text of the same concatenation
    literal = lambda s: xg.Grammar.from_ebnf("root ::= " + json.dumps(s))  # noqa: E731
    call = xg.Grammar.from_json_schema(json.dumps(schema), any_whitespace=False)
    ebnf = str(xg.Grammar.concat(literal(CALL_OPEN), call, literal(CALL_CLOSE)))
    old = xg.GrammarCompiler(c.tokenizer_info, max_threads=1, cache_enabled=False).compile_grammar(ebnf)
    a, b = GrammarConstraint(new), GrammarConstraint(old)
    gen, rng, reply = np.random.default_rng(0), random.Random(0), []
    for _ in range(200):                                  # a finite language: every path ends
        allowed = a.allowed_tokens(reply)
        assert np.array_equal(allowed, b.allowed_tokens(reply)), reply
        ids = np.flatnonzero(allowed)
        token = int(ids[gen.integers(len(ids))]) if rng.random() < 0.5 else int(ids[0])
        reply.append(token)
        if token in c.stop_token_ids:
            break
    text = tok.decode(reply[:-1])
    assert text.startswith(CALL_OPEN) and text.endswith(CALL_CLOSE)
    assert json.loads(text[len(CALL_OPEN):-len(CALL_CLOSE)])["name"] == "set_alarm"


def test_a_bad_tool_schema_fails_with_a_reason(shared):
    with pytest.raises(GrammarError, match="invalid JSON schema") as err:
        shared.compile(GrammarSpec.wrapped_json(CALL_OPEN, {"type": "objectx"}, CALL_CLOSE))
    assert err.value.reason and "Check failed" not in str(err.value)
