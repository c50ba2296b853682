"""Exceptions raised by laya-eval.

Every error meant for a user derives from :class:`LayaEvalError`; the CLI turns
it into one line ``Error: <message>`` and exit code 2.

May import: nothing.
"""

from __future__ import annotations


class LayaEvalError(Exception):
    """Base class of every user-facing laya-eval error."""


class CheckpointError(LayaEvalError):
    """A checkpoint is missing, truncated, unsafe or not a laya-eval checkpoint."""


class DataError(LayaEvalError):
    """A dataset cannot be found, read or does not fit the model."""


class ConfigError(LayaEvalError, ValueError):
    """An option, name or hyper-parameter is invalid.

    ``parameter``: the option the message starts with, as a Python caller names it (``EvalOptions.seed``), where
    one does; the CLI writes its flag there instead (``--seed``).
    """

    def __init__(self, message: str = "", *, parameter: str | None = None) -> None:
        super().__init__(message)
        self.parameter = parameter


class ResultsError(DataError):
    """A results folder (the output of ``laya-eval faithfulness``) is missing, incomplete or unreadable."""


class TrainingError(LayaEvalError):
    """Training diverged (a non-finite loss or weights); nothing is saved."""


class RecomputedWarning(UserWarning):
    """A cache entry or a partial result could not be trusted (damaged, truncated, not a regular file)
    and is recomputed instead of being used."""
