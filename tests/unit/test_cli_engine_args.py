"""`tensorfold serve`'s engine options as the EngineConfig they make."""

from __future__ import annotations

import pytest

from tensorfold.cli import _parser, engine_config


def _config(*args: str):
    return engine_config(_parser().parse_args(["serve", *args]))


def test_cache_idle_defaults_to_five_minutes_and_takes_seconds():
    assert _config().cache_idle == 300.0
    assert _config("--cache-idle", "0").cache_idle == 0.0
    assert _config("--cache-idle", "12.5").cache_idle == 12.5


@pytest.mark.parametrize("value", ["-1", "inf", "nan"])
def test_cache_idle_refuses_what_is_not_a_time(value):
    with pytest.raises(SystemExit, match="--cache-idle"):
        _config("--cache-idle", value)
