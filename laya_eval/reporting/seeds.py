"""Across checkpoints: the runs of a report that are seeds of one head, and their statistics.

A *seed group* is two or more runs that share head, dataset, ablation and scope (the keys of the
combined table, :data:`ACROSS_KEYS`), e.g. five training seeds of one LAYA head.
For each group, from the runs' ``summary.csv`` rows (one value per run and method):

- :func:`~laya_eval.stats.across_seeds`: mean ± std over runs, mean rank, and the Wilcoxon signed-rank
  test (over runs, paired by run) of each method against the best one, Holm-adjusted;
- :func:`~laya_eval.stats.seed_ranks`: each method's rank within each run;
- :func:`~laya_eval.stats.seed_comparisons`: the same test for every pair of methods (the significance
  matrix across seeds).
"""

from __future__ import annotations

from typing import Sequence

import pandas as pd

from laya_eval.stats import ACROSS_SEEDS_COLUMNS, COMPARISON_COLUMNS, across_seeds, seed_comparisons, seed_ranks

__all__ = ["ACROSS_KEYS", "GROUP_KEYS", "SEED_METRICS", "group_name", "seed_groups", "seed_tables"]

ACROSS_KEYS = ["head", "dataset", "ablation", "scope", "method"]  # one row of the combined table
GROUP_KEYS = ACROSS_KEYS[:-1]  # head, dataset, ablation, scope
#: Summary columns compared across seeds (both higher-is-better), with their display names.
SEED_METRICS = {"faithfulness": "Faithfulness", "deletion_at_1": "Deletion@1"}


def group_name(head: str, dataset: str, ablation: str, scope: str) -> str:
    """``laya · digits · gate · head``: the name of a seed group in the CSVs and the report."""
    return " · ".join(map(str, (head, dataset, ablation, scope)))


def seed_groups(faithfulness: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Group name -> the faithfulness rows of its runs, for every group of two runs or more.

    Parameters
    ----------
    faithfulness : DataFrame
        The report's ``faithfulness`` table: one row per (run, method), columns ``run`` and
        :data:`GROUP_KEYS`.
    """
    out = {}
    for keys, group in faithfulness.groupby(GROUP_KEYS, sort=False):
        if group["run"].nunique() > 1:
            out[group_name(*keys)] = group
    return out


def seed_tables(
    faithfulness: pd.DataFrame, *, n_resamples: int = 1000, seed: int = 0
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The across-seeds tables of a report: summary per method, rank per run, every pair's test.

    Parameters
    ----------
    faithfulness : DataFrame
        The report's ``faithfulness`` table (one row per run and method).
    n_resamples, seed : int
        Bootstrap of the pairwise tests' mean-difference interval (over runs).

    Returns
    -------
    across_seeds, seed_ranks, seed_comparisons : DataFrame
        ``group, metric,`` :data:`~laya_eval.stats.ACROSS_SEEDS_COLUMNS`; ``group, metric, run, method,
        value, rank``; ``group,`` :data:`~laya_eval.stats.COMPARISON_COLUMNS`. No rows when no group
        has two runs.
    """
    summary, ranks, pairs = [], [], []
    for name, group in seed_groups(faithfulness).items():
        for metric in SEED_METRICS:
            summary.append(across_seeds(group, metric=metric, run="run").assign(group=name, metric=metric))
            ranks.append(
                seed_ranks(group, metric=metric, run="run")
                .rename(columns={metric: "value"})
                .assign(group=name, metric=metric)
            )
        pairs.append(seed_comparisons(group, run="run", n_resamples=n_resamples, seed=seed).assign(group=name))
    return (
        _concat(summary, ["group", "metric", *ACROSS_SEEDS_COLUMNS]),
        _concat(ranks, ["group", "metric", "run", "method", "value", "rank"]),
        _concat(pairs, ["group", *COMPARISON_COLUMNS]),
    )


def _concat(parts: Sequence[pd.DataFrame], columns: list[str]) -> pd.DataFrame:
    if not parts:
        return pd.DataFrame(columns=columns)
    return pd.concat(parts, ignore_index=True)[columns]
