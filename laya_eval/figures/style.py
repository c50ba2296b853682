"""The look shared by every figure: one colour and display name per method, the theme, saving.

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

from laya_eval.errors import ConfigError

__all__ = ["DPI", "FORMATS", "METHOD_LABELS", "PALETTE", "RHO_BANDS", "check_format", "describe", "figure_bytes",
           "method_color", "method_label", "save_figure"]

# seaborn's "colorblind" palette; the two weight-based methods share a hue family.
PALETTE: dict[str, str] = {
    "laya": "#0173b2",
    "static": "#56b4e9",
    "contribution": "#029e73",
    "ig": "#d55e00",
    "gradcam": "#cc78bc",
    "grad_x_act": "#ca9161",
    "random": "#949494",
}
METHOD_LABELS: dict[str, str] = {
    "laya": "LAYA α(x)",
    "static": "static weights",
    "contribution": "exact contribution",
    "ig": "Integrated Gradients",
    "gradcam": "Grad-CAM",
    "grad_x_act": "gradient × activation",
    "random": "random",
}
FORMATS = ("png", "svg", "pdf")
DPI = 110
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


def describe(meta: Mapping[str, Any]) -> str:
    """Two lines naming checkpoint, dataset, ablation and scope.

    Parameters
    ----------
    meta : mapping
        Keys ``label`` (checkpoint file name), ``dataset``, ``split``, ``n``,
        ``head``, ``ablation``, ``scope``; missing keys are left out.
    """
    data = f"{meta.get('dataset', '?')}"
    extra = [str(meta["split"])] if meta.get("split") else []
    if meta.get("n") is not None:
        extra.append(f"n = {meta['n']}")
    if extra:
        data += f" ({', '.join(extra)})"
    head = f" ({meta['head']} head)" if meta.get("head") else ""
    return (f"checkpoint: {meta.get('label', '?')}{head} · dataset: {data}\n"
            f"ablation: {meta.get('ablation', '?')} · scope: {meta.get('scope', '?')}")


def _facet_title(meta: Mapping[str, Any]) -> str:
    return (f"{meta.get('label', '?')}\n{meta.get('head', '?')} head · {meta.get('dataset', '?')}\n"
            f"ablation {meta.get('ablation', '?')} · scope {meta.get('scope', '?')}")


@contextlib.contextmanager
def _theme(style: str = "whitegrid") -> Iterator[None]:
    import matplotlib
    import seaborn as sns

    rc = {**sns.axes_style(style), **sns.plotting_context("notebook", font_scale=0.85),
          "figure.dpi": DPI, "savefig.dpi": DPI, "svg.hashsalt": "laya-eval", "axes.titlesize": 10}
    with matplotlib.rc_context(rc), warnings.catch_warnings():
        # seaborn 0.13's heatmap calls a colormap method matplotlib 3.11 marks for deprecation.
        warnings.filterwarnings("ignore", message="The set_bad function", category=PendingDeprecationWarning)
        yield


def _new_figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _finish(fig, title: str, subtitle: str | None = None):
    fig.suptitle(title + (f"\n{subtitle}" if subtitle else ""), fontsize=10)
    fig.canvas.draw()  # materialise ticks and layout while the theme is active
    return fig


def check_format(fmt: str) -> str:
    """``fmt`` if it is one of :data:`FORMATS`, else a :class:`ConfigError` naming the choices."""
    if fmt not in FORMATS:
        raise ConfigError(f"figure format must be among {{{', '.join(FORMATS)}}}; got {fmt!r}.")
    return fmt


def _save_kwargs(fmt: str) -> dict[str, Any]:
    # Fixed metadata: the same figure gives the same bytes (no creation dates).
    metadata = {"png": {"Software": None}, "svg": {"Date": None}, "pdf": {"CreationDate": None}}[fmt]
    return {"format": fmt, "dpi": DPI, "metadata": metadata}


def _quantized_png(data: bytes) -> bytes:
    """Re-encode a PNG with a 256-colour palette: plots rarely need more, and the files shrink ~3x."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as img:
        small = img.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT,
                                            dither=Image.Dither.NONE)
    out = io.BytesIO()
    small.save(out, format="png", optimize=True)
    return out.getvalue()


def figure_bytes(fig, fmt: str = "png") -> bytes:
    """The figure encoded as ``fmt`` (png, svg or pdf); PNGs use a 256-colour palette."""
    buf = io.BytesIO()
    with _theme():
        fig.savefig(buf, **_save_kwargs(check_format(fmt)))
    return _quantized_png(buf.getvalue()) if fmt == "png" else buf.getvalue()


def save_figure(fig, path: str | os.PathLike, *, fmt: str = "png") -> Path:
    """Write ``fig`` to ``path`` atomically (temporary name, then rename)."""
    path = Path(path)
    data = figure_bytes(fig, fmt)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return path

