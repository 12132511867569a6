"""Strict checks of Responses bodies and stream events against the official
openai package's own types, used by every Responses test, and tests of the
checks themselves.

`check_response` and `check_event` validate with `model_validate(strict=True)`
(no coercion), refuse any field the type does not declare (anywhere in the
tree; only a finished Response's top-level `tensorfold` block is allowed), and
check that the validated model dumps back to the same JSON (nothing dropped
or changed). `check_stream` also checks that sequence numbers run 0, 1, 2...
and that each item keeps its id from output_item.added to the end.
"""

from __future__ import annotations

import json
import typing
from typing import Any

import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import BaseModel, ValidationError

EVENT_TYPES: dict[str, type[BaseModel]] = {
    typing.get_args(cls.model_fields["type"].annotation)[0]: cls
    for cls in typing.get_args(typing.get_args(ResponseStreamEvent)[0])
}
FINAL_EVENTS = ("response.completed", "response.incomplete", "response.failed")


def _no_extras(value: Any, where: str, allowed: tuple[str, ...] = ()) -> None:
    if isinstance(value, BaseModel):
        extra = set(value.model_extra or {}) - set(allowed)
        assert not extra, f"{where}: {sorted(extra)} are not fields of {type(value).__name__}"
        for name in type(value).model_fields:
            _no_extras(getattr(value, name), f"{where}.{name}")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _no_extras(v, f"{where}[{i}]")
    elif isinstance(value, dict):
        for k, v in value.items():
            _no_extras(v, f"{where}.{k}")


def _strict(cls: type[BaseModel], obj: dict[str, Any], allowed: tuple[str, ...] = ()) -> BaseModel:
    model = cls.model_validate(obj, strict=True)
    _no_extras(model, cls.__name__, allowed)
    dumped = model.model_dump(mode="json", by_alias=True, exclude_unset=True)
    assert dumped == obj, f"{cls.__name__} does not dump back to what was sent"
    return model


def check_response(obj: dict[str, Any]) -> Response:
    """A Response body; a finished one may carry the `tensorfold` block."""
    allowed = ("tensorfold",) if obj.get("status") != "in_progress" else ()
    model = _strict(Response, obj, allowed)
    assert model.object == "response" and model.id.startswith("resp_")
    if obj.get("status") in ("completed", "incomplete"):
        assert set(obj["tensorfold"]) >= {"token_sha", "drafted", "accepted"}
    return model


def check_event(obj: dict[str, Any]) -> BaseModel:
    cls = EVENT_TYPES[obj["type"]]
    if "response" in obj:
        check_response(obj["response"])
        event = _strict(cls, {**obj, "response": {k: v for k, v in obj["response"].items()
                                                 if k != "tensorfold"}})
    else:
        event = _strict(cls, obj)
    return event


def check_stream(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Every event strict, sequence numbers 0..n-1, the documented order, item
    ids stable; returns the final Response object."""
    for event in events:
        check_event(event)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] in FINAL_EVENTS and not set(kinds[:-1]) & set(FINAL_EVENTS)
    final = events[-1]["response"]
    ids = [item["id"] for item in final["output"]]
    added = [e for e in events if e["type"] == "response.output_item.added"]
    done = [e for e in events if e["type"] == "response.output_item.done"]
    assert [e["item"]["id"] for e in added] == [e["item"]["id"] for e in done] == ids
    assert [e["output_index"] for e in added] == list(range(len(ids)))
    assert [e["item"] for e in done] == final["output"]
    for event in events[2:-1]:
        if "item_id" in event:
            assert event["item_id"] == ids[event["output_index"]], event
    return final


def needs_real_engine(served: Any) -> None:
    """Skip where the contract server runs the FakeEngine (TENSORFOLD_TEST_API_ENGINE=
    fake): it has no prefix cache and no grammar compiler."""
    if type(served.engine).__name__ == "FakeEngine":
        pytest.skip("needs the real engine (prefix cache, grammar compiler)")


def parse_sse(text: str) -> list[dict[str, Any]]:
    """Typed SSE events: `event: <type>` then `data: <json>` of that type; no [DONE]."""
    events = []
    assert text.endswith("\n\n")
    for block in text[:-2].split("\n\n"):
        name, data = block.split("\n")
        assert name.startswith("event: ") and data.startswith("data: "), block
        event = json.loads(data[len("data: "):])
        assert event["type"] == name[len("event: "):]
        events.append(event)
    return events


# -- the checks themselves -------------------------------------------------------

def _minimal() -> dict[str, Any]:
    return {"id": "resp_1", "object": "response", "created_at": 1, "status": "completed", "model": "m",
            "output": [], "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
            "tensorfold": {"token_sha": "0" * 64, "drafted": 0, "accepted": 0}}


def test_check_response_accepts_a_minimal_finished_response():
    check_response(_minimal())


def test_check_response_refuses_unknown_fields_at_any_depth():
    with pytest.raises(AssertionError, match="store"):
        check_response({**_minimal(), "store": True})
    item = {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": "x", "annotations": [], "extra": 1}]}
    with pytest.raises(AssertionError, match="extra"):
        check_response({**_minimal(), "output": [item]})


def test_check_response_refuses_coercion_and_wrong_literals():
    with pytest.raises(ValidationError):
        check_response({**_minimal(), "parallel_tool_calls": 1})
    with pytest.raises(ValidationError):
        check_response({**_minimal(), "status": "done"})


def test_check_stream_wants_contiguous_sequence_numbers():
    created = {"type": "response.created", "sequence_number": 0,
               "response": {**_minimal(), "status": "in_progress"}}
    created["response"].pop("tensorfold")
    progress = {**created, "type": "response.in_progress", "sequence_number": 1}
    done = {"type": "response.completed", "sequence_number": 3, "response": _minimal()}
    with pytest.raises(AssertionError):
        check_stream([created, progress, done])
    check_stream([created, progress, {**done, "sequence_number": 2}])
