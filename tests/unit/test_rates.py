"""Rates from /health counter differences: the first sample is a baseline."""

import pytest

from tensorfold.client import RATES, RateTracker


def health(**counters):
    base = {"completion_tokens_total": 0, "prompt_tokens_total": 0, "requests_total": 0,
            "cached_tokens_total": 0, "drafted_total": 0, "accepted_total": 0,
            "requests_running": 0, "requests_waiting": 0}
    return {**base, **counters}


def test_first_sample_is_a_baseline_then_differences():
    t = RateTracker()
    assert t.sample(health(completion_tokens_total=500, requests_total=9), 10.0) is None
    rates = t.sample(health(completion_tokens_total=600, prompt_tokens_total=80, cached_tokens_total=20,
                            requests_total=11, drafted_total=10, accepted_total=7,
                            requests_running=2, requests_waiting=1), 12.0)
    assert set(rates) == set(RATES)
    assert rates["decode_tps"] == pytest.approx(50.0)
    assert rates["prompt_tps"] == pytest.approx(40.0)
    assert rates["requests_ps"] == pytest.approx(1.0)
    assert rates["cached_ratio"] == pytest.approx(0.25)
    assert rates["acceptance"] == pytest.approx(0.7)
    assert (rates["running"], rates["queued"]) == (2.0, 1.0)


def test_no_prompt_or_drafts_gives_no_ratio():
    t = RateTracker()
    t.sample(health(), 0.0)
    rates = t.sample(health(), 1.0)
    assert rates["cached_ratio"] is None and rates["acceptance"] is None
    assert rates["decode_tps"] == 0.0


def test_a_counter_going_back_is_a_restart_and_a_new_baseline():
    t = RateTracker()
    t.sample(health(completion_tokens_total=100), 0.0)
    assert t.sample(health(completion_tokens_total=5), 1.0) is None
    assert t.sample(health(completion_tokens_total=15), 2.0)["decode_tps"] == pytest.approx(10.0)
