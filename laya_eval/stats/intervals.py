"""When a 95% percentile bootstrap interval exists, and how an estimate and its interval are written.

An interval is reported only where it means something:

- at least :data:`~laya_eval.catalog.MIN_INTERVAL_SAMPLES` (5) defined samples: none has no estimate, one has
  no spread to resample, and the bootstrap of two to four samples takes so few distinct values (3, 10 and 35
  resampled means) that its quantiles are a sample's own values or a zero width, not a 95% interval;
- at least :data:`~laya_eval.catalog.MIN_BOOTSTRAP_RESAMPLES` resamples (with fewer, the 2.5% and 97.5%
  quantiles rest on fewer than 2.5 resamples each: ``--bootstrap 1`` would give a zero-width "interval"
  at one resample's value);
- the interval contains its estimate. A percentile interval is the spread of the resampled statistic, not
  a band built around the estimate, so for a skewed statistic on few samples it can miss it; such an
  interval is not widened or shifted (that would be a different method with other coverage) but reported
  as n/a with that reason. Differences below :data:`ROUNDING_TOL` (relative) are the rounding of two
  computations of one value, not statistics: the interval is closed over them.

Otherwise ``low`` and ``high`` are NaN (empty cells in a CSV) and ``note`` says why in words. An undefined
estimate (NaN) is written "undefined", never "nan".
"""

from __future__ import annotations

import math

import numpy as np

from laya_eval.catalog import MIN_BOOTSTRAP_RESAMPLES, MIN_INTERVAL_SAMPLES

__all__ = [
    "MIN_BOOTSTRAP_RESAMPLES",
    "MIN_INTERVAL_SAMPLES",
    "ROUNDING_TOL",
    "IntervalNotes",
    "format_estimate",
    "format_interval",
    "interval_note",
    "percentile_interval",
]

#: Relative distance below which an estimate outside its interval is rounding (the interval is closed over it).
ROUNDING_TOL = 1e-9

EXCLUDES_ESTIMATE = "the percentile interval excludes the estimate"


def interval_note(n_defined: int, n_resamples: int) -> str:
    """Why no interval exists for ``n_defined`` defined samples and ``n_resamples`` resamples ("" if one may)."""
    if n_defined < 1:
        return "no defined samples"
    if n_defined < MIN_INTERVAL_SAMPLES:
        return f"fewer than {MIN_INTERVAL_SAMPLES} defined samples"
    if n_resamples < MIN_BOOTSTRAP_RESAMPLES:
        return (
            f"{n_resamples} bootstrap resample{'' if n_resamples == 1 else 's'}, fewer than the "
            f"{MIN_BOOTSTRAP_RESAMPLES} an interval needs"
        )
    return ""


def percentile_interval(
    estimate: float, resampled: np.ndarray, *, n_defined: int, n_resamples: int, level: float = 0.95
) -> tuple[float, float, str]:
    """The percentile interval of ``resampled`` around ``estimate`` as ``(low, high, note)``.

    Parameters
    ----------
    estimate : float
        The statistic on the full sample.
    resampled : ndarray, (R,)
        The statistic on each resample; NaN entries (an undefined resample) are left out.
    n_defined, n_resamples : int
        Defined samples and requested resamples (see :func:`interval_note`).

    Returns
    -------
    tuple
        ``(low, high, "")`` or ``(nan, nan, reason)``.
    """
    nan = float("nan")
    note = interval_note(n_defined, n_resamples) or ("undefined estimate" if math.isnan(estimate) else "")
    if note:
        return nan, nan, note
    values = np.asarray(resampled, dtype=np.float64)
    values = values[~np.isnan(values)]
    if values.size < MIN_BOOTSTRAP_RESAMPLES:
        return nan, nan, f"{values.size} defined resamples, fewer than the {MIN_BOOTSTRAP_RESAMPLES} an interval needs"
    alpha = (1 - level) / 2
    low, high = (float(v) for v in np.quantile(values, [alpha, 1 - alpha]))
    tol = ROUNDING_TOL * max(1.0, abs(estimate))
    if estimate < low - tol or estimate > high + tol:
        return nan, nan, EXCLUDES_ESTIMATE
    return min(low, estimate), max(high, estimate), ""


def format_estimate(value, *, digits: int = 4, signed: bool = True) -> str:
    """A number for a table: "undefined" for NaN or a missing value, never "nan"."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        return "undefined"
    if math.isnan(value):
        return "undefined"
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def _note_text(note) -> str:
    # A note read back from a CSV is NaN where it was "" (an interval exists) or the folder predates notes.
    return note if isinstance(note, str) and note else "no interval recorded"


def format_interval(
    low, high, note: str = "", *, digits: int = 3, signed: bool = True, notes: "IntervalNotes | None" = None
) -> str:
    """``[low, high]``, or, when the interval does not exist (``low``/``high`` NaN), ``[n/a: reason]`` --
    or ``[n/a]`` / ``[n/a 2]`` with the reason kept in ``notes`` for a footnote under a fixed-width table."""
    text_low, text_high = (format_estimate(v, digits=digits, signed=signed) for v in (low, high))
    if "undefined" in (text_low, text_high):
        return f"[{notes.label(_note_text(note))}]" if notes is not None else f"[n/a: {_note_text(note)}]"
    return f"[{text_low}, {text_high}]"


class IntervalNotes:
    """Footnotes for the missing intervals of a printed table: one line per distinct reason.

    >>> notes = IntervalNotes()
    >>> notes.label("fewer than 5 defined samples"), notes.lines()
    ('n/a', ['n/a: fewer than 5 defined samples'])
    """

    def __init__(self) -> None:
        self._notes: list[str] = []

    def label(self, note: str) -> str:
        if note not in self._notes:
            self._notes.append(note)
        k = self._notes.index(note)
        return "n/a" if k == 0 else f"n/a {k + 1}"

    def lines(self) -> list[str]:
        """``n/a: reason`` for the first reason, ``n/a 2: reason`` ... for the others."""
        return [f"{'n/a' if k == 0 else f'n/a {k + 1}'}: {note}" for k, note in enumerate(self._notes)]
