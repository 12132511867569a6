r"""Property-based fuzzing of the HTTP API (hypothesis).

Every request, well-formed or not, must get an answer the SPEC allows:

- never a 5xx, except the 500 server_error the SPEC asks for when generation fails
  (the FakeEngine fails on [[fail-finish]] / [[fail-raise]]: counted "500-injected");
- every 4xx is an OpenAI error envelope, `{"error": {"message", "type", "param", "code"}}`;
- a 200 is JSON (an object of the route's kind) unless the body asked to stream;
- a 200 stream is read to its end and ends properly: `data: [DONE]` for chat and
  completions (a failure inside it an error event, then [DONE]), and for the
  Responses API a response.completed / response.incomplete / response.failed
  event; never a dropped connection.

Bodies are drawn field by field from request/schemas.py, responses/schemas.py and
fields.py: valid values (so a request reaches generation), wrong types,
out-of-range and huge numbers, NaN / Infinity / 1e400 written as raw JSON text,
empty, huge and unicode strings (lone surrogates sent as "\ud800" escapes),
deep nesting, unknown fields, and raw byte bodies that are not JSON at all.

The server is a real Hypercorn server on the FakeEngine test double, as
`fake_server` runs it, with two additions that keep its answers those of the
real engine (see FuzzEngine): a grammar compiler (xgrammar on the fake's byte
vocabulary), so a valid structured-output field compiles instead of meeting a
missing method; and template failures reported as the real Tokenizer reports
them (TemplateError).

Knobs (environment):
    TENSORFOLD_FUZZ_EXAMPLES   examples per test (default: DEFAULT_EXAMPLES)
    TENSORFOLD_FUZZ_STATS      write the status counts per route to this JSON file
    TENSORFOLD_FUZZ_COLLECT    record every problem to this JSON-lines file and go on,
                               instead of failing at the first (for bug hunts)

Bugs this fuzzer found, each fixed with the test that now holds: chat_template_kwargs
{"self": ...} (a 500), JSON text nested past the recursion limit inside tool-call
arguments or a guided_json string (500s), ?limit= of more than 4300 digits (a 500),
a 413 sent without "Connection: close" (the next request on the connection failed),
surrogates written as UTF-8 bytes (500s and a cut Responses stream), and a
temperature beyond a float (a 500).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import threading
import urllib.parse
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensorfold.checkpoints.errors import TemplateError
from tests.api.conftest import ALIAS, MAX_BODY, api_config
from tests.api.fake_engine import FakeEngine, FakeTokenizer
from tests.servers import Served, running

CHAT, COMPLETIONS, RESPONSES = "/v1/chat/completions", "/v1/completions", "/v1/responses"
DEFAULT_EXAMPLES = 800
EXAMPLES = int(os.environ.get("TENSORFOLD_FUZZ_EXAMPLES", DEFAULT_EXAMPLES))
COLLECT = os.environ.get("TENSORFOLD_FUZZ_COLLECT")

FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None, print_blob=False,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.filter_too_much, HealthCheck.large_base_example])


# -- the server ----------------------------------------------------------------------

class FuzzTokenizer(FakeTokenizer):
    """FakeTokenizer whose template failures are TemplateErrors, as the real
    Tokenizer.render_chat maps them (checkpoints/tokenizer.py), and which keeps
    no record of its renders (thousands of requests pass here)."""

    def render_chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                    add_generation_prompt: bool = True, **template_kwargs: Any) -> str:
        from jinja2 import TemplateError as JinjaTemplateError

        try:
            return self.template.render(messages=messages, tools=tools,
                                        add_generation_prompt=add_generation_prompt, **template_kwargs)
        except TemplateError:
            raise
        except JinjaTemplateError as exc:
            raise TemplateError(f"chat template error: {exc.message or exc}") from exc
        except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
            raise TemplateError(f"chat template error: {exc}") from exc


def _byte_level_hf_tokenizer() -> Any:
    """A Hugging Face tokenizer with the FakeTokenizer's vocabulary (ids 0-2
    special, id = byte + 3), for xgrammar's tokenizer info."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    shown = {b: chr(b) for b in printable}
    extra = (b for b in range(256) if b not in shown)
    shown.update((b, chr(256 + n)) for n, b in enumerate(extra))       # GPT-2's bytes_to_unicode
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{shown[b]: b + 3 for b in range(256)}}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


class FuzzEngine(FakeEngine):
    """The FakeEngine plus the engine's grammar_compiler() (AsyncEngine has one;
    the double has none, so every valid structured-output request would be a
    500 AttributeError of the double's making)."""

    def __init__(self) -> None:
        super().__init__()
        self.tokenizer = FuzzTokenizer()
        self._grammar: Any = None
        self._grammar_lock = threading.Lock()

    def grammar_compiler(self, timeout: float | None = None) -> Any:
        """As AsyncEngine.grammar_compiler: built on first use; `timeout` per compile."""
        from tensorfold.grammar import GrammarCompiler, GrammarUnavailable

        with self._grammar_lock:
            if self._grammar is None:
                try:
                    hf = _byte_level_hf_tokenizer()
                except ImportError as exc:              # no transformers: as a server without xgrammar
                    raise GrammarUnavailable(str(exc)) from exc
                self._grammar = GrammarCompiler(hf, vocab_size=self.tokenizer.vocab_size, stop_token_ids=[2])
            if timeout is not None:
                self._grammar.timeout = timeout
            return self._grammar


@pytest.fixture(scope="module")
def fuzz_server() -> Iterator[Served]:
    with running(FuzzEngine(), api_config()) as served:
        yield served
        if served.engine._grammar is not None:
            served.engine._grammar.close()


@pytest.fixture(scope="module")
def fuzz_http(fuzz_server: Served) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=fuzz_server.url, timeout=60) as client:
        yield client


# -- bookkeeping: counts, problems, stored responses ----------------------------------

COUNTS: Counter[tuple[str, str]] = Counter()
STORED: list[str] = []          # ids of responses the server stored (for previous_response_id, GET, DELETE)
KEPT = itertools.count()        # stored responses so far: every 7th is deleted at once


@pytest.fixture(scope="module", autouse=True)
def _report_counts() -> Iterator[None]:
    yield
    routes = sorted({route for route, _ in COUNTS})
    lines = [f"{route}: " + ", ".join(f"{status}={n}" for (r, status), n in sorted(COUNTS.items()) if r == route)
             for route in routes]
    print("\nfuzz status counts:\n  " + "\n  ".join(lines))
    if os.environ.get("TENSORFOLD_FUZZ_STATS"):
        with open(os.environ["TENSORFOLD_FUZZ_STATS"], "w") as f:
            json.dump({route: {status: n for (r, status), n in sorted(COUNTS.items()) if r == route}
                       for route in routes}, f, indent=1)


def problem(kind: str, route: str, request: Any, response: httpx.Response | None, detail: str) -> None:
    """A broken answer: fail, or (TENSORFOLD_FUZZ_COLLECT) record it and go on."""
    COUNTS[(route, f"PROBLEM:{kind}")] += 1
    shown = response.text[:2000] if response is not None and response.is_stream_consumed else ""
    if COLLECT:
        with open(COLLECT, "a") as f:
            f.write(json.dumps({"kind": kind, "route": route, "request": _show(request),
                                "status": response.status_code if response is not None else None,
                                "detail": detail[:2000], "response": shown}) + "\n")
        return
    raise AssertionError(f"{kind} on {route}: {detail}\nrequest: {_show(request)[:3000]}\nresponse: {shown}")


def _show(request: Any) -> str:
    if isinstance(request, bytes):
        return request.decode("utf-8", "backslashreplace")
    return str(request)


# -- JSON values, and raw JSON text the json module cannot write ------------------------

class Raw:
    """JSON text put into a body as it is: NaN, Infinity, 1e400, a nesting too deep for json.dumps."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"Raw({self.text[:60]!r}{'...' if len(self.text) > 60 else ''})"


class StoredRef:
    """A stored response's id, picked when the request is sent (index into STORED)."""

    def __init__(self, index: int) -> None:
        self.index = index

    def __repr__(self) -> str:
        return f"StoredRef({self.index})"


def resolve(value: Any) -> Any:
    """`value` with every StoredRef replaced by a stored id (or a made-up one)."""
    if isinstance(value, StoredRef):
        return STORED[value.index % len(STORED)] if STORED else "resp_" + "0" * 32
    if isinstance(value, dict):
        return {k: resolve(v) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(v) for v in value]
    return value


def encode(body: Any, ascii_only: bool) -> bytes:
    """The body as JSON bytes, Raw values spliced in as written. Lone surrogates go
    out as \\udXXX escapes (ascii_only) or as surrogate bytes (invalid UTF-8)."""
    raws: list[str] = []

    def mark(v: Any) -> Any:
        if isinstance(v, Raw):
            raws.append(v.text)
            return f"\x00raw{len(raws) - 1}\x00"
        if isinstance(v, dict):
            return {k: mark(x) for k, x in v.items()}
        if isinstance(v, list):
            return [mark(x) for x in v]
        return v

    text = json.dumps(mark(body), ensure_ascii=ascii_only, allow_nan=True)
    if raws:
        quoted = re.compile(r'"\\u0000raw(\d+)\\u0000"')
        text = quoted.sub(lambda m: raws[int(m.group(1))], text)
    return text.encode("utf-8", "surrogatepass")


SURROGATES = ["\ud800", "\udbff", "\udc00", "\udfff", "\ud83d"]
MARKERS = ["[[fail-finish]]", "[[fail-raise]]"]   # the FakeEngine fails on these (fake_engine.py)
SPECIAL_STRINGS = ["", " ", "\x00", "null", "true", "0", "1", "-1", "1.5", "NaN", "{", "}", "{}", "{0}", "{x}",
                   "%s", "%(x)s", "\\", '"', "\u2028", "\ufeff", "é", "😀", "a\nb", "</s>", "<|im_end|>",
                   "resp_", "fake-model", ALIAS, *MARKERS, *SURROGATES, "a\udc00b", "\ud83d\ude00"]
SPECIAL_INTS = [0, 1, -1, 2, 100, 101, 259, 2 ** 31 - 1, 2 ** 31, -(2 ** 31) - 1, 2 ** 53 + 1, 2 ** 63 - 1, 2 ** 63,
                -(2 ** 63), -(2 ** 63) - 1, 2 ** 64 - 1, 2 ** 64, 10 ** 30, 10 ** 300, -(10 ** 300), 10 ** 400]
SPECIAL_FLOATS = [0.0, -0.0, 0.5, 1.0, 1.5, 2.0, 100.0, 1e16, 1e308, -1e308, 1.7976931348623157e308, 5e-324, -1e-300]
RAW_NUMBERS = ["NaN", "-NaN", "Infinity", "-Infinity", "1e400", "-1e400", "1E999", "1e-400", "-0", "0.0e0"]
raw_numbers = st.one_of(st.sampled_from(RAW_NUMBERS).map(Raw),   # and integers of 4000 and 4400 digits:
                        st.sampled_from([4000, 4400]).map(lambda n: Raw("1" + "0" * n)))

chars = st.one_of(st.characters(), st.characters(max_codepoint=0x7f))   # surrogates: in SPECIAL_STRINGS
small_text = st.one_of(st.text(chars, max_size=12), st.sampled_from(SPECIAL_STRINGS))
name_text = st.one_of(st.text(chars, min_size=1, max_size=12), st.sampled_from(["f", "get_weather", "a b", "😀"]))
huge_text = st.builds(lambda s, n: s * n, st.sampled_from(["a", "é", "😀", "\ud800", "[[", "{", " "]),
                      st.sampled_from([1000, 5000, 20_000, 1000, 5000, 20_000, MAX_BODY + 10]))
any_text = st.one_of(small_text, small_text, small_text, small_text, small_text, huge_text)


def json_text(value: Any) -> str:
    """`value` as JSON text (Raw values as written), for the fields that hold JSON in a string."""
    return encode(value, True).decode("ascii")


def nest(leaf: Any, depth: int, kind: str) -> Any:
    for _ in range(depth):
        leaf = [leaf] if kind == "list" else {"a": leaf}
    return leaf


def deep_raw(depth: int, kind: str) -> Raw:
    return Raw("[" * depth + "1" + "]" * depth if kind == "list" else '{"a":' * depth + "1" + "}" * depth)


def deep_json_text(depth: int, kind: str) -> str:
    """JSON *text*, nested `depth` deep, as a string value."""
    return deep_raw(depth, kind).text


scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.sampled_from(SPECIAL_INTS),
                    st.floats(allow_nan=False, allow_infinity=False), st.sampled_from(SPECIAL_FLOATS),
                    small_text, raw_numbers)
nested = st.recursive(scalars, lambda c: st.lists(c, max_size=4) | st.dictionaries(small_text, c, max_size=4),
                      max_leaves=8)
deep = st.one_of(st.builds(nest, scalars, st.integers(1, 70), st.sampled_from(["list", "dict"])),
                 st.builds(deep_raw, st.sampled_from([63, 64, 65, 200, 990, 1100, 5000]),
                           st.sampled_from(["list", "dict"])))
junk = st.one_of(scalars, scalars, nested, nested, deep, huge_text)
deep_texts = st.builds(deep_json_text, st.sampled_from([10, 63, 500, 990, 1100, 3000]),
                       st.sampled_from(["list", "dict"]))


def field(valid: st.SearchStrategy, *bad: Any) -> tuple[st.SearchStrategy, st.SearchStrategy]:
    """A field's (valid, bad) values: `bad` lists its own edge values (strategies or plain values)."""
    own = [b if isinstance(b, st.SearchStrategy) else st.just(b) for b in bad]
    return valid, st.one_of(*own, junk) if own else junk


def maybe_none(s: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(st.none(), s, s, s)


# -- field values ------------------------------------------------------------------------

small_max = st.integers(1, 16)
bools = st.booleans()
numbers_in = lambda lo, hi: st.one_of(st.floats(lo, hi, allow_nan=False), st.integers(int(lo), int(hi)))  # noqa: E731

SCHEMAS = [{"type": "object"}, {"type": "string"}, {"type": "integer", "minimum": 0, "maximum": 9},
           {"type": "array", "items": {"type": "boolean"}}, {"enum": ["a", "b"]}, True, False, {},
           {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]},
           {"type": "objectx"}, {"$ref": "#"}, {"$ref": "#/definitions/x"}, {"type": "integer", "minimum": 1e308},
           {"type": "string", "pattern": "a("}, {"anyOf": []}, {"type": "array", "minItems": 100000},
           {"type": "string", "maxLength": -1}, {"properties": {"a": {"type": "string"}}, "required": ["a", "b"]}]
schema = st.one_of(st.sampled_from(SCHEMAS),
                   st.builds(nest, st.sampled_from(SCHEMAS[:5]), st.integers(1, 30), st.just("dict")),
                   st.dictionaries(st.sampled_from(["type", "properties", "items", "enum", "const", "minimum",
                                                    "pattern", "required", "anyOf", "$ref", "format"]),
                                   nested, max_size=3))
schema_text = st.one_of(schema.map(json_text), small_text, deep_texts)
REGEXES = ["[a-z]+", "a{3}", "(ab|cd)*", "a(b", "\\", "[", "*", ".*", "\\d{2,}", "(?=a)", "(?P<x>a)", "\\p{L}",
           "a{99999}", "[^\\x00-\\x7f]", "😀+", "()", "a|", "^$", "[z-a]", "x{2,1}"]
regex = st.one_of(st.sampled_from(REGEXES), small_text)
GRAMMARS = ['root ::= "a"', "root ::= ((", "root ::= root", 'start: "a"', "root ::= [a-z]+", "root ::= [",
            'root ::= "a" | "b"', "::=", 'root ::= "\\ud800"']
grammar = st.one_of(st.sampled_from(GRAMMARS), small_text)
choices = st.lists(small_text, min_size=1, max_size=4)

response_format_valid = st.one_of(
    st.just({"type": "text"}), st.just({"type": "json_object"}),
    st.fixed_dictionaries({"type": st.just("json_schema"),
                           "json_schema": st.fixed_dictionaries({"schema": schema},
                                                                optional={"name": small_text, "strict": bools})}))
response_format_bad = st.one_of(
    st.fixed_dictionaries({"type": st.sampled_from(["yaml", "json", "", "JSON_OBJECT"])}),
    st.fixed_dictionaries({"type": st.just("json_schema"), "json_schema": junk}),
    st.fixed_dictionaries({"type": st.just("json_schema"), "json_schema": st.fixed_dictionaries({"schema": junk})}),
    st.fixed_dictionaries({"type": junk}))

structured_valid = st.one_of(
    st.fixed_dictionaries({"json": st.one_of(schema, schema_text)}), st.just({"json_object": True}),
    st.fixed_dictionaries({"regex": regex}), st.fixed_dictionaries({"choice": choices}),
    st.fixed_dictionaries({"grammar": grammar}))
structured_bad = st.one_of(
    st.just({}), st.just({"regex": "a", "choice": ["b"]}), st.just({"json_object": 1}), st.just({"json": 3}),
    st.just({"json_object": False}), st.dictionaries(st.sampled_from(["json", "json_object", "regex", "choice",
                                                                      "grammar", "x"]), junk, max_size=3))

logit_bias_valid = st.dictionaries(st.integers(0, 258).map(str), numbers_in(-100, 100), max_size=3)
logit_bias_bad = st.dictionaries(
    st.one_of(st.sampled_from(["259", "-1", "a", " 1", "", "٣", "²", "１", "1e3", "0x1", "9" * 20, "9" * 5000]),
              small_text), junk, min_size=1, max_size=3)

stop_valid = st.one_of(st.none(), st.text(chars, min_size=1, max_size=10),
                       st.sampled_from(["fake", "Hello", "o", ".", "deterministic.", "x"]),
                       st.lists(st.text(chars, min_size=1, max_size=8), min_size=1, max_size=16))
stop_bad = st.one_of(st.sampled_from(["", [""], ["a"] * 17, "a" * 4097, [1], {"a": 1}, ["a", None], []]),
                     st.lists(junk, min_size=1, max_size=3))

EFFORTS = ["none", "minimal", "low", "medium", "high", "xhigh"]
TEMPLATE_KEYS = ["enable_thinking", "reasoning_effort", "self", "messages", "tools", "add_generation_prompt",
                 "conversation", "tokenize", "chat_template", "documents", "m", "loop", "raise_exception", "x", ""]
template_kwargs_valid = st.one_of(st.none(), st.just({}), st.fixed_dictionaries({"enable_thinking": bools}),
                                  st.fixed_dictionaries({"reasoning_effort": st.sampled_from(EFFORTS)}),
                                  st.dictionaries(st.sampled_from(["x", "y", "custom_flag"]), nested, max_size=2))
template_kwargs_bad = st.one_of(
    st.dictionaries(st.sampled_from(TEMPLATE_KEYS), junk, min_size=1, max_size=2),
    st.dictionaries(st.one_of(st.sampled_from(TEMPLATE_KEYS), small_text), junk, min_size=1, max_size=3),
    st.fixed_dictionaries({"reasoning_effort": junk}))

metadata_valid = st.dictionaries(st.text(chars, max_size=64), st.text(chars, max_size=40), max_size=16)
metadata_bad = st.one_of(st.dictionaries(small_text, junk, min_size=1, max_size=3),
                         st.just({str(i): "v" for i in range(17)}), st.just({"k" * 65: "v"}),
                         st.just({"k": "v" * 513}))

GENERATION_FIELDS: dict[str, tuple[st.SearchStrategy, st.SearchStrategy]] = {
    "model": field(st.sampled_from([None, "fake-model", ALIAS]), small_text),
    "max_tokens": field(small_max, 0, -1, 1.5, 2.0, True, "10", 10 ** 6, 2 ** 63, 1e308, 10 ** 300),
    "temperature": field(st.one_of(numbers_in(0, 2), st.sampled_from([0, 1e308, 5e-324])), -0.1, -1e308, True, "0.5"),
    "top_p": field(st.one_of(st.floats(0.01, 1), st.just(1)), 0, 0.0, 1.0000001, -1, True, "1"),
    "top_k": field(st.integers(-(2 ** 31), 2 ** 31 - 1), 2 ** 31, -(2 ** 31) - 1, 2.5, 2.0, True, "5", 1e308),
    "min_p": field(numbers_in(0, 1), -0.1, 1.1, False, "0.1"),
    "frequency_penalty": field(numbers_in(-2, 2), 2.01, -3, True, "1"),
    "presence_penalty": field(numbers_in(-2, 2), -2.01, 3, None, "0"),
    "repetition_penalty": field(st.one_of(st.floats(0.01, 100), st.just(1)), 0, -1, 100.5, "1"),
    "logit_bias": field(logit_bias_valid, logit_bias_bad),
    "seed": field(st.one_of(st.integers(-(2 ** 63), 2 ** 64 - 1), st.just(1e18)), 2 ** 64, -(2 ** 63) - 1, 1.5, True,
                  "42"),
    "stop": field(stop_valid, stop_bad),
    "ignore_eos": field(maybe_none(bools), "true", 1, 0, []),
    "stream": field(maybe_none(bools), "yes", 1, 0, "true"),
    "stream_options": field(maybe_none(st.fixed_dictionaries({}, optional={"include_usage": maybe_none(bools),
                                                                           "continuous_usage_stats": bools})),
                            "x", {"include_usage": "yes"}, {"include_usage": 1}, []),
    "priority": field(st.sampled_from([None, "foreground", "background"]), "urgent", 1, True, "Foreground"),
    "n": field(st.sampled_from([None, 1, 1.0]), 2, 0, -1, "1", 1.5),
    "chat_template_kwargs": field(template_kwargs_valid, template_kwargs_bad),
    "draft": field(maybe_none(bools), "no", 0),
    "thinking_budget": field(st.one_of(st.none(), st.integers(0, 10 ** 6), st.just(10 ** 300)), -1, 2.5, "64"),
    "reasoning_effort": field(st.sampled_from([None, *EFFORTS]), "extreme", 3, "", "HIGH"),
    "response_format": field(st.one_of(st.none(), response_format_valid), response_format_bad),
    "guided_json": field(st.one_of(schema, schema_text), 3, [], 1.5),
    "guided_regex": field(regex, "", 3),
    "guided_choice": field(choices, [], ["a", 1], "a"),
    "guided_grammar": field(grammar, "", 3),
    "structured_outputs": field(st.one_of(st.none(), structured_valid), structured_bad),
    "user": field(maybe_none(small_text), 3),
    "safety_identifier": field(maybe_none(small_text), []),
    "prompt_cache_key": field(maybe_none(any_text), {}),
    "metadata": field(maybe_none(metadata_valid), metadata_bad),
    "service_tier": field(st.sampled_from([None, "auto", "default", "flex", "scale", "priority"]), "fast", 1),
    "store": field(maybe_none(bools), "yes", 1),
}

# -- chat messages and tools -----------------------------------------------------------------

text_content = st.one_of(small_text, small_text, small_text, small_text, any_text, any_text, any_text, any_text,
                         st.sampled_from(MARKERS))
content_valid = st.one_of(text_content, st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": text_content}),
                                                 min_size=1, max_size=3))
arguments = st.one_of(nested.map(json_text), st.dictionaries(small_text, nested, max_size=3),
                      small_text, st.just("{}"), deep_texts)
tool_call_valid = st.fixed_dictionaries(
    {"function": st.fixed_dictionaries({"name": name_text}, optional={"arguments": arguments})},
    optional={"id": small_text, "type": st.just("function")})
message_valid = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "user", "system", "developer"]), "content": content_valid},
                          optional={"name": small_text}),
    st.fixed_dictionaries({"role": st.just("assistant"), "content": content_valid},
                          optional={"reasoning_content": small_text, "name": small_text}),
    st.fixed_dictionaries({"role": st.just("assistant"),
                           "tool_calls": st.lists(tool_call_valid, min_size=1, max_size=2)},
                          optional={"content": maybe_none(content_valid)}),
    st.fixed_dictionaries({"role": st.just("tool"), "content": content_valid,
                           "tool_call_id": st.text(chars, min_size=1, max_size=8)}))
bad_part = st.one_of(
    st.fixed_dictionaries({"type": st.sampled_from(["image_url", "input_image", "input_audio", "audio", "video_url",
                                                    "file", "input_file", "hologram", "input_text", ""])},
                          optional={"text": junk, "image_url": junk}),
    st.fixed_dictionaries({"type": st.just("text"), "text": junk}), st.fixed_dictionaries({"text": small_text}), junk)
message_bad = st.one_of(
    junk,
    st.fixed_dictionaries({"role": st.one_of(st.sampled_from(["wizard", "function", "USER", ""]), junk),
                           "content": content_valid}),
    st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "assistant", "tool"])},
                          optional={"content": st.one_of(junk, st.just([]), st.lists(bad_part, min_size=1, max_size=2)),
                                    "tool_calls": junk, "tool_call_id": junk, "name": junk,
                                    "reasoning_content": junk}),
    st.fixed_dictionaries({"role": st.just("assistant"),
                           "tool_calls": st.lists(st.one_of(junk, st.fixed_dictionaries(
                               {"function": st.fixed_dictionaries({}, optional={"name": junk, "arguments": junk})},
                               optional={"type": junk, "id": junk})), min_size=1, max_size=2)}))
messages_valid = st.lists(message_valid, min_size=1, max_size=4)
messages_bad = st.one_of(junk, st.just([]), st.lists(st.one_of(message_valid, message_bad), min_size=1, max_size=4))

chat_tool_valid = st.fixed_dictionaries(
    {"type": st.just("function"), "function": st.fixed_dictionaries(
        {"name": name_text}, optional={"description": maybe_none(small_text), "parameters": maybe_none(schema),
                                       "strict": bools})})
chat_tool_bad = st.one_of(junk, st.fixed_dictionaries({"type": st.one_of(st.sampled_from(["web_search", ""]), junk)}),
                          st.fixed_dictionaries({"type": st.just("function"), "function": junk}),
                          st.fixed_dictionaries({"type": st.just("function"), "function": st.fixed_dictionaries(
                              {"name": st.one_of(st.just(""), junk)},
                              optional={"parameters": junk, "description": junk})}))
chat_tool_choice_valid = st.one_of(
    st.sampled_from([None, "none", "auto", "required"]),
    st.fixed_dictionaries({"type": st.just("function"), "function": st.fixed_dictionaries({"name": name_text})}))
chat_tool_choice_bad = st.one_of(st.sampled_from(["sometimes", "", "Auto"]),
                                 st.fixed_dictionaries({"type": junk, "function": junk}))

CHAT_FIELDS = {
    **GENERATION_FIELDS,
    "max_completion_tokens": field(small_max, 0, False, 2.2, 10 ** 6),
    "tools": field(st.one_of(st.none(), st.lists(chat_tool_valid, max_size=3)),
                   st.lists(st.one_of(chat_tool_valid, chat_tool_bad), min_size=1, max_size=3)),
    "tool_choice": field(chat_tool_choice_valid, chat_tool_choice_bad),
    "parallel_tool_calls": field(maybe_none(bools), "yes"),
    "logprobs": field(st.sampled_from([None, False]), True, "yes"),
    "top_logprobs": field(st.none(), 0, 3),
    "audio": field(st.none(), {"voice": "alloy", "format": "wav"}),
    "modalities": field(st.sampled_from([None, ["text"]]), ["text", "audio"], "text", [1]),
}

# -- completions -------------------------------------------------------------------------

token_ids = st.lists(st.integers(0, 258), min_size=1, max_size=20)
prompt_valid = st.one_of(st.text(chars, max_size=40), text_content, st.lists(text_content, min_size=1, max_size=1),
                         token_ids, st.lists(token_ids, min_size=1, max_size=1))
prompt_bad = st.one_of(st.sampled_from([[], [[]], ["a", "b"], [[1, 2], [3]], [1, "a"], [1, True], [-1], [1.0],
                                        [10 ** 9], [259], [2 ** 64], [["a"]], ["a", ["b"]]]),
                       st.lists(junk, min_size=1, max_size=3), st.lists(st.integers(), min_size=1, max_size=5))

COMPLETION_FIELDS = {
    **GENERATION_FIELDS,
    "echo": field(st.sampled_from([None, False]), True, "yes", 0),
    "suffix": field(st.sampled_from([None, ""]), "tail", 3),
    "best_of": field(st.sampled_from([None, 1, 1.0]), 2, 0, "1"),
    "logprobs": field(st.none(), 1, 0, True),
    "messages": field(st.none(), messages_valid, messages_bad),      # a nonempty list: handled as chat
}

# -- Responses ------------------------------------------------------------------------------

input_text_part = st.fixed_dictionaries({"type": st.sampled_from(["input_text", "output_text"]), "text": text_content},
                                        optional={"annotations": junk, "id": junk})
refusal_part = st.fixed_dictionaries({"type": st.just("refusal"), "refusal": text_content},
                                     optional={"text": junk, "annotations": junk})   # (a stray key: a 500 once)
user_parts = st.lists(st.one_of(input_text_part, input_text_part, refusal_part), min_size=1, max_size=3)
assistant_parts = st.lists(st.one_of(st.fixed_dictionaries({"type": st.just("output_text"), "text": text_content}),
                                     refusal_part), min_size=1, max_size=2)
item_valid = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "user", "system", "developer"]),
                           "content": st.one_of(text_content, user_parts)}, optional={"type": st.just("message")}),
    st.fixed_dictionaries({"role": st.just("assistant"), "content": st.one_of(text_content, assistant_parts)},
                          optional={"type": st.just("message"), "id": small_text, "status": small_text}),
    st.fixed_dictionaries({"type": st.just("function_call"), "call_id": name_text, "name": name_text,
                           "arguments": st.one_of(st.just(""), arguments.filter(lambda a: isinstance(a, str)))}),
    st.fixed_dictionaries({"type": st.just("function_call_output"), "call_id": name_text,
                           "output": st.one_of(text_content, user_parts)}),
    st.fixed_dictionaries({"type": st.just("reasoning")}, optional={
        "content": st.lists(st.fixed_dictionaries({"type": st.just("reasoning_text"), "text": small_text}), max_size=2),
        "summary": st.lists(st.fixed_dictionaries({"type": st.just("summary_text"), "text": small_text}), max_size=2),
        "id": small_text}))
item_bad = st.one_of(
    junk,
    st.fixed_dictionaries({"type": st.sampled_from(["item_reference", "web_search_call", "computer_call", "mcp_call",
                                                    "hologram", ""])}, optional={"id": small_text}),
    st.fixed_dictionaries({"type": st.just("reasoning"), "encrypted_content": small_text}),
    st.fixed_dictionaries({"type": st.just("reasoning")}, optional={"content": junk, "summary": junk}),
    st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "tool", "wizard"]),
                           "content": st.one_of(junk, st.just([]), st.lists(st.one_of(
                               bad_part, input_text_part,
                               st.fixed_dictionaries({"type": st.just("input_image")},
                                                     optional={"image_url": junk, "file_id": junk, "detail": junk}),
                               # a part with a stray "text" key (a 500 once)
                               st.fixed_dictionaries({"type": st.just("refusal"), "refusal": small_text,
                                                      "text": junk})), min_size=1, max_size=2))}),
    st.fixed_dictionaries({"type": st.sampled_from(["function_call", "function_call_output"])},
                          optional={"call_id": junk, "name": junk, "arguments": junk, "output": junk}))
input_valid = st.one_of(text_content, st.lists(item_valid, min_size=1, max_size=4))
input_bad = st.one_of(junk, st.just([]), st.lists(st.one_of(item_valid, item_bad), min_size=1, max_size=4))

resp_tool_valid = st.fixed_dictionaries({"type": st.just("function"), "name": name_text},
                                        optional={"description": maybe_none(small_text),
                                                  "parameters": maybe_none(schema), "strict": maybe_none(bools)})
resp_tool_bad = st.one_of(junk, st.fixed_dictionaries({"type": st.sampled_from(["web_search", "file_search", ""])}),
                          st.fixed_dictionaries({"type": st.just("function")},
                                                optional={"name": junk, "parameters": junk, "description": junk,
                                                          "strict": junk}))
function_ref = st.fixed_dictionaries({"type": st.just("function"), "name": name_text})
resp_tool_choice_valid = st.one_of(
    st.sampled_from([None, "none", "auto", "required"]), function_ref,
    st.fixed_dictionaries({"type": st.just("allowed_tools"), "mode": st.sampled_from(["auto", "required"]),
                           "tools": st.lists(function_ref, min_size=1, max_size=2)}))
resp_tool_choice_bad = st.one_of(
    st.sampled_from(["sometimes", "", {"type": "web_search"}, {"type": "function"}, {"type": "allowed_tools"}]),
    st.fixed_dictionaries({"type": st.just("allowed_tools"), "mode": junk, "tools": junk}),
    st.fixed_dictionaries({"type": junk, "name": junk}))
text_valid = st.fixed_dictionaries({}, optional={
    "format": st.one_of(st.just({"type": "text"}), st.just({"type": "json_object"}),
                        st.fixed_dictionaries({"type": st.just("json_schema"), "name": name_text,
                                               "schema": schema.filter(lambda s: isinstance(s, dict))},
                                              optional={"strict": maybe_none(bools),
                                                        "description": small_text})),
    "verbosity": st.sampled_from([None, "low", "medium", "high"])})
text_bad = st.one_of(st.fixed_dictionaries({"format": st.one_of(junk, st.fixed_dictionaries(
    {"type": st.one_of(st.just("json_schema"), junk)}, optional={"name": junk, "schema": junk, "strict": junk}))}),
    st.fixed_dictionaries({"verbosity": junk}))

RESPONSES_FIELDS = {
    "model": GENERATION_FIELDS["model"],
    "instructions": field(maybe_none(text_content), 3, []),
    "previous_response_id": field(st.one_of(st.none(), st.integers(0, 10 ** 6).map(StoredRef)), small_text,
                                  "resp_" + "0" * 32),
    "tools": field(st.one_of(st.none(), st.lists(resp_tool_valid, max_size=3, unique_by=lambda t: t["name"])),
                   st.lists(st.one_of(resp_tool_valid, resp_tool_bad), min_size=1, max_size=3)),
    "tool_choice": field(resp_tool_choice_valid, resp_tool_choice_bad),
    "max_output_tokens": field(small_max, 0, -1, 1.5, True, 10 ** 6),
    "reasoning": field(maybe_none(st.fixed_dictionaries({}, optional={
        "effort": st.sampled_from([None, *EFFORTS]), "summary": st.sampled_from([None, "auto", "concise", "detailed"]),
        "generate_summary": st.sampled_from([None, "auto"])})),
        st.fixed_dictionaries({}, optional={"effort": junk, "summary": junk, "generate_summary": junk})),
    "text": field(maybe_none(text_valid), text_bad),
    "stream": GENERATION_FIELDS["stream"],
    "store": field(maybe_none(bools), "yes", 1),
    "metadata": field(maybe_none(metadata_valid), metadata_bad),
    "user": field(maybe_none(small_text), 3),
    "background": field(st.sampled_from([None, False]), True, "no"),
    "include": field(st.sampled_from([None, []]), ["reasoning.encrypted_content"], "x"),
    "conversation": field(st.none(), "conv_1", {"id": "c"}),
    "prompt": field(st.none(), {"id": "pmpt_1"}, "x"),
    "truncation": field(st.sampled_from([None, "disabled"]), "auto", "none"),
    "top_logprobs": field(st.sampled_from([None, 0]), 1, 0.0, True),
    **{name: CHAT_FIELDS[name] for name in ("temperature", "top_p", "top_k", "min_p", "seed", "stop", "ignore_eos",
                                            "draft", "thinking_budget", "chat_template_kwargs", "priority",
                                            "parallel_tool_calls")},
}

unknown_fields = st.dictionaries(st.one_of(small_text, st.sampled_from(["functions", "function_call", "best_of",
                                                                         "echo", "prompt", "input", "messages"])),
                                 junk, min_size=1, max_size=2)


def one_in(n: int) -> st.SearchStrategy[bool]:
    """True about once in `n` draws (hypothesis leans to the first value: False)."""
    return st.sampled_from([False] * (n - 1) + [True])


@st.composite
def bodies(draw: Any, route: str) -> Any:
    """A request body for `route` (its fields are looked up, not passed: hypothesis
    prints strategy arguments). Mode "valid": every field valid (the request should
    reach the engine); "one_bad": one field bad (or a required one missing);
    "chaos": any field valid or bad. Valid bodies keep the reply limit small."""
    required, optional, small_limit = BODY_FIELDS[route]
    mode = draw(st.sampled_from(["valid", "valid", "one_bad", "chaos"]))
    names = draw(st.lists(st.sampled_from(sorted(optional)), max_size=7, unique=True))
    fields = {**required, **{n: optional[n] for n in names}}
    bad = draw(st.sampled_from(sorted(fields))) if mode == "one_bad" else None
    body: dict[str, Any] = {}
    for name, (valid, wrong) in fields.items():
        if name == bad and name in required and draw(st.booleans()):
            continue                                   # a missing required field
        if mode == "chaos":
            body[name] = draw(st.one_of(valid, wrong))
        else:
            body[name] = draw(wrong if name == bad else valid)
    if mode != "chaos" and small_limit not in body:
        body[small_limit] = draw(small_max)
    if "stream" not in body:             # streams are half the API: about 2 bodies in 5 ask for one
        stream = draw(st.sampled_from(["absent", True, False, True, "absent"]))
        if stream != "absent":
            body["stream"] = stream
    if draw(one_in(10)):
        body.update(draw(unknown_fields))
    if draw(one_in(20)):
        body = draw(st.one_of(junk, st.lists(st.just(body), max_size=1)))   # not an object
    return body


BODY_FIELDS = {CHAT: ({"messages": (messages_valid, messages_bad)}, CHAT_FIELDS, "max_tokens"),
               COMPLETIONS: ({"prompt": (prompt_valid, prompt_bad)}, COMPLETION_FIELDS, "max_tokens"),
               RESPONSES: ({"input": (input_valid, input_bad)}, RESPONSES_FIELDS, "max_output_tokens")}
CHAT_BODIES, COMPLETION_BODIES, RESPONSES_BODIES = bodies(CHAT), bodies(COMPLETIONS), bodies(RESPONSES)


# -- checking an answer ---------------------------------------------------------------------------

def check_envelope(route: str, request: Any, r: httpx.Response) -> None:
    try:
        assert r.headers.get("content-type", "").startswith("application/json"), r.headers.get("content-type")
        body = r.json()
        assert isinstance(body, dict) and set(body) == {"error"}, "not {'error': ...}"
        error = body["error"]
        assert isinstance(error, dict) and set(error) == {"message", "type", "param", "code"}, f"keys {error!r}"
        assert isinstance(error["message"], str) and error["message"], "message"
        assert isinstance(error["type"], str) and error["type"], "type"
        assert error["param"] is None or isinstance(error["param"], str), "param"
        assert error["code"] is None or isinstance(error["code"], str), "code"
        want = {429: "rate_limit_error"}.get(r.status_code, "invalid_request_error" if r.status_code < 500
                                              else "server_error")
        assert error["type"] == want, f"type {error['type']!r} on a {r.status_code}"
    except (AssertionError, ValueError) as exc:
        problem("non-envelope", route, request, r, f"{r.status_code}: {exc}")


def check_chat_sse(route: str, request: Any, r: httpx.Response) -> None:
    """data: events, each JSON; an error event is an envelope followed by [DONE]; [DONE] last."""
    text = r.text
    try:
        assert text.endswith("\n\n"), f"the stream does not end with a blank line: {text[-80:]!r}"
        blocks = text[:-2].split("\n\n")
        assert blocks and blocks[-1] == "data: [DONE]", f"the last event is {blocks[-1][:200]!r}, not [DONE]"
        for i, block in enumerate(blocks[:-1]):
            assert block.startswith("data: ") and "\n" not in block, f"event {i}: {block[:200]!r}"
            event = json.loads(block[len("data: "):])
            assert isinstance(event, dict), f"event {i} is not an object"
            if "error" in event:
                COUNTS[(route, "streams with an error event")] += 1
                assert set(event) == {"error"} and set(event["error"]) == {"message", "type", "param", "code"}, \
                    f"error event {i}: {event!r}"
                assert i == len(blocks) - 2, "events after the error event"
    except (AssertionError, ValueError) as exc:
        problem("broken-stream", route, request, r, str(exc))


def check_responses_sse(route: str, request: Any, r: httpx.Response) -> dict[str, Any] | None:
    """Typed events with sequence numbers 0..n-1, ending with one final event; the final Response."""
    from tests.api.test_responses_types import check_stream, parse_sse

    try:
        events = parse_sse(r.text)
        assert events, "no events"
        final = check_stream(events)
        assert events[-1]["type"] == f"response.{final['status']}"
        COUNTS[(route, f"streams ending response.{final['status']}")] += 1
        return final
    except (AssertionError, ValueError, KeyError, TypeError, IndexError) as exc:
        problem("broken-stream", route, request, r, f"{type(exc).__name__}: {exc}")
        return None


OBJECTS = {CHAT: "chat.completion", COMPLETIONS: "text_completion", RESPONSES: "response"}


def send(http: httpx.Client, route: str, method: str, url: str, request: Any = None, *,
         content: bytes | None = None, headers: dict[str, str] | None = None,
         chunked: bool = False) -> httpx.Response | None:
    """Send one request, read its whole answer (stream included) and check it.
    `chunked`: send the body without a Content-Length."""
    shown: Any = request if request is not None else content
    if request is not None and content is not None:       # the body as parsed, and as sent
        shown = f"{_show(request)[:2000]}\n  sent as: {content[:2000]!r}"
    body: Any = content
    if chunked and content is not None:
        body = iter([content[:7], content[7:]])
    req = http.build_request(method, url, content=body, headers=headers)
    try:
        r = http.send(req, stream=True)
    except httpx.TransportError as exc:
        COUNTS[(route, "no-answer")] += 1
        problem("no-answer", route, shown, None, repr(exc))
        return None
    try:
        try:
            r.read()
        except httpx.TransportError as exc:             # a stream cut short: a dropped connection
            COUNTS[(route, f"{r.status_code}-cut")] += 1
            problem("broken-stream", route, shown, None,
                    f"{r.status_code} {r.headers.get('content-type')}: the connection dropped: {exc!r}")
            return None
    finally:
        r.close()
    if r.status_code == 500 and injected_failure(r):
        COUNTS[(route, "500-injected")] += 1
        check_envelope(route, shown, r)
        return r
    COUNTS[(route, str(r.status_code))] += 1
    if r.status_code >= 500:
        problem("5xx", route, shown, r, f"{r.status_code}: {r.text[:500]}")
    elif r.status_code >= 400:
        check_envelope(route, shown, r)
    elif r.status_code != 200:
        problem("odd-status", route, shown, r, str(r.status_code))
    return r


def injected_failure(r: httpx.Response) -> bool:
    """A whole reply that failed as the FakeEngine was told to ([[fail-finish]] or
    [[fail-raise]] in the prompt, this turn's or a stored one's): the 500
    server_error the SPEC asks for."""
    try:
        error = r.json()["error"]
        return error["type"] == "server_error" and error["message"] in (
            "generation failed: injected failure", "generation failed: RuntimeError: injected engine crash")
    except (ValueError, KeyError, TypeError):
        return False


def check_post_200(route: str, body: Any, r: httpx.Response) -> dict[str, Any] | None:
    """A 200 to a POST: a stream iff the body asked for one, then its shape; the Response
    object for /v1/responses (None otherwise)."""
    streamed = r.headers.get("content-type", "").startswith("text/event-stream")
    asked = isinstance(body, dict) and body.get("stream") is True
    if streamed != asked:
        problem("wrong-framing", route, body, r, f"stream asked: {asked}, content-type {r.headers.get('content-type')}")
        return None
    if streamed:
        COUNTS[(route, "200 of them streamed")] += 1
        if route == RESPONSES:
            return check_responses_sse(route, body, r)
        check_chat_sse(route, body, r)
        return None
    try:
        reply = r.json()
        chat_shaped = route == COMPLETIONS and isinstance(body, dict) and isinstance(body.get("messages"), list) \
            and body["messages"]
        want = "chat.completion" if chat_shaped else OBJECTS[route]
        assert isinstance(reply, dict) and reply.get("object") == want, f"object {reply.get('object')!r}"
        if route == RESPONSES:
            from tests.api.test_responses_types import check_response

            check_response(reply)
            assert reply["status"] in ("completed", "incomplete"), reply["status"]
            return reply
        assert reply["choices"][0]["finish_reason"] in ("stop", "length", "tool_calls"), reply["choices"]
    except (AssertionError, ValueError, KeyError, TypeError, IndexError) as exc:
        problem("bad-200", route, body, r, f"{type(exc).__name__}: {exc}")
    return None


# -- the tests ------------------------------------------------------------------------------------------

def post(http: httpx.Client, route: str, body: Any, ascii_only: bool) -> None:
    body = resolve(body)
    r = send(http, route, "POST", route, body, content=encode(body, ascii_only),
             headers={"Content-Type": "application/json"})
    reply = check_post_200(route, body, r) if r is not None and r.status_code == 200 else None
    if route == RESPONSES and reply is not None:
        after_response(http, body, reply)


def after_response(http: httpx.Client, body: dict[str, Any], reply: dict[str, Any]) -> None:
    """A finished response: stored unless store is false; GET it back, list it (the
    newest: this one), and now and then delete it."""
    rid = reply["id"]
    stored = body.get("store") is not False
    r = send(http, "GET /v1/responses/{id}", "GET", f"{RESPONSES}/{rid}", rid)
    if r is None:
        return
    if stored != (r.status_code == 200):
        problem("store", "GET /v1/responses/{id}", rid, r, f"store {body.get('store')!r} but GET is {r.status_code}")
    if not stored:
        return
    send(http, "GET /v1/responses", "GET", f"{RESPONSES}?limit=1", "limit=1")
    if next(KEPT) % 7 == 6:
        send(http, "DELETE /v1/responses/{id}", "DELETE", f"{RESPONSES}/{rid}", rid)
    else:
        STORED.append(rid)


@FUZZ
@given(body=CHAT_BODIES, ascii_only=st.booleans())
def test_chat_completions_fuzz(fuzz_http: httpx.Client, body: Any, ascii_only: bool) -> None:
    post(fuzz_http, CHAT, body, ascii_only)


@FUZZ
@given(body=COMPLETION_BODIES, ascii_only=st.booleans())
def test_completions_fuzz(fuzz_http: httpx.Client, body: Any, ascii_only: bool) -> None:
    post(fuzz_http, COMPLETIONS, body, ascii_only)


@FUZZ
@given(body=RESPONSES_BODIES, ascii_only=st.booleans())
def test_responses_fuzz(fuzz_http: httpx.Client, body: Any, ascii_only: bool) -> None:
    post(fuzz_http, RESPONSES, body, ascii_only)


def _cut(data: bytes, at: int) -> bytes:
    return data[:at % (len(data) + 1)]


VALID_BYTES = {CHAT: b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}',
               COMPLETIONS: b'{"prompt": "hi", "max_tokens": 4}', RESPONSES: b'{"input": "hi", "max_output_tokens": 4}'}
RAW_BODIES = [b"", b" ", b"\n", b"null", b"true", b"0", b"[]", b'"x"', b"{", b"}", b"{}", b"NaN", b"Infinity",
              b"-Infinity", b'{"a": NaN}', b"\xff", b"\xef\xbb\xbf{}", b"\xc0\xaf", b"\xed\xa0\x80", b"\x00",
              b'{"messages": "\\ud800"}', b'{"a": 1}{"b": 2}', b'{"a": 1,}', b"{'a': 1}", b'{"a" 1}',
              b'{"max_tokens": 1' + b"0" * 5000 + b"}", b"[" * 100_000, b"{" * 3000 + b"}" * 3000,
              b'{"messages": [{"role": "user", "content": "\xed\xa0\x80"}]}', b'{"prompt": "\xed\xbf\xbf"}',
              b'{"input": "\xed\xa0\xbd\xed\xb8\x80"}']


@st.composite
def raw_bodies(draw: Any, route: str) -> bytes:
    valid = VALID_BYTES[route]
    kind = draw(st.sampled_from(["bytes", "fixed", "cut", "garbage", "encoding", "deep", "json", "large"]))
    if kind == "bytes":
        return draw(st.binary(max_size=64))
    if kind == "fixed":
        return draw(st.sampled_from(RAW_BODIES))
    if kind == "cut":
        return _cut(valid, draw(st.integers(0, len(valid))))
    if kind == "garbage":
        return draw(st.sampled_from([b"", b"\xef\xbb\xbf", b" \t\r\n", b"\x00"])) + valid + draw(st.binary(max_size=8))
    if kind == "encoding":
        return valid.decode().encode(draw(st.sampled_from(["utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-8-sig",
                                                           "latin-1", "cp037"])))
    if kind == "deep":
        depth = draw(st.sampled_from([63, 64, 65, 500, 999, 1000, 5000, 50_000]))
        where = draw(st.sampled_from(["body", "field"]))
        inner = draw(st.sampled_from(["list", "dict"]))
        value = deep_raw(depth, inner).text
        return (value if where == "body" else valid[:-1].decode() + ', "metadata": ' + value + "}").encode()
    if kind == "json":
        return encode(draw(junk), draw(st.booleans()))
    size = draw(st.sampled_from([MAX_BODY - 100, MAX_BODY, MAX_BODY + 1, 4 * MAX_BODY]))
    return valid[:-1] + b', "user": "' + b"a" * max(0, size - len(valid) - 12) + b'"}'


CONTENT_TYPES = [None, "application/json", "text/plain", "application/x-www-form-urlencoded",
                 "multipart/form-data; boundary=x", "application/json; charset=latin-1", ""]


@FUZZ
@given(route=st.sampled_from([CHAT, COMPLETIONS, RESPONSES]), data=st.data(),
       content_type=st.sampled_from(CONTENT_TYPES), chunked=st.booleans())
def test_raw_bodies_fuzz(fuzz_http: httpx.Client, route: str, data: Any, content_type: str | None,
                         chunked: bool) -> None:
    content = data.draw(raw_bodies(route))
    headers = {} if content_type is None else {"Content-Type": content_type}
    r = send(fuzz_http, route, "POST", route, content=content, headers=headers, chunked=chunked)
    if r is not None and r.status_code == 200:
        check_post_200(route, _loads(content), r)


def _loads(content: bytes) -> Any:
    try:
        return json.loads(content)
    except (ValueError, RecursionError):
        return None


# -- the GET / DELETE routes ---------------------------------------------------------------------------------

path_text = st.one_of(small_text, st.sampled_from(["fake-model", ALIAS, "resp_", "..", ".", "a/b", "org/name", " ",
                                                   "%ff", "%zz", "%", "%00", "%2f", "%c0%af", "%ed%a0%80", "%e2%80%a8",
                                                   "0" * 5000]))


def segment(text: str, raw: bool) -> str:
    """A path segment: percent-encoded, or (raw) as written (it may hold % escapes of its own)."""
    if raw:
        return "".join(c if 0x21 <= ord(c) < 0x7f and c not in "?#" else urllib.parse.quote(c.encode("utf-8",
                                                                                                   "surrogatepass"))
                       for c in text)
    return urllib.parse.quote(text.encode("utf-8", "surrogatepass"), safe="")


LIMITS = ["1", "20", "100", "0", "101", "-1", " 5", "5 ", "+5", "1.0", "1e2", "٣", "²", "１", "", "0" * 5000 + "1",
          "0" * 4300 + "1", "9" * 30, "\x00"]
query_value = st.one_of(st.none(), st.sampled_from(LIMITS), small_text, st.integers(-5, 200).map(str))
id_value = st.one_of(st.integers(0, 10 ** 6).map(StoredRef), path_text)


@st.composite
def get_requests(draw: Any) -> tuple[str, str, str, dict[str, str]]:
    """(method, route label, url, query params)."""
    kind = draw(st.sampled_from(["list", "list", "get", "get", "delete", "items", "models", "model", "health",
                                 "wrong-method"]))
    raw = draw(st.booleans())
    params: dict[str, str] = {}
    if kind == "list":
        for name in ("limit", "after"):
            v = draw(query_value if name == "limit" else st.one_of(st.none(), id_value))
            if v is not None:
                params[name] = resolve(v)
        return "GET", "GET /v1/responses", RESPONSES, params
    if kind in ("get", "delete", "items"):
        rid = resolve(draw(id_value))
        url = f"{RESPONSES}/{segment(rid, raw)}"
        if kind == "items":
            for name, values in (("order", st.sampled_from(["asc", "desc", "", "ASC", "x"])), ("limit", query_value),
                                 ("after", small_text)):
                v = draw(st.one_of(st.none(), st.none(), values))
                if v is not None:
                    params[name] = v
            return "GET", "GET /v1/responses/{id}/input_items", url + "/input_items", params
        if kind == "get":
            v = draw(st.one_of(st.none(), st.sampled_from(["false", "true", "0", "1", "", "FALSE"]), small_text))
            if v is not None:
                params["stream"] = v
            return "GET", "GET /v1/responses/{id}", url, params
        return "DELETE", "DELETE /v1/responses/{id}", url, params
    if kind == "models":
        return "GET", "GET /v1/models", "/v1/models", params
    if kind == "model":
        name = draw(path_text)
        url = "/v1/models/" + (segment(name, raw) if not draw(st.booleans()) else
                               "/".join(segment(p, raw) for p in name.split("/")))
        return "GET", "GET /v1/models/{id}", url, params
    if kind == "health":
        return "GET", "GET /health", "/health", params
    method, path = draw(st.sampled_from([("PUT", "/v1/models"), ("POST", "/v1/models"), ("GET", CHAT),
                                         ("DELETE", RESPONSES), ("PATCH", f"{RESPONSES}/x"), ("POST", "/health"),
                                         ("GET", "/v1/nope"), ("GET", "/v1//models")]))
    return method, f"{method} {path}", path, params


def _query(params: dict[str, str]) -> str:
    return "&".join(f"{k}={urllib.parse.quote(v.encode('utf-8', 'surrogatepass'), safe='')}" for k, v in params.items())


@FUZZ
@given(request=get_requests())
def test_get_routes_fuzz(fuzz_http: httpx.Client, request: tuple[str, str, str, dict[str, str]]) -> None:
    method, route, url, params = request
    full = url + ("?" + _query(params) if params else "")
    r = send(fuzz_http, route, method, full, full)
    if r is None or r.status_code != 200:
        return
    try:
        body = r.json()
        assert isinstance(body, dict), "not an object"
        if route == "DELETE /v1/responses/{id}":
            assert body["deleted"] is True
            deleted = urllib.parse.unquote(url.rsplit("/", 1)[1])
            if deleted in STORED:
                STORED.remove(deleted)
        elif route in ("GET /v1/responses", "GET /v1/models", "GET /v1/responses/{id}/input_items"):
            assert body["object"] == "list" and isinstance(body["data"], list)
        elif route == "GET /health":
            assert body.get("status") is not None or body, body
    except (AssertionError, ValueError, KeyError) as exc:
        problem("bad-200", route, full, r, f"{type(exc).__name__}: {exc}")


def test_the_fuzzer_reached_generation() -> None:
    """The fuzz is worth its time only if many bodies got past validation: each POST
    route the fuzz tests above reached (they run first, in file order) answered 200s,
    streamed ones among them."""
    reached = [route for route in (CHAT, COMPLETIONS, RESPONSES) if any(r == route for r, _ in COUNTS)]
    if not reached:
        pytest.skip("no fuzz test ran in this session")
    for route in reached:
        assert COUNTS[(route, "200")] > 0 and COUNTS[(route, "200 of them streamed")] > 0, dict(COUNTS)
