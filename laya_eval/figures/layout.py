"""Laying out a finished figure: wrapping titles to the canvas, finding what reaches past it, and placements that
need the laid-out figure (labels placed from their drawn extents).

:func:`laya_eval.figures.style._finish` calls :func:`lay_out`, then wraps the titles. Nothing here is drawn:
extents come from the Agg canvas's renderer.

May import: nothing from laya_eval.
"""

from __future__ import annotations

import textwrap
from typing import Callable

__all__ = ["after_layout", "lay_out", "wrap_axes_titles", "wrap_to_width"]


_PLACEMENTS = "_laya_after_layout"


def after_layout(fig, placement: Callable[[], None]) -> None:
    """Have :func:`lay_out` call ``placement`` after each layout pass of ``fig``: labels placed from their drawn
    extents, which only a laid-out figure has."""
    fig.__dict__.setdefault(_PLACEMENTS, []).append(placement)


def lay_out(fig) -> None:
    """Lay ``fig`` out as saving it would (nothing drawn) and run its placements (:func:`after_layout`).

    Where that pass leaves anything past the canvas it is laid out, and its placements run, a second time:
    constrained layout is not idempotent (a colour bar's ticks change as the bar is resized). The placements are
    dropped afterwards: they run only here, and a figure holding them (closures) would not pickle. A figure without
    a layout engine is drawn without rendering instead, which materialises its ticks.
    """
    engine = fig.get_layout_engine()
    for _ in range(2):
        if engine is None:
            fig.draw_without_rendering()
        else:
            engine.execute(fig)
        for placement in getattr(fig, _PLACEMENTS, ()):
            placement()
        if engine is None or not _past_the_edge(fig):
            break
    fig.__dict__.pop(_PLACEMENTS, None)


def _past_the_edge(fig) -> bool:
    """Whether anything the figure draws reaches past its canvas (from the artists' extents; nothing drawn)."""
    box, (width, height) = fig.get_tightbbox(fig.canvas.get_renderer()), fig.get_size_inches()
    return box.x0 < 0 or box.y0 < 0 or box.x1 > width or box.y1 > height


def wrap_to_width(fig, text, width_px: float) -> bool:
    """Wrap the lines of ``text`` (a Text artist) that are wider than ``width_px``; True if any was."""
    if text is None or not text.get_text() or not text.get_visible():
        return False
    renderer = fig.canvas.get_renderer()
    whole = text.get_text()
    room = 0.97 * width_px
    lines = []
    for line in whole.split("\n"):
        text.set_text(line)
        wide = text.get_window_extent(renderer).width
        if wide <= room or " " not in line:
            lines.append(line)
        else:
            lines += textwrap.wrap(line, max(12, int(len(line) * room / wide)))
    text.set_text("\n".join(lines))
    return text.get_text() != whole


def wrap_axes_titles(fig) -> bool:
    """Wrap every visible panel title to its panel's width (constrained layout then makes room)."""
    changed = False
    for ax in fig.axes:
        if ax.get_visible():
            for t in (ax.title, ax._left_title, ax._right_title):
                changed |= wrap_to_width(fig, t, ax.bbox.width)
    return changed
