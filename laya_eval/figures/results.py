"""Figures of faithfulness results (``laya-eval report``): per-method scores, curves, distributions."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from laya_eval.figures.style import (PALETTE, RHO_BANDS, _facet_title, _finish, _new_figure, _theme, describe,
                                     method_color, method_label)

__all__ = ["agreement_figure", "deletion_curves_figure", "faithfulness_figure", "scatter_figure",
           "spearman_distribution_figure"]


def _grid(n_panels: int, width: float, height: float, ncols: int = 4, **kw):
    ncols = min(ncols, n_panels)
    nrows = -(-n_panels // ncols)
    fig = _new_figure(width * ncols, height * nrows)
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False, **kw)).ravel()
    for ax in axes[n_panels:]:
        ax.set_visible(False)
    return fig, axes


def _color_method_ticks(ax, names: Sequence[str], axis: str = "y") -> None:
    labels = ax.get_yticklabels() if axis == "y" else ax.get_xticklabels()
    for text, name in zip(labels, names):
        text.set_color(method_color(name))


def faithfulness_figure(table: pd.DataFrame, runs: Sequence[Mapping[str, Any]]):
    """Faithfulness and Deletion@1 per method with 95% intervals; one column per run.

    Parameters
    ----------
    table : DataFrame
        ``run, method, faithfulness(_ci_low/_ci_high), deletion_at_1(_ci_low/_ci_high)``
        (the report's faithfulness.csv).
    runs : sequence of mapping
        Per run :func:`describe`'s keys, ``label`` equal to the table's ``run``.
    """
    metrics = [("faithfulness", "faithfulness\n(mean Spearman ρ)"),
               ("deletion_at_1", "Deletion@1\n(drop of p(predicted class))")]
    present = set(table["method"])
    # One row per method across all runs, so the shared y axis means the same method everywhere.
    methods = [m for m in PALETTE if m in present] + sorted(present - set(PALETTE))
    ypos = {m: len(methods) - 1 - k for k, m in enumerate(methods)}
    with _theme():
        fig = _new_figure(3.4 * len(runs) + 1.6, 0.3 * len(methods) * 2 + 2.8)
        axes = fig.subplots(2, len(runs), squeeze=False, sharey=True, sharex="row")
        for j, meta in enumerate(runs):
            part = table[table["run"] == meta["label"]]
            for i, (metric, label) in enumerate(metrics):
                ax = axes[i, j]
                for row in part.itertuples(index=False):
                    mid, low, high = (getattr(row, metric), getattr(row, f"{metric}_ci_low"),
                                      getattr(row, f"{metric}_ci_high"))
                    # A percentile interval may miss the estimate (e.g. --bootstrap 1): draw it as it is.
                    ax.hlines(ypos[row.method], low, high, color=method_color(row.method), linewidth=1.5)
                    ax.plot([mid], [ypos[row.method]], "o", color=method_color(row.method), markersize=5)
                ax.axvline(0, color="black", linewidth=0.6)
                ax.set_xlabel(label)
                if metric == "faithfulness":
                    ax.set_xlim(-1.05, 1.05)
                    ax.set_title(_facet_title(meta), fontsize=8)
        for ax in axes[:, 0]:
            ax.set_yticks([ypos[m] for m in methods], [method_label(m) for m in methods])
            _color_method_ticks(ax, methods)
            ax.set_ylim(-0.6, len(methods) - 0.4)
        return _finish(fig, "Faithfulness and Deletion@1 per method (dots: mean; bars: 95% bootstrap interval)",
                       "higher is better for both; faithfulness = Spearman ρ(attribution, leave-one-layer-out effect); "
                       "a method missing from a column does not apply to that head")


def _method_legend(fig, methods: Sequence[str], *, marker: str = "o") -> None:
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=method_color(m), marker=marker, label=method_label(m)) for m in methods]
    fig.legend(handles=handles, loc="outside right center", title="method", fontsize=8, title_fontsize=9)


def deletion_curves_figure(curves: pd.DataFrame, runs: Sequence[Mapping[str, Any]]):
    """Deletion@k: mean drop of the predicted class's probability after removing the top-k layers.

    Parameters
    ----------
    curves : DataFrame
        ``run, method, k, deletion`` (the report's deletion_curves.csv).
    runs : sequence of mapping
    """
    import seaborn as sns

    present = set(curves["method"])
    methods = [m for m in PALETTE if m in present] + sorted(present - set(PALETTE))
    with _theme():
        fig, axes = _grid(len(runs), 3.9, 3.3, sharey=True)
        for ax, meta in zip(axes, runs):
            part = curves[curves["run"] == meta["label"]]
            shown = [m for m in methods if m in set(part["method"])]
            sns.lineplot(part, x="k", y="deletion", hue="method", hue_order=shown,
                         palette={m: method_color(m) for m in methods}, marker="o", ax=ax, legend=False)
            ax.set_xticks(sorted(part["k"].unique()))
            ax.set_xlabel("k: top-ranked layers removed")
            ax.set_ylabel("mean drop of p(predicted class)")
            ax.set_title(_facet_title(meta), fontsize=8)
        _method_legend(fig, methods)
        return _finish(fig, "Deletion@k: removing the k layers a method ranks highest",
                       "a steeper early rise means the method ranks the layers that matter first")


def spearman_distribution_figure(dist: pd.DataFrame, runs: Sequence[Mapping[str, Any]]):
    """Stacked shares of per-sample Spearman ρ bands per method (ρ = 1 ... undefined).

    Parameters
    ----------
    dist : DataFrame
        ``ReportTables.spearman_distribution`` of :mod:`laya_eval.report` (``run, method, n`` and one
        count column per band of :data:`RHO_BANDS`).
    runs : sequence of mapping
    """
    with _theme():
        fig, axes = _grid(len(runs), 4.6, 0.32 * dist["method"].nunique() + 1.9, ncols=2)
        for ax, meta in zip(axes, runs):
            part = dist[dist["run"] == meta["label"]].reset_index(drop=True)
            y = np.arange(len(part))[::-1]
            left = np.zeros(len(part))
            for column, band, color in RHO_BANDS:
                share = (part[column] / part["n"]).to_numpy()
                ax.barh(y, share, left=left, color=color, edgecolor="white", linewidth=0.5,
                        label=band if ax is axes[0] else None)
                left += share
            ax.set_yticks(y, [method_label(m) for m in part["method"]])
            _color_method_ticks(ax, list(part["method"]))
            ax.set_xlim(0, 1)
            ax.set_xlabel("share of samples")
            ax.set_title(_facet_title(meta), fontsize=8)
        fig.legend(loc="outside lower center", ncols=len(RHO_BANDS), fontsize=8, title="per-sample Spearman ρ")
        return _finish(fig, "How often does a method rank the layers exactly like their removal effects?",
                       "ρ undefined: attribution or effect constant across layers (excluded from means)")


def scatter_figure(points: pd.DataFrame, *, meta: Mapping[str, Any]):
    """Attribution against leave-one-layer-out effect, one panel per method, colour = layer.

    Parameters
    ----------
    points : DataFrame
        ``method, layer, attribution, effect`` (a seeded subsample of layers.csv).
    meta : mapping
        :func:`describe`'s keys; ``n_points`` the number of samples drawn.
    """
    import seaborn as sns

    methods = list(dict.fromkeys(points["method"]))
    n_layers = int(points["layer"].max())
    with _theme():
        fig, axes = _grid(len(methods), 3.2, 2.9)
        for ax, name in zip(axes, methods):
            part = points[points["method"] == name]
            sns.scatterplot(part, x="attribution", y="effect", hue="layer", palette="viridis",
                            hue_norm=(1, max(n_layers, 2)), s=9, alpha=0.6, linewidth=0, ax=ax, rasterized=True,
                            legend=ax is axes[0])
            ax.set_title(method_label(name), color=method_color(name), fontweight="bold")
            ax.set_xlabel(f"attribution ({method_label(name)})")
            ax.set_ylabel("effect: drop of p(pred.)")
        if axes[0].get_legend() is not None:
            axes[0].legend(title="layer", fontsize=7, title_fontsize=8, markerscale=1.5)
        return _finish(fig, f"Attribution vs leave-one-layer-out effect ({meta.get('n_points', '?')} samples drawn, "
                            "one dot per sample and layer)", describe(meta))


def agreement_figure(matrix: pd.DataFrame, *, meta: Mapping[str, Any]):
    """Method agreement: mean per-sample Spearman between two methods' layer scores.

    Parameters
    ----------
    matrix : DataFrame
        Square, index and columns the method names, NaN where no sample is defined.
    meta : mapping
    """
    import seaborn as sns

    labels = [method_label(m) for m in matrix.index]
    with _theme():
        fig = _new_figure(0.75 * len(labels) + 3.6, 0.6 * len(labels) + 2.0)
        ax = fig.subplots()
        sns.heatmap(matrix.set_axis(labels, axis=0).set_axis(labels, axis=1), ax=ax, annot=True, fmt=".2f",
                    cmap="vlag", vmin=-1, vmax=1, center=0, square=True, linewidths=0.5,
                    annot_kws={"fontsize": 7}, cbar_kws={"label": "mean Spearman ρ across layers"})
        ax.tick_params(axis="x", rotation=40)
        _color_method_ticks(ax, list(matrix.index), "y")
        _color_method_ticks(ax, list(matrix.columns), "x")
        return _finish(fig, "Method agreement: do two methods rank the layers alike? (per sample, averaged)",
                       describe(meta))
