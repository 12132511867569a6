"""LogitAdjust: OpenAI's logit_bias, frequency and presence penalties and vLLM's
repetition penalty, computed from the reply (and prompt) tokens before the row."""

import torch

from tensorfold.engine.constraints import LogitAdjust


def test_bias_then_counts_then_repetition():
    logits = torch.tensor([1.0, -2.0, 3.0, 0.5, -1.0])
    rule = LogitAdjust(bias=((0, 2.0), (4, -1.0)), frequency=0.5, presence=0.25, repetition=2.0, prompt_seen=torch.tensor([3]))
    rule.mask([2, 2, 1], logits)
    want = torch.tensor([3.0,                          # bias only
                         (-2.0 - (0.5 + 0.25)) * 2.0,  # once in the reply, then repetition (negative)
                         (3.0 - (1.0 + 0.25)) / 2.0,   # twice in the reply, then repetition (positive)
                         0.5 / 2.0,                    # in the prompt: repetition only
                         -2.0])                        # bias only
    assert torch.equal(logits, want)


def test_a_row_depends_only_on_the_tokens_before_it():
    base = torch.randn(50, generator=torch.Generator().manual_seed(0))
    rule = LogitAdjust(frequency=0.7, presence=0.3, repetition=1.3, prompt_seen=torch.tensor([5, 6]))
    a, b = base.clone(), base.clone()
    rule.mask([1, 2, 2, 9], a)
    rule.mask((9, 2, 1, 2), b)                 # the same tokens in another order: the same counts
    assert torch.equal(a, b)
    off = base.clone()
    LogitAdjust().mask([1, 2, 3], off)
    assert torch.equal(off, base)


def test_forbidden_tokens_stay_forbidden():
    logits = torch.tensor([float("-inf"), 1.0, float("-inf")])
    LogitAdjust(bias=((0, 100.0),), frequency=-2.0, repetition=0.5).mask([0, 2], logits)
    assert logits[0] == float("-inf") and logits[2] == float("-inf")
