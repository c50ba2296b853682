"""Every option of every command, declared once: :class:`Option` records and what is derived from them.

A record holds an option's name as a Python caller knows it (``EvalOptions.batch_size``: the library's class and
field, or ``report.title`` for a parameter of a verb), its command-line flag, type, default, bounds or choices,
help text, role and the commands that take it. From the records come the click options of the CLI
(``laya_eval_cli.options.declared``), the defaults and checks of the library's option classes (:func:`declared`,
:func:`check_declared`), the keys a sweep config accepts, the option tables of ``docs/commands/*.md`` and the
resume and cache keys (by role, :func:`role_fields`).

Roles
-----
``decides``
    Changes the numbers: joins every resume and cache key (a changed value recomputes or refuses, never reuses).
``summary``
    Changes only the finished tables computed from the per-sample records (bootstrap resamples, tie tolerance):
    joins the result key, not the per-chunk key, so ``--resume`` reuses the chunks and recomputes the tables.
``speed``
    Changes only speed or where the work runs (batch size, chunk size, threads, the feature cache): the same
    bytes for any value, so it joins no key.
``presentation``
    Changes only how results are written or shown (the output folder, formats, progress bars).
``permission``
    What a run may do or where it may read (run a module's code, download, load an unverified file): the model
    and data it then reads are keyed by their content, not by the permission.

No torch: the CLI reads the records for ``--help`` without importing it.

May import: errors, checks, catalog.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from laya_eval.checks import (
    check_choice,
    check_int,
    check_non_negative_int,
    check_number,
    check_positive_int,
    check_seed,
    fail,
    is_int,
)
from laya_eval.options.record import COMMANDS, KINDS, REQUIRED, ROLES, Option
from laya_eval.options.records import RECORDS

__all__ = [
    "COMMANDS",
    "OPTIONS",
    "REQUIRED",
    "ROLES",
    "Option",
    "check_declared",
    "check_option",
    "declared",
    "defaults_of",
    "for_command",
    "option",
    "options_of",
    "role_fields",
    "values_for",
]

#: Every record by id.
OPTIONS: dict[str, Option] = {}
for _record in RECORDS:
    if _record.id in OPTIONS:
        raise ImportError(f"option {_record.id!r} is declared twice")
    if _record.role not in ROLES or _record.kind not in KINDS:
        raise ImportError(f"option {_record.id!r}: role {_record.role!r} / kind {_record.kind!r} unknown")
    OPTIONS[_record.id] = _record


def option(option_id: str) -> Option:
    """The record of ``option_id`` (``KeyError`` for an unknown id)."""
    return OPTIONS[option_id]


def for_command(command: str) -> list[Option]:
    """The options ``command`` takes, in declaration order (one per flag)."""
    return [o for o in OPTIONS.values() if command in o.commands]


def options_of(owner: str) -> dict[str, Option]:
    """The records of ``owner``'s fields (a class such as ``EvalOptions``, or ``SanityOptions.train``) by field."""
    return {o.name: o for o in OPTIONS.values() if o.owner == owner or owner in o.also}


def defaults_of(owner: str) -> dict[str, Any]:
    """``{field: default}`` of ``owner``'s records (``SanityOptions.train``: the protocol its retrained heads use)."""
    return {name: o.default for name, o in options_of(owner).items()}


def role_fields(owner: str, *roles: str) -> list[str]:
    """The fields of ``owner`` whose role is among ``roles``, in declaration order."""
    return [name for name, o in options_of(owner).items() if o.role in roles]


def check_option(record: Option, value: Any, name: str | None = None) -> Any:
    """``value`` checked against ``record`` (its kind, bounds and choices), or :class:`ConfigError` worded as
    :func:`laya_eval.checks.fail` with ``name`` (default: the record's id). ``None`` passes where the default is
    ``None``. Returns the value, a ``names`` list as a tuple."""
    name = name or record.id
    if value is None and (record.default is None or record.nullable):
        return None
    kind = record.kind
    if kind == "int" and record.high is None and record.low in (0, 1):
        return (check_positive_int if record.low == 1 else check_non_negative_int)(name, value)
    if kind == "int":
        return check_int(
            name,
            value,
            low=None if record.low is None else int(record.low),
            high=None if record.high is None else int(record.high),
        )
    if kind == "float":
        return check_number(
            name, value, low=record.low, high=record.high, low_open=record.low_open, high_open=record.high_open
        )
    if kind == "seed":
        return check_seed(name, value)
    if kind == "flag":
        if not isinstance(value, bool):
            raise fail(name, "True or False", value)
        return value
    if kind == "choice":
        return check_choice(name, value, record.choice_list())
    if kind == "names":
        if isinstance(value, str):
            value = (value,)
        if not isinstance(value, (tuple, list)) or not value:
            raise fail(name, "a non-empty sequence of names", value)
        choices = record.choice_list()
        for v in value:
            check_choice(name, v, choices)
        return tuple(dict.fromkeys(value))
    if kind == "target":
        if value in ("pred", "label", "next-token") or (is_int(value) and value >= 0):
            return value
        raise fail(name, "'pred', 'label', a class index (an integer >= 0) or 'next-token'", value)
    if not isinstance(value, (str, tuple, list)) and not hasattr(value, "__fspath__"):
        raise fail(name, "a string", value)
    return value


def declared(cls: type) -> type:
    """Make ``cls`` a frozen dataclass whose fields take their defaults from their records (``Class.field``): every
    annotated field without a default of its own must have one (``ImportError`` otherwise, so a field cannot be
    added without its record)."""
    records = options_of(cls.__name__)
    for name in cls.__dict__.get("__annotations__", {}):
        if name in cls.__dict__:
            continue
        if name not in records:
            raise ImportError(f"{cls.__name__}.{name} has neither a default nor an option record")
        default = records[name].default
        if default is REQUIRED:
            raise ImportError(f"{cls.__name__}.{name}: a library field cannot be required")
        setattr(cls, name, default)
    return dataclass(frozen=True)(cls)


def check_declared(obj: Any) -> None:
    """Check every field of the option object ``obj`` that has a record (errors name ``Class.field``); a ``names``
    value is stored as a tuple."""
    owner = type(obj).__name__
    records = options_of(owner)
    for f in dataclasses.fields(obj):
        if f.name in records:
            value = check_option(records[f.name], getattr(obj, f.name), f"{owner}.{f.name}")
            if isinstance(value, tuple) and getattr(obj, f.name) is not value:
                object.__setattr__(obj, f.name, value)


def values_for(owner: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword arguments of ``owner``'s class among a command's parsed ``params`` (by each record's parameter
    name): the command hands them over as they are, nothing copied by hand."""
    out = {}
    for name, record in options_of(owner).items():
        param = record.param or record.name
        if param in params:
            out[name] = params[param]
    return out
