"""Errors raised by `tensorfold.checkpoints`.

Both carry a message meant for a person: what failed and what to do about it.
"""

from __future__ import annotations


class CheckpointError(Exception):
    """A model could not be found, fetched, verified, converted or loaded."""


class TemplateError(Exception):
    """A chat template refused the conversation (the API answers 400)."""


class UnsupportedModel(CheckpointError, ValueError):
    """The checkpoint or the settings ask for what this engine cannot run."""
