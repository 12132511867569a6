"""Validated request bodies -> engine `Request`s.

The only module that sees both the schemas and the engine types: `prepare_chat`
and `prepare_completion` are the one step from a validated body to the engine
Request, its budget, forced call and grammar included. Everything
that can be refused once the body is valid is refused here, before any token:
a chat template that rejects the conversation, out-of-vocabulary prompt ids,
and a prompt plus reply limit that does not fit the served window (saying so
when the window was cut to the memory the KV cache got). A chat request's
priority is decided here too: priority.py (a session-title request is
background work unless the body names a priority).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from ...checkpoints.errors import TemplateError
from ...config import SamplingDefaults, ServerConfig
from ...engine.constraints import LogitAdjust
from ...engine.sampler import derive_seed
from ...engine.types import Priority, Request, SamplingParams
from .. import errors
from .chat_format import ChatFormat
from .images import encode_images, image_parts, place_images
from .messages import demote_later_system, template_messages
from .names import field_name
from .parsing import off_loop
from .priority import request_priority
from .schemas import ChatCompletionRequest, CompletionRequest, GenerationRequest
from .structured import attach_grammar
from .thinking import effort_kwargs, think_markers, thinking_budget_rule
from .tool_force import offered, tool_force
from .tool_prompt import hermes_messages

# Keys of chat_template_kwargs that would collide with render_chat's own
# arguments or change what apply_chat_template returns.
RESERVED_TEMPLATE_KWARGS = (      # the parameters of render_chat and of transformers' apply_chat_template
    "self", "messages", "conversation", "tools", "documents", "add_generation_prompt", "continue_final_message",
    "tokenize", "sanitize_control_tokens", "return_dict", "return_tensors", "return_assistant_tokens_mask",
    "padding", "truncation", "max_length", "tokenizer_kwargs", "chat_template",
)


class ChatTokenizer(Protocol):
    vocab_size: int

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]: ...

    def render_chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                    add_generation_prompt: bool = True, **template_kwargs: Any) -> str: ...


class EngineView(Protocol):
    """What building a request reads of the engine."""

    tokenizer: ChatTokenizer
    context_length: int


def chat_request(body: ChatCompletionRequest, engine: EngineView, config: ServerConfig, chat: ChatFormat,
                 request_id: str) -> Request:
    messages = template_messages(body.messages)
    parts = image_parts(body.messages)
    images = encode_images(parts, engine, config.limits) if parts else []
    tools = offered(body)          # "none" hides tools; a named function is the only one offered
    kwargs = effort_kwargs(template_kwargs(body.chat_template_kwargs), body.reasoning_effort,
                           config.reasoning_effort, chat.template)
    fmt = chat.tools
    if fmt.builtin:                # the server writes the tools, calls and results (tool_prompt.py)
        prompt = render_prompt(engine.tokenizer, hermes_messages(messages, tools), None, kwargs)
    else:
        prompt = render_prompt(engine.tokenizer, messages, tools, kwargs)
    placed: tuple = ()
    if images:
        prompt, placed = place_images(prompt, images, engine.vision.image_token_id, field_name("messages"))
    if body.max_completion_tokens is not None:
        explicit, param = body.max_completion_tokens, "max_completion_tokens"
    else:
        explicit, param = body.max_tokens, "max_tokens"
    limit = fit_reply_limit(len(prompt), engine.context_length, explicit, field_name(param), config.max_tokens,
                            prompt_param=field_name("messages"), memory_limited=memory_limited(engine))
    request = build_request(request_id, prompt, body, config.sampling, limit, engine.tokenizer.vocab_size,
                            request_priority(body.priority, messages))
    think = think_markers(chat, engine.tokenizer, kwargs, prompt)
    budget = thinking_budget_rule(chat, think, body.thinking_budget, config.thinking_budget)
    force = tool_force(engine, body, tools, fmt, think)
    rules = tuple(r for r in (budget, force) if r is not None)
    return dataclasses.replace(request, constraints=(*request.constraints, *rules), think=think, images=placed)


async def prepare_chat(state: Any, body: ChatCompletionRequest, request_id: str) -> Request:
    """The engine request for a validated chat body: rendered and fitted (off the event
    loop), then constrained (its grammar or forced call compiled), every refusal a 400.
    The chat and Responses routes both build theirs here."""
    request = await off_loop(chat_request, body, state.engine, state.config, state.chat_format, request_id)
    return await attach_grammar(request, body, state.engine, state.config.limits, state.chat_format.tools)


async def prepare_completion(state: Any, body: CompletionRequest, request_id: str) -> Request:
    """The engine request for a validated completions body (see prepare_chat)."""
    request = await off_loop(completion_request, body, state.engine, state.config, state.chat_format, request_id)
    return await attach_grammar(request, body, state.engine, state.config.limits)


def completion_request(body: CompletionRequest, engine: EngineView, config: ServerConfig, chat: ChatFormat,
                       request_id: str) -> Request:
    """A raw prompt: no chat template; BOS only where the tokenizer adds one."""
    if body.prompt is None:
        raise errors.invalid("Missing required parameter: 'prompt'", param="prompt", code=errors.MISSING)
    if body.suffix is not None:
        prompt = fim_prompt(engine.tokenizer, chat.fim_ids, body.prompt, body.suffix)
    elif isinstance(body.prompt, str):
        prompt = engine.tokenizer.encode(body.prompt, add_special_tokens=True)
    else:
        prompt = check_token_ids(body.prompt, engine.tokenizer.vocab_size)
    if not prompt:
        raise errors.invalid("Invalid 'prompt': it encodes to no tokens", param="prompt")
    limit = fit_reply_limit(len(prompt), engine.context_length, body.max_tokens, "max_tokens",
                            config.max_tokens, prompt_param="prompt", memory_limited=memory_limited(engine))
    return build_request(request_id, prompt, body, config.sampling, limit, engine.tokenizer.vocab_size)


def fim_prompt(tokenizer: Any, fim_ids: tuple[int, int, int] | None, prompt: str | list[int],
               suffix: str) -> list[int]:
    """Fill in the middle: BOS where the tokenizer adds one, then the FIM prefix token, the
    prompt (text or token ids), the suffix token, the suffix, and the middle token, after
    which the model writes the middle."""
    if fim_ids is None:
        raise errors.invalid("Invalid 'suffix': fill-in-the-middle needs a model whose tokenizer has FIM tokens "
                             "(<|fim_prefix|>, <|fim_suffix|>, <|fim_middle|> or <fim_prefix>, <fim_suffix>, "
                             "<fim_middle>); this model's has none", param="suffix")
    pre, suf, mid = fim_ids
    head = tokenizer.encode(prompt) if isinstance(prompt, str) else check_token_ids(prompt, tokenizer.vocab_size)
    bos = [t for t in tokenizer.encode("", add_special_tokens=True) if t == tokenizer.bos_token_id]
    return [*bos, pre, *head, suf, *tokenizer.encode(suffix), mid]


def template_kwargs(kwargs: Mapping[str, Any] | None) -> dict[str, Any]:
    if not kwargs:
        return {}
    for key in RESERVED_TEMPLATE_KWARGS:
        if key in kwargs:
            raise errors.invalid(f"Invalid 'chat_template_kwargs.{key}': {key} is set by the server, "
                                 "not by chat_template_kwargs", param=f"chat_template_kwargs.{key}")
    return dict(kwargs)


def render_prompt(tokenizer: ChatTokenizer, messages: list[dict[str, Any]],
                  tools: list[dict[str, Any]] | None, kwargs: dict[str, Any]) -> list[int]:
    """Render and tokenize the conversation. When the template refuses it and
    system messages sit after the first position, retry with those rendered as
    user messages (SPEC.md); a second refusal is a 400 with the first reason."""
    try:
        text = tokenizer.render_chat(messages, tools=tools, add_generation_prompt=True, **kwargs)
    except TemplateError as exc:
        demoted = demote_later_system(messages)
        if demoted is None:
            raise _template_refused(exc) from None
        try:
            text = tokenizer.render_chat(demoted, tools=tools, add_generation_prompt=True, **kwargs)
        except TemplateError:
            raise _template_refused(exc) from None
    return tokenizer.encode(text, add_special_tokens=False)


def _template_refused(exc: TemplateError) -> errors.APIError:
    return errors.invalid(f"The chat template could not render this request: {exc}",
                          param=field_name("messages"), code=errors.TEMPLATE_ERROR)


def check_token_ids(ids: Sequence[int], vocab_size: int) -> list[int]:
    for i, t in enumerate(ids):
        if not 0 <= t < vocab_size:
            raise errors.invalid(f"Invalid 'prompt': token {i} is {t}, outside the vocabulary "
                                 f"(ids 0 to {vocab_size - 1})", param="prompt")
    return list(ids)


def fit_reply_limit(prompt_tokens: int, context: int, explicit: int | None, param: str,
                    default: int | None, *, prompt_param: str, memory_limited: bool = False) -> int:
    """The reply limit: an explicit one must fit (SPEC 0.3.5: refuse, never cap);
    otherwise the server default (or the whole remaining window), capped to it.
    `memory_limited`: the window is smaller than the model's because the KV
    cache got less memory than a full window needs; a refusal then says so."""
    room = context - prompt_tokens
    if room < 1:
        raise errors.invalid(
            f"The prompt has {prompt_tokens} tokens, which leaves no room for a reply in the "
            f"{context}-token context; shorten the prompt by at least {_tokens(prompt_tokens - context + 1)}"
            + _memory_note(context, memory_limited),
            param=prompt_param, code=errors.CONTEXT_LENGTH)
    if explicit is not None:
        if explicit > room:
            raise errors.invalid(
                f"The prompt has {prompt_tokens} tokens and '{param}' is {explicit}, which exceeds the "
                f"{context}-token context by {explicit - room}; lower '{param}' to at most {room} "
                "or shorten the prompt" + _memory_note(context, memory_limited),
                param=param, code=errors.CONTEXT_LENGTH)
        return explicit
    return room if default is None else min(default, room)


def memory_limited(engine: Any) -> bool:
    """Whether the engine's window was cut to the memory its KV cache got
    (an engine without a `kv_plan` reports nothing: False)."""
    plan = getattr(engine, "kv_plan", None)
    return bool(getattr(plan, "limited_by_memory", False))


def _memory_note(context: int, limited: bool) -> str:
    if not limited:
        return ""
    return (f". The {context}-token context is limited by the memory available for the KV cache; "
            "a larger --kv-memory, or freeing memory before starting the server, raises it")


def _tokens(n: int) -> str:
    return f"{n} token" if n == 1 else f"{n} tokens"


def sampling_params(body: GenerationRequest, defaults: SamplingDefaults, prompt: Sequence[int]) -> SamplingParams:
    """Null fields keep the server defaults; no seed: one derived from the prompt."""
    def pick(value: Any, default: Any) -> Any:
        return default if value is None else value

    return SamplingParams(
        temperature=pick(body.temperature, defaults.temperature),
        top_p=pick(body.top_p, defaults.top_p),
        top_k=pick(body.top_k, defaults.top_k),
        min_p=pick(body.min_p, defaults.min_p),
        seed=body.seed if body.seed is not None else derive_seed(prompt),
    )


def build_request(request_id: str, prompt: list[int], body: GenerationRequest, defaults: SamplingDefaults,
                  max_tokens: int, vocab_size: int, priority: Priority | None = None) -> Request:
    """`priority`: the one decided for the request (chat: priority.py); None
    takes the body's, foreground when it has none."""
    if priority is None:
        priority = Priority(body.priority) if body.priority else Priority.FOREGROUND
    return Request(
        id=request_id,
        prompt=prompt,
        sampling=sampling_params(body, defaults, prompt),
        max_tokens=max_tokens,
        stop=tuple(body.stop),
        ignore_eos=bool(body.ignore_eos),
        priority=priority,
        draft=body.draft is not False,
        constraints=logit_rules(body, prompt, vocab_size),
    )


def logit_rules(body: GenerationRequest, prompt: Sequence[int], vocab_size: int) -> tuple[LogitAdjust, ...]:
    """The penalties and logit_bias as one keyed rule; none when every one is off."""
    for token in body.logit_bias or {}:
        if token >= vocab_size:
            raise errors.invalid(f"Invalid 'logit_bias': token {token} is outside the vocabulary "
                                 f"(0..{vocab_size - 1})", param="logit_bias")
    rule = LogitAdjust(bias=tuple(sorted((body.logit_bias or {}).items())),
                       frequency=body.frequency_penalty or 0.0, presence=body.presence_penalty or 0.0,
                       repetition=body.repetition_penalty or 1.0)
    if rule == LogitAdjust():
        return ()
    if rule.repetition != 1.0:
        rule = dataclasses.replace(rule, prompt_seen=np.unique(np.array(prompt, dtype=np.int64)))
    return (rule,)
