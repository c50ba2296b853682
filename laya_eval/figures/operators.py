"""Operator sensitivity: each method's faithfulness under each removal operator, one line per method."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from laya_eval.figures.style import (
    METHOD_SHORT_LABELS,
    _finish,
    _new_figure,
    _theme,
    check_style,
    method_color,
    method_dashes,
    method_label,
    method_marker,
)

__all__ = ["operators_figure"]


def operators_figure(
    table: pd.DataFrame,
    operators: Sequence[str],
    *,
    meta: Mapping[str, Any] | None = None,
    style: str = "default",
    width: str | float | None = None,
):
    """Faithfulness of every method (y) under each operator (x), read from ``operators.csv``.

    Parameters
    ----------
    table : DataFrame
        ``operators.csv`` (:func:`laya_eval.engine.operators.operator_sensitivity`).
    operators : sequence of str
        The operators in the run's order.
    meta : mapping, optional
        ``kendall_w``/``p_value`` are read from the table; ``subtitle`` from here if given.
    style : {"default", "paper"}
    width : {"single", "double"} or float, optional
    """
    check_style(style)
    paper = style == "paper"
    x = np.arange(len(operators))
    with _theme(figure_style=style):
        fig = _new_figure(
            1.3 * len(operators) + 3.4, 4.2, style=style, paper_width=width, natural="single", paper_height=2.4
        )
        ax = fig.subplots()
        for k, row in enumerate(table.itertuples(index=False)):
            y = np.array([getattr(row, f"faithfulness_{a}") for a in operators], dtype=float)
            # Coinciding lines stay visible: each method is nudged sideways by a small, fixed offset.
            dx = (k - (len(table) - 1) / 2) * 0.025
            ax.plot(
                x + dx,
                y,
                color=method_color(row.method),
                linestyle=method_dashes(row.method),
                marker=method_marker(row.method),
                markersize=4 if paper else 6,
                linewidth=1.2,
                label=METHOD_SHORT_LABELS.get(row.method, row.method) if paper else method_label(row.method),
            )
        ax.axhline(0.0, color="#999999", linewidth=0.6, zorder=0)
        ax.set_xticks(x, list(operators))
        ax.set_xlabel("removal operator (--ablation)")
        ax.set_ylabel("faithfulness (mean Spearman ρ)")
        ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False, fontsize=6 if paper else 8)
        w = float(table["kendall_w"].iloc[0]) if len(table) else float("nan")
        p = float(table["kendall_w_p_value"].iloc[0]) if len(table) else float("nan")
        agreement = (
            "Kendall's W undefined"
            if np.isnan(w)
            else f"Kendall's W = {w:.2f}" + ("" if np.isnan(p) else f" (permutation p = {p:.2g})")
        )
        subtitle = "; ".join(s for s in ((meta or {}).get("subtitle", ""), agreement) if s)
        return _finish(fig, "Does the verdict depend on how a layer is removed?", subtitle)
