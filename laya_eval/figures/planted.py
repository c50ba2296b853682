"""The figure of ``laya-eval meta``: recovery of planted relevance, and which metric tells faithful from not."""

from __future__ import annotations

import numpy as np
import pandas as pd

from laya_eval.figures.style import _finish, _new_figure, _theme, method_label

__all__ = ["planted_figure"]

# Colour positions: red (fails), grey (undefined, or undetermined: no interval), green (separates).
_VERDICT_VALUE = {"separates": 1.0, "undefined": 0.5}


def _recovery_grid(summary: pd.DataFrame) -> pd.DataFrame:
    """Methods x families of the mean AUROC; the scores do not depend on the ablation, the effects do."""
    families = list(dict.fromkeys(summary["family"]))
    scored = summary[summary["kind"] != "effect"].drop_duplicates(["family", "method"])
    grid = scored.pivot(index="method", columns="family", values="auroc")
    grid = grid.reindex(index=list(dict.fromkeys(scored["method"])), columns=families)
    grid.index = [method_label(m) for m in grid.index]
    effects = summary[summary["kind"] == "effect"]
    rows = effects.pivot(index="ablation", columns="family", values="auroc").reindex(
        index=list(dict.fromkeys(effects["ablation"])), columns=families
    )
    rows.index = [f"LOLO effect ({a})" for a in rows.index]
    return pd.concat([grid, rows])


def planted_figure(summary: pd.DataFrame, metrics: pd.DataFrame):
    """Two heatmaps: (a) mean AUROC of each method (and of each ablation's own effects) per planted family;
    (b) per metric, family and ablation, whether the metric scores the planted ranking above the inverted and the
    layer-index ones (green) or not (red; grey: undefined, or a single seed left), annotated with the smaller mean
    margin.

    Parameters
    ----------
    summary : DataFrame
        ``meta.csv`` (:func:`laya_eval.planted.scoring.over_seeds`).
    metrics : DataFrame
        ``metrics.csv`` (:func:`laya_eval.planted.scoring.metric_verdicts`).
    """
    import seaborn as sns

    grid = _recovery_grid(summary)
    metrics = metrics.assign(
        column=metrics["family"] + "\n" + metrics["ablation"],
        margin=np.fmin(metrics["margin_vs_inverted"], metrics["margin_vs_layer_index"]),
        ok=[0.5 if v.startswith("undetermined") else _VERDICT_VALUE.get(v, 0.0) for v in metrics["verdict"]],
    )
    columns = list(dict.fromkeys(metrics["column"]))
    order = list(dict.fromkeys(metrics["metric"]))
    ok = metrics.pivot(index="metric", columns="column", values="ok").reindex(index=order, columns=columns)
    margin = metrics.pivot(index="metric", columns="column", values="margin").reindex(index=order, columns=columns)
    annot = np.where(margin.isna(), "n/a", margin.map(lambda v: f"{v:+.2f}").to_numpy())
    n_seeds = int(summary["n_seeds"].max()) if len(summary) else 0
    with _theme("white"):
        fig = _new_figure(max(9.0, 0.62 * len(columns) + 2.5), 0.34 * len(grid) + 0.5 * len(order) + 3.2)
        top, bottom = fig.subfigures(2, 1, height_ratios=[max(len(grid), 1) * 0.34 + 1.2, len(order) * 0.5 + 1.6])
        ax = top.subplots()
        sns.heatmap(
            grid,
            ax=ax,
            annot=True,
            fmt=".2f",
            cmap="vlag_r",
            vmin=0,
            vmax=1,
            center=0.5,
            linewidths=0.5,
            annot_kws={"fontsize": 7},
            cbar_kws={"label": "AUROC (0.5 = chance)"},
            mask=grid.isna(),
        )
        ax.set_title("(a) recovery of the planted relevance: mean AUROC over seeds", fontsize=9, loc="left")
        ax.set_xlabel("planted family")
        ax.set_ylabel("")
        ax.tick_params(axis="y", rotation=0)
        ax = bottom.subplots()
        sns.heatmap(
            ok,
            ax=ax,
            annot=annot,
            fmt="",
            cmap=sns.color_palette(["#d6604d", "#bdbdbd", "#8fd19e"], as_cmap=True),
            vmin=0,
            vmax=1,
            linewidths=0.5,
            cbar=False,
            annot_kws={"fontsize": 6.5},
            mask=ok.isna(),
        )
        ax.set_title(
            "(b) does the metric rank the planted attribution above the unfaithful ones?", fontsize=9, loc="left"
        )
        ax.set_xlabel("family / ablation (cells: the smaller mean margin)")
        ax.set_ylabel("")
        ax.tick_params(axis="x", labelsize=6.5)
        ax.tick_params(axis="y", rotation=0)
        return _finish(
            fig,
            f"Planted ground truth on digits: {n_seeds} seed(s) per family, head scope",
            "(b) green: above the inverted and the layer-index rankings beyond seed variation; red: not; "
            "grey: undefined or one seed only.\nCells: the smaller mean margin metric(planted) - "
            "metric(other) over seeds",
        )
