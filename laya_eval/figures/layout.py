"""Laying out a finished figure: wrapping titles to the canvas, finding what reaches past it, and placements that
need the laid-out figure (labels placed from their drawn extents).

:func:`laya_eval.figures.style._finish` calls these after each pass of the figure's constrained layout. Nothing here is
drawn: extents come from the Agg canvas's renderer.

May import: nothing from laya_eval.
"""

from __future__ import annotations

import textwrap
from typing import Callable

__all__ = ["after_layout", "past_the_edge", "run_placements", "wrap_axes_titles", "wrap_to_width"]


def after_layout(fig, placement: Callable[[], None]) -> None:
    """Have the figure's finishing (:func:`laya_eval.figures.style._finish`) call ``placement`` after each layout
    pass of ``fig``: labels placed from their drawn extents, which only a laid-out figure has."""
    fig.__dict__.setdefault("_laya_after_layout", []).append(placement)


def run_placements(fig) -> None:
    """Call the placements registered for ``fig``, in the order they were registered."""
    for placement in getattr(fig, "_laya_after_layout", ()):
        placement()


def past_the_edge(fig) -> bool:
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
