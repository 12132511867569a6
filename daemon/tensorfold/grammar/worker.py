"""A grammar compile worker: a child process that compiles specs for one tokenizer.

compile.py starts it as `python -m tensorfold.grammar.worker` with pipes on
stdin and stdout, so the parent can kill a compile that runs too long or that
nobody waits for any more. The messages (pipe.py: pickled, each after its
8-byte length):

    parent -> child   TokenizerInfo.serialize_json()        (once, first)
    child -> parent   ("ready",)
    parent -> child   (kind, text)                          (a GrammarSpec)
    child -> parent   ("fast",)    it compiled within LOCAL_SECONDS: the parent
                                   compiles it again itself, which costs less than
                                   moving it (a JSON schema: 40 ms to compile, 400 ms
                                   to serialize and read back)
                      ("ok", CompiledGrammar.serialize_json())
                      or ("error", message, reason)

The parent sends the next spec only after the answer. The child exits as soon
as its stdin closes (the parent closed it or died), even in the middle of a
compile, and ignores SIGINT (a Ctrl-C reaches the whole process group; the
parent decides when its workers end).
"""

from __future__ import annotations

import os
import queue
import threading
import time
from typing import Any

from .build import build
from .errors import GrammarError, clean_reason, load_xgrammar
from .pipe import child_streams, read_message, write_message
from .spec import LABELS

LOCAL_SECONDS = 1.0     # a spec that compiled faster is compiled again by the parent, not sent


def answer(xgc: Any, kind: str, text: str) -> tuple[str, ...]:
    """The reply message for one spec."""
    start = time.monotonic()
    try:
        compiled = build(xgc, kind, text)
    except GrammarError as exc:
        return ("error", str(exc), exc.reason)
    if time.monotonic() - start < LOCAL_SECONDS:
        return ("fast",)
    return ("ok", compiled.serialize_json())


def main() -> None:
    inp, out = child_streams()
    try:
        info_json = read_message(inp)
    except EOFError:
        return
    xg = load_xgrammar()
    xgc = xg.GrammarCompiler(xg.TokenizerInfo.deserialize_json(info_json), max_threads=1,
                             cache_enabled=False)
    del info_json
    write_message(out, ("ready",))
    specs: queue.Queue[tuple[str, str]] = queue.Queue()

    def compile_loop() -> None:
        while True:
            kind, text = specs.get()
            try:
                reply = answer(xgc, kind, text)
            except Exception as exc:            # e.g. serializing failed: still an answer
                reply = ("error", f"{LABELS.get(kind, 'invalid grammar')}: {clean_reason(exc)}",
                         clean_reason(exc))
            try:
                write_message(out, reply)
            except OSError:                     # the parent is gone
                os._exit(0)

    threading.Thread(target=compile_loop, name="compile", daemon=True).start()
    while True:             # the main thread watches stdin, so its closing ends even a running compile
        try:
            specs.put(read_message(inp))
        except EOFError:
            os._exit(0)


if __name__ == "__main__":
    main()
