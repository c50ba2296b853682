"""Paired comparisons of two methods on the same samples, and Holm's step-down adjustment.

The Wilcoxon signed-rank test is scipy's, with ``zero_method="zsplit"``: a zero difference (both methods
give the same rho or the same Deletion@1, frequent with few layers) is ranked with the others and its rank
is split half to the positive and half to the negative sum. Zeros therefore count as evidence of *no*
difference instead of being discarded (``"wilcox"``) -- the conservative choice when, with L = 3, per-sample
rho takes only four values and many pairs tie exactly. scipy's ``method="auto"`` picks the exact or the
normal-approximation null (see its documentation). When every difference is zero the test has nothing to
say: p = 1 and the statistic is n(n + 1)/4 (each sign gets half of every rank), without asking scipy.

The matched-pairs rank-biserial correlation (Kerby 2014) uses the same ranks:
``r = (R+ - R-) / (n(n + 1)/2)``, ``R+`` / ``R-`` the rank sums of the positive / negative differences over
all ``n`` pairs (zeros ranked, counted in neither sum). It lies in [-1, 1]; +1 means ``a > b`` on every pair.

The family a Holm adjustment runs over is one metric's tests of one reference method against every other method
(``reference=NAME``), or one metric's tests of every pair (``reference="all"``); docs/concepts/statistics.md.
A method added to a run then adds one test to a reference family, and changes no other test's adjusted p-value
beyond that one more test.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import permutation_test, rankdata, wilcoxon

from laya_eval.checks import check_choice
from laya_eval.errors import ConfigError
from laya_eval.stats.metrics import bootstrap_mean

__all__ = [
    "ALL_PAIRS",
    "ALPHA",
    "COMPARED_METRICS",
    "COMPARISON_COLUMNS",
    "PairedComparison",
    "compare_methods",
    "comparison_pairs",
    "holm_adjust",
    "interval_test_note",
    "paired_comparison",
]

COMPARISON_COLUMNS = [
    "metric",
    "method_a",
    "method_b",
    "n",
    "mean_difference",
    "ci_low",
    "ci_high",
    "ci_note",
    "wilcoxon_statistic",
    "p_value",
    "p_holm",
    "reference",
    "family_size",
    "significant",
    "rank_biserial",
    "test_note",
]

#: ``reference`` value of a family of every pair of methods.
ALL_PAIRS = "all"
#: Level of the decision ``significant = p_holm < ALPHA`` that comparisons.csv, the report and the figures share.
ALPHA = 0.05

#: comparisons.csv's metric -> the per-sample column of samples.csv it compares.
COMPARED_METRICS = {"faithfulness": "spearman", "deletion_at_1": "deletion_at_1"}

ZERO_METHOD = "zsplit"
#: Pairs up to which scipy's Wilcoxon test with ties or zeros enumerates every sign flip (2**13 < its 9999 resamples).
_EXACT_FLIPS_MAX = 13


@dataclass(frozen=True)
class PairedComparison:
    """Method ``a`` against method ``b`` on the same samples.

    Attributes
    ----------
    n : int
        Pairs where both values are defined (a pair with a NaN on either side is dropped).
    mean_difference : float
        Mean of ``a - b`` over those pairs.
    ci_low, ci_high : float
        Percentile bootstrap 95% interval of the mean difference (pairs resampled together); NaN where no
        interval exists, ``ci_note`` then says why (:mod:`laya_eval.stats.intervals`).
    wilcoxon_statistic, p_value : float
        scipy's two-sided Wilcoxon signed-rank test, ``zero_method="zsplit"``.
    rank_biserial : float
        Matched-pairs rank-biserial correlation, in [-1, 1], positive when ``a > b``.
    """

    n: int
    mean_difference: float
    ci_low: float
    ci_high: float
    wilcoxon_statistic: float
    p_value: float
    rank_biserial: float
    ci_note: str = ""


def paired_comparison(
    a: np.ndarray, b: np.ndarray, *, n_resamples: int = 1000, seed: int | Sequence[int] = 0
) -> PairedComparison:
    """Compare two paired vectors: mean difference, bootstrap interval, Wilcoxon test, effect size.

    Parameters
    ----------
    a, b : ndarray, (N,)
        Per-sample values of two methods on the same samples; NaN marks an undefined value.
    n_resamples : int
        Bootstrap resamples for the interval (below ``MIN_BOOTSTRAP_RESAMPLES``: no interval, NaN bounds).
    seed : int or sequence of int
        Seeds the bootstrap.

    Returns
    -------
    PairedComparison
        All fields NaN (``n = 0``) when no pair is defined.

    Examples
    --------
    >>> r = paired_comparison(np.array([1.0, 0.5, 1.0]), np.array([0.5, 0.5, -0.5]), n_resamples=0)
    >>> r.n, r.mean_difference, r.rank_biserial
    (3, 0.6666666666666666, 0.8333333333333334)
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ConfigError(f"paired vectors must be 1-d and of equal length; got shapes {a.shape} and {b.shape}.")
    keep = ~(np.isnan(a) | np.isnan(b))
    d = a[keep] - b[keep]
    n = int(d.size)
    if n == 0:
        nan = float("nan")
        return PairedComparison(0, nan, nan, nan, nan, nan, nan, "no defined pairs")
    interval = bootstrap_mean(d, n_resamples=n_resamples, seed=seed)
    statistic, p_value = _wilcoxon(d)
    return PairedComparison(
        n, interval.mean, interval.low, interval.high, statistic, p_value, _rank_biserial(d), interval.note
    )


def _wilcoxon(d: np.ndarray) -> tuple[float, float]:
    """``scipy.stats.wilcoxon(d, zero_method=ZERO_METHOD)``: statistic and two-sided p-value.

    With ties or zeros and at most 13 pairs, scipy's default is an exact permutation test over all ``2**n`` sign
    flips, which it runs one flip at a time through a Python statistic (about 0.2 s a call at n = 10). The same
    test is run here with the signed-rank sum computed for every flip at once: the ranks of ``|d|`` do not change
    under a flip, and each sum of (half-)integer ranks is exact, so statistic and p-value are scipy's own.
    """
    if not np.any(d != 0):
        return d.size * (d.size + 1) / 4, 1.0
    if d.size > _EXACT_FLIPS_MAX or (np.unique(np.abs(d)).size == d.size and np.all(d != 0)):
        result = wilcoxon(d, zero_method=ZERO_METHOD, alternative="two-sided")  # exact or asymptotic: fast
        return float(result.statistic), float(result.pvalue)
    ranks = rankdata(np.abs(d), method="average")
    half_zero = ((d == 0) * ranks).sum() / 2  # zsplit: half of each zero's rank to either side

    def positive_rank_sum(flipped: np.ndarray, axis: int = -1) -> np.ndarray:
        return ((np.moveaxis(flipped, axis, -1) > 0) * ranks).sum(axis=-1) + half_zero

    test = permutation_test(
        (d,),
        positive_rank_sum,
        permutation_type="samples",
        vectorized=True,
        n_resamples=9999,
        alternative="two-sided",
        axis=-1,
    )
    r_plus, r_minus = ((d > 0) * ranks).sum() + half_zero, ((d < 0) * ranks).sum() + half_zero
    return float(min(r_plus, r_minus)), float(test.pvalue)


def _rank_biserial(d: np.ndarray) -> float:
    ranks = rankdata(np.abs(d), method="average")
    total = d.size * (d.size + 1) / 2
    return float((ranks[d > 0].sum() - ranks[d < 0].sum()) / total)


def holm_adjust(p: np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values (family-wise error), in the input's order.

    With the ``m`` defined p-values sorted ascending, ``p_(1) <= ... <= p_(m)``, the adjusted value of
    ``p_(k)`` is ``max_{j <= k} min(1, (m - j + 1) p_(j))``: monotone in ``p`` and capped at 1.

    Parameters
    ----------
    p : array-like, (M,)
        NaN entries (a comparison without data) stay NaN and do not count in ``m``.

    Returns
    -------
    ndarray, (M,)
    """
    p = np.asarray(p, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    defined = np.flatnonzero(~np.isnan(p))
    m = defined.size
    if m == 0:
        return out
    order = defined[np.argsort(p[defined], kind="stable")]
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
    out[order] = np.maximum.accumulate(scaled)
    return out


def compare_methods(
    per_sample: pd.DataFrame,
    *,
    n_resamples: int = 1000,
    seed: int = 0,
    methods: Sequence[str] | None = None,
    reference: str = ALL_PAIRS,
    map_rows: Callable[[Callable, Sequence], list] | None = None,
) -> pd.DataFrame:
    """Paired tests of methods on faithfulness (per-sample rho) and Deletion@1: the ``comparisons.csv`` table.

    Parameters
    ----------
    per_sample : DataFrame
        ``samples.csv``: one row per (sample, method) with columns ``sample, method, spearman, deletion_at_1``
        (``spearman`` NaN where rho is undefined; such a pair is dropped from that comparison only).
    n_resamples : int
        Bootstrap resamples per row.
    seed : int
        Row ``(metric, a, b)`` bootstraps with seed ``(seed, crc32(metric), crc32(a), crc32(b))``: a row
        does not depend on which other methods were run with it.
    methods : sequence of str, optional
        Methods and their order (default: order of first appearance in ``per_sample``). ``random`` is
        compared like any other method.
    reference : str
        A method: test it against every other method (``M - 1`` tests per metric); ``"all"``: test every pair
        (``M(M - 1)/2`` per metric). The tests of one metric are the family Holm's adjustment runs over.
    map_rows : callable, optional
        ``map_rows(fn, items)`` returns ``[fn(x) for x in items]`` (the default); a distributed run passes one
        that shares the rows over its processes (each row is seeded on its own, so the table is the same).

    Returns
    -------
    DataFrame
        Columns :data:`COMPARISON_COLUMNS`, one row per (metric, method_a, method_b), ``method_a`` before
        ``method_b`` in method order, ``mean_difference = mean(a - b)``. ``p_holm``: Holm's adjustment over the
        rows of the same metric (the family), whose number of defined p-values is ``family_size``; ``reference``
        names the family (the reference method, or ``"all"``); ``significant`` is ``p_holm < ALPHA`` (empty
        where no test); ``test_note`` says where the uncorrected 95% interval and that decision disagree.
    """
    missing = {"sample", "method", *COMPARED_METRICS.values()} - set(per_sample.columns)
    if missing:
        raise ConfigError(
            f"per-sample table needs columns sample, method, spearman, deletion_at_1; missing {sorted(missing)}."
        )
    if per_sample.duplicated(["sample", "method"]).any():
        raise ConfigError(
            "per-sample table must have one row per (sample, method); got duplicates. "
            "Pass one ablation's samples.csv at a time."
        )
    present = list(pd.unique(per_sample["method"]))
    names = present if methods is None else list(methods)
    for m in names:
        check_choice("methods (of the per-sample table)", m, present)
    check_choice("reference", reference, [*names, ALL_PAIRS])
    wide = {
        metric: per_sample.pivot(index="sample", columns="method", values=column)
        for metric, column in COMPARED_METRICS.items()
    }

    def row(task: tuple[str, str, str]) -> dict:
        metric, a, b = task
        row_seed = [seed, *(zlib.crc32(name.encode()) for name in (metric, a, b))]
        result = paired_comparison(
            wide[metric][a].to_numpy(), wide[metric][b].to_numpy(), n_resamples=n_resamples, seed=row_seed
        )
        return {
            "metric": metric,
            "method_a": a,
            "method_b": b,
            "n": result.n,
            "mean_difference": result.mean_difference,
            "ci_low": result.ci_low,
            "ci_high": result.ci_high,
            "ci_note": result.ci_note,
            "wilcoxon_statistic": result.wilcoxon_statistic,
            "p_value": result.p_value,
            "rank_biserial": result.rank_biserial,
        }

    tasks = [(metric, a, b) for metric in COMPARED_METRICS for a, b in comparison_pairs(names, reference)]
    rows = (map_rows or (lambda fn, items: [fn(x) for x in items]))(row, tasks)
    table = pd.DataFrame(rows, columns=[c for c in COMPARISON_COLUMNS if c not in _FAMILY_COLUMNS])
    p_holm, size = np.full(len(table), np.nan), np.zeros(len(table), dtype=np.int64)
    for metric in COMPARED_METRICS:
        family = (table["metric"] == metric).to_numpy()
        p_holm[family] = holm_adjust(table["p_value"].to_numpy()[family])
        size[family] = int((~np.isnan(table["p_value"].to_numpy()[family])).sum())
    table["p_holm"], table["reference"], table["family_size"] = p_holm, reference, size
    table["significant"] = pd.array([None if np.isnan(p) else bool(p < ALPHA) for p in p_holm], dtype="boolean")
    table["test_note"] = [
        interval_test_note(low, high, p, k) for low, high, p, k in zip(table["ci_low"], table["ci_high"], p_holm, size)
    ]
    return table[COMPARISON_COLUMNS]


_FAMILY_COLUMNS = ("p_holm", "reference", "family_size", "significant", "test_note")


def comparison_pairs(methods: Sequence[str], reference: str = ALL_PAIRS) -> list[tuple[str, str]]:
    """The pairs ``(a, b)`` a family tests, ``a`` before ``b`` in ``methods`` order: every pair (``"all"``) or
    those holding ``reference``."""
    pairs = list(itertools.combinations(methods, 2))
    return pairs if reference == ALL_PAIRS else [p for p in pairs if reference in p]


def interval_test_note(low: float, high: float, p_holm: float, family_size: int) -> str:
    """``test_note``: where the 95% interval of the mean difference (not adjusted for the family) and the Holm
    decision ``p_holm < ALPHA`` disagree, a sentence that says both; ``""`` where they agree or one is missing."""
    if np.isnan(low) or np.isnan(high) or np.isnan(p_holm):
        return ""
    excludes_zero = low > 0 or high < 0
    significant = p_holm < ALPHA
    if excludes_zero and not significant:
        return (
            f"the 95% interval (not adjusted) excludes 0, but Holm over {family_size} tests gives p = {p_holm:.3g} "
            f">= {ALPHA:g}: not significant"
        )
    if significant and not excludes_zero:
        return f"Holm over {family_size} tests gives p = {p_holm:.3g} < {ALPHA:g}, but the 95% interval includes 0"
    return ""
