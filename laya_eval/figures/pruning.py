"""Figures of layer pruning (accuracy against layers removed) and of the early-exit frontier."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from laya_eval.figures.style import (
    _finish,
    _new_figure,
    _theme,
    method_color,
    method_dashes,
    method_label,
    method_marker,
)

__all__ = ["early_exit_figure", "pruning_figure"]

_BOUND_STYLE = {"oracle": ("#000000", (0, (1, 1))), "random": ("#949494", (0, (1, 3)))}


def _color(name: str) -> str:
    return _BOUND_STYLE[name][0] if name == "oracle" else method_color(name)


def _subtitle(meta: Mapping[str, Any]) -> str:
    return (f"checkpoint: {meta.get('label', '?')} ({meta.get('head', '?')} head) · dataset: {meta.get('dataset', '?')} "
            f"(test, n = {meta.get('n_test', '?')}) · head scope")


def _panel(ax, part: pd.DataFrame, value: str, title: str) -> None:
    for (method, ranking), rows in part.groupby(["method", "ranking"], sort=False):
        rows = rows.sort_values("k_removed")
        if rows[value].isna().all():
            continue
        style = "solid" if method != "oracle" else _BOUND_STYLE["oracle"][1]
        ax.plot(rows["k_removed"], rows[value], color=_color(method), marker=method_marker(method), markersize=4,
                linewidth=1.3 if ranking == "dataset" else 0.9, alpha=1.0 if ranking == "dataset" else 0.6,
                linestyle=style if ranking == "dataset" else (0, (4, 2)),
                label=f"{method_label(method)}{'' if ranking == 'dataset' else ' (per input)'}")
    ax.set_title(title)
    ax.set_xlabel("layers removed (least important first)")
    ax.set_xticks(sorted(part["k_removed"].unique()))


def pruning_figure(table: pd.DataFrame, *, meta: Mapping[str, Any]):
    """Test accuracy against the number of layers removed, one line per method and ranking.

    One panel per ablation (no retraining), then one for the heads retrained on the kept layers (dataset-level
    rankings; the refit does not depend on the ablation except for the oracle, shown for the first ablation).

    Parameters
    ----------
    table : DataFrame
        ``pruning.csv``.
    meta : mapping
        ``label``, ``head``, ``dataset``, ``n_test``.
    """
    ablations = list(dict.fromkeys(table["ablation"]))
    refit = table[(table["ablation"] == ablations[0]) & (table["ranking"] == "dataset")]
    has_refit = bool(refit["accuracy_refit"].notna().any())
    n_panels = len(ablations) + int(has_refit)
    with _theme():
        fig = _new_figure(3.2 * n_panels + 1.5, 3.6)
        axes = fig.subplots(1, n_panels, squeeze=False, sharey=True)[0]
        for ax, ablation in zip(axes, ablations):
            _panel(ax, table[table["ablation"] == ablation], "accuracy", f"no retraining · {ablation}")
        if has_refit:
            _panel(axes[-1], refit, "accuracy_refit", "head retrained on the kept layers")
        axes[0].set_ylabel("test accuracy")
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside right center", fontsize=7, frameon=False)
        return _finish(fig, "Pruning layers by attribution: accuracy against layers removed", _subtitle(meta))


def early_exit_figure(table: pd.DataFrame, *, meta: Mapping[str, Any]):
    """The accuracy-compute frontier of the early-exit policies.

    x: the latency ratio when measured, else the mean depth; y: test accuracy. One panel per partial-prediction
    kind; hollow markers: the saving is hypothetical (the signal or the partial head needs every layer).
    """
    kinds = list(dict.fromkeys(table["partial"]))
    timed = bool(table["latency_ratio"].notna().any())
    x = "latency_ratio" if timed else "mean_depth"
    with _theme():
        fig = _new_figure(4.2 * len(kinds) + 1.6, 3.8)
        axes = fig.subplots(1, len(kinds), squeeze=False, sharey=True)[0]
        for ax, kind in zip(axes, kinds):
            part = table[table["partial"] == kind]
            fixed = part[part["policy"] == "fixed"].sort_values(x)
            ax.plot(fixed[x], fixed["accuracy"], color="#000000", linewidth=1.0, marker="s", markersize=3,
                    label="fixed depth")
            conf = part[part["policy"] == "confidence"].sort_values(x)
            ax.plot(conf[x], conf["accuracy"], color="#d55e00", linewidth=1.2, marker="o", markersize=3,
                    label="confidence θ", markerfacecolor="none" if (conf["saving"] == "hypothetical").all() else None)
            for method, rows in part[part["policy"] == "attribution"].groupby("method", sort=False):
                rows = rows.sort_values(x)
                hollow = (rows["saving"] == "hypothetical").all()
                ax.plot(rows[x], rows["accuracy"], color=method_color(method), linestyle=method_dashes(method),
                        marker=method_marker(method), markersize=4, linewidth=1.0,
                        markerfacecolor="none" if hollow else None, label=f"mass ε · {method_label(method)}")
            oracle = part[part["policy"] == "oracle"]
            ax.scatter(oracle[x], oracle["accuracy"], color="#000000", marker="*", s=80, zorder=5, label="oracle exit")
            ax.set_title(f"partial prediction: {kind}")
            ax.set_xlabel("backbone latency ÷ full backbone" if timed else "mean depth used")
            if not timed:
                ax.set_xticks(np.arange(1, int(part["mean_depth"].max()) + 1))
        axes[0].set_ylabel("test accuracy")
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside right center", fontsize=7, frameon=False)
        return _finish(fig, "Early exit: accuracy against compute (hollow: saving needs all layers' states)",
                       _subtitle(meta))
