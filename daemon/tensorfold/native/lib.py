"""The compiled kernels, loaded with ctypes, and their C structures.

The shared library `tensorfold/native/_tfkernels*.so` is built by the
package's own build (setup.py) where an extension module would go; its
exported C functions are called directly (it defines no Python module).  If it is
missing, `load()` raises NativeMissing with how to build it: the CPU engine
never falls back to a slower path in silence.
"""

from __future__ import annotations

import ctypes as C
import importlib.util
import os
from functools import cache

ISA_NAMES = {0: "scalar", 1: "avx2", 2: "avx512-vnni", 3: "neon"}

_f32p = C.POINTER(C.c_float)
_i32p = C.POINTER(C.c_int32)


MAX_RANKS = 8                     # TF_MAX_RANKS
# int gather(const float *send, float *recv, int64_t count): all-gather count floats of every rank
GATHER = C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_void_p, C.c_int64)


class NativeMissing(RuntimeError):
    pass


class Weight(C.Structure):
    _fields_ = [("fmt", C.c_int32), ("flags", C.c_int32), ("n", C.c_int32), ("k", C.c_int32),
                ("q", C.c_void_p), ("s", C.c_void_p), ("bias", C.c_void_p)]


class Layer(C.Structure):
    _fields_ = [(name, Weight) for name in ("q", "k", "v", "o", "gate", "up", "down")] + [
                ("attn_norm", C.c_void_p), ("mlp_norm", C.c_void_p),
                ("q_norm", C.c_void_p), ("k_norm", C.c_void_p),
                ("kind", C.c_int32), ("slot", C.c_int32)] + [
                (name, Weight) for name in ("qgate", "z", "b", "a")] + [
                (name, C.c_void_p) for name in ("conv", "dt_bias", "decay_a", "gnorm")]


class DeltaNet(C.Structure):
    _fields_ = [(name, C.c_int32) for name in ("k_heads", "v_heads", "k_dim", "v_dim", "conv_k", "tiled")] + [
                ("state", C.c_void_p), ("slot_stride", C.c_int64), ("v_all", C.c_int32),
                ("v_order", C.c_void_p), ("v_split", C.c_int32 * (MAX_RANKS + 1))]


class Model(C.Structure):
    _fields_ = [(name, C.c_int32) for name in ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn",
                                                 "vocab", "max_pos", "block_size", "threads")] + [
        ("eps", C.c_float), ("layer", C.POINTER(Layer)), ("embed", Weight), ("head", Weight),
        ("norm", C.c_void_p), ("cos", C.c_void_p), ("sin", C.c_void_p), ("rot_dim", C.c_int32),
        ("mrope", C.c_int32 * 3), ("dn", DeltaNet), ("kv", C.c_void_p),
        ("block_stride", C.c_int64), ("kv_stride", C.c_int64), ("kv_scale", C.c_void_p), ("scale_region", C.c_int64),
        ("ranks", C.c_int32), ("rank", C.c_int32), ("kv_split", C.c_int32 * (MAX_RANKS + 1)),
        ("hidden_split", C.c_int32 * (MAX_RANKS + 1)), ("ffn_split", C.c_int32 * (MAX_RANKS + 1)),
        ("gather", GATHER)]


class Inputs(C.Structure):
    """tf_inputs: a forward's rows' state slots, image embeddings and M-RoPE positions."""
    _fields_ = [("state_src", C.c_void_p), ("state_dst", C.c_void_p), ("embed_row", C.c_void_p),
                ("embeds", C.c_void_p), ("mrope", C.c_void_p)]


_SIGNATURES = {
    "tf_forward": (C.c_int, [C.POINTER(Model), _i32p, C.c_int, _i32p, _i32p, _i32p, _i32p, C.c_int, _f32p,
                             C.POINTER(Inputs)]),
    "tf_linear": (C.c_int, [C.POINTER(Weight), _f32p, C.c_int, _f32p]),
    "tf_kpack": (None, [C.c_int, C.c_void_p, C.c_int, C.c_int, C.c_void_p, C.c_void_p]),
    "tf_bpack": (None, [C.c_int, C.c_int, C.c_int, C.c_int, C.c_void_p, C.c_void_p, C.c_void_p, C.c_void_p,
                        C.c_void_p]),
    "tf_pool_set_threads": (C.c_int, [C.c_int]),
    "tf_pool_threads": (C.c_int, []),
    "tf_isa": (C.c_int, []),
    "tf_best_isa": (C.c_int, []),
    "tf_set_isa": (C.c_int, [C.c_int]),
    "tf_set_soft_fp16": (None, [C.c_int]),
    "tf_kv_ahead": (C.c_int, []),
    "tf_kv_ahead_default": (C.c_int, []),
    "tf_set_kv_ahead": (None, [C.c_int]),
    "tf_exp": (C.c_float, [C.c_float]),
    "tf_softmax_rows": (None, [_f32p, C.c_int, C.c_int, C.c_int, _f32p]),
    "tf_token_masses": (None, [_f32p, C.c_int64, C.c_double, C.c_double, C.POINTER(C.c_int64)]),
    "tf_f2h": (C.c_uint16, [C.c_float]),
    "tf_h2f": (C.c_float, [C.c_uint16]),
    "tf_f2h_row": (None, [_f32p, C.POINTER(C.c_uint16), C.c_int]),
    "tf_rms_norm": (None, [_f32p, _f32p, C.c_float, C.c_int, _f32p]),
    "tf_silu_mul": (None, [_f32p, _f32p, _f32p, C.c_int64]),
    "tf_dequant_row": (None, [C.POINTER(Weight), C.c_int, _f32p]),
    "tf_bpe_table": (C.c_int, [C.c_void_p, C.c_void_p, C.c_void_p, C.c_int64, C.c_int, C.c_void_p, C.c_void_p]),
    "tf_bpe_merge": (C.c_int64, [C.c_void_p, C.c_void_p, C.c_int, C.c_void_p, C.c_void_p, C.c_int64, C.c_void_p]),
}


@cache
def load() -> C.CDLL:
    spec = importlib.util.find_spec("tensorfold.native._tfkernels")
    if spec is None or not spec.origin:
        raise NativeMissing(
            "the CPU kernels (tensorfold.native._tfkernels) are not built; build them with the package: "
            "`pip install -e .` (needs a C compiler: `apt-get install gcc`, or Xcode's command line tools "
            "on macOS), or run ./scripts/setup")
    lib = C.CDLL(spec.origin)
    for name, (res, args) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    if os.environ.get("TENSORFOLD_ISA"):
        want = {v: k for k, v in ISA_NAMES.items()}.get(os.environ["TENSORFOLD_ISA"], -2)
        if lib.tf_set_isa(want) < 0:
            raise NativeMissing(f"TENSORFOLD_ISA={os.environ['TENSORFOLD_ISA']} is not available on this CPU "
                                f"(best: {ISA_NAMES[lib.tf_best_isa()]})")
    ahead = os.environ.get("TENSORFOLD_KV_AHEAD")
    if ahead:
        if ahead not in ("0", "1"):
            raise NativeMissing(f"TENSORFOLD_KV_AHEAD={ahead}: use 1 (walk the next layer's KV ahead) or 0")
        lib.tf_set_kv_ahead(int(ahead))
    return lib


def isa() -> str:
    return ISA_NAMES[load().tf_isa()]


def ensure_threads(n: int) -> None:
    """Grow the shared pool to at least n threads (each model runs on its own count of them)."""
    pool = load()
    if pool.tf_pool_threads() < n:
        pool.tf_pool_set_threads(n)


def ptr(array, ctype=C.c_float):
    """A ctypes pointer to a numpy array's or torch tensor's first element."""
    address = array.data_ptr() if hasattr(array, "data_ptr") else array.ctypes.data
    return C.cast(address, C.POINTER(ctype))
