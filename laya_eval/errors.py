"""Exceptions raised by laya-eval.

Every error meant for a user derives from :class:`LayaEvalError`; the CLI turns
it into one line ``Error: <message>`` and exit code 2.

May import: nothing.
"""

from __future__ import annotations

#: The longest exception message a :class:`UserCodeError` quotes (a message can be as long as the code makes it).
MAX_QUOTED = 300


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


class UserCodeError(ConfigError):
    """Python code the user named (a ``py:`` factory, a plug-in) raised while it was imported or called.

    The message names the spec, the module, the callable and the exception (type and message) on one line; the
    exception itself is chained as ``__cause__`` (the CLI prints its traceback with ``LAYA_EVAL_DEBUG=1``).
    """


class StorageError(ConfigError):
    """A write failed for lack of room or permission (a full disk, a quota, a read-only file system); the message
    names the folder."""


class ResultsError(DataError):
    """A results folder (the output of ``laya-eval faithfulness``) is missing, incomplete or unreadable."""


class TrainingError(LayaEvalError):
    """Training diverged (a non-finite loss or weights); nothing is saved."""


class RecomputedWarning(UserWarning):
    """A cache entry or a partial result could not be trusted (damaged, truncated, not a regular file)
    and is recomputed instead of being used."""


class DefaultedWarning(UserWarning):
    """A model's files leave a choice open that laya-eval made for them (a tokenizer without a pad token is
    padded with its end-of-text token); the message says which."""


def describe_exception(err: BaseException) -> str:
    """``Type: message`` of an exception on one line (whitespace runs become one space), the message cut to
    :data:`MAX_QUOTED` characters."""
    try:
        text = " ".join(str(err).split())
    except Exception:  # noqa: BLE001 - a user's exception whose __str__ itself fails
        text = "(its message cannot be shown)"
    if len(text) > MAX_QUOTED:
        text = text[:MAX_QUOTED] + "…"
    return f"{type(err).__name__}: {text}" if text else type(err).__name__
