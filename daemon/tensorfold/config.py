"""Server and engine settings: frozen dataclasses filled from the command line."""

from __future__ import annotations

from dataclasses import dataclass, field, fields


@dataclass(frozen=True, slots=True)
class SamplingDefaults:
    """Server-side defaults that a request's null or absent fields keep."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0


@dataclass(frozen=True, slots=True)
class EngineConfig:
    model: str | None = None            # spec for checkpoints.resolve_model
    engine: str = "auto"                # auto (MLX on Apple silicon, else torch) | torch | mlx
    dtype: str = "auto"                 # auto | bfloat16 | float32
    device: str = "auto"                # auto | cpu | cuda
    weights: str = "auto"               # CPU: auto (a GGUF as stored, else q8_0) | q8_0 | q4_0 | bf16
    kv_cache: str = "fp16"              # CPU: the KV cache's keys and values, fp16 | int8
    context: int | None = None          # served window; None: the checkpoint's limit, within memory
    threads: int | None = None          # CPU threads; None: the machine's cores
    ranks: int = 1                      # processes the model is split across (CPU, gloo)
    parallel: int = 0                   # lanes sharing rounds; 0 is auto
    prefill_chunk: int = 256            # prompt rows per prefill round
    background_chunk: int = 64          # prompt rows per round for a background prompt
    decode_share: float = 0.25          # decode time between prefill chunks, as a share of a chunk's
    block_size: int = 32                # positions per KV block
    kv_memory: float | None = None      # GiB for the KV pool; None: from the memory available
    cache_idle: float = 300.0           # CPU: seconds without requests, then the prefix cache's memory goes
    draft_model: str | None = None      # a smaller model with the same tokenizer drafts; None: prompt lookup
    chat_template: str | None = None    # Jinja text replacing the checkpoint's chat template
    vision: bool = False                # load the checkpoint's vision tower: image parts are taken
    mmproj: str | None = None           # a GGUF model's vision tower: llama.cpp's mmproj file


AUTO_LANES = 8
KV_CACHES = ("fp16", "int8")            # --kv-cache


@dataclass(frozen=True, slots=True)
class Limits:
    """What one request may ask of the server: each refused with a 400 (413 for the body)
    naming its field and the `--limit NAME=VALUE` that raises it."""

    body_bytes: int = 8 * 1024 * 1024      # the request body (413)
    messages: int = 4096                   # chat messages, or Responses input items
    message_chars: int = 1_000_000         # the strings of one message or input item; a prompt; instructions
    stop_strings: int = 16                 # stop strings per request
    stop_chars: int = 4096                 # characters per stop string
    grammar_bytes: int = 128 * 1024        # a structured-output schema, regex, grammar or choice list
    grammar_seconds: float = 20.0          # compile time of one grammar
    depth: int = 64                        # arrays and objects nested in one another
    images: int = 8                        # image parts per request (--vision)
    image_bytes: int = 20 * 1024 * 1024    # one image, encoded (a data URL's payload or a fetched body)
    image_pixels: int = 50_000_000         # one image's width x height as decoded, before resizing

    @classmethod
    def parse(cls, items: list[str] | tuple[str, ...]) -> Limits:
        """Limits from NAME=VALUE strings (the --limit flag); ValueError names what is wrong."""
        values: dict[str, int | float] = {}
        names = {f.name: f.type for f in fields(cls)}
        for item in items:
            name, eq, text = item.partition("=")
            name = name.strip().replace("-", "_")
            if not eq or name not in names:
                raise ValueError(f"{item!r}: expected NAME=VALUE with NAME one of {', '.join(names)}")
            try:
                value = float(text) if names[name] == "float" else int(text)
            except ValueError:
                raise ValueError(f"{item!r}: {text!r} is not a number") from None
            if not value > 0:
                raise ValueError(f"{item!r}: the limit must be above 0")
            values[name] = value
        return cls(**values)




@dataclass(frozen=True, slots=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8080
    served_model_name: str | None = None   # default: the checkpoint folder's name
    aliases: tuple[str, ...] = ()
    api_key: str | None = None
    allowed_origins: tuple[str, ...] = ()  # browser origins (or "*") that may call /v1 with CORS
    max_tokens: int | None = None          # default reply limit; None: remaining context
    tool_parser: str | None = None         # tool-call format; None: chosen from the chat template
    reasoning_effort: str | None = None    # effort for requests that send none; None: the template's
    thinking_budget: int | None = None     # thinking tokens before the block is closed; None: no limit
    sampling: SamplingDefaults = field(default_factory=SamplingDefaults)
    engine: EngineConfig = field(default_factory=EngineConfig)
    limits: Limits = field(default_factory=Limits)
