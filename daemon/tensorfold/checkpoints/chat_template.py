"""Chat templates rendered as transformers renders them, without importing transformers.

The same sandboxed Jinja environment (trim_blocks, lstrip_blocks, loop controls), the same
additions (a `tojson` that keeps non-ASCII and takes indent, separators and sort_keys;
`raise_exception`; `strftime_now`; `dict`; a `namespace` that refuses underscore names; a
`{% generation %}` block that renders its body), and the same inputs: messages without
their None values, a message's reasoning under every name templates read it by, the
special tokens by name (bos_token, eos_token...), then the caller's keywords.
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache
from typing import Any

REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


def _tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


@lru_cache(maxsize=8)
def compile_template(source: str) -> Any:
    import jinja2
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(Extension):
        """`{% generation %}...{% endgeneration %}`: marks assistant text for training masks;
        rendering keeps the body as it is."""
        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller: Any) -> str:
            return caller()

    class Namespace(jinja2.utils.Namespace):
        def __init__(*args: Any, **kwargs: Any) -> None:
            self, attrs = args[0], dict(*args[1:], **kwargs)
            for name in attrs:
                Namespace._check(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name: str, value: Any) -> None:
            Namespace._check(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check(name: Any) -> None:
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(
                    f"Chat templates cannot store underscore-prefixed attributes on a namespace, but got {name!r}.")

    class Dict:
        def __call__(self, *args: Any, **kwargs: Any) -> dict:
            return dict(*args, **kwargs)

        def fromkeys(self, *args: Any, **kwargs: Any) -> dict:
            return dict.fromkeys(*args, **kwargs)

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals.update(raise_exception=raise_exception, strftime_now=_strftime_now, dict=Dict(),
                       namespace=Namespace)
    return env.from_string(source)


def _message(message: dict[str, Any]) -> dict[str, Any]:
    message = {k: v for k, v in message.items() if v is not None}
    reasoning = next((message[k] for k in REASONING_FIELDS if message.get(k) is not None), None)
    if reasoning is not None:
        message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
    return message


def pick_template(template: str | dict[str, str] | None, tools: Any) -> str | None:
    """A folder's template, or of its named ones "tool_use" when tools are given (if it has
    one) and else "default"."""
    if isinstance(template, dict):
        return template.get("tool_use") if tools is not None and "tool_use" in template else template.get("default")
    return template


def render(source: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
           add_generation_prompt: bool, special_tokens: dict[str, str], **kwargs: Any) -> str:
    for message in messages:
        if not isinstance(message, dict):
            raise TypeError(f"Chat messages should be dicts, but got {message!r}.")
    return compile_template(source).render(messages=[_message(m) for m in messages], tools=tools, documents=None,
                                           add_generation_prompt=add_generation_prompt,
                                           **{**special_tokens, **kwargs})
