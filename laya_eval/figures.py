"""Seaborn figures of layer profiles and faithfulness results.

One palette and one display name per method (:data:`PALETTE`,
:data:`METHOD_LABELS`) are shared by every figure, and every title or
subtitle names the checkpoint, dataset, ablation and scope it shows.

Figures are plain :class:`matplotlib.figure.Figure` objects on an Agg canvas,
built without pyplot: they never switch the global backend, so the same code
serves scripts, tests and notebooks (``display(fig)``). matplotlib and seaborn
are imported inside the functions, so importing this module is instant.
"""

from __future__ import annotations

import contextlib
import io
import os
import warnings
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import pandas as pd

from laya_eval.errors import ConfigError

__all__ = [
    "DPI",
    "FORMATS",
    "METHOD_LABELS",
    "PALETTE",
    "RHO_BANDS",
    "agreement_figure",
    "deletion_curves_figure",
    "describe",
    "faithfulness_figure",
    "figure_bytes",
    "method_color",
    "method_label",
    "profile_bars",
    "profile_heatmap",
    "save_figure",
    "scatter_figure",
    "spearman_distribution_figure",
]

# seaborn's "colorblind" palette; the two weight-based methods share a hue family.
PALETTE: dict[str, str] = {
    "laya": "#0173b2",
    "static": "#56b4e9",
    "contribution": "#029e73",
    "ig": "#d55e00",
    "gradcam": "#cc78bc",
    "grad_x_act": "#ca9161",
    "random": "#949494",
}
METHOD_LABELS: dict[str, str] = {
    "laya": "LAYA α(x)",
    "static": "static weights",
    "contribution": "exact contribution",
    "ig": "Integrated Gradients",
    "gradcam": "Grad-CAM",
    "grad_x_act": "gradient × activation",
    "random": "random",
}
FORMATS = ("png", "svg", "pdf")
DPI = 110
_FALLBACK_COLOR = "#333333"

# Bands of per-sample Spearman rho, from best to undefined: (count column, label, colour).
RHO_BANDS: tuple[tuple[str, str, str], ...] = (
    ("n_rho_one", "ρ = 1", "#1a7f4b"),
    ("n_rho_high", "0.5 ≤ ρ < 1", "#8fd19e"),
    ("n_rho_low", "0 ≤ ρ < 0.5", "#e8e3c5"),
    ("n_rho_negative", "ρ < 0", "#d6604d"),
    ("n_undefined", "undefined", "#bdbdbd"),
)


def method_color(name: str) -> str:
    """The method's colour in every figure (dark grey for a method the palette does not know)."""
    return PALETTE.get(name, _FALLBACK_COLOR)


def method_label(name: str) -> str:
    """The method's display name in every figure and table."""
    return METHOD_LABELS.get(name, name)


def describe(meta: Mapping[str, Any]) -> str:
    """Two lines naming checkpoint, dataset, ablation and scope.

    Parameters
    ----------
    meta : mapping
        Keys ``label`` (checkpoint file name), ``dataset``, ``split``, ``n``,
        ``head``, ``ablation``, ``scope``; missing keys are left out.
    """
    data = f"{meta.get('dataset', '?')}"
    extra = [str(meta["split"])] if meta.get("split") else []
    if meta.get("n") is not None:
        extra.append(f"n = {meta['n']}")
    if extra:
        data += f" ({', '.join(extra)})"
    head = f" ({meta['head']} head)" if meta.get("head") else ""
    return (f"checkpoint: {meta.get('label', '?')}{head} · dataset: {data}\n"
            f"ablation: {meta.get('ablation', '?')} · scope: {meta.get('scope', '?')}")


def _facet_title(meta: Mapping[str, Any]) -> str:
    return (f"{meta.get('label', '?')}\n{meta.get('head', '?')} head · {meta.get('dataset', '?')}\n"
            f"ablation {meta.get('ablation', '?')} · scope {meta.get('scope', '?')}")


@contextlib.contextmanager
def _theme(style: str = "whitegrid") -> Iterator[None]:
    import matplotlib
    import seaborn as sns

    rc = {**sns.axes_style(style), **sns.plotting_context("notebook", font_scale=0.85),
          "figure.dpi": DPI, "savefig.dpi": DPI, "svg.hashsalt": "laya-eval", "axes.titlesize": 10}
    with matplotlib.rc_context(rc), warnings.catch_warnings():
        # seaborn 0.13's heatmap calls a colormap method matplotlib 3.11 marks for deprecation.
        warnings.filterwarnings("ignore", message="The set_bad function", category=PendingDeprecationWarning)
        yield


def _new_figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _finish(fig, title: str, subtitle: str | None = None):
    fig.suptitle(title + (f"\n{subtitle}" if subtitle else ""), fontsize=10)
    fig.canvas.draw()  # materialise ticks and layout while the theme is active
    return fig


def _check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise ConfigError(f"figure format must be among {{{', '.join(FORMATS)}}}; got {fmt!r}.")
    return fmt


def _save_kwargs(fmt: str) -> dict[str, Any]:
    # Fixed metadata: the same figure gives the same bytes (no creation dates).
    metadata = {"png": {"Software": None}, "svg": {"Date": None}, "pdf": {"CreationDate": None}}[fmt]
    return {"format": fmt, "dpi": DPI, "metadata": metadata}


def _quantized_png(data: bytes) -> bytes:
    """Re-encode a PNG with a 256-colour palette: plots rarely need more, and the files shrink ~3x."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as img:
        small = img.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT,
                                            dither=Image.Dither.NONE)
    out = io.BytesIO()
    small.save(out, format="png", optimize=True)
    return out.getvalue()


def figure_bytes(fig, fmt: str = "png") -> bytes:
    """The figure encoded as ``fmt`` (png, svg or pdf); PNGs use a 256-colour palette."""
    buf = io.BytesIO()
    with _theme():
        fig.savefig(buf, **_save_kwargs(_check_format(fmt)))
    return _quantized_png(buf.getvalue()) if fmt == "png" else buf.getvalue()


def save_figure(fig, path: str | os.PathLike, *, fmt: str = "png") -> Path:
    """Write ``fig`` to ``path`` atomically (temporary name, then rename)."""
    path = Path(path)
    data = figure_bytes(fig, fmt)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return path


# ---------------------------------------------------------------------------- layer profiles


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


# ---------------------------------------------------------------------------- faithfulness reports


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
                    ax.errorbar(mid, ypos[row.method], xerr=[[mid - low], [high - mid]], fmt="o",
                                color=method_color(row.method), capsize=3, markersize=5)
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
