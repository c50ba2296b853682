"""The mixer x source map of a depth-mixer audit: mean mass and mean effect side by side."""

from __future__ import annotations

import numpy as np
import pandas as pd

from laya_eval.figures.style import _finish, _new_figure, _theme

__all__ = ["mixer_map_figure"]


def mixer_map_figure(table: pd.DataFrame, *, title: str = "Depth mixers: mass and effect per source"):
    """Two annotated mixer x source heatmaps: the mean weight (mass) and the mean removal effect.

    Parameters
    ----------
    table : DataFrame
        ``map.csv`` of a mixer audit: columns ``mixer, source, mean_mass, mean_effect``. Cells of sources a
        mixer does not have stay blank.
    """
    import seaborn as sns

    mixers = list(dict.fromkeys(table["mixer"]))
    grids = [
        table.pivot(index="mixer", columns="source", values=v).reindex(mixers) for v in ("mean_mass", "mean_effect")
    ]
    n_src = grids[0].shape[1]
    with _theme("white"):
        fig = _new_figure(3.0 + 1.3 * n_src, 1.4 + 0.45 * len(mixers))
        axes = fig.subplots(1, 2)
        for ax, grid, name, cmap in zip(
            axes, grids, ("mean mass w_j", "mean effect (drop of p_c)"), ("viridis", "vlag")
        ):
            span = float(np.nanmax(np.abs(grid.to_numpy()))) if grid.notna().any().any() else 1.0
            limits = {"vmin": -span, "vmax": span} if cmap == "vlag" else {}
            sns.heatmap(grid, ax=ax, annot=True, fmt=".3f", cmap=cmap, cbar=False, annot_kws={"fontsize": 7}, **limits)
            ax.set_title(name)
            ax.set_xlabel("source")
            ax.set_ylabel("mixer" if ax is axes[0] else "")
            ax.tick_params(axis="y", rotation=0)
        return _finish(fig, title, "blank: the mixer has no such source")
