"""Structured outputs: xgrammar compile cache and the per-row matcher adapter, on the default tokenizer."""

from __future__ import annotations

import json
import random
import re
import sys
import threading

import numpy as np
import pytest

pytest.importorskip("xgrammar")

from tensorfold.engine.constraints import cut_drafts
from tensorfold.grammar import (
    INSTALL_HINT,
    MAX_BLANKS,
    GrammarCompiler,
    GrammarError,
    GrammarSpec,
    GrammarUnavailable,
    available,
)
from tensorfold.grammar.constraint import GrammarConstraint

PAD = 64          # model logits wider than the tokenizer, as many checkpoints pad them

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "ok": {"type": "boolean"},
        "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "maxItems": 3},
    },
    "required": ["name", "age", "ok", "tags"],
}
REGEX = r"[a-z]{2,6}@[a-z]{2,5}\.(com|org)"
CHOICES = ["alpha", "beta gamma", 'say "hi"', "naïve ☃", "back\\slash"]


@pytest.fixture(scope="module")
def tok(default_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(default_model))


@pytest.fixture(scope="module")
def compiler(tok):
    c = GrammarCompiler(tok, len(tok) + PAD)
    yield c
    c.close()


@pytest.fixture(scope="module")
def eos(compiler):
    return compiler.stop_token_ids[0]


def fresh_allowed(compiled, reply, start_after=()):
    """The allowed set after `reply` from a brand-new matcher fed only `reply`."""
    return GrammarConstraint(compiled, start_after=start_after).allowed_tokens(reply)


def decode_random(compiler, compiled, seed, steps=400, check_every=True):
    """Decode with random logits, masked; check `allows` agrees with the mask at every step."""
    con = GrammarConstraint(compiled)
    gen = np.random.default_rng(seed)
    rng = random.Random(seed)
    reply: list[int] = []
    for _ in range(steps):
        logits = gen.standard_normal(compiler.vocab_size).astype(np.float32)
        con.mask(reply, logits)
        finite = np.isfinite(logits)
        token = int(logits.argmax())
        assert finite[token]
        assert con.allows(reply, token)
        if check_every:
            probe = [rng.randrange(compiler.vocab_size) for _ in range(12)]
            probe += [int(i) for i in np.flatnonzero(finite)[:4]]
            for t in probe:
                assert con.allows(reply, t) == bool(finite[t]), (reply, t)
        reply.append(token)
        if token in compiler.stop_token_ids:
            return reply, con
    raise AssertionError("decode did not end")


def text_of(tok, reply, eos):
    assert reply[-1] == eos
    return tok.decode(reply[:-1])


def matches_schema(value):
    return (isinstance(value, dict) and list(value) == ["name", "age", "ok", "tags"]
            and isinstance(value["name"], str) and len(value["name"]) <= 8
            and type(value["age"]) is int and 0 <= value["age"] <= 150
            and type(value["ok"]) is bool
            and isinstance(value["tags"], list) and len(value["tags"]) <= 3
            and all(t in ("red", "green", "blue") for t in value["tags"]))


# -- compiling --------------------------------------------------------------------------

def test_compiles_each_kind_and_caches(compiler):
    specs = [GrammarSpec.json_schema(SCHEMA), GrammarSpec.json_object(), GrammarSpec.regex(REGEX),
             GrammarSpec.choice(CHOICES), GrammarSpec.ebnf('root ::= "yes" | "no" | [0-9]+'),
             GrammarSpec.ebnf('start: "yes" | "no"')]              # Lark, as vLLM also takes
    for spec in specs:
        first = compiler.compile(spec)
        assert compiler.cached(spec)
        assert compiler.compile(spec) is first
        assert compiler.compile_async(spec).result(timeout=30) is first
    # the key is canonical: a schema as text or dict, any spacing, is one entry
    text = json.dumps(SCHEMA, indent=3)
    assert GrammarSpec.json_schema(text) == GrammarSpec.json_schema(SCHEMA)
    assert compiler.compile(GrammarSpec.of("json", text)) is compiler.compile(specs[0])
    # property order matters to the grammar, so it is kept
    flipped = {**SCHEMA, "properties": dict(reversed(list(SCHEMA["properties"].items())))}
    assert GrammarSpec.json_schema(flipped) != GrammarSpec.json_schema(SCHEMA)
    assert GrammarSpec.of("grammar", "root ::= \"a\"") == GrammarSpec.ebnf("root ::= \"a\"")


def test_compile_async_shares_one_compilation(compiler):
    spec = GrammarSpec.regex(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}")
    futures = [compiler.compile_async(spec) for _ in range(6)]
    results = {id(f.result(timeout=30)) for f in futures}
    assert len(results) == 1
    assert compiler.compile(spec) is futures[0].result()
    # the sync call from several threads at once also lands on one cached object
    spec2 = GrammarSpec.regex(r"(ab|cd){1,9}x")
    out: list[object] = []
    threads = [threading.Thread(target=lambda: out.append(compiler.compile(spec2))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert compiler.compile(spec2) is out[-1]


@pytest.mark.parametrize("kind, value, reason", [
    ("json_schema", {"type": "foo"}, "Unsupported type"),
    ("json_schema", '{"type": ', "not valid JSON"),
    ("json_schema", {"$ref": "#/defs/missing"}, "defs"),
    ("json_schema", [1, 2], "must be a JSON object"),
    ("regex", "a(b", "parenthesis"),
    ("regex", "a{3,1}", "Lower bound is larger"),
    ("ebnf", 'root ::= "a" | ', "Expect element"),
    ("ebnf", 'root ::= undefined_rule', 'Rule "undefined_rule" is not defined'),
    ("ebnf", 'start ::= "a"', 'root rule'),
    ("choice", [], "empty"),
    ("choice", ["a", 3], "not a string"),
    ("choice", "abc", "list of strings"),
    ("regex", "", "non-empty"),
    ("nonsense", "x", "unknown grammar kind"),
])
def test_invalid_grammars_raise_with_a_reason(compiler, kind, value, reason):
    with pytest.raises(GrammarError) as err:
        compiler.compile(GrammarSpec.of(kind, value))
    assert reason in str(err.value)
    assert "/project/cpp" not in str(err.value) and "Check failed" not in str(err.value)
    assert err.value.reason


def test_async_failure_is_a_grammar_error_and_not_cached(compiler):
    spec = GrammarSpec.regex("(unclosed")
    with pytest.raises(GrammarError, match="parenthesis"):
        compiler.compile_async(spec).result(timeout=30)
    assert not compiler.cached(spec)
    with pytest.raises(GrammarError):
        compiler.compile(spec)


def test_without_xgrammar_the_error_names_the_install_command(monkeypatch, tok):
    monkeypatch.setitem(sys.modules, "xgrammar", None)          # import xgrammar -> ImportError
    assert not available()
    with pytest.raises(GrammarUnavailable) as err:
        GrammarCompiler(tok)
    assert INSTALL_HINT in str(err.value) and "pip install 'tensorfold[grammar]'" in str(err.value)
    assert isinstance(err.value, GrammarError)                  # the API answers both with 400


# -- decoding -----------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_decode_follows_the_json_schema(compiler, tok, eos, seed):
    compiled = compiler.compile(GrammarSpec.json_schema(SCHEMA))
    reply, con = decode_random(compiler, compiled, seed)
    value = json.loads(text_of(tok, reply, eos))
    assert matches_schema(value), value
    assert con.is_complete(reply) and con.is_complete(reply[:-1])
    assert not con.is_complete(reply[:-2]) or tok.decode(reply[:-2]).rstrip().endswith("}")


@pytest.mark.parametrize("length", [{"maxLength": 8}, {"minLength": 2}, {"minLength": 1, "maxLength": 30}])
def test_length_bounded_strings_refuse_control_characters(compiler, tok, length):
    """JSON forbids U+0000..U+001F unescaped in a string; xgrammar 0.2.9's rule for a string with
    minLength/maxLength lets them through (all but CR and LF), and build.json_grammar closes
    that.  A decode once drew token \\x12 inside such a string and the reply was not JSON."""
    compiled = compiler.compile(GrammarSpec.json_schema({"type": "string", **length}))
    vocab = tok.convert_ids_to_tokens(list(range(len(tok))))
    raw = {i for i, t in enumerate(vocab) if any(tok.convert_tokens_to_string([t]) == chr(c) for c in range(32))}
    assert len(raw) >= 20                                   # the byte tokens of the control characters
    inside = fresh_allowed(compiled, tok.encode('"'))
    assert inside.any() and not inside[sorted(raw)].any()
    assert not fresh_allowed(compiled, tok.encode('"ab'))[sorted(raw)].any()


@pytest.mark.parametrize("seed", [3, 4])
def test_random_decode_follows_the_regex(compiler, tok, eos, seed):
    compiled = compiler.compile(GrammarSpec.regex(REGEX))
    reply, _ = decode_random(compiler, compiled, seed)
    assert re.fullmatch(REGEX, text_of(tok, reply, eos))


@pytest.mark.parametrize("seed", range(5, 11))
def test_random_decode_picks_one_choice(compiler, tok, eos, seed):
    compiled = compiler.compile(GrammarSpec.choice(CHOICES))
    reply, _ = decode_random(compiler, compiled, seed)
    assert text_of(tok, reply, eos) in CHOICES


def test_choice_matches_exactly_one_of_them(compiler, tok, eos):
    choices = ["yes", "yes sir", "\x01ctl", "tab\there", "new\nline", ""]
    con = GrammarConstraint(compiler.compile(GrammarSpec.choice(choices)))
    for c in choices:
        ids = tok.encode(c)
        assert cut_drafts([con], [], ids + [eos]) == ids + [eos], c
    for bad in ["ye", "yes si", "no", "Yes"]:
        ids = tok.encode(bad)
        assert cut_drafts([con], [], ids + [eos]) != ids + [eos], bad


def test_ebnf_and_json_object(compiler, tok, eos):
    con = GrammarConstraint(compiler.compile(GrammarSpec.ebnf('root ::= "n=" [0-9]+ ("," [0-9]+)*')))
    ids = tok.encode("n=12,7,300")
    assert cut_drafts([con], [], ids + [eos]) == ids + [eos]
    assert not con.allows(tok.encode("n=12,"), eos)
    obj = GrammarConstraint(compiler.compile(GrammarSpec.json_object()))
    for good in ['{"a": [1, {"b": null}], "c": "x"}', "{}", json.dumps({"k": [1, 2, {"z": True}]}, indent=2)]:
        ids = tok.encode(good)
        assert cut_drafts([obj], [], ids + [eos]) == ids + [eos], good
    for bad in ["[1, 2]", '"text"', "42", " {}"]:
        ids = tok.encode(bad)
        assert cut_drafts([obj], [], ids + [eos]) != ids + [eos], bad


# -- end token, failures, padding ------------------------------------------------------------

def test_end_token_only_when_complete_and_after_it_only_end_tokens(compiler, tok, eos):
    con = GrammarConstraint(compiler.compile(GrammarSpec.choice(["yes", "yesterday"])))
    yes = tok.encode("yes")
    assert not con.allows([], eos)
    assert con.allows(yes, eos)                 # complete: the end token may come (or more text)
    assert con.allows(yes, tok.encode("terday")[0])
    done = yes + [eos]
    assert con.is_complete(done)
    allowed = con.allowed_tokens(done)
    assert np.flatnonzero(allowed).tolist() == sorted(compiler.stop_token_ids)
    logits = np.zeros(compiler.vocab_size, dtype=np.float32)
    con.mask(done + [eos], logits)              # ignore_eos: the reply may only repeat the end token
    assert np.flatnonzero(np.isfinite(logits)).tolist() == sorted(compiler.stop_token_ids)
    assert not con.allows(done, yes[0])
    with pytest.raises(GrammarError, match="does not fit"):
        con.mask(done + [yes[0]], np.zeros(compiler.vocab_size, dtype=np.float32))
    # back to an earlier path, as a later row or a preemption asks
    assert con.allows([], yes[0]) and not con.is_complete([])


def test_a_reply_that_left_the_grammar_raises_and_the_adapter_recovers(compiler, tok):
    con = GrammarConstraint(compiler.compile(GrammarSpec.choice(["yes", "no"])))
    with pytest.raises(GrammarError, match="does not fit"):
        con.mask(tok.encode("maybe"), np.zeros(compiler.vocab_size, dtype=np.float32))
    with pytest.raises(GrammarError):
        con.check(tok.encode("maybe"))
    logits = np.zeros(compiler.vocab_size, dtype=np.float32)
    con.mask([], logits)
    assert np.array_equal(np.isfinite(logits), fresh_allowed(compiler.compile(GrammarSpec.choice(["yes", "no"])), []))


def test_vocab_padding_and_column_slices(compiler, tok):
    con = GrammarConstraint(compiler.compile(GrammarSpec.json_object()))
    reply = tok.encode('{"a":')
    V = compiler.vocab_size
    assert V == len(tok) + PAD
    full = np.random.default_rng(0).standard_normal(V + 10).astype(np.float32)  # wider than the compiler was told
    ref = full.copy()
    con.mask(reply, full)
    assert np.isinf(full[len(tok):]).all()           # padding ids and beyond: never allowed
    assert np.isfinite(full).sum() > 10
    kept = np.isfinite(full)
    assert np.array_equal(full[kept], ref[kept])     # allowed logits keep their values
    halves = [ref[: V // 2].copy(), ref[V // 2:].copy()]
    con.mask(reply, halves[0], offset=0)
    con.mask(reply, halves[1], offset=V // 2)
    assert np.array_equal(np.isfinite(np.concatenate(halves)), kept)


# -- drafting: state is a function of the reply tokens ------------------------------------------

@pytest.mark.parametrize("marker_text", ["", "</think>"])
def test_paths_with_rollback_equal_fresh_matchers(compiler, tok, eos, marker_text):
    compiled = compiler.compile(GrammarSpec.json_schema(SCHEMA))
    base, _ = decode_random(compiler, compiled, seed=21, check_every=False)
    marker = tok.encode(marker_text) if marker_text else []
    thinking = tok.encode("Hmm {not json} ") if marker else []
    full = thinking + marker + base
    pool = sorted(set(tok.encode('{"name": "x", "age": 12, "ok": true, "tags": ["red", "blue"]}\n  '))
                  | {eos, 0, len(tok) + 3})
    rng = random.Random(5)
    con = GrammarConstraint(compiled, start_after=marker)
    for trial in range(40):
        p = 0 if trial % 13 == 12 else rng.randrange(len(full))     # sometimes a preemption: from []
        committed = full[:p]
        drafts = [full[p + i] if p + i < len(full) and rng.random() < 0.7 else rng.choice(pool)
                  for i in range(rng.randrange(1, 9))]
        cut = cut_drafts([con], committed, drafts)
        ref = cut_drafts([GrammarConstraint(compiled, start_after=marker)], committed, drafts)
        assert cut == ref
        for j in range(len(cut) + 1):
            row = committed + cut[:j]
            logits = np.zeros(compiler.vocab_size, dtype=np.float32)
            con.mask(row, logits)
            assert np.array_equal(np.isfinite(logits), fresh_allowed(compiled, row, marker)), (trial, j)
        # the engine commits some prefix of the row path; the next trial starts anywhere
        con.check(committed + cut[: rng.randrange(len(cut) + 1)])


# -- whitespace -------------------------------------------------------------------------------

def _accepts(compiled, text: str) -> bool:
    import xgrammar as xg

    m = xg.GrammarMatcher(compiled)
    return m.accept_string(text) and m.is_completed()


GAPS = '{0}"a"{1}:{2}1{3},{4}"b"{5}:{6}[{7}1{8},{9}2{10}]{11}}}'


@pytest.mark.parametrize("kind", ["json_schema", "json_object"])
def test_at_most_32_blanks_between_two_json_tokens(compiler, tok, eos, kind):
    schema = {"type": "object", "properties": {"a": {"type": "integer"},
                                               "b": {"type": "array", "items": {"type": "integer"}}},
              "required": ["a", "b"]}
    spec = GrammarSpec.json_schema(schema) if kind == "json_schema" else GrammarSpec.json_object()
    compiled = compiler.compile(spec)
    blanks = (" \n\t\r" * 8)[:MAX_BLANKS]
    assert MAX_BLANKS == 32
    assert _accepts(compiled, "{" + GAPS.format(*[blanks] * 12))
    for gap in range(12):
        gaps = [""] * 12
        gaps[gap] = blanks + " "                          # 33 in one gap
        assert not _accepts(compiled, "{" + GAPS.format(*gaps)), gap
        gaps[gap] = "\n" * 32
        assert _accepts(compiled, "{" + GAPS.format(*gaps)), gap
    value = {"a": 1, "b": [1, 2]}
    for indent in (2, 4, "\t"):
        assert _accepts(compiled, json.dumps(value, indent=indent))
    assert not _accepts(compiled, '{"a": 1,' + "\n\n" * 17 + '"b": []}')     # a run of blank lines
    assert not _accepts(compiled, json.dumps(value) + " ")                   # nothing after the value
    # through the adapter, on real tokens
    con = GrammarConstraint(compiled)
    ok = tok.encode("{\n" + " " * 30 + '"a": 1, "b": []}')
    assert cut_drafts([con], [], ok + [eos]) == ok + [eos]
    bad = tok.encode("{\n" + " " * 40 + '"a": 1, "b": []}')
    assert len(cut_drafts([con], [], bad)) < len(bad)
    # a long string value is not whitespace between tokens
    assert _accepts(compiled, '{"a": 1, "b": []}') and _accepts(compiler.compile(GrammarSpec.json_object()),
                                                             '{"s": "' + " " * 100 + '"}')


# -- thinking: the grammar starts after the marker --------------------------------------------------

def test_grammar_starts_after_the_marker(compiler, tok, eos):
    compiled = compiler.compile(GrammarSpec.json_object())
    marker = tok.encode("</think>")
    assert len(marker) > 1
    thinking = tok.encode("Let me think... not JSON at all {{{ ")
    con = GrammarConstraint(compiled, start_after=marker)
    V = compiler.vocab_size
    # before (and inside) the marker, everything is allowed and logits are untouched
    for n in range(len(thinking) + len(marker)):
        row = (thinking + marker)[:n]
        logits = np.random.default_rng(n).standard_normal(V).astype(np.float32)
        before = logits.copy()
        con.mask(row, logits)
        assert np.array_equal(logits, before)
        assert con.allows(row, eos) and con.allows(row, 17) and not con.started(row)
    # after it, the grammar applies to the tokens after the marker only
    answer = tok.encode('{"ok": true}')
    head = thinking + marker
    assert con.started(head)
    for j in range(len(answer) + 1):
        assert np.array_equal(con.allowed_tokens(head + answer[:j]), fresh_allowed(compiled, answer[:j]))
    assert not con.allows(head, eos) and not con.allows(head, tok.encode("hello")[0])
    assert cut_drafts([con], head, answer + [eos]) == answer + [eos]
    # a path cut inside the marker has not started; a second marker is just text after the start
    assert not con.started(thinking + marker[:-1])
    assert con.allows(thinking + marker[:-1], tok.encode("x")[0])
    assert con.started(thinking + marker)
    quoted = tok.encode('{"t": "</think>"}')
    assert cut_drafts([con], head, quoted + [eos]) == quoted + [eos]
    # the marker right at the start
    con2 = GrammarConstraint(compiled, start_after=marker)
    assert cut_drafts([con2], marker, answer + [eos]) == answer + [eos]


def test_rollback_failure_falls_back_to_reset_and_replay(compiler, tok):
    compiled = compiler.compile(GrammarSpec.json_object())
    con = GrammarConstraint(compiled)

    class NoRollback:                       # an xgrammar with a short rollback window
        def __init__(self, m):
            self._inner = m

        def rollback(self, n):
            raise RuntimeError("rollback window exceeded")

        def __getattr__(self, name):
            return getattr(self._inner, name)

    con._m = NoRollback(con._m)
    text = tok.encode('{"a": [1, 2, {"b": "xyz"}], "c": true}')
    assert cut_drafts([con], [], text) == text
    for cut in (len(text) - 1, 5, 9, 1, len(text)):
        assert np.array_equal(con.allowed_tokens(text[:cut]), fresh_allowed(compiled, text[:cut])), cut


def test_a_reply_may_open_its_think_block_with_its_first_token(compiler, tok, eos):
    compiled = compiler.compile(GrammarSpec.json_object())
    marker = tok.encode("</think>")
    opener = tok.convert_tokens_to_ids("<|im_start|>")          # a one-token opener stands in for <think>
    con = GrammarConstraint(compiled, start_after=marker, may_open=opener)
    first = con.allowed_tokens([])
    expected = fresh_allowed(compiled, [])
    expected[opener] = True
    assert np.array_equal(first, expected)                        # the grammar's tokens, or the opener
    answer = tok.encode('{"ok": true}')
    # opened: free thinking, then the grammar after the marker
    thinking = [opener] + tok.encode("hmm, not JSON {{")
    assert cut_drafts([con], [], thinking + marker + answer + [eos]) == thinking + marker + answer + [eos]
    assert not con.allows(thinking + marker, tok.encode("hello")[0])
    # not opened: the grammar from the first token; the opener only at position 0
    assert cut_drafts([con], [], answer + [eos]) == answer + [eos]
    assert not con.allows(answer, opener) and not con.allows([], tok.encode("hello")[0])
    # rolling back over the opener restores position 0's choice, on the same matcher
    assert np.array_equal(con.allowed_tokens([]), expected)
    assert con.started(answer[:2]) and not con.started(thinking)
    # the same paths on a fresh constraint give the same answers (state follows the path only)
    for path in ([], [opener], thinking + marker, thinking + marker + answer[:3], answer[:3]):
        fresh = GrammarConstraint(compiled, start_after=marker, may_open=opener)
        assert np.array_equal(con.allowed_tokens(path), fresh.allowed_tokens(path)), path
