"""Request bodies of /v1/chat/completions and /v1/completions (pydantic v2).

Strict models: a JSON value of the wrong type is refused, never coerced
("0.5" is not a number, 1 is not a boolean). Unknown fields are ignored
(OpenAI clients send extras), except the ones SPEC.md lists as unsupported,
which are declared here and refused. Fields SPEC.md lists that a later change
implements are given a real type here and carried in build.py.
"""

from __future__ import annotations

import copy
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, PrivateAttr

from .fields import (LogitBias, MinP, ModelName, Modalities, MustBeNull, N, OptionalBool, Penalty,
                     PositiveInt, PriorityName, RepetitionPenalty, Seed, Stop, TemplateKwargs, Temperature,
                     TopK, TopP, _kind, fail, number, off_only, only_one, unsupported)

ROLES = ("system", "developer", "user", "assistant", "tool")
UNSUPPORTED_PARTS = {
    "input_image": "image input (send it as an image_url part)",
    "input_audio": "audio input", "audio": "audio input",
    "video_url": "video input", "video": "video input",
    "file": "file input", "input_file": "file input",
}


class StrictModel(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


ServiceTier = Literal["auto", "default", "flex", "scale", "priority"]


# -- messages --------------------------------------------------------------

def _role(v: Any) -> str:
    if isinstance(v, str) and v in ROLES:
        return v
    fail(f"must be one of {', '.join(ROLES)}, not {v!r}" if isinstance(v, str)
         else f"must be a string, not {_kind(v)}")


def _content(v: Any) -> str | list[dict[str, Any]] | None:
    """A string, or a list of content parts: text parts concatenate in order; with image
    parts, the parts in order ({"type": "text", "text"} and {"type": "image_url", "url"})."""
    if v is None or isinstance(v, str):
        return v
    if not isinstance(v, list):
        fail(f"must be a string or an array of content parts, not {_kind(v)}")
    if not v:
        fail("must not be an empty array")
    parts: list[dict[str, Any]] = []
    for i, part in enumerate(v):
        kind = part.get("type") if isinstance(part, dict) else None
        if not isinstance(kind, str):
            fail(f"content part {i} must be an object with a string 'type'")
        if kind in UNSUPPORTED_PARTS:
            unsupported(f"content part {i} ({kind}): {UNSUPPORTED_PARTS[kind]} is not supported by this server")
        if kind == "image_url":
            parts.append({"type": "image_url", "url": _image_url(part.get("image_url"), i)})
            continue
        if kind != "text":
            fail(f"content part {i} has unknown type {kind!r}; use 'text' or 'image_url'")
        text = part.get("text")
        if not isinstance(text, str):
            fail(f"content part {i} (text) needs a string 'text'")
        parts.append({"type": "text", "text": text})
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


def _image_url(v: Any, i: int) -> str:
    """An image_url part's URL: {"url": "...", "detail": "auto" | "low" | "high"} (or the URL alone)."""
    if isinstance(v, dict):
        detail = v.get("detail")
        if detail is not None and detail not in ("auto", "low", "high"):
            fail(f"content part {i} (image_url): 'detail' must be auto, low or high, not {detail!r}")
        v = v.get("url")
    if not isinstance(v, str) or not v:
        fail(f"content part {i} (image_url) needs a string 'image_url.url'")
    return v


def _arguments(v: Any) -> str | dict[str, Any]:
    if isinstance(v, (str, dict)):
        return v
    fail(f"must be a JSON string or an object, not {_kind(v)}")


class ToolCallFunction(StrictModel):
    name: str
    arguments: Annotated[Any, BeforeValidator(_arguments)] = "{}"


def _function_type(v: Any) -> str:
    if v == "function":
        return v
    fail(f"only function tool calls are supported, not {v!r}")


class ToolCall(StrictModel):
    id: str | None = None
    type: Annotated[str, BeforeValidator(_function_type)] = "function"
    function: ToolCallFunction


class Message(StrictModel):
    role: Annotated[str, BeforeValidator(_role)]
    content: Annotated[str | list[dict[str, Any]] | None, BeforeValidator(_content)] = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None


def _messages(v: Any) -> Any:
    if isinstance(v, list) and not v:
        fail("must contain at least one message")
    return v


# -- tools -----------------------------------------------------------------

def _tools(v: Any) -> list[dict[str, Any]] | None:
    """Function tools, checked for shape and passed to the template as sent."""
    if v is None:
        return None
    if not isinstance(v, list):
        fail(f"must be an array of tools, not {_kind(v)}")
    for i, tool in enumerate(v):
        if not isinstance(tool, dict):
            fail(f"tool {i} must be an object")
        if tool.get("type") != "function":
            unsupported(f"tool {i} has type {tool.get('type')!r}: only function tools are supported")
        fn = tool.get("function")
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            fail(f"tool {i} needs a 'function' object with a nonempty string 'name'")
        if not isinstance(fn.get("parameters", {}), (dict, type(None))):
            fail(f"tool {i}: 'function.parameters' must be a JSON schema object")
        if not isinstance(fn.get("description", ""), (str, type(None))):
            fail(f"tool {i}: 'function.description' must be a string")
    return copy.deepcopy(v)


def _tool_choice(v: Any) -> Any:
    if v is None or v in ("none", "auto"):
        return v
    if v == "required":
        return v
    if isinstance(v, dict) and v.get("type") == "function" and isinstance(v.get("function"), dict) \
            and isinstance(v["function"].get("name"), str):
        return copy.deepcopy(v)
    fail('must be "none", "auto", "required" or {"type": "function", "function": {"name": ...}}')


def _chat_logprobs(v: Any) -> bool | None:
    return off_only(v, "logprobs are not supported by this server")


def _draft(v: Any) -> bool | None:
    if v is None or isinstance(v, bool):
        return v
    fail(f"must be a boolean, not {_kind(v)}")


# -- shared request fields --------------------------------------------------

def _thinking_budget(v: Any) -> int | None:
    if v is None:
        return None
    n = int(number(v, integral=True))
    if n < 0:
        fail(f"must be 0 (the server's default) or a positive token count, not {n}")
    return n


ThinkingBudgetField = Annotated[Any, BeforeValidator(_thinking_budget)]
def _reasoning_effort(v: Any) -> str | None:
    if v is None or v in ("none", "minimal", "low", "medium", "high", "xhigh"):
        return v
    fail(f"must be one of none, minimal, low, medium, high, xhigh, not {v!r}")


ReasoningEffort = Annotated[Any, BeforeValidator(_reasoning_effort)]
def _response_format(v: Any) -> dict[str, Any] | None:
    if v is None:
        return None
    if not isinstance(v, dict) or v.get("type") not in ("text", "json_object", "json_schema"):
        fail('must be {"type": "text"}, {"type": "json_object"} or '
             '{"type": "json_schema", "json_schema": {"schema": {...}}}')
    if v["type"] == "text":
        return None
    if v["type"] == "json_schema":
        spec = v.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("schema"), (dict, bool)):
            fail('json_schema must be an object holding a "schema" object')
    return copy.deepcopy(v)


def _json_schema_value(v: Any) -> Any:
    if v is None or isinstance(v, (dict, bool, str)):
        return copy.deepcopy(v)
    fail(f"must be a JSON schema (an object or a JSON string), not {_kind(v)}")


def _text_value(v: Any) -> str | None:
    if v is None or (isinstance(v, str) and v):
        return v
    fail("must be a non-empty string" if isinstance(v, str) else f"must be a string, not {_kind(v)}")


def _choice_value(v: Any) -> list[str] | None:
    if v is None:
        return None
    if not isinstance(v, list) or not v or not all(isinstance(c, str) for c in v):
        fail("must be a non-empty array of strings")
    return list(v)


def _structured_outputs(v: Any) -> dict[str, Any] | None:
    if v is None:
        return None
    if not isinstance(v, dict):
        fail(f"must be an object, not {_kind(v)}")
    keys = [k for k in ("json", "json_object", "regex", "choice", "grammar") if v.get(k) not in (None, False)]
    if len(keys) != 1:
        fail("must set exactly one of json, json_object, regex, choice or grammar")
    key = keys[0]
    value = {"json": _json_schema_value, "regex": _text_value, "grammar": _text_value,
             "choice": _choice_value, "json_object": lambda x: x}[key](v[key])
    if key == "json_object" and value is not True:
        fail("json_object must be true")
    return {key: value}


ResponseFormat = Annotated[Any, BeforeValidator(_response_format)]
GuidedJson = Annotated[Any, BeforeValidator(_json_schema_value)]
GuidedRegex = Annotated[Any, BeforeValidator(_text_value)]
GuidedChoice = Annotated[Any, BeforeValidator(_choice_value)]
GuidedGrammar = Annotated[Any, BeforeValidator(_text_value)]
StructuredOutputs = Annotated[Any, BeforeValidator(_structured_outputs)]
Draft = Annotated[bool | None, BeforeValidator(_draft)]
Tools = Annotated[list[dict[str, Any]] | None, BeforeValidator(_tools)]
ToolChoice = Annotated[Any, BeforeValidator(_tool_choice)]
ChatLogprobs = Annotated[bool | None, BeforeValidator(_chat_logprobs)]
TopLogprobs = MustBeNull("top_logprobs")
AudioOutput = MustBeNull("audio output")
Messages = Annotated[list[Message], BeforeValidator(_messages)]


class StreamOptions(StrictModel):
    include_usage: OptionalBool = None          # a `choices: []` usage chunk after the finish chunk
    continuous_usage_stats: OptionalBool = None  # accepted, no effect


class GenerationRequest(StrictModel):
    """Fields /v1/chat/completions and /v1/completions share."""

    model: ModelName = None
    max_tokens: PositiveInt = None
    temperature: Temperature = None
    top_p: TopP = None
    top_k: TopK = None
    min_p: MinP = None
    frequency_penalty: Penalty = None
    presence_penalty: Penalty = None
    repetition_penalty: RepetitionPenalty = None
    logit_bias: LogitBias = None
    seed: Seed = None
    stop: Stop = ()
    ignore_eos: OptionalBool = None
    stream: OptionalBool = None
    stream_options: StreamOptions | None = None
    priority: PriorityName = None
    n: N = None
    chat_template_kwargs: TemplateKwargs = None
    # SPEC.md features a later change implements:
    draft: Draft = None
    thinking_budget: ThinkingBudgetField = None
    reasoning_effort: ReasoningEffort = None
    response_format: ResponseFormat = None
    guided_json: GuidedJson = None
    guided_regex: GuidedRegex = None
    guided_choice: GuidedChoice = None
    guided_grammar: GuidedGrammar = None
    structured_outputs: StructuredOutputs = None
    # accepted and documented as no-ops: they name the caller or tune OpenAI's own service
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None          # prefixes are cached whatever the key
    metadata: dict[str, str] | None = None
    service_tier: ServiceTier | None = None
    store: bool | None = None                    # OpenAI's chat-completion store; /v1/responses has its own
    # body fields no schema field takes: listed in the reply's tensorfold block (parsing.validate)
    _ignored: tuple[str, ...] = PrivateAttr(default=())

    @property
    def ignored_fields(self) -> tuple[str, ...]:
        return self._ignored

    @property
    def include_usage(self) -> bool:
        """Whether a stream ends with OpenAI's `choices: []` usage chunk (the
        finish chunk carries usage either way)."""
        return bool(self.stream_options and self.stream_options.include_usage)


class ChatCompletionRequest(GenerationRequest):
    messages: Messages
    max_completion_tokens: PositiveInt = None
    tools: Tools = None
    tool_choice: ToolChoice = None
    parallel_tool_calls: OptionalBool = None
    logprobs: ChatLogprobs = None
    top_logprobs: TopLogprobs = None
    audio: AudioOutput = None
    modalities: Modalities = None


# -- completions --------------------------------------------------------------

def _prompt(v: Any) -> str | list[int] | None:
    """A string, [string], token ids, or [token ids]: exactly one prompt."""
    if v is None or isinstance(v, str):
        return v
    if not isinstance(v, list):
        fail(f"must be a string or an array of token ids, not {_kind(v)}")
    if not v:
        fail("must not be empty")
    if all(isinstance(x, str) for x in v) or all(isinstance(x, list) for x in v):
        if len(v) > 1:
            unsupported(f"several prompts in one request ({len(v)}) are not supported; send one")
        return _prompt(v[0]) if isinstance(v[0], str) else _token_ids(v[0])
    return _token_ids(v)


def _token_ids(v: list[Any]) -> list[int]:
    if not v:
        fail("must not be empty")
    for i, t in enumerate(v):
        if isinstance(t, bool) or not isinstance(t, int):
            fail(f"token {i} must be an integer token id, not {_kind(t)}")
        if t < 0:
            fail(f"token {i} is {t}: token ids are not negative")
    return list(v)


def _echo(v: Any) -> bool | None:
    return off_only(v, "echo is not supported by this server")


def _suffix(v: Any) -> str | None:
    if v is None or v == "":
        return None
    if isinstance(v, str):
        return v
    fail(f"must be a string, not {_kind(v)}")


def _best_of(v: Any) -> int | None:
    return only_one(v, "best_of > 1 is not supported by this server")


Prompt = Annotated[str | list[int] | None, BeforeValidator(_prompt)]
Echo = Annotated[bool | None, BeforeValidator(_echo)]
Suffix = Annotated[str | None, BeforeValidator(_suffix)]
BestOf = Annotated[int | None, BeforeValidator(_best_of)]
CompletionLogprobs = MustBeNull("logprobs")


class CompletionRequest(GenerationRequest):
    prompt: Prompt = None
    echo: Echo = None
    suffix: Suffix = None
    best_of: BestOf = None
    logprobs: CompletionLogprobs = None


def wants_chat(body: dict[str, Any]) -> bool:
    """SPEC: a completions body with a nonempty `messages` list uses chat handling."""
    return isinstance(body.get("messages"), list) and len(body["messages"]) > 0


