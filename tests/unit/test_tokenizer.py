"""The server's tokenizer without transformers: byte-level BPE from compact tables
(checkpoints/bpe.py), the transformers-resolved spec kept in the cache
(checkpoints/tokenizer_spec.py), and chat templates rendered as transformers renders them
(checkpoints/chat_template.py).  Each is compared with the library it stands in for."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SAMPLES = [
    "Hello, world!", "  leading spaces\n\n\ttabs\r\n", "I'm He'LL they've 'S 'd", "café naïve ﬁ Å Å",
    "中文字符 日本語 한국어", "emoji 😀👍🏽 👨‍👩‍👧", "def f(x):\n    return x**2  # comment\n",
    "1234567890 3.14159 1e-10", "<|im_start|>user\nhi<|im_end|>\n", "<|endoftext|>x<|im_end|><|im_end|>",
    "\u0000\u0001 \x7f \u200b\ufeff", " " * 50 + "x", "a" * 3000, "https://example.com/path?q=1&r=2#frag",
    '{"key": [1, 2, {"n": null}]}', "",
]
POOL = "abcdefghijklmnopqrstuvwxyzABCXYZ0123456789 \n\t\r.,;:'\"!?()[]{}<>|_-+=*/\\éüñ中文😀\u0301\u200b"


def _texts(seed: int, count: int, pool: str = POOL, longest: int = 200) -> list[str]:
    rng = random.Random(seed)
    return [*SAMPLES, *("".join(rng.choice(pool) for _ in range(rng.randint(1, longest))) for _ in range(count))]


def _assert_same(ours, rust, texts: list[str]) -> None:
    """Encodes (with and without special tokens), decodes (skipping them or not) and
    spellings equal the Rust tokenizer's."""
    for text in texts:
        for special in (False, True):
            assert ours.encode(text, add_special_tokens=special) == \
                rust.encode(text, add_special_tokens=special).ids, (text, special)
        ids = rust.encode(text).ids
        for skip in (False, True):
            assert ours.decode(ids, skip_special_tokens=skip) == rust.decode(ids, skip_special_tokens=skip), text
    ids = range(len(ours) + 3)      # every id, those nothing spells and past the end included
    assert [ours.id_to_token(i) for i in ids] == [rust.id_to_token(i) for i in ids]
    rng = random.Random(1)
    for _ in range(300):     # any ids, parts of characters and special tokens included
        ids = [rng.randrange(len(ours) + 2) for _ in range(rng.randint(1, 8))]
        for skip in (False, True):
            assert ours.decode(ids, skip_special_tokens=skip) == rust.decode(ids, skip_special_tokens=skip), ids


def test_byte_pairs_encode_and_decode_as_the_rust_tokenizer_on_the_default_model(default_model):
    from tokenizers import Tokenizer as RustTokenizer

    from tensorfold.checkpoints.bpe import BytePairs

    text = (default_model / "tokenizer.json").read_text(encoding="utf-8")
    ours = BytePairs.load(text)
    assert ours is not None
    _assert_same(ours, RustTokenizer.from_str(text), _texts(0, 300))


def _random_bpe(seed: int) -> str:
    """A byte-level BPE over a few letters with random merges: pairs merging into a token
    another pair makes too, and a pair listed twice, whose queue entries go stale in the
    ways the library's order decides.  As the library writes it back (the server's spec
    is its own serialization, in which each added token has the id it gave it)."""
    from tokenizers.pre_tokenizers import ByteLevel

    rng = random.Random(seed)
    alphabet = ByteLevel.alphabet()
    vocab = {c: i for i, c in enumerate(sorted(alphabet))}
    tokens = ["a", "b", "c", "Ġ"]
    merges: list[list[str]] = []
    while len(merges) < 60:
        a, b = rng.choice(tokens), rng.choice(tokens)
        if len(a + b) > 8:
            continue
        merges.append([a, b])
        if a + b not in vocab:
            vocab[a + b] = len(vocab)
            tokens.append(a + b)
    merges.insert(rng.randrange(len(merges)), rng.choice(merges))
    from tokenizers import Tokenizer as RustTokenizer

    return RustTokenizer.from_str(json.dumps({
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": len(vocab), "content": "<|end|>", "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges}})).to_str()


@pytest.mark.parametrize("seed", range(6))
def test_byte_pairs_merge_in_the_rust_tokenizers_order(seed):
    """Random merge tables on long words of a few letters: every merge order question
    (equal ranks, stale queue entries, one token made by two pairs) comes up."""
    from tokenizers import Tokenizer as RustTokenizer

    from tensorfold.checkpoints.bpe import BytePairs

    text = _random_bpe(seed)
    ours = BytePairs.load(text)
    assert ours is not None
    texts = _texts(seed, 200, "aabbbcc ", 60) + _texts(seed, 50, "abc <|end|>", 30)
    _assert_same(ours, RustTokenizer.from_str(text), texts)


def test_a_stale_queue_entry_is_skipped_where_its_pair_now_merges_into_another_token():
    """Merges (b c), (a b), (a bc) on "abc": (b c) goes first, so the queued (a b) finds
    the pair (a bc), which merges, but into another token: it is skipped, and (a bc) gives
    "abc" (applying it would give "ab" and lose the "c")."""
    from tensorfold.checkpoints.bpe import BytePairs

    data = json.loads(_random_bpe(0))
    vocab = {c: i for c, i in data["model"]["vocab"].items() if len(c) == 1}
    for token in ("bc", "ab", "abc"):
        vocab[token] = len(vocab)
    data["model"].update(vocab=vocab, merges=[["b", "c"], ["a", "b"], ["a", "bc"]])
    data["added_tokens"][0]["id"] = len(vocab)
    assert BytePairs.load(json.dumps(data)).encode("abc") == [vocab["abc"]]


def test_pipelines_byte_pairs_do_not_take_are_left_to_the_rust_tokenizer(default_model):
    from tensorfold.checkpoints.bpe import BytePairs

    data = json.loads((default_model / "tokenizer.json").read_text(encoding="utf-8"))
    for key, value in (("byte_fallback", True), ("ignore_merges", True), ("dropout", 0.1), ("unk_token", "x")):
        assert BytePairs.load(json.dumps({**data, "model": {**data["model"], key: value}})) is None, key
    assert BytePairs.load(json.dumps({**data, "decoder": {"type": "Fuse"}})) is None


def _folder(tmp_path: Path, source: Path, template: str | None = None) -> Path:
    """A copy of `source`'s tokenizer files, with `template` as its chat template."""
    folder = tmp_path / "tok"
    folder.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "config.json", "generation_config.json"):
        if (source / name).is_file():
            shutil.copy(source / name, folder / name)
    if template is not None:
        path = folder / "tokenizer_config.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "chat_template": template}))
    return folder


TEMPLATE = """{%- set ns = namespace(count=0, seen=dict(a=1)) -%}
{{ bos_token }}{% for m in messages %}{% if m.role == 'skip' %}{% continue %}{% endif %}
{%- set ns.count = ns.count + 1 -%}
<{{ m.role }}>{% generation %}{{ m.content }}{% endgeneration %}
{%- if m.reasoning_content %}[{{ m.reasoning_content }}|{{ m.thinking }}]{% endif %}
{%- if m.tool_calls %}{{ m.tool_calls | tojson(indent=2) }}{% endif %}
{%- if m.role == 'bad' %}{{ raise_exception('no bad roles') }}{% endif %}
{% endfor %}{% if tools %}{{ tools | tojson(sort_keys=True) }}{% endif %}
{{ ns.count }} {{ 'x' in ns.seen }} {{ eos_token }} {{ flag | default('none') }}
{%- if add_generation_prompt %}<assistant>{% endif %}"""


def test_chat_templates_render_as_transformers_renders_them(default_model, tmp_path):
    from transformers import AutoTokenizer

    from tensorfold.checkpoints.errors import TemplateError
    from tensorfold.checkpoints.tokenizer import Tokenizer

    folder = _folder(tmp_path, default_model, TEMPLATE)
    ours, hf = Tokenizer(folder), AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    tools = [{"type": "function", "function": {"name": "f", "description": "ünï", "parameters": {"type": "object"}}}]
    chats = [
        [{"role": "user", "content": "héllo"}],
        [{"role": "system", "content": "s", "name": None}, {"role": "skip", "content": "x"},
         {"role": "assistant", "content": "a", "reasoning": "why"},
         {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f", "arguments": {"k": "é"}}}]}],
    ]
    for chat in chats:
        for tool_list in (None, tools):
            for prompt in (False, True):
                for extra in ({}, {"flag": "on"}):
                    assert ours.render_chat(chat, tools=tool_list, add_generation_prompt=prompt, **extra) == \
                        hf.apply_chat_template(chat, tools=tool_list, add_generation_prompt=prompt, tokenize=False,
                                               **extra)
    with pytest.raises(TemplateError, match="no bad roles"):
        ours.render_chat([{"role": "bad", "content": "x"}])


def test_the_default_models_tokenizer_matches_transformers(default_model):
    from transformers import AutoTokenizer

    from tensorfold.checkpoints.tokenizer import Tokenizer

    ours, hf = Tokenizer(default_model), AutoTokenizer.from_pretrained(str(default_model), local_files_only=True)
    chat = [{"role": "user", "content": "What is 2+2? <|im_end|>"}, {"role": "assistant", "content": "4"}]
    text = ours.render_chat(chat)
    assert text == hf.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    ids = ours.encode(text)
    assert ids == hf.encode(text, add_special_tokens=False)
    assert ours.decode(ids, skip_special_tokens=True) == hf.decode(ids, skip_special_tokens=True)
    assert ours.convert_ids_to_tokens(ids) == hf.convert_ids_to_tokens(ids)
    assert (ours.vocab_size, ours.bos_token_id, sorted(ours.special_ids)) == \
        (len(hf), hf.bos_token_id, sorted(i for i, t in hf.added_tokens_decoder.items() if t.special))


def test_the_spec_is_resolved_once_and_again_when_a_file_changes(default_model, tmp_path, monkeypatch):
    from tensorfold.checkpoints import tokenizer_spec
    from tensorfold.checkpoints.tokenizer import Tokenizer

    monkeypatch.setenv("TENSORFOLD_CACHE_DIR", str(tmp_path / "cache"))
    folder = _folder(tmp_path, default_model)
    first = Tokenizer(folder)
    assert list((tmp_path / "cache" / ".tokenizers").glob("*.json"))

    def no_child(*args, **kwargs):
        raise AssertionError("the cached spec should have been read")

    monkeypatch.setattr(tokenizer_spec, "run_module", no_child)
    again = Tokenizer(folder)
    assert again.encode("Hello there") == first.encode("Hello there")
    path = folder / "tokenizer_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "chat_template": "{{ messages[0].content }}!"}))
    with pytest.raises(AssertionError, match="cached spec"):
        Tokenizer(folder)
    monkeypatch.undo()
    monkeypatch.setenv("TENSORFOLD_CACHE_DIR", str(tmp_path / "cache"))
    assert Tokenizer(folder).render_chat([{"role": "user", "content": "hi"}]) == "hi!"


def test_a_folder_the_child_cannot_load_is_a_checkpoint_error(tmp_path, monkeypatch):
    from tensorfold.checkpoints.errors import CheckpointError
    from tensorfold.checkpoints.tokenizer import Tokenizer

    monkeypatch.setenv("TENSORFOLD_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "tokenizer.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="could not load the tokenizer"):
        Tokenizer(tmp_path / "broken")


def test_the_server_side_tokenizer_never_imports_transformers(default_model):
    code = ("import sys; from tensorfold.checkpoints.tokenizer import Tokenizer; t = Tokenizer(sys.argv[1]); "
            "ids = t.encode(t.render_chat([{'role': 'user', 'content': 'hi'}])); t.decode(ids); "
            "t.convert_ids_to_tokens(ids); print('transformers' in sys.modules, type(t.codec).__name__)")
    out = subprocess.run([sys.executable, "-c", code, str(default_model)], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "BytePairs"], out.stderr[-2000:]


def test_another_pipeline_runs_in_the_rust_library_as_transformers_runs_it(tmp_path):
    """A SentencePiece-style BPE (Metaspace, byte fallback: Llama 2, Mistral) is not a
    byte-level BPE: the Rust library serves it whole, and it agrees with transformers."""
    from tokenizers import SentencePieceBPETokenizer
    from transformers import AutoTokenizer

    from tensorfold.checkpoints.tokenizer import RustPipeline, Tokenizer

    trained = SentencePieceBPETokenizer()
    trained.train_from_iterator([*SAMPLES, *_texts(3, 200)], vocab_size=400,
                                special_tokens=["<unk>", "<s>", "</s>"])
    folder = tmp_path / "spm"
    folder.mkdir()
    trained.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
        "chat_template": "{% for m in messages %}{{ bos_token }}[{{ m.role }}] {{ m.content }}{{ eos_token }}"
                         "{% endfor %}"}))
    ours, hf = Tokenizer(folder), AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    assert isinstance(ours.codec, RustPipeline)
    for text in _texts(4, 100):
        ids = hf.encode(text, add_special_tokens=False)
        assert ours.encode(text) == ids, text
        assert ours.decode(ids) == hf.decode(ids) and ours.convert_ids_to_tokens(ids) == hf.convert_ids_to_tokens(ids)
    chat = [{"role": "user", "content": "héllo wörld"}]
    assert ours.render_chat(chat) == hf.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    assert (ours.vocab_size, ours.bos_token_id, sorted(ours.eos_token_ids)) == (len(hf), hf.bos_token_id,
                                                                             [hf.eos_token_id])
