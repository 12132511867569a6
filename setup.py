"""The compiled part: TensorFold's CPU kernels (daemon/tensorfold/native/csrc).

Everything else is declared in pyproject.toml.  The kernels are plain C11 with
SIMD paths chosen at run time (AVX2 / AVX-512 VNNI on x86-64, NEON on ARM);
-ffp-contract=off keeps the compiler from fusing multiply-adds, so every path
computes the same bits.  The library is built where an extension module goes
but defines no module: Python loads it with ctypes (tensorfold/native/lib.py),
so building it needs a C compiler and no Python headers."""

import sys
from pathlib import Path

from setuptools import Extension, setup

src = Path("daemon/tensorfold/native/csrc")
# -fno-wrapv undoes the -fwrapv of Python's own CFLAGS, which setuptools passes first: with
# wrapping int arithmetic the compiler cannot widen the kernels' index expressions, and
# attention ran 1.5x slower.
flags = ["-std=c11", "-O3", "-fno-wrapv", "-ffp-contract=off", "-fno-math-errno", "-fvisibility=default"]
if sys.platform == "win32":
    flags = ["/O2", "/fp:precise"]

setup(ext_modules=[Extension(
    "tensorfold.native._tfkernels",
    sources=sorted(str(p) for p in src.glob("*.c")),
    depends=sorted(str(p) for p in src.glob("*.h")),
    extra_compile_args=flags,
    libraries=[] if sys.platform == "win32" else ["m", "pthread"],
)])
