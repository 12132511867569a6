"""Where TensorFold keeps converted models.

The model cache is ``platformdirs.user_cache_dir("tensorfold") / "models"``
(``~/.cache/tensorfold/models`` on Linux, ``~/Library/Caches/tensorfold/models``
on macOS). The environment variable ``TENSORFOLD_CACHE_DIR`` replaces that
folder entirely (it *is* the models folder); tests and CI use it.

Hugging Face repos are not stored here: they live in the Hugging Face hub
cache (``HF_HOME`` / ``HF_HUB_CACHE``), shared with other tools.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

CACHE_ENV = "TENSORFOLD_CACHE_DIR"
APP_NAME = "tensorfold"


def model_cache_dir(create: bool = True) -> Path:
    """The folder holding converted models, created unless ``create`` is False."""
    override = os.environ.get(CACHE_ENV, "").strip()
    if override:
        path = Path(override).expanduser()
    else:
        path = Path(platformdirs.user_cache_dir(APP_NAME, appauthor=False)) / "models"
    if create:
        path.mkdir(parents=True, exist_ok=True)
    return path


def hf_hub_cache_dir() -> Path:
    """The Hugging Face hub cache, read from the environment at call time.

    ``huggingface_hub`` reads these variables once at import; reading them
    here again lets a process (or a test) change them later.
    """
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        value = os.environ.get(var)
        if value:
            return Path(os.path.expandvars(value)).expanduser()
    home = os.environ.get("HF_HOME")
    if home:
        return Path(os.path.expandvars(home)).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "huggingface" / "hub"


def hf_offline() -> bool:
    """True when ``HF_HUB_OFFLINE`` or ``TRANSFORMERS_OFFLINE`` is set now."""
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(var, "").strip().upper() in {"1", "ON", "YES", "TRUE"}:
            return True
    return False
