"""Structured outputs: specs (spec.py), compiles in worker processes (compile.py, worker.py)
and the per-request matcher adapter (constraint.py), which the server holds in the
grammar host, a process of its own (host.py; remote.py is the server's side).

xgrammar is optional (pip install 'tensorfold[grammar]'); it is imported only
when a compiler or constraint is built, so importing this package never needs
it. Without it, building one raises GrammarUnavailable with the install command.
"""

from .compile import GrammarCompiler
from .errors import INSTALL_HINT, GrammarBusy, GrammarError, GrammarTimeout, GrammarUnavailable, available
from .spec import KINDS, MAX_BLANKS, GrammarSpec, choice_ebnf

__all__ = [
    "INSTALL_HINT",
    "KINDS",
    "MAX_BLANKS",
    "GrammarBusy",
    "GrammarCompiler",
    "GrammarConstraint",
    "GrammarError",
    "GrammarSpec",
    "GrammarTimeout",
    "GrammarUnavailable",
    "available",
    "choice_ebnf",
]


def __getattr__(name: str):  # loaded on first use, like xgrammar (which imports torch) in it
    if name == "GrammarConstraint":
        from .constraint import GrammarConstraint

        return GrammarConstraint
    raise AttributeError(name)
