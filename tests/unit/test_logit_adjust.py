"""LogitAdjust: OpenAI's logit_bias, frequency and presence penalties and vLLM's
repetition penalty, computed from the reply (and prompt) tokens before the row."""

import numpy as np

from tensorfold.engine.constraints import LogitAdjust


def test_bias_then_counts_then_repetition():
    logits = np.array([1.0, -2.0, 3.0, 0.5, -1.0], dtype=np.float32)
    rule = LogitAdjust(bias=((0, 2.0), (4, -1.0)), frequency=0.5, presence=0.25, repetition=2.0, prompt_seen=np.array([3], dtype=np.int64))
    rule.mask([2, 2, 1], logits)
    want = np.array([3.0,                          # bias only
                     (-2.0 - (0.5 + 0.25)) * 2.0,  # once in the reply, then repetition (negative)
                     (3.0 - (1.0 + 0.25)) / 2.0,   # twice in the reply, then repetition (positive)
                     0.5 / 2.0,                    # in the prompt: repetition only
                     -2.0], dtype=np.float32)      # bias only
    assert np.array_equal(logits, want)


def test_a_row_depends_only_on_the_tokens_before_it():
    base = np.random.default_rng(0).standard_normal(50).astype(np.float32)
    rule = LogitAdjust(frequency=0.7, presence=0.3, repetition=1.3, prompt_seen=np.array([5, 6], dtype=np.int64))
    a, b = base.copy(), base.copy()
    rule.mask([1, 2, 2, 9], a)
    rule.mask((9, 2, 1, 2), b)                 # the same tokens in another order: the same counts
    assert np.array_equal(a, b)
    off = base.copy()
    LogitAdjust().mask([1, 2, 3], off)
    assert np.array_equal(off, base)


def test_forbidden_tokens_stay_forbidden():
    logits = np.array([-np.inf, 1.0, -np.inf], dtype=np.float32)
    LogitAdjust(bias=((0, 100.0),), frequency=-2.0, repetition=0.5).mask([0, 2], logits)
    assert logits[0] == -np.inf and logits[2] == -np.inf
