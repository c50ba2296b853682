"""Heat map of the significance matrix: which method is significantly better than which?"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from laya_eval.figures.layout import after_layout
from laya_eval.figures.style import (METHOD_SHORT_LABELS, _facet_title, _facets, _finish, _new_figure, _theme,
                                     check_style, describe, method_color, method_label)

__all__ = ["significance_figure"]


def significance_figure(panels: Sequence[Mapping[str, Any]], *, cap: float = 4.0, style: str = "default",
                        width: str | float | None = None):
    """One heat map per run (or seed group): colour = sign of the difference x -log10 of the Holm p.

    Parameters
    ----------
    panels : sequence of mapping
        Each with ``meta`` (:func:`describe`'s keys; names the panel), ``values`` (DataFrame, (M, M),
        index and columns the method names: sign(mean of row - column) * -log10(p_holm), at most
        ``cap``, NaN on the diagonal and where no test exists) and ``cells`` (DataFrame of str, same
        shape: the matrix cells as the report writes them, e.g. ``▲ 0.003``).
    cap : float
        Colour scale limit in -log10 p (4: p <= 1e-4 is the full colour).
    style : {"default", "paper"}
    width : {"single", "double"} or float, optional
    """
    check_style(style)
    paper = style == "paper"
    name = (lambda m: METHOD_SHORT_LABELS.get(m, m)) if paper else method_label
    # The canvas of at least a 4 x 4 matrix: a smaller one leaves no room for the colour bar's label.
    size = max(4, max(len(p["values"]) for p in panels))
    ncols = min(len(panels), 2)
    nrows = -(-len(panels) // ncols)
    with _theme("white", figure_style=style):
        fig = _new_figure((0.65 * size + 2.4) * ncols + 1.2, (0.55 * size + 1.6) * nrows + 1.4, style=style,
                          paper_width=width, natural="single" if len(panels) == 1 else "double",
                          paper_height=(0.28 * size + 0.8) * nrows + 0.3)
        axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False)).ravel()
        for ax in axes[len(panels):]:
            ax.set_visible(False)
        for k, (ax, panel) in enumerate(zip(axes, panels)):
            values, cells = panel["values"], panel["cells"]
            labels = [name(m) for m in values.index]
            _heatmap(ax, values.to_numpy(dtype=float), cells.to_numpy(dtype=object), labels, cap,
                     fontsize=3.0 if paper else 7)
            for axis, names in (("y", values.index), ("x", values.columns)):
                for text, method in zip(ax.get_yticklabels() if axis == "y" else ax.get_xticklabels(), names):
                    text.set_color(method_color(method))
            ax.set_xlabel("column method")
            ax.set_ylabel("row method" if k % ncols == 0 else "")
            ax.set_title(_facet_title(panel["meta"], style, k) + ("" if paper else f"\n{panel.get('test', '')}"),
                         fontsize=7 if paper else 8)
        mappable = axes[0].collections[0]
        bar = fig.colorbar(mappable, ax=list(axes[:len(panels)]), shrink=0.8 if paper else 0.6)
        bar.set_label("sign(row − column) × −log10 p (Holm)", fontsize=5.5 if paper else None)
        if paper:
            bar.ax.tick_params(labelsize=5, length=2, width=0.5)
        metas = [p["meta"] for p in panels]
        note = ("▲ row method significantly higher (better), ▼ lower, · not significant at 0.05; "
                "number: Holm-adjusted p")
        if paper:
            note += ". " + _facets(metas)
        return _finish(fig, "Significance matrix of faithfulness: paired tests between methods",
                       describe(metas[0]) if len(panels) == 1 and not paper else None, note)


def _heatmap(ax, values: np.ndarray, cells: np.ndarray, labels: Sequence[str], cap: float, *,
             fontsize: float) -> None:
    """An annotated (M, M) heat map on ``ax``, row 0 at the top, NaN cells left blank, in seaborn's heatmap look.

    Drawn with matplotlib directly: seaborn's ``heatmap`` renders the whole figure once per call to check whether
    tick labels overlap, so a figure of P panels was rendered P times before it was saved (an 8-panel matrix of
    10 methods took 6.8 CPU-s to build and save, now 2.6). Column names are set upright (rotated 90 degrees),
    row names horizontal, every one shown.
    """
    import seaborn  # noqa: F401  (registers the "vlag" colour maps)

    ax.spines[:].set_visible(False)
    n_rows, n_cols = values.shape
    # vlag_r is a 256-colour map: seaborn's recentring on 0 between -cap and +cap resamples it to itself.
    mesh = ax.pcolormesh(np.ma.masked_invalid(values), cmap="vlag_r", vmin=-cap, vmax=cap, linewidths=0.5,
                         edgecolor="white")
    ax.set(xlim=(0, n_cols), ylim=(0, n_rows))
    ax.invert_yaxis()
    ax.set_aspect("equal")
    ax.set_xticks(np.arange(n_cols) + 0.5, labels, rotation=90)  # upright names would run into each other
    ax.set_yticks(np.arange(n_rows) + 0.5, labels, rotation=0, va="center")
    mesh.update_scalarmappable()
    texts = []
    for k, (value, colour) in enumerate(zip(mesh.get_array().flat, mesh.get_facecolors())):
        if value is np.ma.masked:
            continue
        row, col = divmod(k, n_cols)
        # Dark text on light cells, white on dark ones, by relative luminance (WCAG 2.0).
        texts.append(ax.text(col + 0.5, row + 0.5, f"{cells[row, col]}", ha="center", va="center", fontsize=fontsize,
                             color=".15" if _relative_luminance(colour) > 0.408 else "w"))
    after_layout(ax.figure, lambda: _fit_cells(ax, texts))


def _fit_cells(ax, texts: Sequence) -> None:
    """Every cell's text on two lines (the mark above the p-value) where one line is wider than a cell (a one-column
    paper figure of many methods): measured on the laid-out panel."""
    renderer = ax.figure.canvas.get_renderer()
    cell = abs(ax.transData.transform((1, 0))[0] - ax.transData.transform((0, 0))[0])
    if any(t.get_window_extent(renderer).width > cell - 2 for t in texts):
        for t in texts:
            t.set_text(t.get_text().replace(" ", "\n", 1))


def _relative_luminance(rgba) -> float:
    rgb = np.asarray(rgba, dtype=float)[:3]
    linear = np.where(rgb <= 0.03928, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    return float(linear @ np.array([0.2126, 0.7152, 0.0722]))
