"""Figures: paper style (size read back from the files, no title, caption beside), data-driven axes,
significance markers, distinguishable curves, jittered scatters, violins within [0, 1], layer names."""

from __future__ import annotations

import io
import itertools
import math
import re

import matplotlib.text
import numpy as np
import pandas as pd
import pytest
from PIL import Image

from laya_eval import figures as F
from laya_eval.errors import ConfigError
from laya_eval.figures.pruning import pruning_figure
from laya_eval.profiling.diagnosis import diagnose_scores
from laya_eval.profiling.profiles import layer_table, profile_table

METHODS = ["laya", "static", "contribution", "ig", "gradcam", "grad_x_act", "random"]
LAYERS = ["fc1", "fc2", "fc3"]


def _meta(label="m.pt", head="laya"):
    return {
        "label": label,
        "head": head,
        "dataset": "digits",
        "split": "test",
        "n": 40,
        "ablation": "gate",
        "scope": "head",
        "layer_names": LAYERS,
    }


def _faith_table(values: dict[str, float], run="m.pt", half=0.01) -> pd.DataFrame:
    rows = [
        {
            "run": run,
            "method": m,
            "faithfulness": v,
            "faithfulness_ci_low": v - half,
            "faithfulness_ci_high": v + half,
            "deletion_at_1": v / 2,
            "deletion_at_1_ci_low": v / 2 - half,
            "deletion_at_1_ci_high": v / 2 + half,
        }
        for m, v in values.items()
    ]
    return pd.DataFrame(rows)


def _curves(run="m.pt") -> pd.DataFrame:
    # ig and gradcam coincide (to 1e-4 < 0.001): one line, one label; laya and random differ.
    base = {
        "laya": [0.7, 0.8, 0.82],
        "ig": [0.5, 0.7, 0.82],
        "gradcam": [0.5001, 0.7, 0.82],
        "random": [0.25, 0.5, 0.82],
    }
    return pd.DataFrame(
        [{"run": run, "method": m, "k": k + 1, "deletion": v} for m, vals in base.items() for k, v in enumerate(vals)]
    )


def _scores(n=40, seed=0) -> pd.DataFrame:
    """Per-sample LAYA-like weights on 3 layers: softmax of noise, so each lies in (0, 1) and rows sum to 1."""
    rng = np.random.default_rng(seed)
    w = np.exp(rng.normal(size=(n, 3)) * 2)
    w /= w.sum(1, keepdims=True)
    label = rng.integers(0, 3, n)
    pred = np.where(rng.random(n) < 0.7, label, (label + 1) % 3)
    return pd.DataFrame(
        {
            "sample": np.repeat(np.arange(n), 3),
            "label": np.repeat(label, 3),
            "pred": np.repeat(pred, 3),
            "layer": np.tile([1, 2, 3], n),
            "score": w.ravel(),
        }
    )


def _points(n=50, seed=0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for m in ("laya", "ig"):
        for s in range(n):
            for layer in (1, 2, 3):
                rows.append(
                    {
                        "method": m,
                        "sample": s,
                        "layer": layer,
                        "attribution": float(rng.random()),
                        "effect": 0.0 if layer == 3 else float(rng.random()),
                    }
                )
    return pd.DataFrame(rows)


def _dist(run="m.pt") -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "run": run,
                "method": m,
                "n": 10,
                "n_rho_one": 4,
                "n_rho_high": 3,
                "n_rho_low": 1,
                "n_rho_negative": 1,
                "n_undefined": 1,
            }
            for m in ("laya", "ig", "random")
        ]
    )


def every_figure(style: str, width=None) -> dict:
    metas = [_meta()]
    scores = _scores()
    meta_p = {
        **_meta(),
        "ablation": "none (scores only)",
        "method": "laya",
        "by": "label",
        "n_layers": 3,
        "class_names": ["a", "b", "c"],
    }
    table = profile_table(scores, ["a", "b", "c"])
    matrix = pd.DataFrame(np.eye(3), index=["laya", "ig", "random"], columns=["laya", "ig", "random"])
    kw = {"style": style, "width": width}
    return {
        "faithfulness": F.faithfulness_figure(_faith_table({"laya": 0.85, "ig": 0.88, "random": 0.0}), metas, **kw),
        "deletion_curves": F.deletion_curves_figure(_curves(), metas, **kw),
        "spearman_distribution": F.spearman_distribution_figure(_dist(), metas, **kw),
        "scatter": F.scatter_figure(_points(), meta={**_meta(), "n_points": 50}, **kw),
        "agreement": F.agreement_figure(matrix, meta=_meta(), **kw),
        "profile_heatmap": F.profile_heatmap(table, subset="all", meta=meta_p, **kw),
        "profile_distribution": F.profile_distribution(scores, meta=meta_p, **kw),
        "diagnosis": F.diagnosis_figure(diagnose_scores(scores, n_resamples=0), meta=meta_p, **kw),
    }


def _size_from_file(data: bytes, fmt: str) -> tuple[float, float]:
    """(width, height) in inches as the file itself states them."""
    if fmt == "png":
        with Image.open(io.BytesIO(data)) as img:
            dpi = img.info["dpi"]
            return img.size[0] / dpi[0], img.size[1] / dpi[1]
    if fmt == "pdf":
        box = [float(v) for v in re.search(rb"/MediaBox \[ *([\d. ]+)\]", data).group(1).split()]
        return (box[2] - box[0]) / 72, (box[3] - box[1]) / 72  # PDF user units are points
    head = data[:2000].decode()
    w, h = (float(re.search(rf'{a}="([\d.]+)pt"', head).group(1)) for a in ("width", "height"))
    return w / 72, h / 72


@pytest.mark.parametrize("width, inches", [("single", 3.3), ("double", 6.9), (5.0, 5.0)])
def test_every_figure_in_paper_style_has_the_requested_width_and_no_title(width, inches, tmp_path):
    for name, fig in every_figure("paper", width).items():
        assert fig._suptitle is None, name
        titles = " ".join(t.get_text() for t in fig.findobj(matplotlib.text.Text))
        assert "checkpoint:" not in titles, (name, titles)  # the run description moved to the caption
        caption = F.figure_caption(fig)
        assert "m.pt" in caption and len(caption) > 40, (name, caption)
        w, h = fig.get_size_inches()
        assert w == pytest.approx(inches), name
        for fmt in ("png", "pdf", "svg"):
            path = F.save_figure(fig, tmp_path / f"{name}.{fmt}", fmt=fmt)
            got = _size_from_file(path.read_bytes(), fmt)
            # PNG: pixels / 300 dpi, rounded to whole pixels; PDF and SVG: points / 72.
            assert got == pytest.approx((inches, h), abs=1 / 300 + 1e-6), (name, fmt, got)
        assert (tmp_path / f"{name}.caption.txt").read_text() == caption + "\n"
        with Image.open(tmp_path / f"{name}.png") as img:
            assert img.info["dpi"] == pytest.approx((F.PAPER_DPI, F.PAPER_DPI), abs=0.01)


def test_default_style_keeps_the_title_and_writes_no_caption_file(tmp_path):
    for name, fig in every_figure("default").items():
        assert fig._suptitle is not None and fig._suptitle.get_text(), name
        assert "m.pt" in " ".join(t.get_text() for t in fig.findobj(matplotlib.text.Text)), name
        F.save_figure(fig, tmp_path / f"{name}.png")
    assert not list(tmp_path.glob("*.caption.txt"))
    assert sorted(p.suffix for p in tmp_path.iterdir()) == [".png"] * 8


def _savefig_png(fig) -> bytes:
    """matplotlib's own route: savefig to PNG under the figure's theme, read back, 256 colours (median cut, no
    dither), written at zlib level 6 at the style's resolution."""
    from laya_eval.figures.style import _theme

    dpi = F.PAPER_DPI if F.figure_style(fig) == "paper" else F.DPI
    buf = io.BytesIO()
    with _theme(figure_style=F.figure_style(fig)):
        fig.savefig(buf, format="png", dpi=dpi)
    with Image.open(buf) as img:
        small = img.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    out = io.BytesIO()
    small.save(out, format="png", compress_level=6, dpi=(dpi, dpi))
    return out.getvalue()


def test_png_bytes_are_those_of_matplotlibs_savefig():
    """PNGs are drawn straight from the canvas, not written by savefig and read back: the same bytes. (Two sets of
    the same figures: drawing a constrained-layout figure may move its layout by a pixel for the next draw.)"""
    ours, theirs = every_figure("default"), every_figure("default")
    for name in ours:
        assert F.figure_bytes(ours[name], "png") == _savefig_png(theirs[name]), name


def test_a_figure_at_another_resolution_is_saved_through_savefig_at_the_style_resolution():
    """A figure not drawn at laya-eval's resolution (here 72 dpi) takes savefig's route: 2 x 1 inches come out as
    220 x 110 pixels at 110 dpi, in 256 colours."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(2, 1), dpi=72)
    FigureCanvasAgg(fig)
    fig.subplots().plot([0, 1], [1, 0])
    with Image.open(io.BytesIO(F.figure_bytes(fig, "png"))) as img:
        assert img.size == (220, 110) and img.mode == "P"
        assert img.info["dpi"] == pytest.approx((110, 110), abs=0.01)
    assert fig.dpi == 72  # saving does not change the figure


def test_paper_style_defaults_to_pdf_with_embedded_truetype_fonts(tmp_path):
    fig = every_figure("paper")["faithfulness"]
    path = F.save_figure(fig, tmp_path / "f.pdf")
    data = path.read_bytes()
    assert F.default_format("paper") == "pdf" and F.default_format("default") == "png"
    assert b"/FontFile2" in data and b"/Type3" not in data  # TrueType embedded, no type-3 bitmaps
    assert F.save_figure(fig, tmp_path / "f2.pdf").read_bytes() == data  # same figure, same bytes
    with pytest.raises(ConfigError, match=r"style must be one of \{default, paper\}; got 'journal'"):
        F.faithfulness_figure(_faith_table({"laya": 0.8}), [_meta()], style="journal")
    with pytest.raises(
        ConfigError, match=r"width must be one of \{single, double\} or a width in inches; got 'triple'"
    ):
        F.faithfulness_figure(_faith_table({"laya": 0.8}), [_meta()], style="paper", width="triple")


@pytest.mark.parametrize("style", ["default", "paper"])
def test_faithfulness_axis_follows_the_data(style):
    # Two methods 0.03 apart with intervals ±0.01: the axis spans them (0.84 .. 0.89) and little more;
    # the random baseline at 0 does not stretch it, it becomes an arrow label.
    fig = F.faithfulness_figure(_faith_table({"laya": 0.856, "ig": 0.886, "random": 0.0}), [_meta()], style=style)
    ax = fig.axes[0]
    lo, hi = ax.get_xlim()
    assert hi - lo < 0.5
    assert lo <= 0.846 and hi >= 0.896
    texts = [t.get_text() for t in ax.texts]
    assert "← 0.00" in texts, texts
    # random has its own row, named on the axis
    assert [t.get_text() for t in ax.get_yticklabels()][-1] == "random"
    # A random baseline inside the range is drawn on its row as the other methods (dot and interval, in its
    # colour), with a dashed line through the panel at its mean.
    fig = F.faithfulness_figure(_faith_table({"laya": 0.2, "ig": -0.2, "random": 0.0}), [_meta()], style=style)
    ax = fig.axes[0]
    dashed = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--" and list(ln.get_xdata()) == [0.0, 0.0]]
    assert len(dashed) == 1
    dots = [ln for ln in ax.get_lines() if ln.get_marker() == F.method_marker("random")]
    assert [(ln.get_xdata()[0], ln.get_ydata()[0]) for ln in dots] == [(0.0, 0)]
    assert dots[0].get_color() == F.method_color("random")


def _relative_luminance(hex_color: str) -> float:
    # WCAG 2.x: sRGB channels linearised, weighted 0.2126 / 0.7152 / 0.0722.
    channels = [int(hex_color[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    r, g, b = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def _cielab(hex_color: str) -> tuple[float, float, float]:
    # sRGB (D65) -> XYZ -> CIELAB, the textbook formulas.
    channels = [int(hex_color[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    r, g, b = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883
    f = [v ** (1 / 3) if v > 216 / 24389 else (24389 / 27 * v + 16) / 116 for v in (x, y, z)]
    return 116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])


def test_the_oracle_formulas_give_known_values():
    # WCAG's own examples: black on white 21:1, #767676 on white 4.54:1; CIELAB of pure red (53.24, 80.09, 67.20).
    assert 1.05 / (_relative_luminance("#000000") + 0.05) == pytest.approx(21.0)
    assert 1.05 / (_relative_luminance("#767676") + 0.05) == pytest.approx(4.54, abs=0.01)
    assert _cielab("#ff0000") == pytest.approx((53.24, 80.09, 67.20), abs=0.05)


def test_every_method_colour_is_readable_on_white_and_apart_from_the_others():
    from laya_eval.catalog import METHOD_SPECS, NEXT_TOKEN_METHODS
    from laya_eval.figures.style import PALETTE

    assert set(PALETTE) == set(METHOD_SPECS) | set(NEXT_TOKEN_METHODS)
    contrast = {m: 1.05 / (_relative_luminance(c) + 0.05) for m, c in PALETTE.items()}
    assert min(contrast.values()) >= 3.0, contrast  # WCAG 2.x, graphical objects
    # CIE76 distance: 2.3 is a just-noticeable difference; 25 keeps two lines of a figure apart at a glance
    # (the blues that were too close: #0173b2 and #004d80 are 16.5 apart).
    assert math.dist(_cielab("#0173b2"), _cielab("#004d80")) < 25
    pairs = {(a, b): math.dist(_cielab(PALETTE[a]), _cielab(PALETTE[b])) for a, b in itertools.combinations(PALETTE, 2)}
    assert min(pairs.values()) >= 25, min(pairs.items(), key=lambda kv: kv[1])


def _pruning_table(values: dict[str, list[float]]) -> pd.DataFrame:
    rows = [
        {"ablation": "gate", "method": m, "ranking": "dataset", "k_removed": k, "accuracy": v, "accuracy_refit": np.nan}
        for m, curve in values.items()
        for k, v in enumerate(curve)
    ]
    return pd.DataFrame(rows)


def test_the_pruning_figure_names_the_lines_that_equal_the_oracle():
    oracle = [0.9, 0.9, 0.8]
    table = _pruning_table({"oracle": oracle, "laya": oracle, "ig": list(oracle), "random": [0.9, 0.6, 0.4]})
    fig = pruning_figure(table, meta={"label": "m.pt", "head": "laya", "dataset": "digits", "n_test": 40})
    ax = fig.axes[0]
    notes = [t.get_text() for t in ax.texts if t.get_text().startswith("same as oracle")]
    assert notes == ["same as oracle:\nα(x), IG"], notes
    # every line keeps its markers, set side by side: none hides exactly under another
    xs = {ln.get_label(): tuple(ln.get_xdata()) for ln in ax.get_lines() if not ln.get_label().startswith("_")}
    assert len(set(xs.values())) == len(xs), xs
    table = _pruning_table({"oracle": oracle, "laya": [0.9, 0.8, 0.8]})
    fig = pruning_figure(table, meta={"label": "m.pt", "head": "laya", "dataset": "digits", "n_test": 40})
    assert not [t for t in fig.axes[0].texts if t.get_text().startswith("same as oracle")]


def test_significance_markers_come_from_the_paired_tests():
    table = _faith_table({"laya": 0.80, "ig": 0.88, "gradcam": 0.87, "random": 0.0})
    # ig is best on faithfulness (0.88): it is "ref."; laya vs ig p_holm = 0.0004 -> ***, gradcam vs ig 0.2 -> n.s.
    comparisons = pd.DataFrame(
        {
            "run": "m.pt",
            "metric": "faithfulness",
            "method_a": ["laya", "ig", "laya"],
            "method_b": ["ig", "gradcam", "gradcam"],
            "p_holm": [0.0004, 0.2, 0.03],
        }
    )
    fig = F.faithfulness_figure(table, [_meta()], comparisons=comparisons)
    ax = fig.axes[0]
    marks = {round(t.xy[1]): t.get_text() for t in ax.texts if isinstance(t, matplotlib.text.Annotation)}
    # rows top to bottom in palette order: laya, ig, gradcam, then random (row 0, no marker: it is the baseline)
    ypos = {"laya": 3, "ig": 2, "gradcam": 1}
    assert marks == {ypos["laya"]: "***", ypos["ig"]: "ref.", ypos["gradcam"]: "n.s."}
    assert not [t for t in fig.axes[1].texts if isinstance(t, matplotlib.text.Annotation)]  # no deletion tests
    assert "Holm" in F.figure_caption(fig)
    assert [F.significance_marker(p) for p in (0.0009, 0.001, 0.009, 0.049, 0.05, np.nan)] == [
        "***",
        "**",
        "**",
        "*",
        "n.s.",
        "?",
    ]


def test_deletion_curves_have_distinct_styles_and_direct_labels():
    fig = F.deletion_curves_figure(_curves(), [_meta()])
    ax = fig.axes[0]
    lines = ax.get_lines()
    assert len(lines) == 3  # ig and gradcam coincide within 0.001: drawn once
    # the dash pattern itself (get_linestyle() says only "--" for any dashes)
    styles = {(tuple(ln._dash_pattern[1] or ()), ln.get_marker(), ln.get_color()) for ln in lines}
    assert len(styles) == 3 and len({s[0] for s in styles}) == 3 and len({s[1] for s in styles}) == 3
    labels = sorted(t.get_text() for t in ax.texts)
    assert labels == ["IG = Grad-CAM", "random", "α(x)"]
    assert ax.get_legend() is None and not fig.legends
    # labels never overlap: their centres are at least one text line apart
    ys = sorted(t.xy[1] for t in ax.texts)
    lo, hi = ax.get_ylim()
    assert min(np.diff(ys)) >= 0.07 * (hi - lo) - 1e-12


def test_scatter_jitter_is_small_seeded_and_layers_are_named():
    points = _points()
    a = F.scatter_figure(points, meta={**_meta(), "n_points": 50}, seed=3)
    b = F.scatter_figure(points, meta={**_meta(), "n_points": 50}, seed=3)
    offsets = [c.get_offsets() for c in a.axes[0].collections]
    np.testing.assert_array_equal(np.vstack(offsets), np.vstack([c.get_offsets() for c in b.axes[0].collections]))
    laya = points[points["method"] == "laya"]
    x_span, y_span = np.ptp(laya["attribution"]), np.ptp(points["effect"])
    for layer, coll in zip((3, 2, 1), a.axes[0].collections):  # drawn from the last layer to the first
        part = laya[laya["layer"] == layer]
        dx = coll.get_offsets()[:, 0] - part["attribution"].to_numpy()
        dy = coll.get_offsets()[:, 1] - part["effect"].to_numpy()
        assert np.abs(dx).max() <= 0.01 * x_span and np.abs(dy).max() <= 0.01 * y_span
        assert np.abs(dy).max() > 0  # layer 3 sits at exactly 0: jitter spreads it
        assert coll.get_alpha() < 0.5
    assert [t.get_text() for t in a.legends[0].get_texts()] == LAYERS


def test_profile_violins_stay_within_the_weights_range_and_use_layer_names():
    scores = _scores()
    meta = {**_meta(), "method": "laya", "by": "label", "n_layers": 3}
    fig = F.profile_distribution(scores, meta=meta)
    ax = fig.axes[0]
    assert ax.get_ylim() == pytest.approx((-0.02, 1.02))
    # cut=0: every violin body ends at the subset's observed extremes, inside [0, 1]
    bodies = [c for c in ax.collections if len(c.get_paths())]
    ys = np.concatenate([p.vertices[:, 1] for c in bodies for p in c.get_paths()])
    assert ys.min() >= scores["score"].min() - 1e-9 and ys.max() <= scores["score"].max() + 1e-9
    assert [t.get_text() for t in ax.get_xticklabels()] == LAYERS
    table = profile_table(scores, ["a", "b", "c"])
    heat = F.profile_heatmap(table, subset="all", meta={**meta, "class_names": ["a", "b", "c"]})
    assert [t.get_text() for t in heat.axes[0].get_xticklabels()] == LAYERS
    assert layer_table(scores)["layer"].max() == 3


def test_describe_leaves_out_a_removal_that_did_not_happen():
    meta = {**_meta(), "ablation": "none (scores only)"}
    assert "ablation" not in F.describe(meta) and "scope" not in F.describe(meta)
    assert "scope: network" in F.describe({**meta, "scope": "network"})
    assert "ablation: gate · scope: head" in F.describe(_meta())
    assert F.layer_names({"layer_names": ["a", "b"]}, 2) == ["a", "b"]
    assert F.layer_names({}, 3) == ["1", "2", "3"]


def test_captions_are_sentences_and_a_question_keeps_its_mark():
    """Title, subtitle and note each end the caption's sentences once: 'removed?' is not followed by a full stop."""
    table = pd.DataFrame(
        {
            "method": ["laya", "random"],
            "faithfulness_gate": [0.9, 0.0],
            "faithfulness_zero": [0.8, 0.1],
            "kendall_w": [1.0, 1.0],
            "kendall_w_p_value": [0.5, 0.5],
        }
    )
    fig = F.operators_figure(table, ["gate", "zero"])
    caption = F.figure_caption(fig)
    assert caption.startswith("Does the verdict depend on how a layer is removed? "), caption
    assert "?." not in caption and ".." not in caption and caption.endswith("."), caption


def _two_panels(title: str | None = None):
    """A constrained-layout figure whose second layout pass would move it: the y ticks of the left panel change
    with the height the first pass gives it."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(5, 2.4), layout="constrained", dpi=F.DPI)
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    left.plot(np.linspace(0, 1, 50), np.linspace(-1234.5, 98765.4, 50))
    left.set_ylabel("a long axis label\non two lines")
    right.bar(["fc1", "fc2", "fc3"], [0.2, 0.5, 0.3])
    right.set_title("panel")
    if title is not None:
        fig.suptitle(title, fontsize=10)
    return fig


def test_a_finished_figure_keeps_the_one_layout_that_saving_would_give_it():
    """Finishing lays the figure out once and removes its layout engine: the bytes are those matplotlib's savefig
    writes for the same figure (one layout pass), and saving does not move a panel."""
    from matplotlib.layout_engine import ConstrainedLayoutEngine

    from laya_eval.figures.style import _finish, _theme

    with _theme(figure_style="default"):
        ours = _finish(_two_panels(), "Title", "subtitle")
        theirs = _two_panels("Title\nsubtitle")
    assert not isinstance(ours.get_layout_engine(), ConstrainedLayoutEngine)
    assert isinstance(theirs.get_layout_engine(), ConstrainedLayoutEngine)
    before = [ax.get_position().bounds for ax in ours.axes]
    assert F.figure_bytes(ours, "png") == _savefig_png(theirs)
    assert [ax.get_position().bounds for ax in ours.axes] == before


def test_a_wrapped_title_keeps_the_layout_engine_and_gets_its_room():
    """A title too wide for the canvas is wrapped after the first layout; the figure keeps its engine, so saving
    lays it out again and the panels move down below the wrapped lines."""
    from matplotlib.layout_engine import ConstrainedLayoutEngine

    from laya_eval.figures.style import _finish, _theme

    long = " ".join(["a title far wider than the canvas it is drawn on"] * 3)
    with _theme(figure_style="default"):
        fig = _finish(_two_panels(), long)
    assert isinstance(fig.get_layout_engine(), ConstrainedLayoutEngine)
    assert fig._suptitle.get_text().count("\n") >= 2
    F.figure_bytes(fig, "png")
    renderer = fig.canvas.get_renderer()
    title_bottom = fig._suptitle.get_window_extent(renderer).y0
    assert all(ax.get_tightbbox(renderer).y1 <= title_bottom + 1 for ax in fig.axes)


def _significance_panels(
    n_panels: int, methods=("laya", "static", "ig", "gradcam", "grad_x_act", "random")
) -> list[dict]:
    """Panels as the report builds them: capped signed -log10 p over the whole colour range (light and dark cells),
    NaN on the diagonal and where no test exists."""
    rng = np.random.default_rng(3)
    panels = []
    for k in range(n_panels):
        values = rng.permutation(np.linspace(-4.0, 4.0, len(methods) ** 2)).reshape(len(methods), len(methods))
        np.fill_diagonal(values, np.nan)
        values[0, -1] = np.nan
        cells = np.where(
            np.isnan(values), "—", np.where(values > 1.3, "▲ 0.02", np.where(values < -1.3, "▼ 0.03", "· 0.4"))
        )
        panels.append(
            {
                "meta": _meta(f"run{k}.pt"),
                "test": "Wilcoxon signed-rank",
                "values": pd.DataFrame(values, index=list(methods), columns=list(methods)),
                "cells": pd.DataFrame(cells, index=list(methods), columns=list(methods)),
            }
        )
    return panels


@pytest.mark.filterwarnings("ignore:The set_bad function:PendingDeprecationWarning")  # seaborn's own heatmap
@pytest.mark.parametrize("style", ["default", "paper"])
def test_significance_heat_map_draws_what_seaborns_heatmap_draws(style):
    """Cell colours, annotations (text, place, colour) and labels against seaborn's own heatmap of the same matrix."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    panel = _significance_panels(1)[0]
    fig = F.significance_figure([panel], style=style)
    ax = fig.axes[0]
    values, cells = panel["values"], panel["cells"]
    ref_fig, ref_ax = plt.subplots()
    sns.heatmap(
        values,
        ax=ref_ax,
        annot=cells.to_numpy(dtype=object),
        fmt="",
        cmap="vlag_r",
        vmin=-4,
        vmax=4,
        center=0,
        square=True,
        linewidths=0.5,
        cbar=False,
    )
    ours, theirs = ax.collections[0], ref_ax.collections[0]
    ours.update_scalarmappable()
    theirs.update_scalarmappable()
    np.testing.assert_allclose(ours.get_facecolors(), theirs.get_facecolors(), atol=1e-12)
    assert np.array_equal(np.ma.getmaskarray(ours.get_array()).ravel(), np.isnan(values.to_numpy()).ravel())

    def annotations(a):
        return sorted((t.get_position(), t.get_text(), matplotlib.colors.to_hex(t.get_color())) for t in a.texts)

    assert annotations(ax) == annotations(ref_ax)
    assert len(ax.texts) == int(np.isfinite(values.to_numpy()).sum())  # no text on the diagonal or untested pairs
    assert ax.get_xlim() == ref_ax.get_xlim() and ax.get_ylim() == ref_ax.get_ylim()  # row 0 at the top
    assert list(ax.get_xticks()) == list(ref_ax.get_xticks()) == [k + 0.5 for k in range(len(values))]
    assert all(t.get_rotation() == 90 for t in ax.get_xticklabels())
    assert all(t.get_rotation() == 0 for t in ax.get_yticklabels())
    assert {k: v.get_visible() for k, v in ax.spines.items()} == {k: v.get_visible() for k, v in ref_ax.spines.items()}
    plt.close(ref_fig)


@pytest.mark.filterwarnings("ignore:The set_bad function:PendingDeprecationWarning")  # seaborn's own heatmap
@pytest.mark.parametrize("style", ["default", "paper"])
def test_agreement_heat_map_draws_what_seaborns_heatmap_draws(style):
    """Cells, annotations (two decimals, place, colour), colour bar and labels against seaborn's own heatmap."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    methods = ["laya", "static", "ig", "gradcam", "random"]
    rng = np.random.default_rng(5)
    values = rng.uniform(-1, 1, (5, 5))
    values = (values + values.T) / 2
    np.fill_diagonal(values, 1.0)
    values[0, 4] = values[4, 0] = np.nan  # no sample where both are defined
    matrix = pd.DataFrame(values, index=methods, columns=methods)
    fig = F.agreement_figure(matrix, meta=_meta(), style=style)
    ax = fig.axes[0]
    ref_fig, ref_ax = plt.subplots()
    sns.heatmap(
        matrix,
        ax=ref_ax,
        annot=True,
        fmt=".2f",
        cmap="vlag",
        vmin=-1,
        vmax=1,
        center=0,
        square=True,
        linewidths=0.5,
        annot_kws={"fontsize": 4.5 if style == "paper" else 7},
    )
    ours, theirs = ax.collections[0], ref_ax.collections[0]
    ours.update_scalarmappable()
    theirs.update_scalarmappable()
    np.testing.assert_allclose(ours.get_facecolors(), theirs.get_facecolors(), atol=1e-12)

    def annotations(a):
        return sorted(
            (t.get_position(), t.get_text(), matplotlib.colors.to_hex(t.get_color()), t.get_fontsize()) for t in a.texts
        )

    assert annotations(ax) == annotations(ref_ax)
    assert len(ax.texts) == 23 and "nan" not in {t.get_text() for t in ax.texts}
    assert ax.get_xlim() == ref_ax.get_xlim() and ax.get_ylim() == ref_ax.get_ylim()  # row 0 at the top
    assert [t.get_text() for t in ax.get_yticklabels()] == [
        F.METHOD_SHORT_LABELS[m] if style == "paper" else F.METHOD_LABELS[m] for m in methods
    ]
    assert all(t.get_rotation() == 90 for t in ax.get_xticklabels())
    assert all(t.get_rotation() == 0 for t in ax.get_yticklabels())
    ours_bar, theirs_bar = ours.colorbar, theirs.colorbar
    assert ours_bar.ax.get_ylabel() == "mean Spearman ρ across layers"
    assert (ours_bar.vmin, ours_bar.vmax) == (theirs_bar.vmin, theirs_bar.vmax) == (-1, 1)
    assert ours_bar.outline.get_linewidth() == theirs_bar.outline.get_linewidth() == 0
    plt.close(ref_fig)


def _eye_agreement():
    methods = ["laya", "static", "ig"]
    return F.agreement_figure(pd.DataFrame(np.eye(3), index=methods, columns=methods), meta=_meta())


@pytest.mark.parametrize(
    "build",
    [lambda: F.significance_figure(_significance_panels(8)), _eye_agreement],
    ids=["significance-8-panels", "agreement"],
)
def test_a_heat_map_figure_is_not_rendered_before_it_is_saved(monkeypatch, build):
    """No render while the figure is built, one when it is saved: seaborn's heatmap rendered the figure to check
    its tick labels, once per panel."""
    import matplotlib.figure

    renders = []
    draw = matplotlib.figure.Figure.draw

    def counted(self, renderer):
        renders.append(self)
        return draw(self, renderer)

    monkeypatch.setattr(matplotlib.figure.Figure, "draw", counted)
    fig = build()
    assert renders == []
    F.figure_bytes(fig, "png")
    assert renders == [fig]


def test_a_finished_figure_pickles_and_draws_the_same_after_unpickling():
    """matplotlib figures pickle; the significance figure's after-layout placements (closures) are dropped once it
    is finished, so it does too."""
    import pickle

    fig = F.significance_figure(_significance_panels(1))
    copy = pickle.loads(pickle.dumps(fig))
    assert sorted(t.get_text() for t in copy.axes[0].texts) == sorted(t.get_text() for t in fig.axes[0].texts)
    assert F.figure_bytes(copy, "png") == F.figure_bytes(fig, "png")


def test_perplexity_figure_labels_minor_ticks_at_two_and_five_only_and_colours_the_logit_lens():
    """Minor tick labels of the log axis: only 2 and 5 times a power of ten (the labels of a decade would run into
    each other); the logit lens has its own colour and label."""
    from laya_eval.figures.pruning import perplexity_figure
    from laya_eval.figures.style import PALETTE

    rows = []
    for method, ranking, values in (
        ("logit_lens", "dataset", [260, 290, 340, 420, 700]),
        ("oracle", "oracle", [260, 280, 330, 400, 650]),
        ("random", "random", [260, 900, 1500, 2600, 3900]),
    ):
        rows += [{"method": method, "ranking": ranking, "k_removed": k, "perplexity": v} for k, v in enumerate(values)]
    fig = perplexity_figure(pd.DataFrame(rows), meta={"label": "lm", "dataset": "text:x", "n_test": 9})
    ax = fig.axes[0]
    fig.canvas.draw()
    minor = [(t.get_loc(), t.label1.get_text()) for t in ax.yaxis.get_minor_ticks() if t.label1.get_text()]
    ylow, yhigh = ax.get_ylim()
    shown = [v for v, _ in minor if ylow <= v <= yhigh]
    assert shown, minor
    for value in shown:
        mantissa = value / 10 ** math.floor(math.log10(value) + 1e-9)
        assert round(mantissa, 6) in (2.0, 5.0), minor
    colours = {line.get_label(): line.get_color() for line in ax.get_lines()}
    assert any(c == PALETTE["logit_lens"] for c in colours.values()), colours
    texts = [t.get_text() for t in fig.findobj(matplotlib.text.Text)]
    assert any("logit lens" in t for t in texts) and not any("logit_lens" in t for t in texts)
