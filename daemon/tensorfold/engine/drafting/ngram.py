"""Prompt lookup: propose what followed the latest earlier occurrence of the reply's tail.

For n from `max_n` down to `min_n`, the last n tokens of the sequence (prompt
and reply so far) are looked up among all earlier n-grams; the tokens that
followed the most recent earlier occurrence are the draft. The index is built
incrementally, O(max_n) per token.
"""

from __future__ import annotations

from collections.abc import Sequence


class _Index:
    __slots__ = ("follow", "size")

    def __init__(self, max_n: int) -> None:
        # follow[n][gram] = index of the token right after the latest earlier occurrence of gram
        self.follow: list[dict[tuple[int, ...], int]] = [{} for _ in range(max_n + 1)]
        self.size = 0

    def extend(self, tokens: Sequence[int], max_n: int) -> None:
        """Index every n-gram that has a following token, up to len(tokens)."""
        for j in range(max(self.size, 1), len(tokens)):
            for n in range(1, min(max_n, j) + 1):
                self.follow[n][tuple(tokens[j - n:j])] = j
        self.size = max(self.size, len(tokens))


class NgramDrafter:
    name = "ngram"

    def __init__(self, max_n: int = 4, min_n: int = 1) -> None:
        self.max_n, self.min_n = max_n, min_n
        self._seqs: dict[str, _Index] = {}

    def start(self, seq_id: str, tokens: Sequence[int], sampling: object = None) -> None:
        index = _Index(self.max_n)
        index.extend(tokens, self.max_n)
        self._seqs[seq_id] = index

    def propose(self, seq_id: str, tokens: Sequence[int], k: int) -> list[int]:
        index = self._seqs.get(seq_id)
        if index is None or k <= 0:
            return []
        index.extend(tokens, self.max_n)
        end = len(tokens)
        for n in range(min(self.max_n, end), self.min_n - 1, -1):
            j = index.follow[n].get(tuple(tokens[end - n:]))
            if j is not None and j < end:
                return list(tokens[j:min(j + k, end)])
        return []

    def accepted(self, seq_id: str, tokens: Sequence[int]) -> None:
        index = self._seqs.get(seq_id)
        if index is not None:
            index.extend(tokens, self.max_n)

    def finish(self, seq_id: str) -> None:
        self._seqs.pop(seq_id, None)

    def idle(self) -> None:
        pass                       # holds nothing once its sequences finish
