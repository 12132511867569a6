"""The tool-call format of a chat request, and the built-in Hermes tool prompt.

A checkpoint's chat template names its tool-call format (parsers'
`parser_for_template`); `--tool-parser` overrides it. A template with no tool
format that speaks ChatML (`<|im_start|>`, as SmolLM2's, the default model's)
gets a built-in Hermes-style tool prompt instead, the one Qwen2.5 and Hermes
templates render:

- the offered tools as JSON function signatures inside <tools></tools>, with
  the usual instruction to call a function as
  <tool_call>{"name": ..., "arguments": {...}}</tool_call>, appended to the
  leading system message (or as one when there is none);
- an assistant message's tool calls as <tool_call> JSON blocks after its text;
- tool results (role "tool") as <tool_response> blocks in a user turn, one
  turn for a run of consecutive results;

and its reply is read by the Hermes parser. The template then renders these
plain messages (it gets no `tools`). `--tool-parser hermes` keeps the
built-in prompt on such a template; another `--tool-parser` value leaves the
template as it is and reads the reply in that format.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ...parsers import parser_for_template
from .parsing import loads_bounded

CHATML = "<|im_start|>"
BUILTIN = "hermes"
CALL_OPEN, CALL_CLOSE = "<tool_call>\n", "\n</tool_call>"     # around a Hermes call's JSON

TOOLS_INTRO = ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
               "You are provided with function signatures within <tools></tools> XML tags:\n<tools>")
TOOLS_OUTRO = ("</tools>\n\nFor each function call, return a json object with function name and arguments "
               "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
               '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')


@dataclass(frozen=True, slots=True)
class ToolFormat:
    """`parser`: the TOOL_PARSERS name the reply is read with (None: no tool calls);
    `builtin`: the server renders the tools, calls and results (this module)."""

    parser: str | None
    builtin: bool = False


def tool_format(chat_template: str | None, tool_parser: str | None) -> ToolFormat:
    """The format for a checkpoint's template and the server's --tool-parser (read once
    per server, into its chat format: chat_format.py)."""
    template = chat_template or ""
    native = parser_for_template(template)
    chatml = native is None and CHATML in template
    if tool_parser:
        return ToolFormat(tool_parser, builtin=chatml and tool_parser == BUILTIN)
    if native:
        return ToolFormat(native)
    return ToolFormat(BUILTIN, builtin=True) if chatml else ToolFormat(None)


def tools_block(tools: list[dict[str, Any]]) -> str:
    """The tools section of the system message."""
    return "\n".join([TOOLS_INTRO, *(json.dumps(t, ensure_ascii=False) for t in tools), TOOLS_OUTRO])


def call_block(call: dict[str, Any]) -> str:
    """One assistant tool call as the model would write it."""
    fn = call.get("function", {})
    args = fn.get("arguments", {})
    if isinstance(args, str):                 # not a JSON object: kept as the client sent it
        try:
            args = loads_bounded(args)
        except ValueError:
            pass
    body = json.dumps({"name": fn.get("name", ""), "arguments": args}, ensure_ascii=False)
    return f"{CALL_OPEN}{body}{CALL_CLOSE}"


def hermes_messages(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """`messages` (template_messages' dicts, leading system merged) with the tools
    in the system message, tool calls and tool results as text. New dicts."""
    out: list[dict[str, Any]] = []
    if tools:
        block = tools_block(tools)
        if messages and messages[0]["role"] == "system":
            text = messages[0].get("content") or ""
            out.append(dict(messages[0], content=f"{text}\n\n{block}" if text else block))
            messages = messages[1:]
        else:
            out.append({"role": "system", "content": block})
    for m in messages:
        if m["role"] == "assistant" and m.get("tool_calls"):
            parts = [m.get("content") or "", *(call_block(c) for c in m["tool_calls"])]
            d = {k: v for k, v in m.items() if k != "tool_calls"}
            out.append(dict(d, content="\n".join(p for p in parts if p)))
        elif m["role"] == "tool":
            result = f"<tool_response>\n{m.get('content') or ''}\n</tool_response>"
            if out and out[-1].get("tool_results"):
                out[-1] = dict(out[-1], content=out[-1]["content"] + "\n" + result)
            else:
                out.append({"role": "user", "content": result, "tool_results": True})
        else:
            out.append(dict(m))
    return [{k: v for k, v in m.items() if k != "tool_results"} for m in out]
