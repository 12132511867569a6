"""The engine's counters as /health's JSON and as Prometheus text (/metrics).

Both views come from one `engine.health()` snapshot. /metrics writes the
text exposition format 0.0.4: for every numeric key `k` of the snapshot a
`tensorfold_k` family with `# HELP` and `# TYPE` lines, typed counter when
the key ends in `_total` and gauge otherwise (booleans as 0 or 1), so a key
the engine adds later is exported without a change here. Then the served
window (`tensorfold_context_length`), the uptime (`tensorfold_uptime_seconds`) and `tensorfold_info{model, version} 1`.
Keys that are not numbers (text, lists, nested objects) are left out.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PREFIX = "tensorfold_"

HELP = {
    "busy": "1 while the engine is generating any request, else 0",
    "requests_running": "Requests being generated now",
    "requests_waiting": "Requests queued and not started yet",
    "requests_total": "Requests submitted since the server started",
    "prompt_tokens_total": "Prompt tokens of finished requests",
    "cached_tokens_total": "Prompt tokens of finished requests found in the prefix cache",
    "completion_tokens_total": "Reply tokens generated, running replies included",
    "prefill_seconds_total": "Seconds finished requests spent prefilling their prompts",
    "decode_seconds_total": "Seconds finished requests spent decoding their replies",
    "rounds_total": "Engine rounds (forward passes) run",
    "preemptions_total": "Background requests that yielded to foreground ones",
    "drafted_total": "Draft tokens proposed for verification",
    "accepted_total": "Draft tokens accepted",
    "streams_decoding": "Streams decoding now",
    "streams_prefilling": "Streams prefilling now",
    "streams_maximum": "The most streams that share rounds",
    "kv_blocks_used": "KV cache blocks in use",
    "context_length": "The served context window in tokens",
    "uptime_seconds": "Seconds since the server started",
    "parallel": "Lanes: the most requests generated at once",
    "info": "The served model and the server version (the value is always 1)",
}
# Families this module writes itself; an engine key of the same name is left to them.
OWN = ("context_length", "uptime_seconds", "info")

_INVALID = re.compile(r"[^a-zA-Z0-9_:]")


def numeric(value: Any) -> bool:
    return isinstance(value, (bool, int, float))


def metric_type(key: str) -> str:
    return "counter" if key.endswith("_total") else "gauge"


def streams_view(counters: Mapping[str, Any]) -> dict[str, Any]:
    """{"decoding": .., "prefilling": .., "maximum": ..} from the streams_* keys
    (any of them the engine reports; empty when it reports none)."""
    return {k[len("streams_"):]: v for k, v in counters.items() if k.startswith("streams_") and len(k) > 8}


def health_body(counters: Mapping[str, Any], *, model: str, aliases: list[str], version: str,
                context_length: int, uptime_seconds: float = 0.0) -> dict[str, Any]:
    """/health: everything the engine reports, the server's own fields (which
    win a clash), and the `streams` view when the engine has streams."""
    own = {"status": "degraded" if counters.get("down") else "ok", "model": model, "aliases": aliases, "version": version,
           "context_length": context_length, "uptime_seconds": uptime_seconds}
    body = {**own, **{k: v for k, v in counters.items() if k not in own}}
    streams = streams_view(counters)
    if streams and "streams" not in body:
        body["streams"] = streams
    return body


def exposition(counters: Mapping[str, Any], *, model: str, version: str, context_length: int,
               uptime_seconds: float = 0.0) -> str:
    lines: list[str] = []
    seen: set[str] = set()

    def family(key: str, kind: str, samples: list[tuple[str, Any]]) -> None:
        name = PREFIX + _INVALID.sub("_", key)
        if name in seen:
            return
        seen.add(name)
        lines.append(f"# HELP {name} {_help(HELP.get(key, f'Engine statistic {key}'))}")
        lines.append(f"# TYPE {name} {kind}")
        lines.extend(f"{name}{labels} {_value(value)}" for labels, value in samples)

    for key, value in counters.items():
        if isinstance(key, str) and key and key not in OWN and numeric(value):
            family(key, metric_type(key), [("", value)])
    family("context_length", "gauge", [("", context_length)])
    family("uptime_seconds", "gauge", [("", uptime_seconds)])
    family("info", "gauge", [(f'{{model="{_label(model)}",version="{_label(version)}"}}', 1)])
    return "\n".join(lines) + "\n"


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _label(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
