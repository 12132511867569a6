"""GGML's tensor types and their block sizes, as the GGUF format numbers them.

The same numbers the `gguf` package's GGMLQuantizationType and GGML_QUANT_SIZES give
(tests/unit/test_checkpoints.py compares them), kept here so that loading a GGUF does not
import that package: it imports sentencepiece, yaml and tqdm with it, about 9 MiB that a
server would hold for good.  The package still reads and writes GGUFs where a model is
converted.
"""

from __future__ import annotations

from enum import IntEnum


class GGMLType(IntEnum):
    F32 = 0
    F16 = 1
    Q4_0 = 2
    Q4_1 = 3
    Q5_0 = 6
    Q5_1 = 7
    Q8_0 = 8
    Q8_1 = 9
    Q2_K = 10
    Q3_K = 11
    Q4_K = 12
    Q5_K = 13
    Q6_K = 14
    Q8_K = 15
    IQ2_XXS = 16
    IQ2_XS = 17
    IQ3_XXS = 18
    IQ1_S = 19
    IQ4_NL = 20
    IQ3_S = 21
    IQ2_S = 22
    IQ4_XS = 23
    I8 = 24
    I16 = 25
    I32 = 26
    I64 = 27
    F64 = 28
    IQ1_M = 29
    BF16 = 30
    TQ1_0 = 34
    TQ2_0 = 35
    MXFP4 = 39


# (weights per block, bytes per block)
BLOCK_SIZES: dict[GGMLType, tuple[int, int]] = {
    GGMLType.F32: (1, 4), GGMLType.F16: (1, 2), GGMLType.Q4_0: (32, 18), GGMLType.Q4_1: (32, 20),
    GGMLType.Q5_0: (32, 22), GGMLType.Q5_1: (32, 24), GGMLType.Q8_0: (32, 34), GGMLType.Q8_1: (32, 40),
    GGMLType.Q2_K: (256, 84), GGMLType.Q3_K: (256, 110), GGMLType.Q4_K: (256, 144), GGMLType.Q5_K: (256, 176),
    GGMLType.Q6_K: (256, 210), GGMLType.Q8_K: (256, 292), GGMLType.IQ2_XXS: (256, 66), GGMLType.IQ2_XS: (256, 74),
    GGMLType.IQ3_XXS: (256, 98), GGMLType.IQ1_S: (256, 50), GGMLType.IQ4_NL: (32, 18), GGMLType.IQ3_S: (256, 110),
    GGMLType.IQ2_S: (256, 82), GGMLType.IQ4_XS: (256, 136), GGMLType.I8: (1, 1), GGMLType.I16: (1, 2),
    GGMLType.I32: (1, 4), GGMLType.I64: (1, 8), GGMLType.F64: (1, 8), GGMLType.IQ1_M: (256, 56),
    GGMLType.BF16: (1, 2), GGMLType.TQ1_0: (256, 54), GGMLType.TQ2_0: (256, 66), GGMLType.MXFP4: (32, 17),
}
