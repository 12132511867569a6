"""The request body of POST /v1/responses (pydantic v2, strict like chat's).

Only the Responses-shaped fields are declared here. The fields a response
shares with chat (temperature, top_p, top_k, min_p, seed, stop, ignore_eos,
draft, thinking_budget, chat_template_kwargs, priority, parallel_tool_calls)
pass to the equivalent chat request as sent and are judged by the chat
schema, so both routes take and refuse exactly the same values. `input` is
checked by items.py, which names the failing item in `param`.

Refused (400 unsupported_parameter), as SPEC.md lists them: built-in tools,
background, include, conversation, prompt templates, truncation "auto" and
top_logprobs.
"""

from __future__ import annotations

import copy
from typing import Annotated, Any, ClassVar

from pydantic import BeforeValidator, PrivateAttr

from ..request.fields import ModelName, OptionalBool, PositiveInt, _kind, fail, unsupported
from ..request.schemas import StrictModel

MAX_METADATA = 16
MAX_METADATA_KEY = 64
MAX_METADATA_VALUE = 512
SUMMARIES = ("auto", "concise", "detailed")
VERBOSITY = ("low", "medium", "high")
FUNCTION_TOOL_KEYS = ("type", "name", "description", "parameters", "strict")


def _string(v: Any) -> str | None:
    if v is None or isinstance(v, str):
        return v
    fail(f"must be a string, not {_kind(v)}")


def _function_tool(tool: Any, i: int) -> dict[str, Any]:
    if not isinstance(tool, dict):
        fail(f"tool {i} must be an object")
    kind = tool.get("type")
    if kind != "function":
        if isinstance(kind, str):
            unsupported(f"tool {i} is a built-in tool ({kind}), which this server does not run; "
                        "only function tools are supported")
        fail(f"tool {i} needs a string 'type'")
    if not isinstance(tool.get("name"), str) or not tool["name"]:
        fail(f"tool {i} needs a nonempty string 'name'")
    if not isinstance(tool.get("parameters", {}), (dict, type(None))):
        fail(f"tool {i}: 'parameters' must be a JSON schema object")
    if not isinstance(tool.get("description", ""), (str, type(None))):
        fail(f"tool {i}: 'description' must be a string")
    if not isinstance(tool.get("strict", False), (bool, type(None))):
        fail(f"tool {i}: 'strict' must be a boolean")
    return {k: copy.deepcopy(tool[k]) for k in FUNCTION_TOOL_KEYS if k in tool}


def _tools(v: Any) -> list[dict[str, Any]] | None:
    if v is None:
        return None
    if not isinstance(v, list):
        fail(f"must be an array of tools, not {_kind(v)}")
    tools = [_function_tool(tool, i) for i, tool in enumerate(v)]
    names = [t["name"] for t in tools]
    if len(set(names)) != len(names):
        fail("tool names must be unique")
    return tools


def _function_ref(v: Any, where: str) -> str:
    """The name of {"type": "function", "name": ...}; built-in types are refused."""
    kind = v.get("type") if isinstance(v, dict) else None
    if kind == "function":
        if isinstance(v.get("name"), str) and v["name"]:
            return v["name"]
        fail(f"{where} needs a nonempty string 'name'")
    if isinstance(kind, str):
        unsupported(f"{where} names a built-in tool ({kind}), which this server does not run")
    fail(f"{where} must be an object with a string 'type'")


def _tool_choice(v: Any) -> Any:
    if v is None or v in ("none", "auto", "required"):
        return v
    if isinstance(v, dict) and v.get("type") == "allowed_tools":
        if v.get("mode") not in ("auto", "required"):
            fail('allowed_tools needs mode "auto" or "required"')
        tools = v.get("tools")
        if not isinstance(tools, list) or not tools:
            fail("allowed_tools needs a nonempty array 'tools'")
        names = [_function_ref(t, f"allowed tool {i}") for i, t in enumerate(tools)]
        return {"type": "allowed_tools", "mode": v["mode"],
                "tools": [{"type": "function", "name": n} for n in names]}
    if isinstance(v, dict):
        return {"type": "function", "name": _function_ref(v, "tool_choice")}
    fail('must be "none", "auto", "required", {"type": "function", "name": ...} or '
         '{"type": "allowed_tools", ...}')


def _reasoning(v: Any) -> dict[str, Any] | None:
    if v is None:
        return None
    if not isinstance(v, dict):
        fail(f"must be an object, not {_kind(v)}")
    effort = v.get("effort")
    if effort is not None and not isinstance(effort, str):
        fail(f"'effort' must be a string, not {_kind(effort)}")
    summary = v.get("summary", v.get("generate_summary"))
    if summary is not None and summary not in SUMMARIES:
        fail(f"'summary' must be one of {', '.join(SUMMARIES)} or null")
    return {"effort": effort, "summary": summary}


def _text(v: Any) -> dict[str, Any] | None:
    """text.format: text, json_schema (name + schema) or json_object."""
    if v is None:
        return None
    if not isinstance(v, dict):
        fail(f"must be an object, not {_kind(v)}")
    fmt = v.get("format")
    verbosity = v.get("verbosity")
    if verbosity is not None and verbosity not in VERBOSITY:
        fail(f"'verbosity' must be one of {', '.join(VERBOSITY)} or null")
    out: dict[str, Any] = {} if verbosity is None else {"verbosity": verbosity}   # echoed; no effect
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if fmt is None or kind == "text":
        return {"format": {"type": "text"}, **out}
    if kind == "json_object":
        return {"format": {"type": "json_object"}, **out}
    if kind != "json_schema":
        fail("'format' must be {\"type\": \"text\"}, {\"type\": \"json_schema\", ...} or {\"type\": \"json_object\"}")
    if not isinstance(fmt.get("name"), str) or not fmt["name"]:
        fail("a json_schema format needs a nonempty string 'name'")
    if not isinstance(fmt.get("schema"), dict):
        fail("a json_schema format needs a JSON schema object 'schema'")
    if not isinstance(fmt.get("strict", False), (bool, type(None))):
        fail("'format.strict' must be a boolean")
    keep = ("type", "name", "schema", "description", "strict")
    return {"format": {k: copy.deepcopy(fmt[k]) for k in keep if fmt.get(k) is not None}, **out}


def _metadata(v: Any) -> dict[str, str] | None:
    if v is None:
        return None
    if not isinstance(v, dict):
        fail(f"must be an object of string pairs, not {_kind(v)}")
    if len(v) > MAX_METADATA:
        fail(f"takes at most {MAX_METADATA} pairs, not {len(v)}")
    for key, value in v.items():
        if len(key) > MAX_METADATA_KEY:
            fail(f"keys are at most {MAX_METADATA_KEY} characters; {key[:20]!r}... has {len(key)}")
        if not isinstance(value, str):
            fail(f"value of {key!r} must be a string, not {_kind(value)}")
        if len(value) > MAX_METADATA_VALUE:
            fail(f"values are at most {MAX_METADATA_VALUE} characters; the value of {key!r} has {len(value)}")
    return dict(v)


def _refuse(feature: str, is_off=lambda v: v is None):
    def check(v: Any) -> Any:
        if is_off(v):
            return v
        unsupported(f"{feature} is not supported by this server")
    return check


def _truncation(v: Any) -> str | None:
    if v is None or v == "disabled":
        return v
    if v == "auto":
        unsupported('truncation "auto" is not supported by this server; the prompt is never truncated')
    fail('must be "auto" or "disabled"')


Tools = Annotated[list[dict[str, Any]] | None, BeforeValidator(_tools)]
ToolChoice = Annotated[Any, BeforeValidator(_tool_choice)]
Reasoning = Annotated[dict[str, Any] | None, BeforeValidator(_reasoning)]
TextConfig = Annotated[dict[str, Any] | None, BeforeValidator(_text)]
Metadata = Annotated[dict[str, str] | None, BeforeValidator(_metadata)]
OptionalString = Annotated[str | None, BeforeValidator(_string)]
Truncation = Annotated[str | None, BeforeValidator(_truncation)]


def Refused(feature: str, is_off=lambda v: v is None) -> Any:  # noqa: N802 (a type factory)
    return Annotated[Any, BeforeValidator(_refuse(feature, is_off))]


Background = Refused("background", lambda v: v in (None, False))
Include = Refused("include", lambda v: v in (None, []))
Conversation = Refused("conversation")
PromptTemplate = Refused("prompt (a stored prompt template)")
TopLogprobs = Refused("top_logprobs", lambda v: v is None or (type(v) is int and v == 0))


class ResponsesRequest(StrictModel):
    model: ModelName = None
    input: Any = None                          # items.normalize_input
    instructions: OptionalString = None
    previous_response_id: OptionalString = None
    tools: Tools = None
    tool_choice: ToolChoice = None
    max_output_tokens: PositiveInt = None
    reasoning: Reasoning = None
    text: TextConfig = None
    stream: OptionalBool = None
    store: OptionalBool = None
    metadata: Metadata = None
    user: OptionalString = None
    # what this server does not run:
    background: Background = None
    include: Include = None
    conversation: Conversation = None
    prompt: PromptTemplate = None
    truncation: Truncation = None
    top_logprobs: TopLogprobs = None
    # chat fields a Responses body may carry: passed to the chat request as they are
    PASS_THROUGH: ClassVar[tuple[str, ...]] = (
        "temperature", "top_p", "top_k", "min_p", "seed", "stop", "ignore_eos", "draft", "thinking_budget",
        "chat_template_kwargs", "priority", "parallel_tool_calls")
    # body fields neither takes: listed in the response's tensorfold block (parsing.validate)
    _ignored: tuple[str, ...] = PrivateAttr(default=())

    @property
    def ignored_fields(self) -> tuple[str, ...]:
        return self._ignored
