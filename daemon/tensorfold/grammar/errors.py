"""Grammar errors and the one place that imports xgrammar."""

from __future__ import annotations

import re
from types import ModuleType

INSTALL_HINT = "pip install 'tensorfold[grammar]'"


class GrammarError(ValueError):
    """A grammar that cannot be compiled (HTTP 400), or a reply that left its grammar (HTTP 500).

    `reason` is xgrammar's own explanation (or ours), without file/line noise.
    """

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason if reason is not None else message


class GrammarTimeout(GrammarError):
    """A grammar that took longer than the compiler's time budget to compile (HTTP 400)."""

    def __init__(self, seconds: float) -> None:
        reason = f"it took longer than {seconds:g} s to compile"
        super().__init__(f"the grammar took longer than {seconds:g} s to compile", reason)


class GrammarBusy(GrammarError):
    """Too many distinct grammars are compiling or waiting to compile (HTTP 429: retry later)."""


class GrammarUnavailable(GrammarError):
    """xgrammar is not installed on the server (HTTP 400, with the install command)."""

    def __init__(self, detail: str = "") -> None:
        message = f"structured outputs need xgrammar on the server: {INSTALL_HINT}"
        if detail:
            message += f" ({detail})"
        super().__init__(message, reason=detail or "xgrammar is not installed")


def load_xgrammar() -> ModuleType:
    """The xgrammar module, or GrammarUnavailable with the install command."""
    try:
        import xgrammar
    except ImportError as exc:
        raise GrammarUnavailable(str(exc)) from exc
    return xgrammar


def available() -> bool:
    """Whether xgrammar can be imported here."""
    try:
        load_xgrammar()
    except GrammarUnavailable:
        return False
    return True


_PREFIX = re.compile(r"^\s*\[[0-9:.]+\]\s+\S+:\d+:\s*")
_CHECK = re.compile(r"Check failed: \(.*?\) is false:\s*")


def clean_reason(exc: BaseException) -> str:
    """xgrammar's message without the timestamp, C++ file/line and check expression."""
    text = str(exc).strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    # tvm-ffi may add a traceback: keep the last line that carries the message
    msg = lines[-1] if lines else type(exc).__name__
    for ln in lines:
        if _PREFIX.match(ln):
            msg = ln
            break
    msg = _CHECK.sub("", _PREFIX.sub("", msg)).strip()
    return msg or type(exc).__name__
