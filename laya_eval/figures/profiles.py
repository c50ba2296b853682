"""Figures of class-wise layer profiles (``laya-eval profile``)."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pandas as pd

from laya_eval.figures.style import _finish, _new_figure, _theme, describe, method_color, method_label

__all__ = ["profile_bars", "profile_heatmap"]


def profile_heatmap(table: pd.DataFrame, *, subset: str, meta: Mapping[str, Any],
                    vmin: float | None = None, vmax: float | None = None):
    """Annotated class x layer heatmap of the mean score (± std) for one subset.

    Parameters
    ----------
    table : DataFrame
        Columns ``subset, class, class_name, layer, mean, std, n`` (see
        :func:`laya_eval.profile.profile_table`).
    subset : {"all", "correct", "incorrect"}
    meta : mapping
        :func:`describe`'s keys plus ``method`` and ``by`` (``label`` or ``pred``).
    vmin, vmax : float, optional
        Colour range; pass the same range for every subset to compare them.
    """
    import seaborn as sns

    part = table[table["subset"] == subset]
    classes = list(meta.get("class_names") or sorted(part["class_name"].unique()))
    n_layers = int(meta.get("n_layers") or part["layer"].max())
    layers = list(range(1, n_layers + 1))
    mean = part.pivot(index="class_name", columns="layer", values="mean").reindex(index=classes, columns=layers)
    std = part.pivot(index="class_name", columns="layer", values="std").reindex(index=classes, columns=layers)
    # A single sample has no std: its cell shows the mean only.
    annot = np.where(mean.isna(), "", mean.map(lambda v: f"{v:.2f}").to_numpy() + std.map(
        lambda v: "" if pd.isna(v) else f"\n±{v:.2f}").to_numpy())
    signed = bool((table["mean"] < 0).any())
    per_class = part.drop_duplicates("class_name").set_index("class_name")["n"]
    n = int(per_class.sum())
    mean.index = [f"{c} (n = {int(per_class.get(c, 0))})" for c in classes]
    with _theme("white"):
        fig = _new_figure(max(7.5, 1.1 * n_layers + 4.5), 0.42 * len(classes) + 2.0)
        ax = fig.subplots()
        sns.heatmap(mean, ax=ax, annot=annot, fmt="", cmap="vlag" if signed else "crest",
                    center=0 if signed else None, vmin=vmin, vmax=vmax, linewidths=0.5,
                    annot_kws={"fontsize": 7}, cbar_kws={"label": f"mean {method_label(meta['method'])}"},
                    mask=mean.isna())
        ax.set_xlabel("layer (1 = closest to the input)")
        ax.set_ylabel("true class" if meta.get("by", "label") == "label" else "predicted class")
        ax.tick_params(axis="y", rotation=0)
        what = {"all": "all predictions", "correct": "correct predictions", "incorrect": "incorrect predictions"}[subset]
        return _finish(fig, f"{method_label(meta['method'])} per class and layer: {what} (n = {n}); "
                            "cells: mean ± std", describe(meta))


def profile_bars(layer_table: pd.DataFrame, *, meta: Mapping[str, Any]):
    """Bar plot of the mean score ± std per layer, all classes pooled, one bar per subset.

    Parameters
    ----------
    layer_table : DataFrame
        Columns ``subset, layer, mean, std, n`` (see :func:`laya_eval.profile.layer_table`).
    meta : mapping
        As for :func:`profile_heatmap`.
    """
    subsets = [s for s in ("all", "correct", "incorrect") if s in set(layer_table["subset"])]
    # One colour (the method's); the subsets differ by shade and hatching, never by another method's colour.
    style = {"all": (1.0, ""), "correct": (0.55, ""), "incorrect": (0.55, "///")}
    n_layers = int(layer_table["layer"].max())
    width = 0.8 / len(subsets)
    with _theme():
        fig = _new_figure(max(7.5, 0.9 * n_layers + 3), 3.8)
        ax = fig.subplots()
        for k, subset in enumerate(subsets):
            part = layer_table[layer_table["subset"] == subset].sort_values("layer")
            x = part["layer"].to_numpy() + (k - (len(subsets) - 1) / 2) * width
            n = int(part["n"].iloc[0]) if len(part) else 0
            alpha, hatch = style[subset]
            ax.bar(x, part["mean"], width=width, yerr=part["std"].fillna(0), capsize=3, hatch=hatch,
                   color=method_color(meta["method"]), alpha=alpha, edgecolor="white", label=f"{subset} (n = {n})")
        ax.set_xticks(range(1, n_layers + 1))
        ax.set_xlabel("layer (1 = closest to the input)")
        ax.set_ylabel(f"{method_label(meta['method'])}: mean ± std")
        ax.axhline(0, color="black", linewidth=0.6)
        ax.legend(title="predictions", fontsize=8)
        return _finish(fig, f"{method_label(meta['method'])} per layer, all classes pooled", describe(meta))

