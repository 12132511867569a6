"""Without the compiled kernels the CPU engine refuses to start, with how to build them."""

from __future__ import annotations

import importlib.util

from tensorfold.cli import main
from tensorfold.native import lib


def test_missing_kernels_is_a_clear_error_at_start(monkeypatch, capsys, tiny_model):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name.endswith("_tfkernels") else real(name, *a))
    lib.load.cache_clear()
    try:
        code = main(["--log-level", "WARNING", "serve", "--model", str(tiny_model), "--device", "cpu",
                     "--port", "0"])
    finally:
        monkeypatch.undo()
        lib.load.cache_clear()
    err = capsys.readouterr().err
    assert code == 2
    assert "CPU kernels" in err and "not built" in err and "pip install -e ." in err
