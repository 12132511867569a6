"""The kernels' SIMD paths give their scalar reference's bits on this CPU and, built for
ARM and run under qemu-aarch64, on NEON too; the references agree across the two
(native_same_bits.c).  Here the harness links the package's built library (the one the
daemon loads: rebuild it after changing the kernels); for ARM it builds the sources.
The ARM half needs a cross compiler and qemu (scripts/test-system-packages installs
them on Debian); without them it skips."""

from __future__ import annotations

import ast
import importlib.util
import platform
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CSRC = ROOT / "daemon/tensorfold/native/csrc"
HARNESS = Path(__file__).with_name("native_same_bits.c")
SOURCES = ["tf_ahead.c", "tf_bdot.c", "tf_kdot.c", "tf_dot.c", "tf_ops.c", "tf_pool.c"]
# ARMv8.2 with dot products and fp16 (Apple silicon, recent ARM servers), and the plain
# ARMv8-A baseline whose paths widen products by hand
ARM_TARGETS = ["armv8.2-a+fp16+dotprod", "armv8-a"]


def build_flags() -> list[str]:
    """The C flags setup.py builds the kernels with."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "flags":
            return ast.literal_eval(node.value)
    raise AssertionError("setup.py has no flags list")


def build(cc: str, out: Path, extra: list[str], kernels: list[str] | None = None) -> None:
    """The harness with the kernels: `kernels` (a built library) or the sources."""
    kernels = kernels or [str(CSRC / s) for s in SOURCES]
    cmd = [cc, *build_flags(), *extra, f"-I{CSRC}", str(HARNESS), *kernels, "-lm", "-lpthread", "-o", str(out)]
    subprocess.run(cmd, check=True, capture_output=True, text=True)


def run(cmd: list[str]) -> dict[str, tuple[str, str]]:
    """case -> (reference hash, same|DIFFER)"""
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    cases = {}
    for line in proc.stdout.splitlines():
        name, digest, verdict = line.split()
        cases[name] = (digest, verdict)
    assert cases, proc.stderr
    assert all(v == "same" for _, v in cases.values()), {n: v for n, (_, v) in cases.items() if v != "same"}
    assert proc.returncode == 0
    return cases


@pytest.fixture(scope="module")
def native(tmp_path_factory) -> dict[str, tuple[str, str]]:
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler")
    spec = importlib.util.find_spec("tensorfold.native._tfkernels")
    assert spec and spec.origin, "the kernels are not built (scripts/setup builds them)"
    lib = Path(spec.origin)
    exe = tmp_path_factory.mktemp("native") / "same_bits"
    build(cc, exe, [], [str(lib), f"-Wl,-rpath,{lib.parent}"])
    return run([str(exe)])


def test_every_simd_path_gives_the_reference_bits_here(native):
    assert len(native) == 13 * 4 + 4 * 2 * 8 + 3      # attention: fp16 and int8 KV, 3, 6, 7 and 8 heads a kv head
    for name in [n for n in native if n.startswith("attend") and not n.endswith("-by-head")]:
        assert native[name][0] == native[f"{name}-by-head"][0], name     # a head's bits whoever shares its call


@pytest.mark.parametrize("target", ARM_TARGETS)
def test_neon_gives_the_reference_bits_and_the_reference_agrees_across_cpus(native, target, tmp_path):
    cross, qemu = shutil.which("aarch64-linux-gnu-gcc"), shutil.which("qemu-aarch64")
    if platform.machine() in ("aarch64", "arm64"):
        pytest.skip("this machine is ARM: the native test covers NEON")
    if cross is None or qemu is None:
        pytest.skip("needs aarch64-linux-gnu-gcc and qemu-aarch64 (scripts/test-system-packages)")
    exe = tmp_path / "same_bits_arm"
    build(cross, exe, [f"-march={target}", "-static"])
    arm = run([qemu, str(exe)])
    assert {n: d for n, (d, _) in arm.items()} == {n: d for n, (d, _) in native.items()}
