"""Figures of faithfulness results (``laya-eval report``): distributions, scatters, agreement."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from laya_eval.figures.heatmap import annotated_heatmap
from laya_eval.figures.style import (
    METHOD_SHORT_LABELS,
    RHO_BANDS,
    _facet_title,
    _facets,
    _finish,
    _legend_below,
    _new_figure,
    _theme,
    check_style,
    describe,
    layer_names,
    method_color,
    method_label,
)

__all__ = ["agreement_figure", "scatter_figure", "spearman_distribution_figure"]

_LAYER_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "h", "<", ">", "p")


def _grid(
    n_panels: int,
    width: float,
    height: float,
    ncols: int = 4,
    *,
    style: str = "default",
    paper_width=None,
    panel_height: float = 1.5,
    **kw,
):
    ncols = min(ncols, n_panels)
    nrows = -(-n_panels // ncols)
    fig = _new_figure(
        width * ncols,
        height * nrows,
        style=style,
        paper_width=paper_width,
        natural="single" if n_panels == 1 else "double",
        paper_height=panel_height * nrows + 0.35,
    )
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False, **kw)).ravel()
    for ax in axes[n_panels:]:
        ax.set_visible(False)
    return fig, axes


def _color_method_ticks(ax, names: Sequence[str], axis: str = "y") -> None:
    labels = ax.get_yticklabels() if axis == "y" else ax.get_xticklabels()
    for text, name in zip(labels, names):
        text.set_color(method_color(name))


def spearman_distribution_figure(
    dist: pd.DataFrame, runs: Sequence[Mapping[str, Any]], *, style: str = "default", width: str | float | None = None
):
    """Stacked shares of per-sample Spearman ρ bands per method (ρ = 1 ... undefined).

    Parameters
    ----------
    dist : DataFrame
        ``ReportTables.spearman_distribution`` of :mod:`laya_eval.reporting` (``run, method, n`` and one
        count column per band of :data:`RHO_BANDS`).
    runs : sequence of mapping
    style : {"default", "paper"}
    width : {"single", "double"} or float, optional
    """
    check_style(style)
    n_methods = dist["method"].nunique()
    with _theme(figure_style=style):
        fig, axes = _grid(
            len(runs),
            4.6,
            0.32 * n_methods + 1.9,
            ncols=2,
            style=style,
            paper_width=width,
            panel_height=0.12 * n_methods + 0.55,
        )
        for j, (ax, meta) in enumerate(zip(axes, runs)):
            part = dist[dist["run"] == meta["label"]].reset_index(drop=True)
            y = np.arange(len(part))[::-1]
            left = np.zeros(len(part))
            for column, band, color in RHO_BANDS:
                share = (part[column] / part["n"]).to_numpy()
                ax.barh(
                    y,
                    share,
                    left=left,
                    color=color,
                    edgecolor="white",
                    linewidth=0.5,
                    label=band if ax is axes[0] else None,
                )
                left += share
            ax.set_yticks(y, [method_label(m) for m in part["method"]])
            _color_method_ticks(ax, list(part["method"]))
            ax.set_xlim(0, 1)
            ax.set_xlabel("share of samples")
            ax.set_title(_facet_title(meta, style, j), fontsize=7 if style == "paper" else 8)
        handles, labels = axes[0].get_legend_handles_labels()
        _legend_below(
            fig,
            handles,
            labels,
            ncols=len(RHO_BANDS),
            fontsize=6.5 if style == "paper" else 8,
            title="per-sample Spearman ρ",
        )
        note = (
            "how often a method ranks the layers exactly like their removal effects; ρ undefined: attribution "
            "or effect constant across layers (excluded from means)"
        )
        return _finish(
            fig, "Per-sample Spearman ρ per method", None, note + (". " + _facets(runs) if style == "paper" else "")
        )


def _jittered(part: pd.DataFrame, rng: np.random.Generator, x_span: float, y_span: float) -> tuple[np.ndarray, ...]:
    # Uniform jitter of 1% of each axis's span: ties (many layers sit at effect 0) become visible clouds.
    n = len(part)
    x = part["attribution"].to_numpy(dtype=float) + rng.uniform(-0.01, 0.01, n) * x_span
    y = part["effect"].to_numpy(dtype=float) + rng.uniform(-0.01, 0.01, n) * y_span
    return x, y


def scatter_figure(
    points: pd.DataFrame,
    *,
    meta: Mapping[str, Any],
    style: str = "default",
    width: str | float | None = None,
    seed: int = 0,
):
    """Attribution against leave-one-layer-out effect, one panel per method; colour and marker = layer.

    Points are drawn with transparency and a seeded jitter of ±1% of each axis so that layers
    sharing a value (an effect of exactly 0 is common) stay visible; the caption says so.

    Parameters
    ----------
    points : DataFrame
        ``method, layer, attribution, effect`` (a seeded subsample of layers.csv).
    meta : mapping
        :func:`describe`'s keys; ``n_points`` the number of samples drawn; ``layer_names`` optional.
    style : {"default", "paper"}
    width : {"single", "double"} or float, optional
    seed : int
        Seed of the jitter.
    """
    import matplotlib

    check_style(style)
    methods = list(dict.fromkeys(points["method"]))
    n_layers = int(points["layer"].max())
    names = layer_names(meta, n_layers)
    cmap = matplotlib.colormaps["viridis"]
    colors = [cmap(0.85 * k / max(n_layers - 1, 1)) for k in range(n_layers)]
    rng = np.random.default_rng(seed)
    size = 5 if style == "paper" else 12
    with _theme(figure_style=style):
        # Every method's panel shows the same effects: one shared y axis.
        fig, axes = _grid(len(methods), 3.2, 2.9, style=style, paper_width=width, panel_height=1.45, sharey=True)
        y_span = float(np.ptp(points["effect"])) or 1.0
        for ax, name in zip(axes, methods):
            part = points[points["method"] == name]
            x_span = float(np.ptp(part["attribution"])) or 1.0
            for layer in range(n_layers, 0, -1):  # layer 1 on top
                sub = part[part["layer"] == layer]
                x, y = _jittered(sub, rng, x_span, y_span)
                ax.scatter(
                    x,
                    y,
                    s=size,
                    alpha=0.35,
                    color=colors[layer - 1],
                    marker=_LAYER_MARKERS[(layer - 1) % 12],
                    linewidths=0,
                    rasterized=True,
                    label=names[layer - 1],
                )
            ax.set_title(
                method_label(name),
                color=method_color(name),
                fontweight="bold",
                fontsize=7 if style == "paper" else None,
            )
            ax.set_xlabel("attribution")
            ax.locator_params(axis="x", nbins=3 if style == "paper" else 5)
        # One label for the shared y axis: a panel's own label can be taller than the panel.
        fig.supylabel("effect: drop of p(pred.)", fontsize=7 if style == "paper" else 10)
        handles, labels = axes[0].get_legend_handles_labels()
        legend = _legend_below(
            fig,
            handles[::-1],
            labels[::-1],
            ncols=min(n_layers, 8),
            title="layer",
            fontsize=6.5 if style == "paper" else 8,
            markerscale=1.5,
        )
        for handle in legend.legend_handles:
            handle.set_alpha(0.9)
        return _finish(
            fig,
            "Attribution vs leave-one-layer-out effect",
            describe(meta),
            f"{meta.get('n_points', '?')} samples drawn, one dot per sample and layer, jitter ±1% of each axis",
        )


def agreement_figure(
    matrix: pd.DataFrame, *, meta: Mapping[str, Any], style: str = "default", width: str | float | None = None
):
    """Method agreement: mean per-sample Spearman between two methods' layer scores.

    Parameters
    ----------
    matrix : DataFrame
        Square, index and columns the method names, NaN where no sample is defined.
    meta : mapping
    style : {"default", "paper"}
    width : {"single", "double"} or float, optional
    """
    check_style(style)
    paper = style == "paper"
    # A single paper column has no room for long names: the short ones (as on the curves' labels).
    name = (lambda m: METHOD_SHORT_LABELS.get(m, m)) if paper else method_label
    labels = [name(m) for m in matrix.index]
    values = matrix.to_numpy(dtype=float)
    with _theme("white", figure_style=style):
        fig = _new_figure(
            0.75 * len(labels) + 3.6,
            0.6 * len(labels) + 2.0,
            style=style,
            paper_width=width,
            natural="single",
            paper_height=0.3 * len(labels) + 0.7,
        )
        ax = fig.subplots()
        cells = np.array([[f"{v:.2f}" for v in row] for row in values], dtype=object)
        mesh = annotated_heatmap(
            ax,
            values,
            cells,
            [name(m) for m in matrix.columns],
            labels,
            cmap="vlag",
            vmin=-1,
            vmax=1,
            fontsize=4.5 if paper else 7,
        )
        bar = fig.colorbar(mesh, ax=ax, shrink=0.8 if paper else 1.0, label="mean Spearman ρ across layers")
        bar.outline.set_linewidth(0)
        if paper:
            bar.ax.tick_params(length=2, width=0.5)
        _color_method_ticks(ax, list(matrix.index), "y")
        _color_method_ticks(ax, list(matrix.columns), "x")
        return _finish(
            fig,
            "Method agreement",
            describe(meta),
            "do two methods rank the layers alike? Mean over samples of the Spearman ρ between their layer scores",
        )
