"""The look shared by every figure: one colour, line style and name per method, the theme, saving.

Two styles: ``"default"`` (screen and reports: a title and a subtitle naming the run on the
figure) and ``"paper"`` (publication: no title on the figure, the same text kept as the
figure's caption, paper column widths, vector output, fonts embedded, 300 dpi for PNG).
Figures are built without pyplot on an Agg canvas; saving writes fixed metadata, so the
same figure gives the same bytes.
"""

from __future__ import annotations

import contextlib
import io
import os
import warnings
from pathlib import Path
from typing import Any, Iterator, Mapping

from laya_eval.catalog import METHOD_SPECS
from laya_eval.errors import ConfigError
from laya_eval.figures.layout import lay_out, wrap_axes_titles, wrap_to_width
from laya_eval.checks import check_choice, fail
from laya_eval.catalog import FIGURE_FORMATS, FIGURE_STYLES

__all__ = [
    "COLUMN_WIDTHS",
    "DPI",
    "FORMATS",
    "METHOD_LABELS",
    "METHOD_SHORT_LABELS",
    "PALETTE",
    "PAPER_DPI",
    "RHO_BANDS",
    "STYLES",
    "caption_path",
    "check_format",
    "check_style",
    "default_format",
    "describe",
    "figure_bytes",
    "figure_caption",
    "figure_files",
    "figure_style",
    "layer_names",
    "method_color",
    "method_dashes",
    "method_label",
    "method_marker",
    "save_figure",
]

# One hue per method, each at least 3:1 against white (WCAG's contrast for graphics) and apart from every other
# in CIELAB (tests/test_figures.py computes both from these values); markers and dashes are the second channel.
PALETTE: dict[str, str] = {
    "laya": "#0072b2",
    "static": "#7b3294",
    "contribution": "#008a5e",
    "ig": "#d55e00",
    "gradcam": "#c2188b",
    "grad_x_act": "#8c564b",
    "random": "#6e6e6e",
    "block_influence": "#b2182b",
    "angular_distance": "#7a7a00",
    "alpha_norm": "#00838f",
    "atp": "#1a1a1a",
    "logit_lens": "#3d2bd9",
}
# The next-token methods that no classifier has (``catalog.NEXT_TOKEN_METHODS``): label and short label.
_NEXT_TOKEN_ONLY = {"logit_lens": ("logit lens", "lens")}
# Names come from the method catalog (the one owner); a method without a label shows its name.
METHOD_LABELS: dict[str, str] = {n: spec.label or n for n, spec in METHOD_SPECS.items()}
METHOD_LABELS.update({n: label for n, (label, _) in _NEXT_TOKEN_ONLY.items()})
# Direct labels on lines have little room.
METHOD_SHORT_LABELS: dict[str, str] = {n: spec.short_label or spec.label or n for n, spec in METHOD_SPECS.items()}
METHOD_SHORT_LABELS.update({n: short for n, (_, short) in _NEXT_TOKEN_ONLY.items()})
# A second channel besides colour (grey-scale print, colour-blind readers): marker and dash pattern.
_MARKERS = {
    "laya": "o",
    "static": "s",
    "contribution": "D",
    "ig": "^",
    "gradcam": "v",
    "grad_x_act": "P",
    "random": "X",
    "block_influence": "<",
    "angular_distance": ">",
    "alpha_norm": "h",
    "atp": "d",
    "logit_lens": "p",
}
_DASHES = {
    "laya": (None, None),
    "static": (0, (5, 2)),
    "contribution": (0, (1, 1.5)),
    "ig": (0, (4, 1.5, 1, 1.5)),
    "gradcam": (0, (2, 2)),
    "grad_x_act": (0, (6, 1.5, 1, 1.5, 1, 1.5)),
    "random": (0, (1, 3)),
    "block_influence": (0, (8, 2)),
    "angular_distance": (0, (3, 1, 3, 3)),
    "alpha_norm": (0, (1, 1, 4, 1)),
    "atp": (0, (6, 2, 2, 2)),
    "logit_lens": (0, (2, 1, 2, 4)),
}
FORMATS, STYLES = FIGURE_FORMATS, FIGURE_STYLES
DPI = 110
PAPER_DPI = 300
# Text widths of a two-column paper (NeurIPS/ICML/ACL are within 0.2 in of these).
COLUMN_WIDTHS: dict[str, float] = {"single": 3.3, "double": 6.9}
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


def method_marker(name: str) -> str:
    """The method's marker (the same in every figure)."""
    return _MARKERS.get(name, "*")


def method_dashes(name: str):
    """The method's matplotlib line style (solid for LAYA, a distinct dash pattern for each other method)."""
    dash = _DASHES.get(name, (0, (3, 1, 1, 1, 1, 1)))
    return "solid" if dash == (None, None) else dash


def check_style(style: str) -> str:
    """``style`` if it is one of :data:`STYLES`, else a :class:`ConfigError` naming the choices."""
    check_choice("style", style, STYLES)
    return style


def default_format(style: str) -> str:
    """The figure file format when none is given: PNG on screen, PDF (vector) for papers."""
    return "pdf" if check_style(style) == "paper" else "png"


def layer_names(meta: Mapping[str, Any], n_layers: int) -> list[str]:
    """The model's layer names (``meta["layer_names"]``) or ``1 .. n_layers`` when it has none."""
    names = list(meta.get("layer_names") or [])
    return [str(n) for n in names] if len(names) == n_layers else [str(k) for k in range(1, n_layers + 1)]


def describe(meta: Mapping[str, Any]) -> str:
    """Two lines naming checkpoint, dataset, ablation and scope.

    Parameters
    ----------
    meta : mapping
        Keys ``label`` (checkpoint file name), ``dataset``, ``split``, ``n``,
        ``head``, ``ablation``, ``scope``; missing keys are left out. An ablation
        starting with ``"none"`` (scores only, nothing removed) is not named.
    """
    data = f"{meta.get('dataset', '?')}"
    extra = [str(meta["split"])] if meta.get("split") else []
    if meta.get("n") is not None:
        extra.append(f"n = {meta['n']}")
    if extra:
        data += f" ({', '.join(extra)})"
    head = f" ({meta['head']} head)" if meta.get("head") else ""
    first = f"checkpoint: {meta.get('label', '?')}{head} · dataset: {data}"
    if str(meta.get("ablation", "?")).startswith("none"):
        return first + (f"\nscope: {meta['scope']}" if meta.get("scope") == "network" else "")
    return first + f"\nablation: {meta.get('ablation', '?')} · scope: {meta.get('scope', '?')}"


def _panel_letter(k: int) -> str:
    return f"({chr(ord('a') + k % 26)})"


def _facet_title(meta: Mapping[str, Any], style: str = "default", k: int = 0) -> str:
    if style == "paper":  # a letter the caption resolves (see _facets)
        return f"{_panel_letter(k)} {meta.get('head', '?')} head"
    return (
        f"{meta.get('label', '?')}\n{meta.get('head', '?')} head · {meta.get('dataset', '?')}\n"
        f"ablation {meta.get('ablation', '?')} · scope {meta.get('scope', '?')}"
    )


def _facets(runs) -> str:
    """A caption sentence naming every run of a multi-panel figure (paper style has short panel titles)."""
    return (
        "Panels: "
        + "; ".join(
            f"{_panel_letter(k)} {m.get('head', '?')} head: {m.get('label', '?')}, "
            f"{m.get('dataset', '?')}, ablation {m.get('ablation', '?')}, "
            f"scope {m.get('scope', '?')}"
            for k, m in enumerate(runs)
        )
        + "."
    )


@contextlib.contextmanager
def _theme(style: str = "whitegrid", figure_style: str = "default") -> Iterator[None]:
    import matplotlib
    import seaborn as sns

    if figure_style == "paper":
        context = sns.plotting_context(
            "paper",
            rc={
                "font.size": 7,
                "axes.labelsize": 7,
                "axes.titlesize": 7,
                "xtick.labelsize": 6.5,
                "ytick.labelsize": 6.5,
                "legend.fontsize": 6.5,
                "legend.title_fontsize": 7,
                "lines.linewidth": 1.1,
                "lines.markersize": 3.5,
            },
        )
        extra = {
            "figure.dpi": PAPER_DPI,
            "savefig.dpi": PAPER_DPI,
            "axes.linewidth": 0.6,
            "grid.linewidth": 0.4,
            # TrueType fonts embedded in PDF (type 3 fonts are refused by some publishers); SVG text as paths.
            "pdf.fonttype": 42,
            "ps.fonttype": 42,
            "svg.fonttype": "path",
        }
    else:
        context = sns.plotting_context("notebook", font_scale=0.85)
        extra = {"figure.dpi": DPI, "savefig.dpi": DPI, "axes.titlesize": 10}
    rc = {**sns.axes_style(style), **context, **extra, "svg.hashsalt": "laya-eval"}
    with matplotlib.rc_context(rc), warnings.catch_warnings():
        # seaborn 0.13's heatmap calls a colormap method matplotlib 3.11 marks for deprecation.
        warnings.filterwarnings("ignore", message="The set_bad function", category=PendingDeprecationWarning)
        yield


def _paper_width(width: str | float | None, natural: str) -> float:
    width = natural if width is None else width
    if isinstance(width, str):
        if width not in COLUMN_WIDTHS:
            raise fail("width", f"one of {{{', '.join(COLUMN_WIDTHS)}}} or a width in inches", width)
        return COLUMN_WIDTHS[width]
    if not 0.5 <= float(width) <= 20:
        raise ConfigError(f"width must be between 0.5 and 20 inches; got {width!r}.")
    return float(width)


def _new_figure(
    width: float,
    height: float,
    *,
    style: str = "default",
    paper_width: str | float | None = None,
    natural: str = "double",
    paper_height: float | None = None,
):
    """A constrained-layout Figure of ``width`` x ``height`` inches.

    In paper style the width is a column width (``paper_width``: "single", "double" or inches;
    ``natural`` when None) and the height ``paper_height`` (else ``height`` scaled like the width).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if check_style(style) == "paper":
        w = _paper_width(paper_width, natural)
        height = paper_height if paper_height is not None else height * w / width
        width = w
    fig = Figure(figsize=(width, height), layout="constrained", dpi=PAPER_DPI if style == "paper" else DPI)
    if style == "paper":
        fig.get_layout_engine().set(h_pad=0.02, w_pad=0.02)
    FigureCanvasAgg(fig)
    fig._laya_style = style
    return fig


def _finish(fig, title: str, subtitle: str | None = None, note: str | None = None):
    """Default style: a short title and subtitle on the figure. Paper style: no title.

    ``note`` (what the marks mean, how to read the figure) never goes on the figure: with the title and
    subtitle it makes the caption (:func:`figure_caption`), which the paper style writes beside the file and the
    report prints under the figure. A title line wider than the canvas is wrapped at word boundaries.

    The figure is laid out here (:func:`~laya_eval.figures.layout.lay_out`: as saving a constrained-layout figure
    would lay it out, a second time where the first pass leaves anything past the canvas, with the placements
    registered by :func:`~laya_eval.figures.layout.after_layout`) and keeps that layout (its layout engine is
    removed): saving it then renders it without another layout pass. Where a title had to be wrapped the engine
    stays, so that saving lays the figure out again around the wrapped lines. An edited figure is laid out again
    with ``set_layout_engine``.
    """
    sub = subtitle.replace("\n", "; ") if subtitle else ""
    fig._laya_caption = " ".join(_sentence(part) for part in (title, sub, note or "") if part)
    if figure_style(fig) != "paper":
        fig.suptitle(title + (f"\n{subtitle}" if subtitle else ""), fontsize=10)
    engine = fig.get_layout_engine()
    lay_out(fig)  # while the theme is active: the ticks materialise in it
    wrapped = wrap_to_width(fig, fig._suptitle, fig.bbox.width)
    wrapped |= wrap_axes_titles(fig)
    if engine is not None and not wrapped:
        fig.set_layout_engine("none")
    return fig


def _sentence(text: str) -> str:
    """``text`` as a caption sentence: capitalised, ending in one full stop (a question keeps its mark)."""
    text = text[0].upper() + text[1:]
    return text if text.endswith(("?", "!")) else text.rstrip(".") + "."


def _legend_below(fig, handles, labels, *, ncols: int, **kw):
    """A figure legend under the panels, with as many columns as fit the canvas (at most ``ncols``)."""
    ncols = max(1, min(ncols, len(labels)))
    renderer = fig.canvas.get_renderer()
    while True:
        legend = fig.legend(handles, labels, loc="outside lower center", ncols=ncols, **kw)
        if ncols == 1 or legend.get_window_extent(renderer).width <= 0.97 * fig.bbox.width:
            return legend
        legend.remove()
        ncols -= 1


def figure_style(fig) -> str:
    """The style a laya-eval figure was made in (``"default"`` for any other Figure)."""
    return getattr(fig, "_laya_style", "default")


def figure_caption(fig) -> str:
    """The caption of a laya-eval figure: its title and subtitle as one paragraph ('' for others)."""
    return getattr(fig, "_laya_caption", "")


def check_format(fmt: str) -> str:
    """``fmt`` if it is one of :data:`FORMATS`, else a :class:`ConfigError` naming the choices."""
    check_choice("format", fmt, FORMATS)
    return fmt


def _save_kwargs(fmt: str, dpi: int) -> dict[str, Any]:
    # Fixed metadata: the same figure gives the same bytes (no creation dates).
    metadata = {"png": {"Software": None}, "svg": {"Date": None}, "pdf": {"CreationDate": None}}[fmt]
    return {"format": fmt, "dpi": dpi, "metadata": metadata}


def _quantized_png(img, dpi: int) -> bytes:
    """``img`` (a PIL image) as a PNG with a 256-colour palette: plots rarely need more, and the files shrink ~3x.
    zlib level 6: level 9 (``optimize``) made report figures 7% smaller at twice the encoding time."""
    from PIL import Image

    small = img.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    out = io.BytesIO()
    small.save(out, format="png", compress_level=6, dpi=(dpi, dpi))
    return out.getvalue()


def _drawn_as_saved(fig, dpi: int):
    """The pixels ``savefig`` would encode as PNG, straight from the Agg canvas (no PNG written and read back);
    None where saving could draw otherwise (another canvas or resolution, a save setting the canvas lacks)."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from PIL import Image

    rc = matplotlib.rcParams
    if (
        type(fig.canvas) is not FigureCanvasAgg
        or fig.dpi != dpi
        or rc["savefig.bbox"] is not None
        or rc["savefig.transparent"]
        or rc["savefig.facecolor"] != "auto"
        or rc["savefig.edgecolor"] != "auto"
    ):
        return None
    # One draw renders the figure (and lays it out first where it still has a layout engine), as savefig does.
    fig.canvas.draw()
    return Image.frombuffer(
        "RGBA", fig.canvas.get_width_height(physical=True), fig.canvas.buffer_rgba(), "raw", "RGBA", 0, 1
    )


def figure_bytes(fig, fmt: str = "png") -> bytes:
    """The figure encoded as ``fmt`` (png, svg or pdf); PNGs use a 256-colour palette.

    A paper-style figure is written at :data:`PAPER_DPI` (its PNG records it), any other at :data:`DPI`.
    """
    from PIL import Image

    check_format(fmt)
    style = figure_style(fig)
    dpi = PAPER_DPI if style == "paper" else DPI
    with _theme(figure_style=style):
        img = _drawn_as_saved(fig, dpi) if fmt == "png" else None
        if img is None:
            buf = io.BytesIO()
            fig.savefig(buf, **_save_kwargs(fmt, dpi))
    if fmt != "png":
        return buf.getvalue()
    if img is None:
        with Image.open(io.BytesIO(buf.getvalue())) as saved:
            return _quantized_png(saved, dpi)
    return _quantized_png(img, dpi)


def caption_path(path: str | os.PathLike) -> Path:
    """Where :func:`save_figure` writes a paper-style figure's caption: ``NAME.caption.txt`` beside it."""
    path = Path(path)
    return path.with_name(f"{path.stem}.caption.txt")


def figure_files(figs: Mapping[str, Any], *, fmt: str | None = None, style: str = "default") -> dict[str, bytes]:
    """The bytes of each figure for a result folder, by file name: ``NAME.<fmt>`` and, in paper style, its
    caption ``NAME.caption.txt`` (as :func:`save_figure` writes them). ``fmt`` defaults to :func:`default_format`
    of ``style``; both are checked first."""
    check_style(style)
    fmt = check_format(fmt) if fmt is not None else default_format(style)
    files = {}
    for name, fig in figs.items():
        files[f"{name}.{fmt}"] = figure_bytes(fig, fmt)
        if style == "paper":
            files[caption_path(f"{name}.{fmt}").name] = (figure_caption(fig) + "\n").encode()
    return files


def _atomic_write(path: Path, data: bytes) -> Path:
    from laya_eval.output.files import atomic_write_bytes

    return atomic_write_bytes(path, data)


def save_figure(fig, path: str | os.PathLike, *, fmt: str | None = None) -> Path:
    """Write ``fig`` to ``path`` atomically (temporary name, then rename).

    ``fmt`` defaults to :func:`default_format` of the figure's style. A paper-style figure's
    caption (its title, not drawn on it) is written beside it as :func:`caption_path`.
    """
    path = Path(path)
    _atomic_write(path, figure_bytes(fig, fmt or default_format(figure_style(fig))))
    if figure_style(fig) == "paper":
        _atomic_write(caption_path(path), (figure_caption(fig) + "\n").encode())
    return path
