"""Structured outputs: xgrammar compile cache (compile.py) + per-request matcher adapter (constraint.py).

xgrammar is optional (pip install 'tensorfold[grammar]'); it is imported only
when a compiler or constraint is built, so importing this package never needs
it. Without it, building one raises GrammarUnavailable with the install command.
"""

from .compile import KINDS, MAX_BLANKS, GrammarCompiler, GrammarSpec, choice_ebnf
from .errors import INSTALL_HINT, GrammarError, GrammarUnavailable, available

__all__ = [
    "INSTALL_HINT",
    "KINDS",
    "MAX_BLANKS",
    "GrammarCompiler",
    "GrammarConstraint",
    "GrammarError",
    "GrammarSpec",
    "GrammarUnavailable",
    "available",
    "choice_ebnf",
]


def __getattr__(name: str):  # GrammarConstraint imports torch: load it on first use
    if name == "GrammarConstraint":
        from .constraint import GrammarConstraint

        return GrammarConstraint
    raise AttributeError(name)
