"""The compact significance matrix: methods x methods, one cell per paired test.

Cell (row ``a``, column ``b``) reads the test of ``a`` against ``b`` from ``comparisons.csv`` (per run: the
Wilcoxon signed-rank test over samples) or from the across-seeds comparisons (over runs):

- ``▲`` the row method scores higher (mean of ``a - b`` > 0) and the Holm-adjusted p is below ``alpha``;
- ``▼`` it scores lower, same condition; ``≠`` significant with a mean difference of exactly 0;
- ``·`` not significant at ``alpha``; ``?`` no test (no pair of defined values); an empty cell: the pair is not in
  the run's family (by default every method is tested against one reference, not against every other method).

followed by the Holm-adjusted p (``<0.001`` below 0.001). The decision is comparisons.csv's ``significant``
(``p_holm < ALPHA``, :data:`laya_eval.stats.ALPHA`), the same rule the figures mark. Both compared metrics are higher-is-better, so
``▲`` always means "better". comparisons.csv holds each unordered pair once (``method_a`` before
``method_b``); the cell ``(b, a)`` is the same test with the sign reversed.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from laya_eval.catalog import in_registry_order
from laya_eval.stats import ALPHA

__all__ = [
    "ALPHA",
    "SIGNIFICANCE_COLUMNS",
    "cell_text",
    "holm_family_text",
    "matrix_cells",
    "signed_log_p",
    "significance_matrix",
    "significance_symbol",
    "significance_table",
]

SIGNIFICANCE_COLUMNS = [
    "source",
    "name",
    "metric",
    "method",
    "versus",
    "n",
    "mean_difference",
    "p_holm",
    "family_size",
    "symbol",
]


def significance_symbol(mean_difference: float, p_holm: float, *, alpha: float = ALPHA) -> str:
    """``▲`` / ``▼`` / ``≠`` / ``·`` / ``?`` for one ordered comparison (see the module docstring)."""
    if pd.isna(p_holm) or pd.isna(mean_difference):
        return "?"
    if p_holm >= alpha:
        return "·"
    return "▲" if mean_difference > 0 else "▼" if mean_difference < 0 else "≠"


def cell_text(symbol: str, p_holm: float) -> str:
    """What a matrix cell shows: the symbol and the Holm-adjusted p, e.g. ``▲ 0.003`` or ``· 0.412``."""
    if symbol == "?" or pd.isna(p_holm):
        return "?"
    return f"{symbol} {'<0.001' if p_holm < 0.001 else f'{p_holm:.3f}'}"


def significance_matrix(
    comparisons: pd.DataFrame, *, metric: str, methods: Sequence[str] | None = None, alpha: float = ALPHA
) -> pd.DataFrame:
    """Every ordered pair of methods of one run (or one seed group) on one metric.

    Parameters
    ----------
    comparisons : DataFrame
        ``comparisons.csv`` rows of one run: ``metric, method_a, method_b, n, mean_difference, p_holm`` and
        ``family_size`` (the number of tests Holm's adjustment ran over; left empty where absent).
    metric : str
        ``faithfulness`` or ``deletion_at_1``.
    methods : sequence of str, optional
        Row / column order (default: the methods in ``comparisons``, registry order).
    alpha : float

    Returns
    -------
    DataFrame
        ``method, versus, n, mean_difference, p_holm, family_size, symbol``: one row per ordered pair ``method !=
        versus`` present in ``comparisons``, rows in ``methods`` order; ``mean_difference`` is the mean of
        ``method - versus``.
    """
    part = comparisons[comparisons["metric"] == metric]
    if methods is None:
        methods = in_registry_order(pd.concat([part["method_a"], part["method_b"]]))
    tests = {}
    sizes = part["family_size"] if "family_size" in part.columns else pd.Series(np.nan, index=part.index)
    for row, size in zip(part.itertuples(index=False), sizes):
        tests[(row.method_a, row.method_b)] = (int(row.n), float(row.mean_difference), float(row.p_holm), size)
        tests[(row.method_b, row.method_a)] = (int(row.n), -float(row.mean_difference), float(row.p_holm), size)
    rows = []
    for a in methods:
        for b in methods:
            if a == b or (a, b) not in tests:
                continue
            n, diff, p, size = tests[(a, b)]
            rows.append(
                {
                    "method": a,
                    "versus": b,
                    "n": n,
                    "mean_difference": diff,
                    "p_holm": p,
                    "family_size": size,
                    "symbol": significance_symbol(diff, p, alpha=alpha),
                }
            )
    return pd.DataFrame(rows, columns=SIGNIFICANCE_COLUMNS[3:])


def significance_table(
    comparisons: pd.DataFrame, seed_comparisons: pd.DataFrame, *, alpha: float = ALPHA
) -> pd.DataFrame:
    """The significance matrices of a report in long form (``significance.csv``).

    Parameters
    ----------
    comparisons : DataFrame
        The runs' paired tests over samples, with a ``run`` column.
    seed_comparisons : DataFrame
        The seed groups' paired tests over runs, with a ``group`` column.

    Returns
    -------
    DataFrame
        :data:`SIGNIFICANCE_COLUMNS`; ``source`` is ``run`` (``name`` the run label) or ``seeds``
        (``name`` the seed group).
    """
    parts = []
    for source, table, key in (("run", comparisons, "run"), ("seeds", seed_comparisons, "group")):
        for name in pd.unique(table[key]) if len(table) else []:
            own = table[table[key] == name]
            for metric in pd.unique(own["metric"]):
                parts.append(
                    significance_matrix(own, metric=metric, alpha=alpha).assign(source=source, name=name, metric=metric)
                )
    if not parts:
        return pd.DataFrame(columns=SIGNIFICANCE_COLUMNS)
    return pd.concat(parts, ignore_index=True)[SIGNIFICANCE_COLUMNS]


def matrix_cells(long: pd.DataFrame, methods: Sequence[str]) -> list[list[str]]:
    """Rows of cell texts (``—`` on the diagonal, empty for a pair outside the family) from one matrix in long
    form."""
    by_pair = {(r.method, r.versus): cell_text(r.symbol, r.p_holm) for r in long.itertuples(index=False)}
    return [[("—" if a == b else by_pair.get((a, b), "")) for b in methods] for a in methods]


def holm_family_text(long: pd.DataFrame) -> str:
    """``Holm over k tests`` for one matrix in long form (``Holm over 3 to 6 tests`` where its families differ)."""
    sizes = sorted({int(k) for k in long["family_size"].dropna()}) if "family_size" in long.columns else []
    if not sizes:
        return "Holm"
    count = f"{sizes[0]}" if len(sizes) == 1 else f"{sizes[0]} to {sizes[-1]}"
    return f"Holm over {count} test{'' if sizes == [1] else 's'}"


def signed_log_p(long: pd.DataFrame, methods: Sequence[str], *, cap: float = 4.0) -> np.ndarray:
    """(M, M) sign(mean difference) * -log10(p_holm), capped at ``cap``; NaN on the diagonal and untested cells."""
    out = np.full((len(methods), len(methods)), np.nan)
    index = {m: k for k, m in enumerate(methods)}
    for r in long.itertuples(index=False):
        if r.method in index and r.versus in index and not pd.isna(r.p_holm):
            strength = min(-np.log10(max(float(r.p_holm), 10.0**-cap)), cap)
            out[index[r.method], index[r.versus]] = np.sign(r.mean_difference) * strength
    return out
