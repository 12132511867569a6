"""The grammar host (grammar/host.py, grammar/remote.py): grammars compiled and matched in
a process of their own give the answers of the same grammar in this process, its errors
keep their kinds, and the host starts, stops and restarts as the server needs it."""

from __future__ import annotations

import os
import random
import signal
import time

import numpy as np
import pytest

pytest.importorskip("xgrammar")

from tensorfold.engine.types import Think
from tensorfold.grammar import GrammarBusy, GrammarCompiler, GrammarError, GrammarSpec, GrammarTimeout
from tensorfold.grammar.remote import GrammarHost
from tests.servers import wait_for
from tests.unit.test_grammar import REGEX, SCHEMA


@pytest.fixture(scope="module")
def tok(default_model):
    from tensorfold.checkpoints.tokenizer import Tokenizer

    return Tokenizer(default_model)


@pytest.fixture(scope="module")
def local(tok):
    c = GrammarCompiler(tok, tok.vocab_size + 64)
    yield c
    c.close()
    c.join()


@pytest.fixture(scope="module")
def host(tok):
    h = GrammarHost(tok.folder, tok.vocab_size + 64)
    h.start()
    yield h
    h.close()
    h.join()


def paths(tok, text: str, seed: int) -> list[list[int]]:
    """Replies the engine asks about: the text's tokens growing, cut back (a rejected draft,
    a preemption) and grown again, with a stray token now and then."""
    ids = tok.encode(text)
    rng = random.Random(seed)
    out, n = [], 0
    while n < len(ids):
        n = min(len(ids), n + rng.randint(1, 3))
        out.append(ids[:n])
        if rng.random() < 0.3:
            out.append(ids[:rng.randint(0, n)])
        if rng.random() < 0.2:
            out.append(ids[:n] + [rng.randrange(tok.vocab_size)])
    return out


def ask(constraint, method: str, reply: list[int], *args):
    """The answer, or the error's class and message."""
    try:
        value = getattr(constraint, method)(reply, *args)
    except GrammarError as exc:
        return type(exc), str(exc)
    return value.tolist() if isinstance(value, np.ndarray) else value


@pytest.mark.parametrize("think", [None, Think(opener=(1,), close=(2, 3)), Think(opener=(1,), close=(2, 3), inside=True)],
                         ids=["plain", "reply-may-think", "inside-think"])
def test_remote_answers_are_the_local_ones(tok, local, host, think):
    spec = GrammarSpec.of("json_schema", SCHEMA)
    text = '{"name": "Ann", "age": 31, "ok": true, "tags": ["red", "blue"]}'
    mine, theirs = local.constraint(spec, think), host.constraint(spec, think)
    assert (theirs.vocab_size, theirs.stop_token_ids) == (mine.vocab_size, mine.stop_token_ids)
    lead = [] if think is None else [2, 3] if think.inside else [1, 5, 6, 2, 3]     # the think block's tokens
    rng = random.Random(3)
    for reply in paths(tok, text, seed=7):
        reply = lead + reply
        for method, args in (("mask_allowed", ()), ("allowed_tokens", ()), ("allows", (rng.randrange(tok.vocab_size),)),
                             ("check", ()), ("started", ()), ("is_complete", ())):
            assert ask(theirs, method, reply, *args) == ask(mine, method, reply, *args), (method, reply)
    row, want = np.zeros(tok.vocab_size + 64, np.float32), np.zeros(tok.vocab_size + 64, np.float32)
    theirs.mask(lead + tok.encode('{"name": "A'), row)
    mine.mask(lead + tok.encode('{"name": "A'), want)
    assert np.array_equal(row, want) and np.isneginf(row).any()


def test_errors_keep_their_kind(tok, host):
    with pytest.raises(GrammarError) as bad:
        host.compile(GrammarSpec.of("regex", "(unclosed"))
    assert type(bad.value) is GrammarError and bad.value.reason
    c = host.constraint(GrammarSpec.of("regex", REGEX))
    with pytest.raises(GrammarError, match="does not fit the grammar"):
        c.check(tok.encode("NOT AN ADDRESS"))
    limit, host.max_pending = host.max_pending, 0
    try:
        with pytest.raises(GrammarBusy):
            host.compile(GrammarSpec.of("regex", "[0-9]{5}q"))
    finally:
        host.max_pending = limit
    slow = "(" + "|".join(f"{i}x" for i in range(30_000)) + ")"
    budget, host.timeout = host.timeout, 0.2
    try:
        with pytest.raises(GrammarTimeout, match="took longer than 0.2 s"):
            host.compile(GrammarSpec.of("regex", slow))
    finally:
        host.timeout = budget


def test_the_host_stops_when_idle_and_starts_again(tok):
    h = GrammarHost(tok.folder, tok.vocab_size, idle=0.5)
    try:
        spec = GrammarSpec.of("regex", REGEX)
        c = h.constraint(spec)
        first = h.host_pid()
        time.sleep(1.5)
        assert h.host_pid() == first                        # a constraint holds it
        assert c.allows(tok.encode("ab"), tok.encode("@")[0])
        del c
        assert wait_for(lambda: h.host_pid() is None, timeout=20)       # nothing held: stopped
        assert wait_for(lambda: not _alive(first), timeout=20)
        c = h.constraint(spec)                              # started again for the next grammar
        assert h.host_pid() not in (None, first)
        assert c.allows([], tok.encode("ab")[0])
    finally:
        h.close()
        h.join()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return os.waitpid(pid, os.WNOHANG) == (0, 0)
    except ChildProcessError:
        return False


def test_a_host_that_dies_fails_its_constraints_and_the_next_grammar_starts_anew(tok):
    h = GrammarHost(tok.folder, tok.vocab_size)
    try:
        spec = GrammarSpec.of("regex", REGEX)
        c = h.constraint(spec)
        os.kill(h.host_pid(), signal.SIGKILL)
        with pytest.raises(GrammarError, match="grammar process ended"):
            c.mask_allowed(tok.encode("ab"))
        again = h.constraint(spec)
        assert again.allows([], tok.encode("ab")[0])
    finally:
        h.close()
        h.join()


def test_close_stops_the_host_and_fails_what_waits(tok):
    h = GrammarHost(tok.folder, tok.vocab_size)
    h.start()
    pid = h.host_pid()
    slow = "(" + "|".join(f"{i}y" for i in range(30_000)) + ")"
    pending = h.compile_async(GrammarSpec.of("regex", slow))
    h.close()
    h.join()
    with pytest.raises(GrammarError):
        pending.result(timeout=10)
    assert wait_for(lambda: not _alive(pid), timeout=20)
    with pytest.raises(GrammarError, match="closed"):
        h.compile(GrammarSpec.of("regex", REGEX))


def test_a_finished_reply_leaves_the_host_free_to_stop(default_model, tok):
    """The engine keeps nothing of a finished constrained reply while it waits for more,
    so the host it used stops once idle."""
    from tensorfold.bench.drafting import run_one
    from tensorfold.config import EngineConfig
    from tensorfold.engine.async_engine import AsyncEngine
    from tensorfold.engine.types import SamplingParams

    engine = AsyncEngine(default_model, EngineConfig(threads=1, kv_memory=0.5))
    engine.start()
    try:
        host = engine.grammar_compiler()
        host.idle = 0.5
        prompt = tok.encode(tok.render_chat([{"role": "user", "content": "An email address, please."}]))
        sha, result = run_one(engine, prompt, True, 24, SamplingParams(temperature=0.0),
                              (host.constraint(GrammarSpec.of("regex", REGEX)),))
        assert result.tokens > 0
        assert wait_for(lambda: host.host_pid() is None, timeout=20)
    finally:
        engine.stop()
