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
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import permutation_test, rankdata, wilcoxon

from laya_eval.errors import ConfigError
from laya_eval.stats.metrics import bootstrap_mean

__all__ = [
    "COMPARED_METRICS",
    "COMPARISON_COLUMNS",
    "PairedComparison",
    "compare_methods",
    "holm_adjust",
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
    "rank_biserial",
]

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
    map_rows: Callable[[Callable, Sequence], list] | None = None,
) -> pd.DataFrame:
    """Every pair of methods on faithfulness (per-sample rho) and Deletion@1: the ``comparisons.csv`` table.

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
    map_rows : callable, optional
        ``map_rows(fn, items)`` returns ``[fn(x) for x in items]`` (the default); a distributed run passes one
        that shares the rows over its processes (each row is seeded on its own, so the table is the same).

    Returns
    -------
    DataFrame
        Columns :data:`COMPARISON_COLUMNS`, one row per (metric, method_a, method_b), ``method_a`` before
        ``method_b`` in method order, ``mean_difference = mean(a - b)``. ``p_holm``: Holm's adjustment over
        *all* rows of the run (both metrics, every pair), so the family-wise error of everything the run
        reports is controlled.
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
    unknown = [m for m in names if m not in present]
    if unknown:
        raise ConfigError(
            f"methods must be among those in the per-sample table {{{', '.join(present)}}}; got {unknown[0]!r}."
        )
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

    tasks = [(metric, a, b) for metric in COMPARED_METRICS for a, b in itertools.combinations(names, 2)]
    rows = (map_rows or (lambda fn, items: [fn(x) for x in items]))(row, tasks)
    table = pd.DataFrame(rows, columns=[c for c in COMPARISON_COLUMNS if c != "p_holm"])
    table.insert(COMPARISON_COLUMNS.index("p_holm"), "p_holm", holm_adjust(table["p_value"].to_numpy()))
    return table
