"""Figures of layer pruning (accuracy against layers removed) and of the early-exit frontier."""

from __future__ import annotations

import math

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.ticker import FuncFormatter

from laya_eval.figures.style import (
    METHOD_SHORT_LABELS,
    _finish,
    _legend_below,
    _new_figure,
    _theme,
    check_style,
    method_color,
    method_dashes,
    method_label,
    method_marker,
)

__all__ = ["early_exit_figure", "perplexity_figure", "pruning_figure"]

_BOUND_STYLE = {"oracle": ("#000000", (0, (1, 1)))}
# Horizontal step between the markers of the lines of one panel (in layers removed): lines that coincide
# (every method often keeps the oracle's accuracy) stay visible side by side.
_DODGE = 0.035


def _color(name: str) -> str:
    return _BOUND_STYLE[name][0] if name == "oracle" else method_color(name)


def _subtitle(meta: Mapping[str, Any]) -> str:
    return (
        f"checkpoint: {meta.get('label', '?')} ({meta.get('head', '?')} head) · dataset: {meta.get('dataset', '?')} "
        f"(test, n = {meta.get('n_test', '?')}) · head scope"
    )


def _same_curve(rows: pd.DataFrame, oracle: pd.DataFrame, value: str) -> bool:
    """Whether a line has the oracle's value at every number of layers removed (it would hide under it)."""
    a, b = rows.set_index("k_removed")[value], oracle.set_index("k_removed")[value]
    return a.index.equals(b.index) and bool(np.allclose(a.to_numpy(float), b.to_numpy(float), equal_nan=True))


def _panel(ax, part: pd.DataFrame, value: str, title: str, style: str) -> None:
    lines = [
        (key, rows.sort_values("k_removed"))
        for key, rows in part.groupby(["method", "ranking"], sort=False)
        if not rows[value].isna().all()
    ]
    oracle = [rows for (method, _), rows in lines if method == "oracle"]
    if oracle:  # a wide pale band under the methods: a method on the oracle's line shows inside it
        ax.plot(
            oracle[0]["k_removed"],
            oracle[0][value],
            color="#000000",
            alpha=0.15,
            linewidth=7,
            solid_capstyle="round",
            zorder=1,
        )
    others = [line for line in lines if line[0][0] != "oracle"]
    same = [key for key, rows in others if oracle and _same_curve(rows, oracle[0], value)]
    size = 3 if style == "paper" else 4
    # Offsets symmetric around each k and never 0: the oracle's own markers keep the exact positions.
    shift = (len(others) % 2) / 2
    for j, ((method, ranking), rows) in enumerate(others):
        dataset = ranking == "dataset"
        ax.plot(
            rows["k_removed"] + (j - (len(others) - 1) / 2 + shift) * _DODGE,
            rows[value],
            color=_color(method),
            marker=method_marker(method),
            markersize=size,
            linewidth=1.3 if dataset else 0.9,
            alpha=1.0 if dataset else 0.6,
            linestyle="solid" if dataset else (0, (4, 2)),
            zorder=3,
            label=f"{method_label(method)}{'' if dataset else ' (per input)'}",
        )
    for rows in oracle:
        ax.plot(
            rows["k_removed"],
            rows[value],
            color="#000000",
            linestyle=_BOUND_STYLE["oracle"][1],
            marker="*",
            markersize=size + 1,
            linewidth=1.0,
            zorder=4,
            label="oracle (grey band)",
        )
    if same:  # lines under the oracle's, named in the panel (the legend is shared by panels that may differ)
        names = [f"{METHOD_SHORT_LABELS.get(m, m)}{'' if r == 'dataset' else ' (input)'}" for m, r in same]
        rows_of_names = [", ".join(names[k : k + 2]) for k in range(0, len(names), 2)]
        ax.text(
            0.03,
            0.03,
            "same as oracle:\n" + ",\n".join(rows_of_names),
            transform=ax.transAxes,
            fontsize=5.5 if style == "paper" else 7,
            color="#333333",
            ha="left",
            va="bottom",
            zorder=5,
            bbox={"facecolor": "white", "edgecolor": "#bbbbbb", "alpha": 0.85, "linewidth": 0.5},
        )
    ax.set_title(title)
    ax.set_xticks(sorted(part["k_removed"].unique()))


def pruning_figure(
    table: pd.DataFrame, *, meta: Mapping[str, Any], style: str = "default", width: str | float | None = None
):
    """Test accuracy against the number of layers removed, one line per method and ranking.

    One panel per ablation (no retraining), then one for the heads retrained on the kept layers (dataset-level
    rankings; the refit does not depend on the ablation except for the oracle, shown for the first ablation).
    The oracle is also drawn as a wide grey band and the methods' markers are set side by side, so a method
    that keeps the oracle's accuracy stays visible on its line.

    Parameters
    ----------
    table : DataFrame
        ``pruning.csv``.
    meta : mapping
        ``label``, ``head``, ``dataset``, ``n_test``.
    style : {"default", "paper"}
    width : {"single", "double"} or float, optional
        Paper style: the figure's width (default: double).
    """
    check_style(style)
    ablations = list(dict.fromkeys(table["ablation"]))
    refit = table[(table["ablation"] == ablations[0]) & (table["ranking"] == "dataset")]
    has_refit = bool(refit["accuracy_refit"].notna().any())
    n_panels = len(ablations) + int(has_refit)
    ncols = n_panels if style == "default" else min(n_panels, 3)
    nrows = -(-n_panels // ncols)
    with _theme(figure_style=style):
        fig = _new_figure(
            3.2 * ncols + 1.5, 3.6 * nrows, style=style, paper_width=width, paper_height=1.5 * nrows + 0.9
        )
        axes = fig.subplots(nrows, ncols, squeeze=False, sharey=True).ravel()
        for ax in axes[n_panels:]:
            ax.set_visible(False)
        for ax, ablation in zip(axes, ablations):
            _panel(
                ax,
                table[table["ablation"] == ablation],
                "accuracy",
                f"no retraining · {ablation}" if style == "default" else ablation,
                style,
            )
        if has_refit:
            _panel(
                axes[n_panels - 1],
                refit,
                "accuracy_refit",
                "head retrained on the kept layers" if style == "default" else "head retrained",
                style,
            )
        for ax in axes[::ncols]:
            ax.set_ylabel("test accuracy")
        handles, labels = axes[0].get_legend_handles_labels()
        if style == "default":
            fig.supxlabel("layers removed (least important first)")
            fig.legend(handles, labels, loc="outside right center", fontsize=7, frameon=False)
        else:  # the legend goes below, where a figure-wide axis label would meet it
            for ax in axes[:n_panels]:
                ax.set_xlabel("layers removed")
            _legend_below(fig, handles, labels, ncols=4, fontsize=6, frameon=False)
        note = (
            "markers of the lines of one panel are set side by side so that lines which coincide stay "
            "visible, and a panel names the lines equal to the oracle's; the oracle (greedy order on the "
            "validation split) is also the wide grey band"
        )
        return _finish(fig, "Pruning layers by attribution: accuracy against layers removed", _subtitle(meta), note)


def _two_and_five(value: float, _position=None) -> str:
    """A minor tick's label on a log axis: only at 2 and 5 times a power of ten (200, 500, 2000 …), so that the
    labels of a decade do not run into each other."""
    if value <= 0:
        return ""
    mantissa = value / 10 ** math.floor(math.log10(value) + 1e-9)
    return f"{value:.4g}" if round(mantissa, 6) in (2.0, 5.0) else ""


def perplexity_figure(table: pd.DataFrame, *, meta: Mapping[str, Any], style: str = "default"):
    """A causal LM's held-out perplexity against the number of blocks removed (``skip``), one line per ranking,
    the oracle as a grey band (log scale: removing blocks multiplies perplexity).

    Parameters
    ----------
    table : DataFrame
        ``pruning.csv`` of ``prune --target next-token``: method, ranking, k_removed, perplexity.
    meta : mapping
        ``label``, ``dataset``, ``n_test``.
    """
    check_style(style)
    with _theme(figure_style=style):
        fig = _new_figure(6.0, 3.8, style=style, paper_width="single", paper_height=2.4)
        ax = fig.subplots()
        _panel(ax, table, "perplexity", "skip" if style == "paper" else "blocks skipped · no retraining", style)
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.4g}"))  # 37.5, not 3.75 x 10^1
        ax.yaxis.set_minor_formatter(FuncFormatter(_two_and_five))
        ax.set_ylabel("test perplexity")
        ax.set_xlabel("blocks removed (least important first)")
        handles, labels = ax.get_legend_handles_labels()
        if style == "default":
            fig.legend(handles, labels, loc="outside right center", fontsize=7, frameon=False)
        else:
            _legend_below(fig, handles, labels, ncols=3, fontsize=6, frameon=False)
        subtitle = (
            f"model: {meta.get('label', '?')} · data: {meta.get('dataset', '?')} (test windows, n = "
            f"{meta.get('n_test', '?')}) · network scope"
        )
        note = (
            "each score's dataset ranking from the validation windows; the oracle (greedy by measured validation "
            "loss) is also the wide grey band; random is the mean of seeded orders"
        )
        return _finish(fig, "Pruning blocks of a language model: perplexity against blocks removed", subtitle, note)


def early_exit_figure(
    table: pd.DataFrame, *, meta: Mapping[str, Any], style: str = "default", width: str | float | None = None
):
    """The accuracy-compute frontier of the early-exit policies.

    x: the latency ratio when measured, else the mean depth; y: test accuracy. One panel per partial-prediction
    kind; hollow markers: the saving is hypothetical (the signal or the partial head needs every layer).
    """
    check_style(style)
    kinds = list(dict.fromkeys(table["partial"]))
    timed = bool(table["latency_ratio"].notna().any())
    x = "latency_ratio" if timed else "mean_depth"
    with _theme(figure_style=style):
        fig = _new_figure(4.2 * len(kinds) + 1.6, 3.8, style=style, paper_width=width, paper_height=2.4)
        axes = fig.subplots(1, len(kinds), squeeze=False, sharey=True)[0]
        for ax, kind in zip(axes, kinds):
            part = table[table["partial"] == kind]
            fixed = part[part["policy"] == "fixed"].sort_values(x)
            ax.plot(
                fixed[x],
                fixed["accuracy"],
                color="#000000",
                linewidth=1.0,
                marker="s",
                markersize=3,
                label="fixed depth",
            )
            conf = part[part["policy"] == "confidence"].sort_values(x)
            ax.plot(
                conf[x],
                conf["accuracy"],
                color="#d55e00",
                linewidth=1.2,
                marker="o",
                markersize=3,
                label="confidence θ",
                markerfacecolor="none" if (conf["saving"] == "hypothetical").all() else None,
            )
            for method, rows in part[part["policy"] == "attribution"].groupby("method", sort=False):
                rows = rows.sort_values(x)
                hollow = (rows["saving"] == "hypothetical").all()
                ax.plot(
                    rows[x],
                    rows["accuracy"],
                    color=method_color(method),
                    linestyle=method_dashes(method),
                    marker=method_marker(method),
                    markersize=4,
                    linewidth=1.0,
                    markerfacecolor="none" if hollow else None,
                    label=f"mass ε · {method_label(method)}",
                )
            oracle = part[part["policy"] == "oracle"]
            ax.scatter(oracle[x], oracle["accuracy"], color="#000000", marker="*", s=80, zorder=5, label="oracle exit")
            ax.set_title(f"partial prediction: {kind}", fontsize=None if style == "default" else 7)
            ax.set_xlabel("backbone latency ÷ full backbone" if timed else "mean depth used")
            if not timed:
                ax.set_xticks(np.arange(1, int(part["mean_depth"].max()) + 1))
        axes[0].set_ylabel("test accuracy")
        handles, labels = axes[0].get_legend_handles_labels()
        if style == "default":
            fig.legend(handles, labels, loc="outside right center", fontsize=7, frameon=False)
        else:
            _legend_below(fig, handles, labels, ncols=3, fontsize=6, frameon=False)
        return _finish(
            fig,
            "Early exit: accuracy against compute",
            _subtitle(meta),
            "hollow markers: the saving is hypothetical (the signal or the partial head needs every layer's state)",
        )
