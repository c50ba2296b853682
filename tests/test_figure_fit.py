"""Every figure kind fits its canvas, in both styles, on two real models (LAYA and ScalarMix heads on digits).

Two checks per figure, each against what the pixels and the renderer say (not the code that placed things):
the outermost pixel rows and columns of the PNG are background (nothing drawn reaches the edge), and the
bounding boxes of all drawn texts (titles, axis and tick labels, legends, annotations, colour bars) lie inside
the figure and do not intersect one another. An annotation matplotlib leaves out (its anchor outside its panel)
counts as a problem too.
"""

from __future__ import annotations

import io
import itertools

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image

from laya_eval import evaluate
from laya_eval import figures as F
from laya_eval.engine.plan import EvalOptions
from laya_eval.data import Dataset
from laya_eval.figures.mixers import mixer_map_figure
from laya_eval.figures.planted import planted_figure
from laya_eval.figures.sanity_checks import randomisation_figure
from laya_eval.loading.specs import load_model
from laya_eval.mixers.audit import MixerOptions, audit_mixers
from laya_eval.mixers.reference import PatchDepthClassifier
from laya_eval.planted.run import MetaOptions, meta
from laya_eval.profiling.output import profile_figures
import laya_eval
from laya_eval.pruning import prune
from laya_eval.pruning.options import PruneOptions
from laya_eval.pruning.output import prune_figures
from laya_eval.reporting.runs import load_inputs
from laya_eval.reporting.write import report_figures
from laya_eval.sanity_checks import sanity
from laya_eval.sanity_checks.options import SanityOptions
from laya_eval.training.trainer import TrainOptions

pytestmark = pytest.mark.slow  # trains, evaluates, prunes and checks two models end to end

# Every kind a command writes; the names without a run suffix (scatter_<run> -> scatter).
KINDS = {
    "faithfulness",
    "deletion_curves",
    "spearman_distribution",
    "scatter",
    "agreement",
    "significance",
    "profile_heatmap_all",
    "profile_heatmap_correct",
    "profile_heatmap_incorrect",
    "profile_layers",
    "diagnosis",
    "pruning",
    "early_exit",
    "sanity",
    "operators",
    "planted",
    "mixer_map",
}
TOL = 0.5  # pixels: anti-aliasing of touching boxes is not an overlap


@pytest.fixture(scope="module")
def results(digits, digits_checkpoints, tmp_path_factory):
    """Per model (laya, scalarmix): its faithfulness folder, profile, pruning and sanity results."""
    root = tmp_path_factory.mktemp("fit")
    out = {}
    # A few methods for pruning and sanity (each costs head trainings); the faithfulness runs have them all.
    for head, method, few in (
        ("laya", "laya", ("laya", "static", "grad_x_act")),
        ("scalarmix", "contribution", ("static", "contribution", "grad_x_act")),
    ):
        ckpt = digits_checkpoints[head]
        model = load_model(ckpt).model
        folder = root / head
        # Two ablations for the LAYA model: its report gains the operator-sensitivity figure.
        ablations = ["gate", "zero"] if head == "laya" else ["gate"]
        evaluate(ckpt, None, options=EvalOptions(limit=80, bootstrap=50, ablation=tuple(ablations)), out=folder)
        info = {
            "label": ckpt.name,
            "head": head,
            "dataset": "digits",
            "split": "test",
            "n": 80,
            "ablation": "gate",
            "scope": "head",
        }
        pruned = prune(
            model,
            digits,
            options=PruneOptions(
                methods=few, seeds=1, n_random=3, n_random_refit=1, timing=False, train=TrainOptions(epochs=2, seed=0)
            ),
        )
        checks = sanity(
            model,
            digits,
            options=SanityOptions(methods=few, roar_seeds=1, bootstrap=50, train=TrainOptions(epochs=2, patience=1)),
        )
        prof = laya_eval.profile(ckpt, method=method, options=EvalOptions(limit=120))
        out[head] = {"folder": folder, "meta": info, "prune": pruned, "sanity": checks, "profile": prof}
    return out


@pytest.fixture(scope="module")
def planted_and_mixers(tmp_path_factory):
    """``laya-eval meta`` on every planted family (two seeds, few samples) and a mixer audit of a DenseFormer-style
    classifier with five mixers: the tables their figures are drawn from."""
    planted = meta(None, MetaOptions(seeds=2, limit=24, bootstrap=0))
    torch.manual_seed(0)
    model = PatchDepthClassifier("denseformer", image_size=8, patch=4, dim=8, depth=5, heads=2, n_classes=3).eval()
    gen = torch.Generator().manual_seed(1)
    data = Dataset(
        torch.randn(24, 1, 8, 8, generator=gen),
        torch.randint(0, 3, (24,), generator=gen),
        ("a", "b", "c"),
        "random",
        "test",
    )
    audit = audit_mixers(model, data, options=MixerOptions(batch_size=24, bootstrap=0, ig_steps=4))
    return planted, audit


def all_figures(results, planted_and_mixers, style: str) -> dict:
    figs = dict(report_figures(load_inputs([r["folder"] for r in results.values()]).runs, style=style))
    planted, audit = planted_and_mixers  # one style each: they are drawn as `meta` and `mixers` write them
    figs["planted"] = planted_figure(planted.summary, planted.metrics)
    figs["mixer_map"] = mixer_map_figure(audit.map)
    for head, r in results.items():
        figs.update({f"{k}_{head}": v for k, v in profile_figures(r["profile"], style=style).items()})
        info = {**r["meta"], "n_test": 360, **r["prune"].meta}
        figs.update({f"{k}_{head}": v for k, v in prune_figures(r["prune"], meta=info, style=style).items()})
        table = pd.concat([r["sanity"].randomisation, r["sanity"].data_randomisation])
        figs[f"sanity_{head}"] = randomisation_figure(table, meta=r["meta"], style=style)
    return figs


def _kind(name: str) -> str:
    return next(k for k in sorted(KINDS, key=len, reverse=True) if name == k or name.startswith(k + "_"))


def drawn_texts(fig) -> list:
    """Every non-empty text the renderer draws: figure and panel titles, axis and tick labels, legends, notes."""
    texts = [fig._suptitle, fig._supxlabel, fig._supylabel, *fig.texts]
    for legend in fig.legends:
        texts += [legend.get_title(), *legend.get_texts()]
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        texts += [
            ax.title,
            ax._left_title,
            ax._right_title,
            ax.xaxis.label,
            ax.yaxis.label,
            ax.xaxis.offsetText,
            ax.yaxis.offsetText,
            *ax.texts,
        ]
        for axis in (ax.xaxis, ax.yaxis):
            for tick in axis._update_ticks():  # the ticks inside the view, those the axis draws
                texts += [tick.label1, tick.label2]
        if ax.get_legend() is not None:
            texts += [ax.get_legend().get_title(), *ax.get_legend().get_texts()]
    unique = {id(t): t for t in texts if t is not None and t.get_visible() and t.get_text().strip()}
    return list(unique.values())


def _border_is_background(png: bytes) -> list[str]:
    with Image.open(io.BytesIO(png)) as img:
        rgb = np.asarray(img.convert("RGB"), dtype=int)
    background = rgb[0, 0]
    edges = {"top": rgb[0], "bottom": rgb[-1], "left": rgb[:, 0], "right": rgb[:, -1]}
    return [side for side, px in edges.items() if np.abs(px - background).max() > 8] + (
        [] if np.abs(background - 255).max() <= 3 else ["corner pixel is not white"]
    )


def _problems(fig) -> list[str]:
    png = F.figure_bytes(fig, "png")  # draws the figure as it is saved
    problems = [f"drawing touches the {side} edge" for side in _border_is_background(png)]
    renderer = fig.canvas.get_renderer()
    W, H = fig.bbox.width, fig.bbox.height
    boxes = [(t.get_text().replace("\n", " ")[:40], t.get_window_extent(renderer)) for t in drawn_texts(fig)]
    # An annotation whose anchor lies outside its axes is not drawn at all (its extent is then the unit box at 0, 0).
    problems += [
        f"{text!r} is not drawn (its anchor is outside its panel)"
        for text, b in boxes
        if tuple(b.bounds) == (0.0, 0.0, 1.0, 1.0)
    ]
    for text, b in boxes:
        if b.x0 < -TOL or b.y0 < -TOL or b.x1 > W + TOL or b.y1 > H + TOL:
            problems.append(f"{text!r} leaves the canvas: {b.bounds} on {W:.0f}x{H:.0f}")
    for (ta, a), (tb, b) in itertools.combinations(boxes, 2):
        dx = min(a.x1, b.x1) - max(a.x0, b.x0)
        dy = min(a.y1, b.y1) - max(a.y0, b.y0)
        if dx > TOL and dy > TOL:
            problems.append(f"{ta!r} overlaps {tb!r} ({dx:.1f} x {dy:.1f} px)")
    return problems


@pytest.mark.parametrize("style", ["default", "paper"])
def test_every_figure_kind_fits_its_canvas_without_overlapping_labels(results, planted_and_mixers, style):
    figs = all_figures(results, planted_and_mixers, style)
    assert {_kind(n) for n in figs} == KINDS, sorted(KINDS - {_kind(n) for n in figs})
    problems = {name: p for name, fig in figs.items() if (p := _problems(fig))}
    assert not problems, problems


def test_the_checks_see_a_title_past_the_edge_and_two_labels_on_each_other():
    """The checks can fail: a text pushed past the right edge, a second label on top of a tick label and an annotation
    matplotlib leaves out."""
    from tests.test_figures import _faith_table, _meta

    fig = F.faithfulness_figure(_faith_table({"laya": 0.85, "ig": 0.88, "random": 0.0}), [_meta()])
    fig.text(0.9, 0.5, "a label that runs far past the right edge of the canvas", bbox={"facecolor": "black"})
    box = fig.axes[0].get_yticklabels()[0].get_window_extent(fig.canvas.get_renderer())
    fig.text(box.x0 / fig.bbox.width, box.y0 / fig.bbox.height, "on top")
    ax = fig.axes[0]
    ax.annotate("anchored outside", (ax.get_xlim()[1] + 10, ax.get_ylim()[1]))
    problems = _problems(fig)
    assert "'anchored outside' is not drawn (its anchor is outside its panel)" in problems, problems
    assert "drawing touches the right edge" in problems, problems
    assert any("leaves the canvas" in p for p in problems), problems
    assert any("'on top' overlaps" in p or "overlaps 'on top'" in p for p in problems), problems


def test_coinciding_pruning_lines_stay_visible(results):
    """Methods on the oracle's line: each method's markers sit at their own x (side by side), none hidden."""
    fig = prune_figures(results["laya"]["prune"], meta={**results["laya"]["meta"], "n_test": 360})["pruning"]
    ax = fig.axes[0]
    xs = [tuple(np.round(line.get_xdata(), 6)) for line in ax.get_lines() if line.get_label()[:1] != "_"]
    assert len(xs) == len(set(xs)), "two lines share their markers' positions"


@pytest.mark.parametrize("style", ["default", "paper"])
def test_a_one_run_significance_matrix_fits_its_canvas(style):
    """One panel (a one-run report): its colour bar's label stays on the canvas. One pass of constrained layout
    left it past the right edge in the default style (the bar's ticks change as it is resized)."""
    from tests.test_figures import _significance_panels

    for n_methods in (2, 4, 6):
        methods = ("laya", "static", "ig", "gradcam", "grad_x_act", "random")[:n_methods]
        fig = F.significance_figure(_significance_panels(1, methods), style=style)
        assert _problems(fig) == [], (n_methods, _problems(fig))


@pytest.mark.parametrize("style", ["default", "paper"])
def test_a_one_run_report_fits_its_canvas(results, style):
    """The report of one result folder: its panels are the widest, so coinciding methods stack the most direct labels
    on a deletion curve and the significance matrix gets the narrowest cells."""
    figs = dict(report_figures(load_inputs([results["laya"]["folder"] / "gate"]).runs, style=style))
    assert {"deletion_curves", "significance"} <= set(figs), sorted(figs)
    problems = {name: p for name, fig in figs.items() if (p := _problems(fig))}
    assert not problems, problems


@pytest.mark.parametrize("style", ["default", "paper"])
@pytest.mark.parametrize("top", [0.78, 0.4])
def test_stacked_direct_labels_of_coinciding_methods_stay_apart_and_inside_their_panel(style, top):
    """Seven methods on one curve at the top of the panel (four label lines), two others just below it: the label
    blocks are stacked without touching one another or the panel title, whatever the panel's height."""
    from tests.test_figures import _meta

    shapes = {"top": [top, top, 0.78], "near": [top - 0.02, 0.5, 0.78], "low": [0.0, 0.0, 0.78]}
    groups = {
        "top": ["laya", "static", "contribution", "ig", "gradcam", "grad_x_act", "alpha_norm"],
        "near": ["random"],
        "low": ["block_influence", "angular_distance"],
    }
    rows = [
        {"run": "m.pt", "method": m, "k": k + 1, "deletion": shapes[g][k]}
        for g, members in groups.items()
        for m in members
        for k in range(3)
    ]
    fig = F.deletion_curves_figure(pd.DataFrame(rows), [_meta()], style=style)
    assert _problems(fig) == []
    ax = fig.axes[0]
    renderer = fig.canvas.get_renderer()
    labels = [t for t in ax.texts if t.get_text().strip()]
    assert len(labels) == 3 and labels[0].get_text().count("\n") == 3  # 7 names, two per line
    for t in labels:  # inside the panel's height: nothing reaches into the title above or the tick labels below
        box = t.get_window_extent(renderer)
        assert ax.bbox.y0 - TOL <= box.y0 and box.y1 <= ax.bbox.y1 + TOL, (t.get_text(), box, ax.bbox)
