"""The names refusals give the request's fields: the vocabulary of the route that took it.

A Responses request runs the chat request path (responses/to_chat.py), but its client
sent `max_output_tokens` and `input`, not `max_completion_tokens` and `messages`. Every
refusal on the shared path names its field with `field_name`, which answers in the
vocabulary the route set with `speaking` (chat's own names when none is set), so the
error is written with the client's names from the start.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar

# chat field -> (the route's name, whether the path below it is kept)
Vocabulary = Mapping[str, tuple[str, bool]]

_SPOKEN: ContextVar[Vocabulary] = ContextVar("field_vocabulary", default={})


def field_name(path: str) -> str:
    """`path` ('messages[2].content', 'response_format.json_schema') as the route names it."""
    vocabulary = _SPOKEN.get()
    if not vocabulary:
        return path
    cut = min((i for i in (path.find("["), path.find(".")) if i >= 0), default=len(path))
    entry = vocabulary.get(path[:cut])
    if entry is None:
        return path
    name, keep_rest = entry
    return name + path[cut:] if keep_rest else name


@contextmanager
def speaking(vocabulary: Vocabulary) -> Iterator[None]:
    """Refusals raised inside (and in the worker threads it starts) use `vocabulary`."""
    token = _SPOKEN.set(vocabulary)
    try:
        yield
    finally:
        _SPOKEN.reset(token)
