"""Operator sensitivity: does a method's verdict depend on how a layer is removed?

A run over two or more ablations (removal operators) scores every method against each. The table
``operators.csv`` has one row per method: its faithfulness and rank under each operator, the largest swing
of its faithfulness between two operators (and which two), and — the same on every row — the agreement of
the method ranking across operators, Kendall's W with a permutation p-value
(:mod:`laya_eval.stats.concordance`; raters = operators, items = the methods with a defined faithfulness
under every operator). A method whose faithfulness is undefined under an operator has no rank there and is
left out of W; the ``n_methods_ranked`` column says how many entered it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
import pandas as pd
from scipy.stats import rankdata

from laya_eval.catalog import METHOD_SPECS
from laya_eval.stats.concordance import kendalls_w_test

__all__ = ["OPERATOR_PERMUTATIONS", "OperatorSensitivity", "operator_columns", "operator_sensitivity"]

#: Permutations of the Kendall's W test (p-values resolve to 1 / 10001).
OPERATOR_PERMUTATIONS = 10000


@dataclass(frozen=True)
class OperatorSensitivity:
    """Operator sensitivity of one run.

    Attributes
    ----------
    table : DataFrame
        ``operators.csv`` (columns :func:`operator_columns`).
    best : dict of str to str or None
        Per operator, the non-baseline method with the highest faithfulness (None if none is defined).
    kendall_w, p_value : float
        NaN where undefined (fewer than two methods ranked under every operator).
    warning : str or None
        Set when the best method changes with the operator.
    """

    table: pd.DataFrame
    best: dict[str, str | None]
    kendall_w: float
    p_value: float
    warning: str | None


def operator_columns(operators: list[str]) -> list[str]:
    """The columns of ``operators.csv`` for these operators, in order."""
    per = [c for a in operators for c in (f"faithfulness_{a}", f"rank_{a}")]
    return [
        "method",
        *per,
        "largest_swing",
        "swing_from",
        "swing_to",
        "rank_range",
        "kendall_w",
        "kendall_w_p_value",
        "n_operators",
        "n_methods_ranked",
    ]


def _best(faith: pd.DataFrame, operator: str) -> str | None:
    real = [m for m in faith.index if not (METHOD_SPECS.get(m) and METHOD_SPECS[m].baseline)]
    column = faith.loc[real, operator].dropna()
    return None if column.empty else str(column.idxmax())


def operator_sensitivity(
    summaries: Mapping[str, pd.DataFrame], *, seed: int = 0, n_permutations: int = OPERATOR_PERMUTATIONS
) -> OperatorSensitivity:
    """Operator sensitivity from each operator's ``summary`` table (columns ``method``, ``faithfulness``).

    Parameters
    ----------
    summaries : mapping of operator name to DataFrame
        Two or more, in the run's order.
    seed : int
        Seeds the permutation test.
    n_permutations : int
    """
    operators = list(summaries)
    faith = pd.concat({a: s.set_index("method")["faithfulness"].astype(float) for a, s in summaries.items()}, axis=1)
    ranks = faith.apply(lambda col: pd.Series(_ranks(col.to_numpy()), index=col.index))
    complete = faith.dropna()
    test = kendalls_w_test(complete.to_numpy().T, n_permutations=n_permutations, seed=seed)
    rows: list[dict[str, Any]] = []
    for method in faith.index:
        values = faith.loc[method]
        row: dict[str, Any] = {"method": method}
        for a in operators:
            row[f"faithfulness_{a}"] = values[a]
            row[f"rank_{a}"] = ranks.loc[method, a]
        defined = values.dropna()
        if len(defined) >= 2:
            row.update(
                largest_swing=float(defined.max() - defined.min()),
                swing_from=str(defined.idxmin()),
                swing_to=str(defined.idxmax()),
                rank_range=float(ranks.loc[method].max() - ranks.loc[method].min()),
            )
        else:
            row.update(largest_swing=np.nan, swing_from="", swing_to="", rank_range=np.nan)
        row.update(
            kendall_w=test.w, kendall_w_p_value=test.p_value, n_operators=len(operators), n_methods_ranked=test.n_items
        )
        rows.append(row)
    best = {a: _best(faith, a) for a in operators}
    warning = None
    if len({b for b in best.values() if b is not None}) > 1:
        warning = (
            "the best method changes with the operator: "
            + ", ".join(f"{a} -> {b if b is not None else 'undefined'}" for a, b in best.items())
            + ": which method is most faithful depends on how a layer is removed."
        )
    return OperatorSensitivity(
        pd.DataFrame(rows, columns=operator_columns(operators)), best, test.w, test.p_value, warning
    )


def _ranks(values: np.ndarray) -> np.ndarray:
    """Average ranks, 1 = the highest faithfulness; NaN stays NaN (no rank)."""
    out = np.full(values.shape, np.nan)
    ok = ~np.isnan(values)
    out[ok] = rankdata(-values[ok], method="average")
    return out
