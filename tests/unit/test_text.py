"""Incremental detokenization and stop-string holdback (tensorfold.engine.text).

Most tests use tokenizers built here with the `tokenizers` library, so they need
no download:

* `byte_bpe`: a tiny byte-level BPE (GPT-2 / SmolLM style) with a few merges;
  every character outside them is split into single-byte tokens, so emoji,
  CJK and accented letters span several tokens.
* `llama_bpe`: a tiny SentencePiece-style BPE (Metaspace "▁", byte fallback
  `<0xNN>` tokens, a decoder that strips the first leading space).

`smollm` is the default model's real tokenizer, when it is in the model cache.
"""

from __future__ import annotations


import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from tensorfold.engine.text import IncrementalDecoder, ReplyText, StepResult, StopMatcher


SAMPLES = [
    "",
    "hello world",
    "Hello, world! How are you today?",
    "héllo wörld, ça va? naïve café",
    "emoji 😀😃 and 👨‍👩‍👧‍👦 family, flags 🇫🇷🇯🇵",
    "日本語のテキストと中文文本，한국어도。",
    "mixed\twhitespace \n\n  indented\r\n\u00a0nbsp  end  ",
    "   leading and trailing spaces   ",
    "math ∑ x² ≤ ∞, arrows → ⇒, 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 and combining é",
    "code: def f(x):\n    return {'a': [1, 2]}\n",
    "😀",
    "é",
    "cdcdcd hello hello",
]


# ---------------------------------------------------------------------------
# Tokenizers
# ---------------------------------------------------------------------------


def _byte_bpe() -> PreTrainedTokenizerFast:
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    merges = [
        ("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o"),
        ("Ġ", "w"), ("o", "r"), ("Ġw", "or"), ("l", "d"), ("Ġwor", "ld"),
        ("c", "d"), ("Ġ", "t"), ("Ġt", "he"),
        ("Ã", "©"),  # é is one token; every other non-ASCII byte stands alone
    ]
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(
        [AddedToken("<|im_start|>", special=True), AddedToken("<|im_end|>", special=True)]
    )
    tok.add_tokens([AddedToken("<think>", special=False)])
    return PreTrainedTokenizerFast(tokenizer_object=tok)


def _llama_bpe() -> PreTrainedTokenizerFast:
    vocab = {"<unk>": 0}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for ch in "▁abcdefghijklmnopqrstuvwxyzé,.!?":
        vocab.setdefault(ch, len(vocab))
    merges = [("▁", "h"), ("e", "l"), ("▁h", "el"), ("l", "o"), ("▁hel", "lo")]
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    tok = Tokenizer(
        models.BPE(vocab=vocab, merges=merges, byte_fallback=True, unk_token="<unk>", fuse_unk=True)
    )
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    tok.add_special_tokens([AddedToken("</s>", special=True)])
    return PreTrainedTokenizerFast(tokenizer_object=tok)


BYTE_BPE = _byte_bpe()
LLAMA_BPE = _llama_bpe()
IM_END = BYTE_BPE.convert_tokens_to_ids("<|im_end|>")
THINK = BYTE_BPE.convert_tokens_to_ids("<think>")


@pytest.fixture(scope="session")
def smollm(default_model):
    """The default model's tokenizer (SmolLM2), from the model cache."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(default_model))


@pytest.fixture(params=["byte_bpe", "llama_bpe"])
def tiny(request):
    return {"byte_bpe": BYTE_BPE, "llama_bpe": LLAMA_BPE}[request.param]


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------


def encode(tok, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False)


def stream(tok, ids, stop=(), skip=True):
    """Push ids one by one; return (ReplyText, released chunks, step results, finish text)."""
    reply = ReplyText(tok, stop=stop, skip_special_tokens=skip)
    chunks, steps = [], []
    for i in ids:
        step = reply.push(i)
        steps.append(step)
        chunks.append(step.text)
    tail = reply.finish()
    return reply, chunks, steps, tail


def incremental(tok, ids, skip=True) -> str:
    reply, chunks, _, tail = stream(tok, ids, skip=skip)
    assert reply.text == "".join(chunks) + tail
    return "".join(chunks) + tail


def expected_cut(tok, ids, stops, skip=True):
    """Oracle: (text, stop) a token-by-token reply must end with.

    After token k the visible reply is decode(ids[:k]) without a trailing
    incomplete character.  The reply ends at the first k whose visible text
    contains a stop string, cut at the earliest start (ties: the shorter one,
    which completed first).
    """
    stops = [s for s in stops if s]
    whole = tok.decode(ids, skip_special_tokens=skip)
    for k in range(1, len(ids) + 1):
        visible = tok.decode(ids[:k], skip_special_tokens=skip).rstrip("\ufffd")
        found = [(visible.find(s), len(s), s) for s in stops if s in visible]
        if found:
            start, _, stop = min(found)
            return visible[:start], stop
    return whole, None


def longest_stop_prefix_suffix(text: str, stops) -> int:
    best = 0
    for s in stops:
        for k in range(min(len(s) - 1, len(text)), 0, -1):
            if text.endswith(s[:k]):
                best = max(best, k)
                break
    return best


# ---------------------------------------------------------------------------
# Incremental detokenization
# ---------------------------------------------------------------------------


def test_tiny_byte_bpe_splits_multibyte_characters():
    # The premise of the tests: one character's bytes span several tokens.
    for text, n in [("😀", 4), ("日", 3), ("ö", 2), ("é", 1)]:
        assert len(encode(BYTE_BPE, text)) == n
    assert BYTE_BPE.decode(encode(BYTE_BPE, "😀")[:2]) == "\ufffd"


@pytest.mark.parametrize("text", SAMPLES)
@pytest.mark.parametrize("skip", [True, False])
def test_incremental_equals_whole_decode(tiny, text, skip):
    ids = encode(tiny, text)
    assert incremental(tiny, ids, skip) == tiny.decode(ids, skip_special_tokens=skip)


@pytest.mark.parametrize("text", SAMPLES)
def test_incremental_equals_whole_decode_smollm(smollm, text):
    ids = encode(smollm, text)
    assert smollm.decode(ids) == text
    assert incremental(smollm, ids) == text


def test_partial_character_is_never_released():
    ids = encode(BYTE_BPE, "a😀b")
    reply = ReplyText(BYTE_BPE)
    got = [reply.push(i).text for i in ids]
    # "a", then three bytes of the emoji release nothing, the fourth the emoji.
    assert got == ["a", "", "", "", "😀", "b"]
    assert all("\ufffd" not in chunk for chunk in got)
    assert reply.finish() == ""
    assert reply.text == "a😀b"


def test_special_tokens_skipped_or_kept():
    ids = encode(BYTE_BPE, "hi 😀") + [IM_END]
    # A skipped special token inside a character's bytes does not split it.
    split = ids[:3] + [IM_END] + ids[3:]
    for seq in (ids, split):
        for skip in (True, False):
            assert incremental(BYTE_BPE, seq, skip) == BYTE_BPE.decode(seq, skip_special_tokens=skip)
    assert incremental(BYTE_BPE, ids, True) == "hi 😀"
    assert incremental(BYTE_BPE, ids, False) == "hi 😀<|im_end|>"
    # A non-special added token is text even when skipping special tokens.
    assert incremental(BYTE_BPE, [THINK, *encode(BYTE_BPE, "x")], True) == "<think>x"


def test_invalid_bytes_released_by_finish_as_decode_gives_them():
    lone = encode(BYTE_BPE, "😀")
    cases = [
        encode(BYTE_BPE, "ok ") + lone[:2],          # reply cut inside a character
        lone[1:] + encode(BYTE_BPE, "x"),             # continuation bytes without a lead
        lone[:1] + encode(BYTE_BPE, "x") + lone[:3],  # a lead byte interrupted, then cut short
    ]
    for ids in cases:
        reply, chunks, _, tail = stream(BYTE_BPE, ids)
        assert "".join(chunks) + tail == BYTE_BPE.decode(ids)
        assert "\ufffd" in BYTE_BPE.decode(ids)
    reply, chunks, _, tail = stream(BYTE_BPE, cases[0])
    assert "".join(chunks) == "ok " and tail == "\ufffd"


@settings(max_examples=300, deadline=None)
@given(
    ids=st.lists(
        st.one_of(st.integers(0, len(BYTE_BPE) - 1), st.sampled_from([IM_END, THINK])), max_size=40
    ),
    skip=st.booleans(),
)
def test_property_random_ids_incremental_equals_decode(ids, skip):
    # Any id sequence, invalid UTF-8 included, decodes the same either way.
    assert incremental(BYTE_BPE, ids, skip) == BYTE_BPE.decode(ids, skip_special_tokens=skip)


EOS = LLAMA_BPE.convert_tokens_to_ids("</s>")


@settings(max_examples=200, deadline=None)
@given(pieces=st.lists(st.tuples(st.text(max_size=8), st.booleans()), max_size=6), skip=st.booleans())
def test_property_llama_style_texts(pieces, skip):
    # Valid UTF-8 only: tokenizers' ByteFallback decoder turns a whole run of
    # <0xNN> tokens into U+FFFD per token when the run is not valid UTF-8, so
    # an invalid run can retroactively change bytes that were valid text (see
    # IncrementalDecoder's docstring); byte-level BPE has no such effect.
    ids: list[int] = []
    for text, eos in pieces:
        ids += encode(LLAMA_BPE, text) + ([EOS] if eos else [])
    assert incremental(LLAMA_BPE, ids, skip) == LLAMA_BPE.decode(ids, skip_special_tokens=skip)


class CountingTokenizer:
    """Wraps a tokenizer and records the longest id list any decode call got."""

    def __init__(self, inner):
        self.inner = inner
        self.longest = 0
        self.calls = 0

    @property
    def added_tokens_decoder(self):
        return self.inner.added_tokens_decoder

    def decode(self, ids, skip_special_tokens=False):
        self.calls += 1
        self.longest = max(self.longest, len(ids))
        return self.inner.decode(ids, skip_special_tokens=skip_special_tokens)


def test_work_per_step_does_not_grow_with_the_reply():
    text = "hello world 😀 日本語 é " * 300
    ids = encode(BYTE_BPE, text)
    assert len(ids) > 3000
    counting = CountingTokenizer(BYTE_BPE)
    reply = ReplyText(counting, stop=["never appears"])
    out = "".join(reply.push(i).text for i in ids) + reply.finish()
    assert out == text
    assert counting.longest <= 8  # the window: a few tokens, not the reply
    assert counting.calls <= 2 * len(ids) + 1


def test_decoder_push_after_flush_raises():
    dec = IncrementalDecoder(BYTE_BPE)
    assert dec.push(encode(BYTE_BPE, "a")[0]) == "a"
    assert [dec.push(i) for i in encode(BYTE_BPE, "😀")[:2]] == ["", ""]
    assert dec.flush() == "\ufffd"
    assert dec.flush() == ""
    with pytest.raises(RuntimeError):
        dec.push(1)


# ---------------------------------------------------------------------------
# Stop strings
# ---------------------------------------------------------------------------


def test_stop_spanning_several_tokens():
    ids = encode(BYTE_BPE, "say 😀 STOP now please")
    reply, chunks, steps, tail = stream(BYTE_BPE, ids, stop=["😀 STOP"])
    assert reply.stopped and reply.stop_string == "😀 STOP"
    assert reply.text == "say " == "".join(chunks) + tail
    assert tail == ""
    last = next(i for i, s in enumerate(steps) if s.stopped)
    # The reply ends on the token that completes the match, not before.
    assert BYTE_BPE.decode(ids[: last + 1]).endswith("😀 STOP")
    assert not BYTE_BPE.decode(ids[:last]).endswith("😀 STOP")
    assert steps[last] == StepResult("", True, "😀 STOP")
    assert all(s == StepResult("", True, "😀 STOP") for s in steps[last + 1 :])


def test_stop_spanning_tokens_smollm(smollm):
    text = "The answer is 42.\n###\nIgnore this part."
    ids = encode(smollm, text)
    reply, chunks, _, _ = stream(smollm, ids, stop=["\n###\n"])
    assert reply.stopped and reply.text == "The answer is 42."
    assert "".join(chunks) == "The answer is 42."
    assert all("#" not in c for c in chunks)


def test_stop_at_the_very_start():
    ids = encode(BYTE_BPE, "STOP then more")
    reply, chunks, steps, tail = stream(BYTE_BPE, ids, stop=["STOP"])
    assert reply.stopped and reply.stop_string == "STOP"
    assert reply.text == "" and chunks == [""] * len(ids) and tail == ""
    assert steps[3].stopped and not steps[2].stopped


def test_earliest_start_wins_when_one_token_completes_two_stops():
    # "cd" is one token: it completes both "bc" and "abcd"; "abcd" starts earlier.
    ids = encode(BYTE_BPE, "xabcd")
    assert BYTE_BPE.convert_ids_to_tokens(ids) == ["x", "a", "b", "cd"]
    for stops in (["bc", "abcd"], ["abcd", "bc"]):
        reply, chunks, steps, _ = stream(BYTE_BPE, ids, stop=stops)
        assert reply.text == "x" and reply.stop_string == "abcd"
        assert steps[3].stopped


def test_first_completed_stop_ends_the_reply():
    # Same stops, but "c" and "d" arrive separately: "bc" completes first and
    # the reply ends there; "abcd" never gets the chance.
    ids = encode(BYTE_BPE, "xabc") + encode(BYTE_BPE, "d")
    reply, _, steps, _ = stream(BYTE_BPE, ids, stop=["abcd", "bc"])
    assert reply.text == "xa" and reply.stop_string == "bc"
    assert steps[3].stopped


def test_holdback_is_released_when_the_prefix_is_not_a_stop():
    ids = encode(BYTE_BPE, "the ENd of END")
    reply = ReplyText(BYTE_BPE, stop=["END"])
    steps = [reply.push(i) for i in ids]
    texts = [s.text for s in steps]
    pieces = BYTE_BPE.convert_ids_to_tokens(ids)
    assert pieces[:6] == ["t", "he", "Ġ", "E", "N", "d"]
    assert texts[:6] == ["t", "he", " ", "", "", "ENd"]  # "E", "EN" held, then released
    assert reply.stopped and reply.text == "the ENd of "


def test_holdback_only_what_could_begin_a_stop():
    reply = ReplyText(BYTE_BPE, stop=["<stop>", "abcdef"])
    out = "".join(reply.push(i).text for i in encode(BYTE_BPE, "xx <st"))
    assert out == "xx " and reply.held == "<st"
    out = "".join(reply.push(i).text for i in encode(BYTE_BPE, "x abc"))
    assert out == "<stx " and reply.held == "abc"
    assert reply.finish() == "abc"
    assert reply.text == "xx <stx abc" and not reply.stopped


def test_finish_releases_held_text():
    ids = encode(BYTE_BPE, "partial sto")
    reply, chunks, _, tail = stream(BYTE_BPE, ids, stop=["stop", "x"])
    assert "".join(chunks) == "partial " and tail == "sto"
    assert reply.text == "partial sto" and not reply.stopped and reply.stop_string is None
    assert reply.finish() == ""


def test_stop_made_of_a_multibyte_character():
    ids = encode(BYTE_BPE, "a 😀 b")
    reply, chunks, _, _ = stream(BYTE_BPE, ids, stop=["😀"])
    assert reply.text == "a " and reply.stop_string == "😀"
    assert all("\ufffd" not in c for c in chunks)


def test_stop_with_special_tokens_not_skipped():
    ids = encode(BYTE_BPE, "done") + [IM_END] + encode(BYTE_BPE, "more")
    reply, _, _, _ = stream(BYTE_BPE, ids, stop=["<|im_end|>"], skip=False)
    assert reply.text == "done" and reply.stop_string == "<|im_end|>"
    reply, _, _, _ = stream(BYTE_BPE, ids, stop=["<|im_end|>"], skip=True)
    assert not reply.stopped and reply.text == "donemore"


def test_empty_stop_strings_are_ignored():
    ids = encode(BYTE_BPE, "hello world")
    for stops in ([""], ["", ""], ("",)):
        reply, chunks, _, _ = stream(BYTE_BPE, ids, stop=stops)
        assert not reply.stopped and chunks[0] == "hello" and reply.text == "hello world"
    reply, _, _, _ = stream(BYTE_BPE, ids, stop=["", "o w"])
    assert reply.text == "hell" and reply.stop_string == "o w"
    # A bare string is one stop string, not a list of characters.
    reply, _, _, _ = stream(BYTE_BPE, ids, stop="world")
    assert reply.text == "hello " and reply.stop_string == "world"


def test_push_after_finish_raises():
    reply = ReplyText(BYTE_BPE)
    reply.push(encode(BYTE_BPE, "a")[0])
    assert reply.finish() == ""
    with pytest.raises(RuntimeError):
        reply.push(1)


def test_stop_matcher_hold_and_matches():
    m = StopMatcher(["abcab", "bca", ""])
    assert m.stops == ("abcab", "bca") and m.max_len == 5
    assert m.feed("xab") is None and m.hold == 2
    assert m.feed("c") is None and m.hold == 3  # "abc" could begin "abcab"
    assert m.feed("a") == (2, "bca")  # "bca" completes before "abcab" could
    m = StopMatcher(["aab"])
    assert m.feed("aaaa") is None and m.hold == 2
    assert m.feed("b") == (2, "aab")
    assert StopMatcher([]).hold == 0 and StopMatcher([]).feed("abc") is None


# ---------------------------------------------------------------------------
# Properties
# ---------------------------------------------------------------------------

ALPHABET = "ab cé😀日\n"
texts = st.text(alphabet=ALPHABET, max_size=40)
stop_lists = st.lists(st.text(alphabet=ALPHABET, min_size=0, max_size=6), min_size=0, max_size=4)


def check_stream(tok, text, stops):
    ids = encode(tok, text)
    real_stops = [s for s in stops if s]
    reply = ReplyText(tok, stop=stops)
    released = ""
    stopped_at = None
    for k, token in enumerate(ids, 1):
        step = reply.push(token)
        assert "\ufffd" not in step.text
        for s in real_stops:
            assert s not in step.text
        released += step.text
        if step.stopped:
            stopped_at = stopped_at or k
            assert reply.held == ""
            continue
        # Released + held is exactly the visible text, and only as much is
        # held as could still begin a stop string.
        visible = tok.decode(ids[:k], skip_special_tokens=True).rstrip("\ufffd")
        assert released + reply.held == visible
        assert reply.held == visible[len(visible) - longest_stop_prefix_suffix(visible, real_stops) :]
        assert len(reply.held) <= max((len(s) - 1 for s in real_stops), default=0)
    released += reply.finish()
    want, want_stop = expected_cut(tok, ids, stops)
    assert released == want == reply.text
    assert reply.stop_string == want_stop
    assert reply.stopped == (want_stop is not None)
    for s in real_stops:
        assert s not in released


@settings(max_examples=400, deadline=None)
@given(text=texts, stops=stop_lists)
def test_property_stop_holdback(text, stops):
    check_stream(BYTE_BPE, text, stops)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), text=st.text(alphabet=ALPHABET, min_size=1, max_size=40))
def test_property_stop_taken_from_the_text(data, text):
    # Stops cut out of the text itself, so they really occur.
    i = data.draw(st.integers(0, len(text) - 1))
    j = data.draw(st.integers(i + 1, min(len(text), i + 8)))
    extra = data.draw(stop_lists)
    check_stream(BYTE_BPE, text, [text[i:j], *extra])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=30), stops=st.lists(st.text(min_size=1, max_size=4), max_size=3))
def test_property_stop_holdback_any_unicode(text, stops):
    if "\ufffd" in text or any("\ufffd" in s for s in stops):
        return
    check_stream(BYTE_BPE, text, stops)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=texts, stops=stop_lists)
def test_property_stop_holdback_smollm(smollm, text, stops):
    check_stream(smollm, text, stops)
