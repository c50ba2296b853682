"""Across checkpoints: several runs of one head (e.g. 5 training seeds), one summary row per (run, method).

:func:`across_seeds` gives each method's mean and standard deviation over runs and a paired test against
the best method (highest mean): Wilcoxon signed-rank on the per-run values, paired by run, scipy's exact
null for small ``n`` (``zero_method="zsplit"`` as in :mod:`laya_eval.stats.paired`), Holm-adjusted over the
methods compared. With ``n`` runs the smallest two-sided p-value the test can give is ``2 / 2**n``
(0.0625 for 5 seeds): with fewer than 6 runs no difference can reach p < 0.05, which is the honest answer.
:func:`seed_ranks` gives each method's rank within each run; :func:`seed_comparisons` tests every pair of
methods the same way (the ``comparisons.csv`` table, paired over runs instead of samples).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from laya_eval.errors import ConfigError
from laya_eval.stats.paired import COMPARED_METRICS, compare_methods, holm_adjust, paired_comparison

__all__ = ["ACROSS_SEEDS_COLUMNS", "across_seeds", "min_wilcoxon_p", "seed_comparisons", "seed_ranks"]

ACROSS_SEEDS_COLUMNS = [
    "method",
    "n_runs",
    "mean",
    "std",
    "mean_rank",
    "reference",
    "mean_difference",
    "wilcoxon_statistic",
    "p_value",
    "p_holm",
]


def _wide(summaries: pd.DataFrame, metric: str, run: str) -> pd.DataFrame:
    missing = {run, "method", metric} - set(summaries.columns)
    if missing:
        raise ConfigError(
            f"summaries need columns {run!r}, 'method' and {metric!r}; missing {sorted(missing)}. "
            "Pass run= the column that names each run (e.g. checkpoint or seed)."
        )
    duplicated = summaries.duplicated([run, "method"])
    if duplicated.any():
        first = summaries.loc[duplicated, [run, "method"]].iloc[0].tolist()
        raise ConfigError(
            f"summaries must have one row per ({run}, method); got several for {first}. "
            "Select one ablation and scope first."
        )
    methods = list(pd.unique(summaries["method"]))
    return summaries.pivot(index=run, columns="method", values=metric)[methods]


def seed_ranks(summaries: pd.DataFrame, *, metric: str = "faithfulness", run: str = "checkpoint") -> pd.DataFrame:
    """Rank of each method within each run (1 = highest ``metric``; ties share the average rank).

    Parameters
    ----------
    summaries : DataFrame
        ``summary.csv`` rows of several runs, one row per (run, method).
    metric : str
        A summary column where higher is better.
    run : str
        The column naming the run.

    Returns
    -------
    DataFrame
        Columns ``run, method, metric value, rank``; one row per (run, method) with a defined value.
    """
    wide = _wide(summaries, metric, run)
    ranks = wide.rank(axis=1, ascending=False, method="average")
    long = wide.stack().rename(metric).to_frame().join(ranks.stack().rename("rank"))
    return long.reset_index().rename(columns={"level_0": run})[[run, "method", metric, "rank"]]


def across_seeds(summaries: pd.DataFrame, *, metric: str = "faithfulness", run: str = "checkpoint") -> pd.DataFrame:
    """Each method over several runs: mean +- std, mean rank, and a paired test against the best method.

    Parameters
    ----------
    summaries : DataFrame
        ``summary.csv`` rows of several runs of one head, one row per (run, method).
    metric : str
        A summary column where higher is better (default ``faithfulness``).
    run : str
        The column naming the run (``checkpoint`` in summary.csv; ``seed`` if you have one).

    Returns
    -------
    DataFrame
        Columns :data:`ACROSS_SEEDS_COLUMNS`, one row per method by descending mean. ``std`` is the sample
        standard deviation (ddof = 1); ``reference`` the best method; ``mean_difference`` the mean over runs
        of ``method - reference``; the test columns are NaN on the reference's own row.
    """
    wide = _wide(summaries, metric, run)
    means = wide.mean(axis=0)
    if means.isna().all():
        raise ConfigError(f"no run has a defined {metric!r}.")
    best = str(means.idxmax())
    ranks = wide.rank(axis=1, ascending=False, method="average").mean(axis=0)
    rows = []
    for method in wide.columns:
        values = wide[method].to_numpy(dtype=np.float64)
        row = {
            "method": method,
            "n_runs": int((~np.isnan(values)).sum()),
            "mean": float(np.nanmean(values)),
            "std": float(np.nanstd(values, ddof=1)) if (~np.isnan(values)).sum() > 1 else float("nan"),
            "mean_rank": float(ranks[method]),
            "reference": best,
        }
        if method == best:
            row.update(mean_difference=float("nan"), wilcoxon_statistic=float("nan"), p_value=float("nan"))
        else:
            test = paired_comparison(values, wide[best].to_numpy(dtype=np.float64), n_resamples=0)
            row.update(
                mean_difference=test.mean_difference, wilcoxon_statistic=test.wilcoxon_statistic, p_value=test.p_value
            )
        rows.append(row)
    table = pd.DataFrame(rows)
    table["p_holm"] = holm_adjust(table["p_value"].to_numpy())
    return table.sort_values("mean", ascending=False, kind="stable").reset_index(drop=True)[ACROSS_SEEDS_COLUMNS]


def min_wilcoxon_p(n: int) -> float:
    """Smallest two-sided p-value of the exact Wilcoxon signed-rank test on ``n`` pairs: ``2 / 2**n``.

    Every difference of one sign (rank sum 0 or ``n(n+1)/2``) is the most extreme of the ``2**n``
    equally likely sign patterns, one in each tail: 0.0625 for 5 runs, so p < 0.05 needs at least 6.
    """
    return float("nan") if n < 1 else min(1.0, 2.0 / 2.0**n)


def seed_comparisons(
    summaries: pd.DataFrame, *, run: str = "checkpoint", n_resamples: int = 1000, seed: int = 0
) -> pd.DataFrame:
    """Every pair of methods over several runs of one head, on faithfulness and Deletion@1.

    The per-run values (one ``summary.csv`` row per run and method) are paired by run and compared
    exactly as :func:`~laya_eval.stats.paired.compare_methods` compares per-sample values: Wilcoxon
    signed-rank (``zsplit``), a paired bootstrap interval over runs, rank-biserial, Holm over every pair of
    one metric (``reference="all"``).

    Parameters
    ----------
    summaries : DataFrame
        Columns ``run``, ``method``, ``faithfulness``, ``deletion_at_1``; one row per (run, method).
    run : str
        The column naming the run.
    n_resamples, seed : int
        As for :func:`~laya_eval.stats.paired.compare_methods`.

    Returns
    -------
    DataFrame
        :data:`~laya_eval.stats.paired.COMPARISON_COLUMNS`; ``n`` counts runs.
    """
    metrics = list(COMPARED_METRICS)
    for metric in metrics:
        _wide(summaries, metric, run)  # the same checks (columns, one row per run and method)
    per_run = summaries[[run, "method", *metrics]].rename(columns={run: "sample", **COMPARED_METRICS})
    return compare_methods(per_run, n_resamples=n_resamples, seed=seed, methods=list(pd.unique(summaries["method"])))
