"""Declarative checks of options and arguments, with one message template.

Every check raises :class:`~laya_eval.errors.ConfigError` worded as ``{name} must be {what}; got {value!r}.``,
so a message always names the option, what was expected and the value received. Option dataclasses call
:func:`check_fields` from ``__post_init__`` with one rule per field instead of hand-written ``if`` blocks.

Examples
--------
>>> check_positive_int("batch_size", 0)
Traceback (most recent call last):
...
laya_eval.errors.ConfigError: batch_size must be a positive integer; got 0.

May import: errors.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from laya_eval.errors import ConfigError

__all__ = [
    "MAX_LAYERS",
    "MAX_SIZE",
    "SEED_MAX",
    "check_choice",
    "check_fields",
    "check_int",
    "check_non_negative_int",
    "check_number",
    "check_optional",
    "check_positive_int",
    "check_seed",
    "fail",
    "is_int",
    "offset_seed",
]

#: The largest width, dim, channel count or token length a stored config (a checkpoint's, a model folder's
#: config.json) may declare, and the most layers (blocks, hidden states): what a file can make laya-eval build.
MAX_SIZE = 1 << 20
MAX_LAYERS = 1024

#: Seeds are integers from 0 to 2**63 - 1, in every option class and command: they are stored and passed on as
#: signed 64-bit integers (evaluation manifests, partial results), within what NumPy, torch and the per-sample
#: hash take.
SEED_MAX = 2**63 - 1


def fail(name: str, what: str, value: Any) -> ConfigError:
    """The one message template: ``{name} must be {what}; got {value!r}.``"""
    return ConfigError(f"{name} must be {what}; got {value!r}.", parameter=name)


def is_int(value: Any) -> bool:
    """An ``int`` that is not a ``bool`` (``True`` is an int to Python, never a count to a user)."""
    return isinstance(value, int) and not isinstance(value, bool)


def check_int(name: str, value: Any, *, low: int | None = None, high: int | None = None) -> int:
    """An integer in ``[low, high]`` (either bound optional)."""
    if not is_int(value) or (low is not None and value < low) or (high is not None and value > high):
        if low is not None and high is not None:
            what = f"an integer from {low} to {high}"
        elif low is not None:
            what = f"an integer >= {low}"
        elif high is not None:
            what = f"an integer <= {high}"
        else:
            what = "an integer"
        raise fail(name, what, value)
    return value


def check_positive_int(name: str, value: Any) -> int:
    """An integer >= 1."""
    if not is_int(value) or value < 1:
        raise fail(name, "a positive integer", value)
    return value


def check_non_negative_int(name: str, value: Any) -> int:
    """An integer >= 0."""
    if not is_int(value) or value < 0:
        raise fail(name, "a non-negative integer", value)
    return value


def check_seed(name: str, value: Any) -> int:
    """A seed: an integer from 0 to :data:`SEED_MAX` (2**63 - 1)."""
    if not is_int(value) or not 0 <= value <= SEED_MAX:
        raise fail(name, "an integer from 0 to 2**63 - 1", value)
    return value


def offset_seed(seed: int, offset: int) -> int:
    """``seed + offset``, wrapped into the seed range: the seeds of repeated runs (``seed``, ``seed + 1``, ...)
    stay seeds when ``seed`` is near :data:`SEED_MAX` (below it nothing changes)."""
    return (seed + offset) % (SEED_MAX + 1)


def check_number(
    name: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """A finite real number within the given bounds (open or closed)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    if not ok:
        left = "" if low is None else f"{'>' if low_open else '>='} {low}"
        right = "" if high is None else f"{'<' if high_open else '<='} {high}"
        bounds = " and ".join(b for b in (left, right) if b)
        raise fail(name, "a finite number" + (f" {bounds}" if bounds else ""), value)
    return value


def check_choice(name: str, value: Any, choices: Iterable[str]) -> str:
    """One of ``choices``."""
    choices = list(choices)
    if value not in choices:
        raise fail(name, f"one of {{{', '.join(map(str, choices))}}}", value)
    return value


def check_optional(check: Callable[..., Any]) -> Callable[..., Any]:
    """``check`` that also admits ``None``."""

    def optional(name: str, value: Any, *args: Any, **kwargs: Any) -> Any:
        return None if value is None else check(name, value, *args, **kwargs)

    return optional


def check_fields(obj: Any, rules: Mapping[str, Callable[[str, Any], Any]]) -> None:
    """Apply ``rules[field](field, getattr(obj, field))`` to each named field of a dataclass instance."""
    for field_name, rule in rules.items():
        rule(field_name, getattr(obj, field_name))
