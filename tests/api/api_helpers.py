"""Assertions shared by the API tests."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

import httpx

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
HELLO = [{"role": "user", "content": "Say hello."}]


def sse_events(response: httpx.Response) -> list[Any]:
    """The `data:` payloads of an SSE body: parsed JSON, and "[DONE]" as is."""
    events = []
    for block in response.text.split("\n\n"):
        if not block.strip():
            continue
        assert block.startswith("data: "), block
        payload = block[len("data: "):]
        events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def assert_envelope(response: httpx.Response, status: int, param: str | None = None,
                    type: str = "invalid_request_error") -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and error["message"]
    assert error["type"] == type
    assert error["param"] == param, error
    return error


# -- Prometheus text exposition 0.0.4, as /metrics writes it -----------------

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
_HELP_LINE = re.compile(rf"# HELP ({_NAME}) (\S.*)")
_TYPE_LINE = re.compile(rf"# TYPE ({_NAME}) (counter|gauge)")
_SAMPLE_LINE = re.compile(rf"({_NAME})(\{{(?:{_LABEL}(?:,{_LABEL})*)?\}})? (\S+)")
_ONE_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


@dataclass
class MetricFamily:
    name: str
    help: str
    type: str
    samples: list[tuple[dict[str, str], float]] = field(default_factory=list)

    @property
    def value(self) -> float:
        """The value of a family with one unlabelled sample."""
        assert len(self.samples) == 1 and not self.samples[0][0], self
        return self.samples[0][1]


def parse_prometheus(text: str) -> dict[str, MetricFamily]:
    """Parse the exposition strictly: every family is `# HELP`, `# TYPE`
    (counter or gauge), then one or more samples named as the family; no
    blank or other lines, no family twice, newline-terminated, values that
    Prometheus reads (floats, NaN, +Inf, -Inf)."""
    assert text.endswith("\n") and not text.endswith("\n\n"), repr(text[-40:])
    lines = text[:-1].split("\n")
    families: dict[str, MetricFamily] = {}
    i = 0
    while i < len(lines):
        help_match = _HELP_LINE.fullmatch(lines[i])
        assert help_match, f"line {i + 1}: expected # HELP, got {lines[i]!r}"
        assert i + 1 < len(lines), "# HELP without # TYPE at the end"
        type_match = _TYPE_LINE.fullmatch(lines[i + 1])
        assert type_match, f"line {i + 2}: expected # TYPE, got {lines[i + 1]!r}"
        name = help_match.group(1)
        assert type_match.group(1) == name, (lines[i], lines[i + 1])
        assert name not in families, f"family {name} twice"
        family = MetricFamily(name, _unescape(help_match.group(2)), type_match.group(2))
        i += 2
        while i < len(lines) and not lines[i].startswith("#"):
            sample = _SAMPLE_LINE.fullmatch(lines[i])
            assert sample, f"line {i + 1}: not a sample: {lines[i]!r}"
            assert sample.group(1) == name, f"line {i + 1}: sample {sample.group(1)} in family {name}"
            labels = {k: _unescape(v) for k, v in _ONE_LABEL.findall(sample.group(2) or "")}
            family.samples.append((labels, _float(sample.group(3))))
            i += 1
        assert family.samples, f"family {name} has no sample"
        families[name] = family
    return families


def _float(text: str) -> float:
    special = {"NaN": math.nan, "+Inf": math.inf, "-Inf": -math.inf}
    if text in special:
        return special[text]
    assert re.fullmatch(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?", text), f"not a sample value: {text!r}"
    return float(text)


def _unescape(text: str) -> str:
    return re.sub(r"\\[\\\"n]", lambda m: _UNESCAPE[m.group(0)], text)
