"""mlx-lm's own server (`python -m mlx_lm.server`) for `bench decode --against mlx-lm`: the
8-stream figure of the engine we compare with, as its users run it.

The server loads an MLX folder: the model exactly as our MLX loader built it (the same
weights in the same format) saved with mlx-lm's own writer, with the checkpoint's tokenizer
files beside it.  Streams are greedy `/v1/completions` requests sent together, the prompts
as text (the server tokenizes them itself); the aggregate counts streamed chunks from the
last stream's first chunk to the first stream's last, as our figure does.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from .decode import lockstep_rate

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                   "generation_config.json", "tokenizer.model", "vocab.json", "merges.txt")


def write_mlx_folder(model: Any, folder: Path, out: Path) -> None:
    """`model` saved as an MLX folder mlx-lm loads: its weights as they are, the source
    folder's config with the quantization the model's layers have (each quantized layer's
    group size and bits, as mlx-lm's loader reads them) and the model_type of the mlx-lm
    implementation it runs, its tokenizer files."""
    import mlx.nn as nn
    from mlx_lm.utils import save_config, save_model

    from ..backends.mlx.load import MODEL_TYPES

    config = json.loads((folder / "config.json").read_text())
    config["model_type"] = MODEL_TYPES.get(config.get("model_type"), config.get("model_type"))
    for key in ("quantization", "quantization_config"):
        config.pop(key, None)
    layers = {path: {"group_size": m.group_size, "bits": m.bits, "mode": m.mode}
              for path, m in model.named_modules() if isinstance(m, (nn.QuantizedLinear, nn.QuantizedEmbedding))}
    if layers:
        config["quantization"] = {**next(iter(layers.values())), **layers}
    save_model(out, model)
    save_config(config, out / "config.json")
    for name in TOKENIZER_FILES:
        if (folder / name).is_file():
            shutil.copy(folder / name, out / name)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MlxLmServer:
    """mlx_lm.server on a saved copy of `model`, started in a subprocess; close() stops it."""

    def __init__(self, model: Any, folder: Path, streams: int, max_tokens: int, ready_s: float = 600.0) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="tensorfold-mlxlm-"))
        self.proc: subprocess.Popen | None = None
        try:
            write_mlx_folder(model, folder, self.dir / "model")
            port = _free_port()
            self.url = f"http://127.0.0.1:{port}"
            self.log = open(self.dir / "server.log", "wb")
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "mlx_lm.server", "--model", str(self.dir / "model"), "--port", str(port),
                 "--temp", "0", "--max-tokens", str(max_tokens), "--decode-concurrency", str(streams),
                 "--prompt-concurrency", str(streams)],
                stdout=self.log, stderr=subprocess.STDOUT, env={**os.environ, "HF_HUB_OFFLINE": "1"})
            self._wait_ready(ready_s)
        except BaseException:
            self.close()
            raise

    def _wait_ready(self, ready_s: float) -> None:
        deadline = time.monotonic() + ready_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mlx_lm.server exited ({self.proc.returncode}): "
                                   f"{(self.dir / 'server.log').read_text(errors='replace')[-800:]}")
            try:
                if httpx.get(f"{self.url}/v1/models", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"mlx_lm.server did not answer within {ready_s:.0f} s")

    def stream_times(self, prompt: str, max_tokens: int) -> list[float]:
        """Arrival time of each streamed chunk with text of one greedy completion."""
        body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0, "stream": True}
        times: list[float] = []
        with httpx.stream("POST", f"{self.url}/v1/completions", json=body, timeout=None) as r:
            r.raise_for_status()
            for line in r.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                choices = json.loads(line[6:]).get("choices") or []
                if choices and choices[0].get("text"):
                    times.append(time.perf_counter())
        return times

    def many(self, prompts: list[str], max_tokens: int) -> float:
        """Aggregate decode tokens/s of `prompts` sent together."""
        times: list[list[float]] = [[] for _ in prompts]
        errors: list[BaseException] = []

        def run(i: int) -> None:
            try:
                times[i] = self.stream_times(prompts[i], max_tokens)
            except BaseException as exc:          # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise RuntimeError(f"mlx_lm.server: {errors[0]}")
        return lockstep_rate(times)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        if getattr(self, "log", None):
            self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
