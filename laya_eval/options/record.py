"""The :class:`Option` record: what one option of one or more commands is (see :mod:`laya_eval.options`).

May import: nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["COMMANDS", "KINDS", "REQUIRED", "ROLES", "Option"]

#: The roles an option plays (see the module docstring), in the order the docs list them.
ROLES = ("decides", "summary", "speed", "presentation", "permission")
#: The commands, in the order ``laya-eval --help`` lists them.
COMMANDS = (
    "train",
    "fit-head",
    "faithfulness",
    "profile",
    "sanity",
    "prune",
    "mixers",
    "report",
    "sweep",
    "meta",
    "import-keras",
    "info",
)

#: No default: the option is required (its flag must be given; the library parameter has no default).
REQUIRED = object()
KINDS = ("int", "float", "str", "flag", "choice", "names", "seed", "target", "path", "dir", "file", "pairs")


@dataclass(frozen=True)
class Option:
    """One option of one or more commands.

    Attributes
    ----------
    id : str
        The name a Python caller knows: ``Class.field`` for a field of a library option class (``EvalOptions.seed``,
        ``SanityOptions.train.patience`` for a field of a nested class), ``command.parameter`` otherwise.
    flag : str
        The long flag (``--batch-size``).
    help : str
    commands : tuple of str
    role : str
        One of :data:`ROLES`.
    kind : str
        ``int``, ``float``, ``seed``, ``str``, ``path`` / ``dir`` / ``file`` (a path; ``dir``: a folder, ``file``: not
        a folder), ``flag`` (a switch), ``choice`` (one of ``choices``), ``names`` (a comma-separated list of
        ``choices``, a tuple in Python), ``target`` (``pred``, ``label``, a class index or ``next-token``), ``pairs`` (repeatable
        ``KEY=VALUE``).
    default : object
        :data:`REQUIRED` where the option must be given.
    choices : tuple of str, or a callable returning them
        A callable reads a registry when asked (plug-ins add to it).
    low, high : number, optional
        Inclusive bounds, open where ``low_open`` / ``high_open``.
    param : str
        The command function's parameter (default: the last part of ``id``).
    short, secondary, metavar : str, optional
        ``-q``; the negative flag of a switch (``--no-timing``); the metavar in ``--help``.
    multiple : bool
        Repeatable (a tuple of the values given).
    default_text : str, optional
        The default in words where it is not one value (``gate at head scope, zero at network scope``): ``--help``
        and the command page's default column say it.
    nullable : bool
        ``None`` is a value too (no limit) though the default is not ``None``.
    also : tuple of str
        Other classes with a field of the same name, default and meaning (``SanityOptions.seed`` also stands for
        ``PruneOptions.seed``).
    """

    id: str
    flag: str
    help: str
    commands: tuple[str, ...]
    role: str
    kind: str = "str"
    default: Any = None
    choices: tuple[str, ...] | Callable[[], Iterable[str]] | None = None
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    param: str = ""
    short: str | None = None
    secondary: str | None = None
    metavar: str | None = None
    multiple: bool = False
    default_text: str | None = None
    also: tuple[str, ...] = ()
    nullable: bool = False

    @property
    def name(self) -> str:
        """The field or parameter: the last part of :attr:`id`."""
        return self.id.rpartition(".")[2]

    @property
    def owner(self) -> str:
        """The class or command the option belongs to: :attr:`id` without its last part."""
        return self.id.rpartition(".")[0]

    def choice_list(self) -> list[str]:
        """The choices as they stand (a registry is read now)."""
        c = self.choices
        return list(c() if callable(c) else c or ())
