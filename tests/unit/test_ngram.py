"""Prompt-lookup drafting: what followed the latest earlier occurrence of the tail."""

from tensorfold.engine.drafting.ngram import NgramDrafter


def test_proposes_the_continuation_of_the_longest_match():
    d = NgramDrafter(max_n=3)
    prompt = [1, 2, 3, 4, 5, 9, 2, 3, 7, 8]
    d.start("a", prompt)
    # tail (2, 3) occurred twice: the latest earlier occurrence is followed by 7, 8
    assert d.propose("a", prompt + [2, 3], 2) == [7, 8]
    # tail (9, 2, 3) matches at index 5..7 -> followed by 7, 8 and then the reply's own 9, 2
    assert d.propose("a", prompt + [9, 2, 3], 4) == [7, 8, 9, 2]


def test_longer_match_wins_over_more_recent_shorter_one():
    d = NgramDrafter(max_n=3)
    tokens = [5, 6, 7, 1, 9, 7, 2, 5, 6, 7]
    d.start("a", tokens)
    assert d.propose("a", tokens, 2) == [1, 9]          # (5, 6, 7) -> 1, 9 beats (7,) -> 2


def test_no_match_and_limits():
    d = NgramDrafter(max_n=2)
    d.start("a", [1, 2, 3])
    assert d.propose("a", [1, 2, 3], 3) == []
    assert d.propose("a", [1, 2, 3, 1], 0) == []
    assert d.propose("a", [1, 2, 3, 1], 5) == [2, 3, 1]  # never beyond the end
    assert d.propose("unknown", [1, 2], 3) == []


def test_index_grows_with_the_reply():
    d = NgramDrafter(max_n=2)
    d.start("a", [10, 11])
    reply = [10, 11, 12, 13, 10, 11]
    assert d.propose("a", reply, 2) == [12, 13]
    d.finish("a")
    assert d.propose("a", reply, 2) == []
