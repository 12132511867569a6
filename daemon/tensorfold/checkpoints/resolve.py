"""Turn a ``--model`` value into a local Hugging Face style folder.

Accepted forms, tried in this order:

1. nothing, ``default`` or ``SmolLM2-135M-Instruct``: the built-in default
   model (downloaded and converted once, see ``default.py``);
2. a local folder holding ``config.json``: used as it is;
3. a ``.gguf`` file: converted once into the model cache, in a folder named
   ``<file stem>-<key>`` where ``key`` is the first 12 hex digits of the
   sha256 of the file's absolute path, size and modification time. Hashing
   the path and stat instead of the content keeps a multi-GB file from being
   read twice; editing or replacing the file gives a new key (a fresh
   conversion), and a converted folder is never rewritten in place;
4. the name of a folder already in the model cache (as ``list_cached`` shows);
5. a Hugging Face repo id ``org/name``: ``huggingface_hub.snapshot_download``
   of the config, tokenizer, chat template and safetensors files, kept in the
   Hugging Face hub cache. Offline (``HF_HUB_OFFLINE=1``) only that cache is
   used.
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from .default import DEFAULT_MODEL_NAME, pull_default
from .errors import CheckpointError
from .paths import hf_hub_cache_dir, hf_offline, model_cache_dir
from .store import build_atomically, folder_size, is_complete, read_marker

log = logging.getLogger(__name__)

_DEFAULT_ALIASES = {"default", DEFAULT_MODEL_NAME.lower()}
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
HF_ALLOW_PATTERNS = [
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "chat_template.json",
    "chat_template.jinja",
    "*.safetensors",
    "model.safetensors.index.json",
]


@dataclass(frozen=True, slots=True)
class CachedModel:
    """One model available without a download."""

    name: str  # what to pass as --model
    path: Path  # the HF-style folder
    size: int  # bytes on disk
    source: str  # "default", "gguf", "huggingface", or "tensorfold" (unknown origin)


def gguf_cache_name(gguf_path: Path) -> str:
    """The cache folder name for a GGUF file (see the module docstring)."""
    resolved = gguf_path.resolve()
    stat = resolved.stat()
    key = hashlib.sha256(f"{resolved}\0{stat.st_size}\0{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", resolved.stem).strip("._") or "model"
    return f"{stem}-{key}"


def convert_gguf_cached(gguf_path: Path) -> Path:
    """Convert ``gguf_path`` into the model cache once; return the folder."""
    from .gguf_convert import convert_gguf_apart

    dest = model_cache_dir() / gguf_cache_name(gguf_path)
    if is_complete(dest):
        return dest
    stat = gguf_path.stat()
    info = {"kind": "gguf", "source": str(gguf_path.resolve()), "gguf_size": stat.st_size}
    return build_atomically(dest, lambda work: convert_gguf_apart(gguf_path, work), info)


def _is_gguf(path: Path) -> bool:
    if path.suffix.lower() == ".gguf":
        return True
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == b"GGUF"
    except OSError:
        return False


def _hf_error(repo_id: str, exc: Exception) -> CheckpointError:
    name = type(exc).__name__
    cache = hf_hub_cache_dir()
    fix = "Pass a local model folder or a .gguf file with --model instead"
    if name == "GatedRepoError":
        why = "is gated: accept its license on huggingface.co and log in with `hf auth login`"
    elif name == "RepositoryNotFoundError":
        why = "does not exist on the Hugging Face hub or is private (log in with `hf auth login`)"
    elif name == "RevisionNotFoundError":
        why = "has no such revision"
    else:
        mode = "offline mode (HF_HUB_OFFLINE) is on" if hf_offline() else "the hub could not be reached"
        why = f"could not be downloaded ({mode}) and is not in the Hugging Face cache at {cache}"
        fix += ", or run once with network access to huggingface.co"
    return CheckpointError(f"Hugging Face repo {repo_id!r} {why}. {fix}. [{name}: {exc}]")


def snapshot_repo(repo_id: str) -> Path:
    """Download (or find in the HF cache) the files TensorFold needs from ``repo_id``."""
    from huggingface_hub import constants, snapshot_download

    offline = hf_offline() or bool(constants.HF_HUB_OFFLINE)
    try:
        folder = Path(
            snapshot_download(
                repo_id,
                cache_dir=str(hf_hub_cache_dir()),
                allow_patterns=HF_ALLOW_PATTERNS,
                local_files_only=offline,
            )
        )
    except Exception as exc:  # huggingface_hub, httpx and OS errors alike
        raise _hf_error(repo_id, exc) from exc
    if not (folder / "config.json").is_file():
        raise CheckpointError(f"Hugging Face repo {repo_id!r} has no config.json; it is not a transformers model")
    if not any(folder.glob("*.safetensors")):
        raise CheckpointError(
            f"Hugging Face repo {repo_id!r} has no safetensors weights; TensorFold loads safetensors "
            "checkpoints or GGUF files (download the .gguf and pass its path with --model)"
        )
    return folder


def resolve_model(spec: str | None, progress: bool = True) -> Path:
    """A local Hugging Face style folder for ``spec`` (see the module docstring)."""
    text = (spec or "").strip()
    if not text or text.lower() in _DEFAULT_ALIASES:
        return pull_default(progress)
    path = Path(text).expanduser()
    if path.is_dir():
        if (path / "config.json").is_file():
            return path.resolve()
        ggufs = sorted(path.glob("*.gguf"))
        hint = f"; to use a GGUF file, pass it: --model {ggufs[0]}" if ggufs else ""
        raise CheckpointError(f"folder {path} has no config.json, so it is not a model folder{hint}")
    if path.is_file():
        if _is_gguf(path):
            return convert_gguf_cached(path)
        raise CheckpointError(f"{path} is a file but not a GGUF file; pass a model folder, a .gguf file or a repo id")
    cached = model_cache_dir(create=False) / text
    if "/" not in text and "\\" not in text and is_complete(cached):
        return cached
    if _REPO_ID.match(text) and not text.lower().endswith(".gguf"):
        return snapshot_repo(text)
    names = [m.name for m in list_cached()][:10]
    available = f" Cached models: {', '.join(names)}." if names else ""
    raise CheckpointError(
        f"--model {text!r} is not a local model folder (with config.json), not an existing .gguf file, "
        f"not a model in the cache ({model_cache_dir(create=False)}), and not a Hugging Face repo id "
        f"like 'org/name'.{available} Omit --model to use the default model ({DEFAULT_MODEL_NAME})."
    )


def _hf_models() -> list[CachedModel]:
    cache = hf_hub_cache_dir()
    if not cache.is_dir():
        return []
    try:
        from huggingface_hub import scan_cache_dir

        info = scan_cache_dir(cache)
    except Exception as exc:
        log.debug("could not scan the Hugging Face cache %s: %s", cache, exc)
        return []
    found: list[CachedModel] = []
    for repo in info.repos:
        try:
            if repo.repo_type != "model" or not repo.revisions:
                continue
            latest = max(repo.revisions, key=lambda r: r.last_modified)
            snap = Path(latest.snapshot_path)
            if (snap / "config.json").is_file() and any(snap.glob("*.safetensors")):
                found.append(CachedModel(repo.repo_id, snap, int(repo.size_on_disk), "huggingface"))
        except Exception as exc:
            log.debug("skipping cached repo %s: %s", getattr(repo, "repo_id", "?"), exc)
    return found


def list_cached() -> list[CachedModel]:
    """Models usable without a download: the model cache, then Hugging Face hub repos."""
    models: list[CachedModel] = []
    cache = model_cache_dir(create=False)
    if cache.is_dir():
        for entry in sorted(cache.iterdir()):
            if entry.name.startswith(".") or not entry.is_dir() or not is_complete(entry):
                continue
            kind = str(read_marker(entry).get("kind", "tensorfold"))
            models.append(CachedModel(entry.name, entry, folder_size(entry), kind))
    models.extend(sorted(_hf_models(), key=lambda m: m.name.lower()))
    return models
