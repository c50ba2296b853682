"""Heat map of the significance matrix: which method is significantly better than which?"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from laya_eval.figures.heatmap import annotated_heatmap
from laya_eval.figures.layout import after_layout
from laya_eval.figures.style import (
    METHOD_SHORT_LABELS,
    _facet_title,
    _facets,
    _finish,
    _new_figure,
    _theme,
    check_style,
    describe,
    method_color,
    method_label,
)

__all__ = ["significance_figure"]


def significance_figure(
    panels: Sequence[Mapping[str, Any]], *, cap: float = 4.0, style: str = "default", width: str | float | None = None
):
    """One heat map per run (or seed group): colour = sign of the difference x -log10 of the Holm p.

    Parameters
    ----------
    panels : sequence of mapping
        Each with ``meta`` (:func:`describe`'s keys; names the panel), ``values`` (DataFrame, (M, M),
        index and columns the method names: sign(mean of row - column) * -log10(p_holm), at most
        ``cap``, NaN on the diagonal and where no test exists) and ``cells`` (DataFrame of str, same
        shape: the matrix cells as the report writes them, e.g. ``▲ 0.003``); optionally ``test``, the test and
        its Holm family (``Wilcoxon over samples, Holm over 9 tests``).
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
        fig = _new_figure(
            (0.65 * size + 2.4) * ncols + 1.2,
            (0.55 * size + 1.6) * nrows + 1.4,
            style=style,
            paper_width=width,
            natural="single" if len(panels) == 1 else "double",
            paper_height=(0.28 * size + 0.8) * nrows + 0.3,
        )
        axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False)).ravel()
        for ax in axes[len(panels) :]:
            ax.set_visible(False)
        for k, (ax, panel) in enumerate(zip(axes, panels)):
            values, cells = panel["values"], panel["cells"]
            labels = [name(m) for m in values.index]
            annotated_heatmap(
                ax,
                values.to_numpy(dtype=float),
                cells.to_numpy(dtype=object),
                labels,
                labels,
                cmap="vlag_r",
                vmin=-cap,
                vmax=cap,
                fontsize=3.0 if paper else 7,
            )
            texts = list(ax.texts)
            after_layout(fig, lambda ax=ax, texts=texts: _fit_cells(ax, texts))
            for axis, names in (("y", values.index), ("x", values.columns)):
                for text, method in zip(ax.get_yticklabels() if axis == "y" else ax.get_xticklabels(), names):
                    text.set_color(method_color(method))
            ax.set_xlabel("column method")
            ax.set_ylabel("row method" if k % ncols == 0 else "")
            ax.set_title(
                _facet_title(panel["meta"], style, k) + ("" if paper else f"\n{panel.get('test', '')}"),
                fontsize=7 if paper else 8,
            )
        mappable = axes[0].collections[0]
        bar = fig.colorbar(mappable, ax=list(axes[: len(panels)]), shrink=0.8 if paper else 0.6)
        bar.set_label("sign(row − column) × −log10 p (Holm)", fontsize=5.5 if paper else None)
        if paper:
            bar.ax.tick_params(labelsize=5, length=2, width=0.5)
        metas = [p["meta"] for p in panels]
        note = (
            "▲ row method significantly higher (better), ▼ lower, · not significant at 0.05; number: Holm-adjusted p; "
            "empty: the pair is not in the run's family"
        )
        if paper:
            note += ". " + "; ".join(p.get("test", "") for p in panels) + ". " + _facets(metas)
        return _finish(
            fig,
            "Significance matrix of faithfulness: paired tests between methods",
            describe(metas[0]) if len(panels) == 1 and not paper else None,
            note,
        )


def _fit_cells(ax, texts: Sequence) -> None:
    """Every cell's text on two lines (the mark above the p-value) where one line is wider than a cell (a one-column
    paper figure of many methods): measured on the laid-out panel."""
    renderer = ax.figure.canvas.get_renderer()
    cell = abs(ax.transData.transform((1, 0))[0] - ax.transData.transform((0, 0))[0])
    if any(t.get_window_extent(renderer).width > cell - 2 for t in texts):
        for t in texts:
            t.set_text(t.get_text().replace(" ", "\n", 1))
