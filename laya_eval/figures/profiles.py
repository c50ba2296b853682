"""Figures of class-wise layer profiles (``laya-eval profile``)."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pandas as pd

from laya_eval.figures.style import (
    _finish,
    _new_figure,
    _theme,
    check_style,
    describe,
    layer_names,
    method_color,
    method_label,
)

__all__ = ["WEIGHT_METHODS", "profile_distribution", "profile_heatmap"]

# Methods whose scores are layer weights: convex combinations, in [0, 1] and summing to 1 over layers.
WEIGHT_METHODS = ("laya", "static")


def profile_heatmap(
    table: pd.DataFrame,
    *,
    subset: str,
    meta: Mapping[str, Any],
    vmin: float | None = None,
    vmax: float | None = None,
    style: str = "default",
    width: str | float | None = None,
):
    """Annotated class x layer heatmap of the mean score (± std) for one subset.

    Parameters
    ----------
    table : DataFrame
        Columns ``subset, class, class_name, layer, mean, std, n`` (see
        :func:`laya_eval.profiling.profiles.profile_table`).
    subset : {"all", "correct", "incorrect"}
    meta : mapping
        :func:`describe`'s keys plus ``method``, ``by`` (``label`` or ``pred``) and
        ``layer_names`` (the model's, used on the layer axis).
    vmin, vmax : float, optional
        Colour range; pass the same range for every subset to compare them.
    style : {"default", "paper"}
    width : {"single", "double"} or float, optional
    """
    import seaborn as sns

    check_style(style)
    part = table[table["subset"] == subset]
    classes = list(meta.get("class_names") or sorted(part["class_name"].unique()))
    n_layers = int(meta.get("n_layers") or part["layer"].max())
    layers = list(range(1, n_layers + 1))
    mean = part.pivot(index="class_name", columns="layer", values="mean").reindex(index=classes, columns=layers)
    std = part.pivot(index="class_name", columns="layer", values="std").reindex(index=classes, columns=layers)
    # A single sample has no std: its cell shows the mean only.
    annot = np.where(
        mean.isna(),
        "",
        mean.map(lambda v: f"{v:.2f}").to_numpy() + std.map(lambda v: "" if pd.isna(v) else f"\n±{v:.2f}").to_numpy(),
    )
    signed = bool((table["mean"] < 0).any())
    per_class = part.drop_duplicates("class_name").set_index("class_name")["n"]
    n = int(per_class.sum())
    mean.index = [f"{c} (n = {int(per_class.get(c, 0))})" for c in classes]
    mean.columns = layer_names(meta, n_layers)
    paper = style == "paper"
    with _theme("white", figure_style=style):
        fig = _new_figure(
            max(7.5, 1.1 * n_layers + 4.5),
            0.42 * len(classes) + 2.0,
            style=style,
            paper_width=width,
            natural="single" if n_layers <= 4 else "double",
            paper_height=0.2 * len(classes) + 0.8,
        )
        ax = fig.subplots()
        sns.heatmap(
            mean,
            ax=ax,
            annot=annot,
            fmt="",
            cmap="vlag" if signed else "crest",
            center=0 if signed else None,
            vmin=vmin,
            vmax=vmax,
            linewidths=0.5,
            annot_kws={"fontsize": 4.5 if paper else 7},
            mask=mean.isna(),
            cbar_kws={"label": f"mean {method_label(meta['method'])}"},
        )
        if paper:
            ax.collections[0].colorbar.ax.tick_params(length=2, width=0.5)
        ax.set_xlabel("layer (closest to the input first)")
        ax.set_ylabel("true class" if meta.get("by", "label") == "label" else "predicted class")
        ax.tick_params(axis="y", rotation=0)
        what = {"all": "all predictions", "correct": "correct predictions", "incorrect": "incorrect predictions"}[
            subset
        ]
        return _finish(
            fig,
            f"{method_label(meta['method'])} per class and layer: {what} (n = {n})",
            describe(meta),
            "cells: mean ± standard deviation over the class's samples",
        )


def _long_scores(scores: pd.DataFrame, names: list[str]) -> pd.DataFrame:
    correct = scores["label"].to_numpy() == scores["pred"].to_numpy()
    n_ok = int(scores.loc[correct, "sample"].nunique())
    n_bad = int(scores.loc[~correct, "sample"].nunique())
    labels = np.where(correct, f"correct (n = {n_ok})", f"incorrect (n = {n_bad})")
    return pd.DataFrame(
        {"layer": [names[k - 1] for k in scores["layer"]], "score": scores["score"].to_numpy(), "predictions": labels}
    )


def profile_distribution(
    scores: pd.DataFrame, *, meta: Mapping[str, Any], style: str = "default", width: str | float | None = None
):
    """Violins of the per-sample score per layer, correct and incorrect predictions side by side.

    Each half violin is the density of one subset's scores, cut at the observed extremes (a
    weight never leaves [0, 1]); the dashed lines are its quartiles. Weight methods
    (:data:`WEIGHT_METHODS`) are drawn on the fixed axis [0, 1].

    Parameters
    ----------
    scores : DataFrame
        ``sample, label, pred, layer, score`` (:attr:`laya_eval.profiling.profiles.LayerProfile.scores`).
    meta : mapping
        As for :func:`profile_heatmap`.
    style : {"default", "paper"}
    width : {"single", "double"} or float, optional
    """
    import seaborn as sns

    check_style(style)
    n_layers = int(meta.get("n_layers") or scores["layer"].max())
    names = layer_names(meta, n_layers)
    data = _long_scores(scores, names)
    hues = sorted(data["predictions"].unique())  # "correct ..." before "incorrect ..."
    color = method_color(meta["method"])
    palette = dict(zip(hues, [color, "#bbbbbb"]))
    with _theme(figure_style=style):
        fig = _new_figure(
            max(7.5, 0.9 * n_layers + 3),
            3.8,
            style=style,
            paper_width=width,
            natural="single" if n_layers <= 6 else "double",
            paper_height=2.0,
        )
        ax = fig.subplots()
        sns.violinplot(
            data,
            x="layer",
            y="score",
            hue="predictions",
            hue_order=hues,
            order=names,
            split=len(hues) == 2,
            cut=0,
            inner="quart",
            density_norm="width",
            palette=palette,
            linewidth=0.6 if style == "paper" else 1.0,
            ax=ax,
        )
        if meta["method"] in WEIGHT_METHODS:
            ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("layer (closest to the input first)")
        ax.set_ylabel(method_label(meta["method"]))
        ax.legend(title="predictions", fontsize=6.5 if style == "paper" else 8, loc="best")
        n = int(scores["sample"].nunique())
        return _finish(
            fig,
            f"{method_label(meta['method'])} per layer, all classes pooled (n = {n})",
            describe(meta),
            "distribution of the per-sample scores; dashed lines: quartiles",
        )
