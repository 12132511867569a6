"""A byte-level BPE tokenizer in compact tables (GPT-2, Llama 3, Qwen and SmolLM vocabularies).

The Hugging Face tokenizers library holds a 151k-token vocabulary and its merges in
hash maps of strings: 41 MiB for Qwen2.5's after load, most of a small model's memory
beyond its weights.  Here the same tokenizer is two parts:

- the library's own pipeline, built from the same tokenizer.json with only its
  one-byte tokens and no merges: it splits out added tokens, normalizes, pre-tokenizes
  and post-processes exactly as the full one, and gives each byte of each pre-token
  its one-byte token and the pre-token's number (`word_ids`);
- the merges, in one open-addressing table the native library reads
  (native/csrc/tf_bpe.c merges each word in the library's order), and each token's
  bytes in one buffer for decoding (the ByteLevel decoder's rule: a token whose every
  character is a byte's stands for those bytes, any other for its UTF-8).

`BytePairs.load` takes a tokenizer.json whose model is a plain byte-level BPE (no
dropout, unknown token, word affixes, byte fallback or whole-word lookup) and decoder
ByteLevel; it returns None for any other, which `tokenizers.Tokenizer` then serves.
"""

from __future__ import annotations

import json
from array import array
from typing import Any

import numpy as np

from tokenizers import Tokenizer as RustTokenizer
from tokenizers.pre_tokenizers import ByteLevel

# The model settings a plain byte-level BPE has (other values change what merging does).
PLAIN_BPE = {"dropout": (None,), "unk_token": (None,), "continuing_subword_prefix": (None, ""),
             "end_of_word_suffix": (None, ""), "fuse_unk": (None, False), "byte_fallback": (None, False),
             "ignore_merges": (None, False)}


def _plain(pipeline: dict[str, Any]) -> bool:
    model, decoder = pipeline.get("model") or {}, pipeline.get("decoder") or {}
    if model.get("type") != "BPE" or decoder.get("type") != "ByteLevel":
        return False
    return all(model.get(key) in allowed for key, allowed in PLAIN_BPE.items())


def _byte_chars() -> dict[str, int]:
    """The ByteLevel alphabet: each byte's character (GPT-2's bytes_to_unicode)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


def _merge_pairs(merges: list[Any]) -> list[tuple[str, str]]:
    """Merges as pairs: tokenizer.json lists them as [a, b] or as "a b"."""
    return [tuple(m) if isinstance(m, list) else tuple(m.split(" ", 1)) for m in merges]


class BytePairs:
    """Encode and decode with a byte-level BPE held in compact tables."""

    def __init__(self, pipeline: RustTokenizer, keys: np.ndarray, vals: np.ndarray, bits: int,
                 blob: bytes, offsets: array, spelled: dict[int, str | None], special: frozenset[int]) -> None:
        from ..native import lib

        self._lib = lib.load()
        self._pipeline = pipeline
        self._keys, self._vals, self._bits = keys, vals, bits
        self._blob, self._offsets = blob, offsets
        self._spelled = spelled           # added tokens' contents, spellings not all bytes' characters,
                                          # and None for ids nothing spells
        self.special_ids = special        # what decode(skip_special_tokens=True) drops

    @classmethod
    def load(cls, text: str) -> BytePairs | None:
        """From a tokenizer.json's text, or None where it is not a plain byte-level BPE."""
        from ..native import lib

        pipeline = json.loads(text)
        if not _plain(pipeline):
            return None
        try:
            native = lib.load()
        except lib.NativeMissing:
            return None
        model = pipeline["model"]
        vocab: dict[str, int] = model["vocab"]
        if set(ByteLevel.alphabet()) != set(_CHAR_BYTE):
            return None
        pairs = _merge_pairs(model["merges"])
        try:
            merged = np.array([vocab[a + b] for a, b in pairs], np.uint32)
            left = np.array([vocab[a] for a, _ in pairs], np.uint32)
            right = np.array([vocab[b] for _, b in pairs], np.uint32)
        except KeyError:
            return None                   # the library refuses such a file too
        bits = max(10, (len(pairs) * 3 // 2).bit_length())      # at most two thirds full
        keys, vals = np.empty(1 << bits, np.uint64), np.empty(1 << bits, np.uint64)
        if native.tf_bpe_table(left.ctypes.data, right.ctypes.data, merged.ctypes.data, len(pairs), bits,
                               keys.ctypes.data, vals.ctypes.data):
            return None
        added = pipeline.get("added_tokens", [])
        size = max([*vocab.values(), *(t["id"] for t in added)], default=-1) + 1
        pieces: list[bytes | None] = [None] * size        # None: an id nothing spells
        spelled: dict[int, str | None] = {}
        for token, i in vocab.items():
            pieces[i] = _token_bytes(token)
            if not all(c in _CHAR_BYTE for c in token):
                spelled[i] = token
        for t in added:
            pieces[t["id"]], spelled[t["id"]] = _token_bytes(t["content"]), t["content"]
        spelled.update((i, None) for i, p in enumerate(pieces) if p is None)
        special = frozenset(t["id"] for t in added if t.get("special"))
        offsets = array("q", [0])
        for p in pieces:
            offsets.append(offsets[-1] + len(p or b""))
        blob = b"".join(p or b"" for p in pieces)
        del pieces, vocab
        # a byte the vocabulary lacks is dropped from its word, by both (the model has no unknown
        # token); added tokens keep their ids (an added token the model lacks would get a new one)
        kept = {c: model["vocab"][c] for c in _CHAR_BYTE if c in model["vocab"]}
        model["vocab"] = {**kept, **{t["content"]: t["id"] for t in added}}
        model["merges"] = []
        return cls(RustTokenizer.from_str(json.dumps(pipeline)), keys, vals, bits, blob, offsets, spelled, special)

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        enc = self._pipeline.encode(text, add_special_tokens=add_special_tokens)
        n = len(enc.ids)
        if not n:
            return []
        ids = np.array(enc.ids, np.uint32)
        words = np.array([-1 - i if w is None else w for i, w in enumerate(enc.word_ids)], np.int64)
        out = np.empty(n, np.uint32)
        count = self._lib.tf_bpe_merge(self._keys.ctypes.data, self._vals.ctypes.data, self._bits, ids.ctypes.data,
                                       words.ctypes.data, n, out.ctypes.data)
        if count < 0:
            raise MemoryError("no memory to merge the text's tokens")
        return out[:count].tolist()

    def token_bytes(self, i: int) -> bytes:
        return self._blob[self._offsets[i]:self._offsets[i + 1]]

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        o, blob, n, skip = self._offsets, self._blob, len(self), self.special_ids if skip_special_tokens else ()
        return b"".join(blob[o[i]:o[i + 1]] for i in ids if 0 <= i < n and i not in skip).decode("utf-8", "replace")

    def id_to_token(self, i: int) -> str | None:
        """The token's spelling in the vocabulary (its bytes as ByteLevel characters), or
        an added token's content."""
        if not 0 <= i < len(self):
            return None
        if i in self._spelled:
            return self._spelled[i]
        return self.token_bytes(i).decode("latin-1").translate(_BYTE_CHAR)


def _token_bytes(token: str) -> bytes:
    """The ByteLevel decoder's bytes for one token."""
    try:
        return bytes(_CHAR_BYTE[c] for c in token)
    except KeyError:
        return token.encode()


_CHAR_BYTE = _byte_chars()
_BYTE_CHAR = {b: c for c, b in _CHAR_BYTE.items()}        # a str.translate table: byte -> character
