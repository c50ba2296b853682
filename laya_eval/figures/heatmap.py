"""Annotated heat maps in the look of seaborn's ``heatmap``, drawn with matplotlib alone.

seaborn's ``heatmap`` renders the whole figure on every call to decide whether tick labels overlap, so a figure of
P heat maps was rendered P times before it was saved (an 8-panel significance matrix of 10 methods took 6.8 CPU-s
to build and save, 2.6 drawn here). :func:`annotated_heatmap` draws what seaborn draws for a square matrix with a
symmetric colour range (cells, white grid lines, annotations in dark or white text by the cell's luminance, no
spines, row 0 at the top) without rendering anything; every name is shown, columns upright, rows horizontal.

May import: nothing from laya_eval.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["annotated_heatmap"]


def annotated_heatmap(
    ax,
    values: np.ndarray,
    cells: np.ndarray,
    xlabels: Sequence[str],
    ylabels: Sequence[str],
    *,
    cmap: str,
    vmin: float,
    vmax: float,
    fontsize: float,
):
    """An annotated (M, N) heat map on ``ax``; returns the QuadMesh (for a colour bar).

    Parameters
    ----------
    values : ndarray, (M, N)
        Colours; NaN cells are left blank and get no text.
    cells : ndarray of str, (M, N)
        The text of each cell.
    xlabels, ylabels : sequence of str
        Column names (set upright: side by side they would run into each other) and row names.
    cmap, vmin, vmax
        A 256-colour map and its range, centred on its middle (seaborn's ``center`` at the middle of a symmetric
        range resamples such a map to itself).
    fontsize : float
        Of the cell texts, in points.
    """
    import seaborn  # noqa: F401  (registers the "vlag" colour maps)

    ax.spines[:].set_visible(False)
    n_rows, n_cols = values.shape
    mesh = ax.pcolormesh(
        np.ma.masked_invalid(values), cmap=cmap, vmin=vmin, vmax=vmax, linewidths=0.5, edgecolor="white"
    )
    ax.set(xlim=(0, n_cols), ylim=(0, n_rows))
    ax.invert_yaxis()
    ax.set_aspect("equal")
    ax.set_xticks(np.arange(n_cols) + 0.5, xlabels, rotation=90)
    ax.set_yticks(np.arange(n_rows) + 0.5, ylabels, rotation=0, va="center")
    mesh.update_scalarmappable()
    for k, (value, colour) in enumerate(zip(mesh.get_array().flat, mesh.get_facecolors())):
        if value is np.ma.masked:
            continue
        row, col = divmod(k, n_cols)
        # Dark text on light cells, white on dark ones, by relative luminance (WCAG 2.0).
        ax.text(
            col + 0.5,
            row + 0.5,
            f"{cells[row, col]}",
            ha="center",
            va="center",
            fontsize=fontsize,
            color=".15" if _relative_luminance(colour) > 0.408 else "w",
        )
    return mesh


def _relative_luminance(rgba) -> float:
    rgb = np.asarray(rgba, dtype=float)[:3]
    linear = np.where(rgb <= 0.03928, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    return float(linear @ np.array([0.2126, 0.7152, 0.0722]))
