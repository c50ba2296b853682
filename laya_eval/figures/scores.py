"""Per-method scores of faithfulness runs: dot-and-interval plots and deletion@k curves."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from laya_eval.figures.style import (
    METHOD_SHORT_LABELS,
    PALETTE,
    _facet_title,
    _facets,
    _finish,
    _new_figure,
    _theme,
    check_style,
    method_color,
    method_dashes,
    method_label,
    method_marker,
)

__all__ = ["SIGNIFICANCE_LEVELS", "axis_range", "deletion_curves_figure", "faithfulness_figure", "significance_marker"]

_METRICS = (
    ("faithfulness", "faithfulness (mean Spearman ρ)", "faithfulness (ρ)"),
    ("deletion_at_1", "Deletion@1 (drop of p(pred.))", "Deletion@1"),
)
# Both metrics live in [-1, 1]: Spearman rho, and a difference of two probabilities.
_BOUNDS = (-1.0, 1.0)
# (threshold, marker), strictest first; Holm-adjusted p-values of the paired tests.
SIGNIFICANCE_LEVELS: tuple[tuple[float, str], ...] = ((0.001, "***"), (0.01, "**"), (0.05, "*"))
BASELINE = "random"


def significance_marker(p_value: float) -> str:
    """``***``, ``**``, ``*`` below 0.001, 0.01, 0.05, else ``n.s.`` (``?`` when the test is undefined)."""
    if p_value is None or pd.isna(p_value):
        return "?"
    return next((mark for level, mark in SIGNIFICANCE_LEVELS if p_value < level), "n.s.")


def _ordered_methods(present) -> list[str]:
    present = set(present)
    return [m for m in PALETTE if m in present] + sorted(present - set(PALETTE))


def axis_range(lows, highs, *, pad: float = 0.08, right_room: float = 0.0) -> tuple[float, float]:
    """A data-driven axis around the intervals ``[lows, highs]``, clipped to the metrics' bounds [-1, 1].

    ``pad`` is the share of the span added on both sides (at least 0.004), ``right_room`` an extra
    share on the right for text markers.
    """
    lo, hi = float(np.nanmin(lows)), float(np.nanmax(highs))
    span = max(hi - lo, 0.02)
    lo, hi = lo - max(pad * span, 0.004), hi + max(pad * span, 0.004) + right_room * span
    return max(lo, _BOUNDS[0] - 0.02), min(hi, _BOUNDS[1] + 0.02 + right_room * span)


def _markers(comparisons: pd.DataFrame | None, run: str, metric: str, means: pd.Series) -> dict[str, str]:
    """Per method: its paired test against the run's reference method ('ref.' for that one; the panel's best method
    where the run tested every pair); {} without tests.

    The mark is comparisons.csv's decision: ``n.s.`` where ``significant`` is false, else the stars of its
    Holm-adjusted p."""
    if comparisons is None or comparisons.empty or means.empty:
        return {}
    part = comparisons[(comparisons["run"] == run) & (comparisons["metric"] == metric)]
    if part.empty:
        return {}
    references = set(part["reference"]) - {"all"} if "reference" in part.columns else set()
    ref = str(next(iter(references))) if references else str(means.idxmax())
    out = {ref: "ref."} if ref in means.index else {}
    for m in means.index:
        if m == ref:
            continue
        row = part[
            ((part["method_a"] == ref) & (part["method_b"] == m))
            | ((part["method_a"] == m) & (part["method_b"] == ref))
        ]
        if len(row):
            decided = row["significant"].iloc[0] if "significant" in row.columns else None
            mark = significance_marker(row["p_holm"].iloc[0])
            out[m] = "n.s." if decided is not None and not pd.isna(decided) and not bool(decided) else mark
    return out


def _interval(ax, y: float, lo: float, mid: float, hi: float, method: str, style: str) -> None:
    # The interval is drawn as it is: a percentile bootstrap interval may miss the estimate (--bootstrap 1).
    color = method_color(method)
    ax.hlines(y, lo, hi, color=color, linewidth=1.0, zorder=3)
    ax.plot([lo, hi], [y, y], "|", color=color, markersize=4 if style == "paper" else 6, zorder=3)
    ax.plot([mid], [y], method_marker(method), color=color, markersize=3.5 if style == "paper" else 5, zorder=4)


def _baseline(ax, row: pd.DataFrame, metric: str, y: float, style: str) -> None:
    """The random method's row: its dot and interval, with a dashed line through the panel at its mean, where the
    mean lies on the axis; else its value and an arrow at the edge of its row (the axis spans the other methods)."""
    if row.empty or pd.isna(row[metric].iloc[0]):
        return
    value = float(row[metric].iloc[0])
    lo, hi = ax.get_xlim()
    color = method_color(BASELINE)
    if lo <= value <= hi:
        band = row[f"{metric}_ci_low"].fillna(value).iloc[0], row[f"{metric}_ci_high"].fillna(value).iloc[0]
        ax.axvline(value, color=color, linestyle=(0, (4, 2)), linewidth=1.0, alpha=0.8, zorder=2)
        _interval(ax, y, band[0], value, band[1], BASELINE, style)
        return
    left = value < lo
    ax.text(
        0.01 if left else 0.99,
        y,
        f"← {value:.2f}" if left else f"{value:.2f} →",
        transform=ax.get_yaxis_transform(),  # x in axes fraction, y in data
        color=color,
        fontsize=6 if style == "paper" else 7.5,
        fontweight="bold",
        ha="left" if left else "right",
        va="center",
    )


def _score_panel(ax, part: pd.DataFrame, metric: str, ypos: dict[str, int], marks: dict[str, str], style: str) -> None:
    shown = part[part["method"] != BASELINE] if (part["method"] != BASELINE).any() else part
    low, high = shown[f"{metric}_ci_low"].fillna(shown[metric]), shown[f"{metric}_ci_high"].fillna(shown[metric])
    ax.set_xlim(
        *axis_range(
            pd.concat([low, shown[metric]]), pd.concat([high, shown[metric]]), right_room=0.22 if marks else 0.0
        )
    )
    for row, lo, hi in zip(shown.itertuples(index=False), low, high):
        _interval(ax, ypos[row.method], lo, getattr(row, metric), hi, row.method, style)
        if row.method in marks:
            ax.annotate(
                marks[row.method],
                (hi, ypos[row.method]),
                xytext=(3, 0),
                textcoords="offset points",
                va="center",
                ha="left",
                fontsize=6 if style == "paper" else 7.5,
                color="#333333",
            )
    if len(shown) < len(part) and BASELINE in ypos:
        _baseline(ax, part[part["method"] == BASELINE], metric, ypos[BASELINE], style)


def faithfulness_figure(
    table: pd.DataFrame,
    runs: Sequence[Mapping[str, Any]],
    *,
    comparisons: pd.DataFrame | None = None,
    style: str = "default",
    width: str | float | None = None,
):
    """Faithfulness and Deletion@1 per method: dots (means) and 95% intervals on a data-driven axis.

    One column per run, one row per metric. The axis spans the real methods only; the random baseline has the
    last row, with its dot, interval and a dashed line through the panel where it lies on that axis, or its value
    and an arrow where it does not; with ``comparisons``, every method carries the marker of its paired test
    against the panel's best method.

    Parameters
    ----------
    table : DataFrame
        ``run, method, faithfulness(_ci_low/_ci_high), deletion_at_1(_ci_low/_ci_high)``
        (the report's faithfulness.csv).
    runs : sequence of mapping
        Per run :func:`describe`'s keys, ``label`` equal to the table's ``run``.
    comparisons : DataFrame, optional
        ``run, metric, method_a, method_b, p_holm`` (the runs' comparisons.csv with a ``run`` column).
    style : {"default", "paper"}
    width : {"single", "double"} or float, optional
        Paper style: the figure's width (default: single for one run, else double).
    """
    check_style(style)
    # The random baseline gets the last row; its value does not set the axis (which spans the other methods).
    methods = [m for m in _ordered_methods(table["method"]) if m != BASELINE]
    methods += [BASELINE] if BASELINE in set(table["method"]) or not methods else []
    ypos = {m: len(methods) - 1 - k for k, m in enumerate(methods)}
    paper_height = 2 * (0.13 * len(methods) + 0.55) + 0.15
    marked = False
    with _theme(figure_style=style):
        fig = _new_figure(
            3.4 * len(runs) + 1.6,
            0.3 * len(methods) * 2 + 2.8,
            style=style,
            paper_width=width,
            natural="single" if len(runs) == 1 else "double",
            paper_height=paper_height,
        )
        axes = fig.subplots(2, len(runs), squeeze=False, sharey=True)
        for j, meta in enumerate(runs):
            part = table[table["run"] == meta["label"]]
            for i, (metric, label, short) in enumerate(_METRICS):
                ax = axes[i, j]
                means = part[part["method"] != BASELINE].set_index("method")[metric].dropna()
                marks = _markers(comparisons, meta["label"], metric, means)
                marked = marked or bool(marks)
                _score_panel(ax, part, metric, ypos, marks, style)
                ax.set_xlabel(short if style == "paper" else label)
                ax.locator_params(axis="x", nbins=4 if style == "paper" else 5)
                if i == 0:
                    ax.set_title(_facet_title(meta, style, j), fontsize=7 if style == "paper" else 8)
        for ax in axes[:, 0]:
            ax.set_yticks([ypos[m] for m in methods], [method_label(m) for m in methods])
            for text, name in zip(ax.get_yticklabels(), methods):
                text.set_color(method_color(name))
            ax.set_ylim(-0.6, len(methods) - 0.4)
        note = (
            "markers: paired Wilcoxon signed-rank test against the run's reference method (ref.; the panel's best "
            "where every pair was tested), Holm-adjusted over the metric's tests (comparisons.csv's family_size): "
            "*** p < 0.001, ** p < 0.01, * p < 0.05, n.s. otherwise (comparisons.csv's significant); "
            if marked
            else ""
        )
        note = (
            "higher is better for both; each panel's axis spans its methods' intervals, the random baseline "
            "aside (its row: dot, interval and a dashed line on the axis, else its value and an arrow); "
            + note
            + "faithfulness = Spearman ρ(attribution, leave-one-layer-out "
            "effect); a method missing from a column does not apply to that head"
        )
        if style == "paper":
            note += ". " + _facets(runs)
        return _finish(
            fig,
            "Faithfulness and Deletion@1 per method",
            "dots: mean · bars: 95% bootstrap interval · higher is better",
            note,
        )


def _merge_identical(curves: dict[str, np.ndarray], atol: float) -> list[list[str]]:
    """Groups of methods whose curves coincide within ``atol`` (drawn once, labelled together)."""
    groups: list[list[str]] = []
    for name, values in curves.items():
        for group in groups:
            if np.allclose(curves[group[0]], values, atol=atol, rtol=0, equal_nan=True):
                group.append(name)
                break
        else:
            groups.append([name])
    return groups


def _spread(ys: Sequence[float], heights: Sequence[float], bounds: tuple[float, float]) -> list[float]:
    """Label centres near ``ys`` that do not overlap (label k is ``heights[k]`` tall), kept within ``bounds``."""
    order = np.argsort(ys, kind="stable")
    y = np.array(ys, dtype=float)[order]
    h = np.array(heights, dtype=float)[order]
    for k in range(1, len(y)):  # push up from the lowest label
        y[k] = max(y[k], y[k - 1] + (h[k - 1] + h[k]) / 2)
    y[-1] = min(y[-1], bounds[1] - h[-1] / 2)  # the top one back inside, and those below it down as far as needed
    for k in range(len(y) - 2, -1, -1):
        y[k] = min(y[k], y[k + 1] - (h[k + 1] + h[k]) / 2)
    y[0] = max(y[0], bounds[0] + h[0] / 2)  # the bottom one inside (labels taller than the bounds cannot all fit)
    for k in range(1, len(y)):
        y[k] = max(y[k], y[k - 1] + (h[k - 1] + h[k]) / 2)
    out = np.empty_like(y)
    out[order] = y
    return out.tolist()


def _group_label(group: Sequence[str]) -> str:
    names = [METHOD_SHORT_LABELS.get(m, m) for m in group]
    return "\n".join(" = ".join(names[k : k + 2]) for k in range(0, len(names), 2))


def _curves_panel(ax, part: pd.DataFrame, methods: Sequence[str], style: str) -> None:
    ks = np.array(sorted(part["k"].unique()))
    curves = {
        m: part[part["method"] == m].sort_values("k")["deletion"].to_numpy()
        for m in methods
        if (part["method"] == m).any()
    }
    groups = _merge_identical(curves, atol=1e-3)
    for group in groups:
        m = group[0]
        ax.plot(
            ks,
            curves[m],
            color=method_color(m),
            linestyle=method_dashes(m),
            marker=method_marker(m),
            markersize=3.5 if style == "paper" else 5,
            linewidth=1.1 if style == "paper" else 1.6,
        )
    low = min(float(np.nanmin(c)) for c in curves.values())
    high = max(float(np.nanmax(c)) for c in curves.values())
    ax.set_ylim(low - 0.06 * (high - low + 1e-9), high + 0.06 * (high - low + 1e-9))
    span = ks[-1] - ks[0] if len(ks) > 1 else 1
    ax.set_xlim(ks[0] - 0.85 * span, ks[-1] + 0.08 * span)
    ax.set_xticks(ks)
    # Direct labels left of k = min, where the curves differ most (they all meet once every layer is removed).
    y0 = [float(curves[g[0]][0]) for g in groups]
    lo, hi = ax.get_ylim()
    line = (0.085 if style == "paper" else 0.07) * (hi - lo)  # one text line, in data units
    heights = [line * (_group_label(g).count("\n") + 1) for g in groups]
    for group, y in zip(groups, _spread(y0, heights, (lo, hi))):
        # Drawn even where labels taller than the panel push one past it (matplotlib would silently leave it out).
        ax.annotate(
            _group_label(group),
            (ks[0], y),
            xytext=(-9, 0),
            textcoords="offset points",
            ha="right",
            va="center",
            color=method_color(group[0]),
            fontsize=6 if style == "paper" else 7.5,
            linespacing=0.95,
            annotation_clip=False,
        )


def deletion_curves_figure(
    curves: pd.DataFrame, runs: Sequence[Mapping[str, Any]], *, style: str = "default", width: str | float | None = None
):
    """Deletion@k: mean drop of the predicted class's probability after removing the top-k layers.

    One panel per run; each method has its own colour, dash pattern and marker and is named at
    the start of its line; methods whose curves coincide (within 0.001) share one line and one label.

    Parameters
    ----------
    curves : DataFrame
        ``run, method, k, deletion`` (the report's deletion_curves.csv).
    runs : sequence of mapping
    style : {"default", "paper"}
    width : {"single", "double"} or float, optional
    """
    check_style(style)
    methods = _ordered_methods(curves["method"])
    ncols = min(len(runs), 2 if style == "paper" else 4)
    nrows = -(-len(runs) // ncols)
    with _theme(figure_style=style):
        fig = _new_figure(
            4.4 * ncols,
            3.3 * nrows,
            style=style,
            paper_width=width,
            natural="single" if len(runs) == 1 else "double",
            paper_height=1.75 * nrows + 0.1,
        )
        axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False)).ravel()
        for ax in axes[len(runs) :]:
            ax.set_visible(False)
        for j, (ax, meta) in enumerate(zip(axes, runs)):
            _curves_panel(ax, curves[curves["run"] == meta["label"]], methods, style)
            ax.set_xlabel("k: top-ranked layers removed")
            ax.set_ylabel("mean drop of p(pred.)")
            ax.set_title(_facet_title(meta, style, j), fontsize=7 if style == "paper" else 8)
        note = (
            "a steeper early rise means the method ranks the layers that matter first; methods named "
            "together (a = b) have the same curve within 0.001 and share one line"
        )
        if style == "paper":
            note += ". " + _facets(runs)
        return _finish(fig, "Deletion@k: removing the k layers a method ranks highest", None, note)
