"""Seaborn figures of layer profiles and faithfulness results.

One palette, marker, dash pattern and display name per method (:data:`PALETTE`,
:data:`METHOD_LABELS`, :func:`method_marker`, :func:`method_dashes`) are shared by every
figure. Every figure function takes ``style="default"`` (a title naming checkpoint,
dataset, ablation and scope on the figure) or ``style="paper"`` (no title: the same text
becomes the figure's caption, :func:`figure_caption`, written beside the file by
:func:`save_figure`; paper column widths :data:`COLUMN_WIDTHS`; PDF by default, fonts embedded).

Figures are plain :class:`matplotlib.figure.Figure` objects on an Agg canvas,
built without pyplot: they never switch the global backend, so the same code
serves scripts, tests and notebooks (``display(fig)``). matplotlib and seaborn
are imported inside the functions, so importing this module is instant.

May import: errors, checks, catalog, output.
"""

from __future__ import annotations

from laya_eval.figures.diagnosis import diagnosis_figure
from laya_eval.figures.profiles import WEIGHT_METHODS, profile_distribution, profile_heatmap
from laya_eval.figures.operators import operators_figure
from laya_eval.figures.results import agreement_figure, scatter_figure, spearman_distribution_figure
from laya_eval.figures.significance import significance_figure
from laya_eval.figures.scores import (
    SIGNIFICANCE_LEVELS,
    axis_range,
    deletion_curves_figure,
    faithfulness_figure,
    significance_marker,
)
from laya_eval.figures.style import (
    COLUMN_WIDTHS,
    DPI,
    FORMATS,
    METHOD_LABELS,
    METHOD_SHORT_LABELS,
    PALETTE,
    PAPER_DPI,
    RHO_BANDS,
    STYLES,
    caption_path,
    check_format,
    check_style,
    default_format,
    describe,
    figure_bytes,
    figure_caption,
    figure_files,
    figure_style,
    layer_names,
    method_color,
    method_dashes,
    method_label,
    method_marker,
    save_figure,
)

__all__ = [
    "COLUMN_WIDTHS",
    "DPI",
    "FORMATS",
    "METHOD_LABELS",
    "METHOD_SHORT_LABELS",
    "PALETTE",
    "PAPER_DPI",
    "RHO_BANDS",
    "SIGNIFICANCE_LEVELS",
    "STYLES",
    "WEIGHT_METHODS",
    "agreement_figure",
    "axis_range",
    "caption_path",
    "check_format",
    "check_style",
    "default_format",
    "deletion_curves_figure",
    "describe",
    "diagnosis_figure",
    "faithfulness_figure",
    "figure_bytes",
    "figure_caption",
    "figure_files",
    "figure_style",
    "layer_names",
    "method_color",
    "method_dashes",
    "method_label",
    "method_marker",
    "operators_figure",
    "profile_distribution",
    "profile_heatmap",
    "save_figure",
    "scatter_figure",
    "significance_figure",
    "significance_marker",
    "spearman_distribution_figure",
]
