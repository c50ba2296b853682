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

from laya_eval.figures.profiles import profile_bars, profile_heatmap
from laya_eval.figures.results import (agreement_figure, deletion_curves_figure, faithfulness_figure, scatter_figure,
                                       spearman_distribution_figure)
from laya_eval.figures.style import (DPI, FORMATS, METHOD_LABELS, PALETTE, RHO_BANDS, check_format, describe,
                                     figure_bytes, method_color, method_label, save_figure)

__all__ = [
    "DPI",
    "FORMATS",
    "METHOD_LABELS",
    "PALETTE",
    "RHO_BANDS",
    "agreement_figure",
    "check_format",
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
