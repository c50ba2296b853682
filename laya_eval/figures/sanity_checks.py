"""Figure of the sanity checks: attribution similarity per randomisation step and method."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from laya_eval.figures.style import (
    _finish,
    _legend_below,
    _new_figure,
    _theme,
    check_style,
    describe,
    method_color,
    method_label,
)

__all__ = ["randomisation_figure"]

_CHECK_TITLES = {"cascading": "cascading parameter randomisation", "data": "data randomisation (shuffled labels)"}


def _step_labels(params: list[str]) -> list[str]:
    """The group each step adds (``+scorer``); the steps are cumulative, as the axis label says."""
    labels, previous = [], []
    for p in params:
        groups = [] if p == "none" else p.split("+")
        new = groups[len(previous) :] if groups[: len(previous)] == previous else groups
        labels.append("original" if not groups else ("+" if previous else "") + "\n+".join(new))
        previous = groups
    return labels


def randomisation_figure(
    table: pd.DataFrame, *, meta: Mapping[str, Any], style: str = "default", width: str | float | None = None
):
    """Similarity to the original attributions (95% interval) after each randomisation step, per method.

    Parameters
    ----------
    table : DataFrame
        ``randomisation.csv`` and ``data_randomisation.csv`` rows (columns ``check, step, params, method,
        similarity, similarity_ci_low, similarity_ci_high``); one panel per check.
    meta : mapping
        As for :func:`laya_eval.figures.describe`.
    style : {"default", "paper"}
    width : {"single", "double"} or float, optional
        Paper style: the figure's width (default: double).
    """
    check_style(style)
    paper = style == "paper"
    checks = [c for c in ("cascading", "data") if c in set(table["check"])]
    methods = list(dict.fromkeys(table["method"]))
    n_steps = max(int(table.loc[table["check"] == c, "step"].max()) + 1 for c in checks)
    with _theme(figure_style=style):
        fig = _new_figure(
            min(16.0, max(7.0, 1.5 * n_steps + 2.5 * len(checks))),
            4.0,
            style=style,
            paper_width=width,
            paper_height=2.4,
        )
        axes = fig.subplots(
            1,
            len(checks),
            squeeze=False,
            sharey=True,
            width_ratios=[int(table.loc[table["check"] == c, "step"].max()) + 1 for c in checks],
        )[0]
        for ax, check in zip(axes, checks):
            part = table[table["check"] == check]
            steps = part.drop_duplicates("step").sort_values("step")
            for k, method in enumerate(methods):
                rows = part[part["method"] == method].sort_values("step")
                x = rows["step"].to_numpy() + (k - (len(methods) - 1) / 2) * 0.05
                # A percentile interval can miss its estimate with few resamples; errorbar needs lengths >= 0.
                below = (rows["similarity"] - rows["similarity_ci_low"]).clip(lower=0)
                above = (rows["similarity_ci_high"] - rows["similarity"]).clip(lower=0)
                ax.errorbar(
                    x,
                    rows["similarity"],
                    yerr=[below, above],
                    color=method_color(method),
                    marker="o",
                    markersize=2.5 if paper else 4,
                    capsize=2,
                    linewidth=0.9 if paper else 1.2,
                    label=method_label(method),
                )
            ax.set_xticks(steps["step"], _step_labels(steps["params"].tolist()), fontsize=5 if paper else 7)
            ax.axhline(0, color="black", linewidth=0.6)
            ax.set_ylim(-1.05, 1.05)
            ax.set_title(_CHECK_TITLES.get(check, check), fontsize=7 if paper else None)
            ax.set_xlabel("parameters re-initialised (cumulative)" if check == "cascading" else "")
        axes[0].set_ylabel("similarity to the original attributions")
        handles, labels = axes[0].get_legend_handles_labels()
        _legend_below(fig, handles, labels, ncols=len(labels), fontsize=6 if paper else 8, frameon=False)
        return _finish(
            fig,
            "Sanity checks: do the attributions depend on the model?",
            describe(meta),
            "similarity of each method's attributions to the original ones after each step (bars: 95% "
            "bootstrap interval over samples); attributions that depend on the model fall towards 0",
        )
