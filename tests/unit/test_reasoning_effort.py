"""The reasoning-effort rule: what the chat template hears."""

import pytest

from tensorfold.api.errors import APIError
from tensorfold.api.request.thinking import effort_kwargs

PLAIN = "{% if enable_thinking %}<think>{% endif %}{{ reasoning_effort }}"
NAMES_HIGH = PLAIN + "{% if reasoning_effort == 'high' %}High{% endif %}"


@pytest.mark.parametrize("kwargs, effort, default, template, expected", [
    ({}, None, None, PLAIN, {}),                                                   # the template's default
    ({}, "none", None, PLAIN, {"enable_thinking": False}),                         # none: thinking off
    ({}, "medium", None, PLAIN, {"enable_thinking": True, "reasoning_effort": "medium"}),
    ({}, "high", None, PLAIN, {"enable_thinking": True, "reasoning_effort": "xhigh"}),
    ({}, "minimal", None, PLAIN, {"enable_thinking": True, "reasoning_effort": "low"}),
    ({}, "high", None, NAMES_HIGH, {"enable_thinking": True, "reasoning_effort": "high"}),
    ({"reasoning_effort": "low"}, None, None, PLAIN, {"enable_thinking": True, "reasoning_effort": "low"}),
    ({"reasoning_effort": "low"}, "medium", None, PLAIN,                          # the top-level field wins
     {"enable_thinking": True, "reasoning_effort": "medium"}),
    ({}, None, "low", PLAIN, {"enable_thinking": True, "reasoning_effort": "low"}),  # --reasoning-effort
    ({"enable_thinking": False}, "high", None, PLAIN, {"enable_thinking": False}),  # explicit switch wins,
    ({"enable_thinking": True}, "none", None, PLAIN, {"enable_thinking": True}),    # no effort while off
])
def test_effort_rule(kwargs, effort, default, template, expected):
    before = dict(kwargs)
    assert effort_kwargs(kwargs, effort, default, template) == expected
    assert kwargs == before                     # the caller's dict is not changed


def test_unknown_effort_in_template_kwargs_is_refused():
    with pytest.raises(APIError):
        effort_kwargs({"reasoning_effort": "max"}, None, None, PLAIN)


def test_reasoning_tokens_count_through_the_closing_marker():
    from tensorfold.engine.types import Think

    think = Think(opener=(1,), close=(8, 9), inside=True)
    assert think.reasoning_tokens([5, 5, 8, 9, 7, 7]) == 4          # through the close marker
    assert think.reasoning_tokens([5, 5, 5]) == 3                   # never closed: all thinking
    opened = Think(opener=(1,), close=(8, 9))
    assert opened.reasoning_tokens([1, 5, 8, 9, 7]) == 4            # the reply opened the block
    assert opened.reasoning_tokens([7, 1, 5, 8, 9]) == 0            # a block later in the reply is not thinking
    assert opened.reasoning_tokens([7, 7]) == 0
