"""Layer pruning and the early-exit what-if: oracles worked out by hand, fit-head, scipy-free
trapezoids and planted models."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from laya_eval.models.backbones.base import Backbone
from laya_eval.data import Dataset
from laya_eval.errors import ConfigError
from laya_eval.training.head_fit import fit_head, train
from laya_eval.models.heads import ConcatHead
from laya_eval.models.layered import LayeredModel, ModelInfo
from laya_eval.pruning import (
    PRUNING_COLUMNS,
    PruneOptions,
    curve_area,
    depth_latency,
    evaluate_masks,
    is_chain,
    normalised_mass,
    oracle_exit_depth,
    prefix_masks,
    prune,
    pruning_comparisons,
    removal_order,
)
from laya_eval.training.trainer import TrainOptions

QUICK = TrainOptions(epochs=3, seed=5, batch_size=64)


@pytest.fixture(scope="module")
def recorded(digits):
    """An MLP + LAYA model trained by ``laya-eval train``'s code path: it records its test accuracy."""
    return train(
        "mlp",
        "laya",
        digits,
        backbone_kwargs={"widths": [32, 16, 16]},
        head_kwargs={"d_star": 16, "scorer_hidden": 16},
        options=TrainOptions(epochs=4, seed=0),
    )


def test_prune_checks_out_before_loading_or_measuring_anything(tmp_path, monkeypatch, digits):
    import laya_eval
    from laya_eval.loading import specs
    from laya_eval.pruning import run as pruning_run

    def work(*args, **kwargs):
        raise AssertionError("the model was loaded or pruned before the output was checked")

    monkeypatch.setattr(specs, "load_model", work)
    monkeypatch.setattr(pruning_run, "_prune_layers", work)
    a_file = tmp_path / "a-file"
    a_file.write_text("keep me")
    with pytest.raises(ConfigError, match=r"^output folder '.*a-file' exists and is not a folder\.$"):
        laya_eval.prune(tmp_path / "model.pt", digits, out=a_file)
    with pytest.raises(ConfigError, match=r"^format must be one of \{png, svg, pdf\}; got 'jpg'\.$"):
        laya_eval.prune(tmp_path / "model.pt", digits, out=tmp_path / "new", fmt="jpg")
    assert a_file.read_text() == "keep me" and sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


@pytest.fixture(scope="module")
def pruned(recorded, digits):
    return prune(
        recorded.model,
        digits,
        options=PruneOptions(seeds=1, n_random=4, n_random_refit=1, bootstrap=100, timing=False, train=QUICK),
    )


# ----------------------------------------------------------------------------------------- hand-worked pieces


def test_removal_order_and_prefix_masks_by_hand():
    # scores (0.2, 0.9, 0.2): least important first, ties keep the lower layer first -> (0, 2, 1)
    order = removal_order(np.array([0.2, 0.9, 0.2]))
    assert order.tolist() == [0, 2, 1]
    # k = 0 keeps all, k = 1 drops layer 0, k = 2 drops layers 0 and 2
    assert prefix_masks(order).tolist() == [[1, 1, 1], [0, 1, 1], [0, 1, 0]]
    per_input = prefix_masks(removal_order(np.array([[3.0, 2.0, 1.0], [1.0, 2.0, 3.0]])))
    assert per_input[0].tolist() == [[1, 1, 1], [1, 1, 0], [1, 0, 0]]
    assert per_input[1].tolist() == [[1, 1, 1], [0, 1, 1], [0, 0, 1]]


def test_curve_area_is_the_normalised_trapezoid():
    correct = np.array([[1, 1, 0, 0], [1, 0, 1, 1.0]])
    # sample 0: trapezoids on x = 0, 1/3, 2/3, 1: (1+1)/2 + (1+0)/2 + (0+0)/2 = 1.5, times 1/3 = 0.5
    # sample 1: (1+0)/2 + (0+1)/2 + (1+1)/2 = 2, times 1/3 = 2/3
    np.testing.assert_allclose(curve_area(correct), [0.5, 2 / 3])
    x = np.linspace(0, 1, 4)
    np.testing.assert_allclose(curve_area(correct), [np.trapezoid(c, x) for c in correct])
    # In accuracy units: 49 of 50 inputs right at every k (a flat curve at 0.98) has area 0.98, not 1.
    flat = np.repeat((np.arange(50) > 0).astype(float)[:, None], 3, axis=1)
    assert curve_area(flat).mean() == pytest.approx(0.98)


def test_paired_comparison_is_the_difference_of_areas():
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 2, (200, 3)).astype(float), rng.integers(0, 2, (200, 3)).astype(float)
    table = pruning_comparisons(
        {("a", "dataset", "gate", "accuracy"): a, ("b", "dataset", "gate", "accuracy"): b}, n_resamples=200
    )
    row = table.iloc[0]
    assert row["auc_difference"] == pytest.approx(curve_area(a).mean() - curve_area(b).mean())
    assert row["ci_low"] <= row["auc_difference"] <= row["ci_high"]


def test_normalised_mass_by_hand():
    # weights (0.5, 0.3, 0.2): mass deeper than depth 1 is 0.5, than depth 2 is 0.2, than depth 3 is 0
    np.testing.assert_allclose(normalised_mass(np.array([[0.5, 0.3, 0.2]])), [[0.5, 0.2, 0.0]])
    # negative scores count as 0: (-1, 1, 1) -> (0, 0.5, 0.5); no positive score -> uniform
    np.testing.assert_allclose(
        normalised_mass(np.array([[-1.0, 1.0, 1.0], [-1.0, -2.0, 0.0]])), [[1.0, 0.5, 0.0], [2 / 3, 1 / 3, 0.0]]
    )


def _sum_head(n_layers: int) -> ConcatHead:
    """Two classes; the logit of class 1 is the sum of the (1-dim) layer states, class 0's is 0."""
    head = ConcatHead([1] * n_layers, 2)
    with torch.no_grad():
        head.classifier.weight.zero_()
        head.classifier.weight[1] = 1.0
        head.classifier.bias.zero_()
    return head.eval()


def test_oracle_exit_depth_on_a_hand_built_head():
    # states = the per-layer terms of class 1. Partial sums by depth and the classes they give (ties -> class 0):
    #   ( 1,  1, 1): 1, 2, 3   -> 1, 1, 1; full 1 -> exit at 1
    #   (-1,  3, 1): -1, 2, 3  -> 0, 1, 1; full 1 -> exit at 2
    #   ( 1, -3, 1): 1, -2, -1 -> 1, 0, 0; full 0 -> exit at 2
    #   ( 1, -3, 4): 1, -2, 2  -> 1, 0, 1; full 1 -> exit at 1 (the shallowest agreeing depth)
    #   (-1, -1, 5): -1, -2, 3 -> 0, 0, 1; full 1 -> exit at 3
    states = torch.tensor([[1, 1, 1], [-1, 3, 1], [1, -3, 1], [1, -3, 4], [-1, -1, 5.0]])
    head = _sum_head(3)
    hidden = [states[:, i : i + 1] for i in range(3)]
    prefix = np.tril(np.ones((3, 3), np.float32))
    pred, _ = evaluate_masks(head, hidden, prefix, "gate-renorm", None)
    assert pred.tolist() == [[1, 1, 1], [0, 1, 1], [1, 0, 0], [1, 0, 1], [0, 0, 1]]
    assert oracle_exit_depth(pred, pred[:, -1]).tolist() == [1, 2, 2, 1, 3]


# ----------------------------------------------------------------------------------------- a real pruning run


def test_nothing_removed_reproduces_the_recorded_test_accuracy(recorded, pruned):
    table = pruned.pruning
    assert list(table.columns) == PRUNING_COLUMNS
    k0 = table[table["k_removed"] == 0]
    assert set(k0["accuracy"]) == {recorded.metrics["test_accuracy"]}
    assert len(k0) == len(table) // recorded.model.n_layers
    # the model's state beside the verdict: the accuracy recorded at training, a working model, no warning
    state = pruned.model_state
    assert state.accuracy == recorded.metrics["test_accuracy"] and state.n == pruned.meta["n_test"]
    assert not state.at_chance and not state.one_class and pruned.warnings == []
    assert pruned.meta["model_state"]["accuracy"] == state.accuracy


def test_refit_on_all_layers_matches_fit_head(recorded, pruned, digits):
    fitted = fit_head(
        recorded.model.backbone, digits, head="laya", head_kwargs={"d_star": 16, "scorer_hidden": 16}, options=QUICK
    )
    k0 = pruned.pruning[
        (pruned.pruning["k_removed"] == 0)
        & (pruned.pruning["ranking"] == "dataset")
        & (pruned.pruning["method"] != "random")
    ]
    assert set(k0["accuracy_refit"]) == {fitted.metrics["test_accuracy"]}


def test_rows_cover_every_method_ablation_and_k(recorded, pruned):
    table = pruned.pruning
    L = recorded.model.n_layers
    assert set(table["ablation"]) == {"gate", "gate-renorm", "zero", "mean"}
    for (method, ranking, ablation), rows in table.groupby(["method", "ranking", "ablation"]):
        assert rows["k_removed"].tolist() == list(range(L))
    assert {"oracle", "random", "laya", "contribution", "ig"} <= set(table["method"])
    # static weights are the same for every input: no per-input ranking
    assert set(table.loc[table["method"] == "static", "ranking"]) == {"dataset"}
    # per-input rankings are not one smaller model: no refit
    assert table.loc[table["ranking"] == "input", "accuracy_refit"].isna().all()


def test_depth_is_the_deepest_kept_layer_of_a_chain(pruned):
    assert pruned.meta["chain"] is True
    rows = pruned.pruning[(pruned.pruning["ranking"] == "dataset") & (pruned.pruning["method"] != "random")]
    deepest = rows["layers_kept"].map(lambda s: max(int(i) for i in s.split(",")))
    assert (rows["depth"] == deepest).all()


def test_no_retraining_accuracy_equals_a_slow_loop(recorded, pruned, digits):
    # Independent route: the model's own forward pass with the keep gate, one mask at a time, over the raw inputs.
    model = recorded.model
    rows = pruned.pruning[
        (pruned.pruning["method"] == "ig")
        & (pruned.pruning["ranking"] == "dataset")
        & (pruned.pruning["ablation"] == "gate")
    ]
    x, y = digits["test"].x, digits["test"].y
    for _, row in rows.iterrows():
        keep = torch.zeros(model.n_layers)
        keep[[int(i) - 1 for i in row["layers_kept"].split(",")]] = 1.0
        with torch.no_grad():
            pred = model(x, keep.expand(len(x), -1)).argmax(-1)
        assert row["accuracy"] == pytest.approx(float((pred == y).float().mean()), abs=1 / len(y) + 1e-12)


# ----------------------------------------------------------------------------------------- a planted model


class _Slices(Backbone):
    """Three 'layers' that are slices of the input (not a chain: no layer modules)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.width = width
        self.layer_dims = [width] * 3

    def forward(self, x, replace=None):
        return [x[:, i * self.width : (i + 1) * self.width] for i in range(3)]

    def config(self):
        return {"name": "slices", "width": self.width}


def _planted(j: int, n: int = 600, width: int = 4, seed: int = 0):
    """Class information only in layer ``j``; a Concat head that reads only layer ``j``."""
    gen = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 2, (n,), generator=gen)
    x = torch.randn(n, 3 * width, generator=gen)
    x[:, j * width] += 4.0 * (2 * y - 1)
    head = ConcatHead([width] * 3, 2)
    with torch.no_grad():
        head.classifier.weight.zero_()
        head.classifier.weight[1, j * width] = 1.0
        head.classifier.weight[0, j * width] = -1.0
        head.classifier.bias.zero_()
    model = LayeredModel(_Slices(width), head, ModelInfo(num_classes=2, input_shape=(3 * width,)))
    split = lambda name, s: Dataset(x=x[s], y=y[s], class_names=("a", "b"), name="planted", split=name)  # noqa: E731
    return model.eval(), split("train", slice(0, 300)), split("val", slice(300, 400)), split("test", slice(400, n))


@pytest.mark.parametrize("j", [0, 1, 2])
def test_a_planted_layer_is_kept_by_oracle_and_contribution_and_its_loss_is_felt(j):
    model, train, val, test = _planted(j)
    result = prune(
        model,
        {"train": train, "val": val, "test": test},
        options=PruneOptions(
            methods=("contribution",), seeds=0, n_random=6, bootstrap=0, timing=False, early_exit=False
        ),
    )
    table = result.pruning.set_index(["method", "ranking", "ablation", "k_removed"])
    full = table.loc[("oracle", "dataset", "gate", 0), "accuracy"]
    assert full > 0.95
    for method in ("oracle", "contribution"):
        for ablation in ("gate", "zero", "mean"):
            last = table.loc[(method, "dataset", ablation, 2)]
            assert last["layers_kept"] == str(j + 1)
            assert last["accuracy"] == full
    # Removing layer j under gate leaves the logits at the bias (0, 0): every input goes to class 0.
    hidden = [test.x[:, i * 4 : (i + 1) * 4] for i in range(3)]
    mask = np.ones((1, 3), np.float32)
    mask[0, j] = 0
    pred, _ = evaluate_masks(model.head, hidden, mask, "gate", None)
    assert float((pred[:, 0] == test.y.numpy()).mean()) == pytest.approx(float((test.y == 0).float().mean()))
    # The random orders remove j before the end in 2 of 3 cases on average: they lose accuracy.
    assert table.loc[("random", "dataset", "gate", 2), "accuracy"] < full - 0.1
    assert result.meta["chain"] is False
    assert np.isnan(result.pruning["depth"]).all()


# ----------------------------------------------------------------------------------------- cost


class _Reversed(Backbone):
    """Runs its layer modules last-first: not a chain."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))
        self.layer_dims = [4, 4, 4]

    def forward(self, x, replace=None):
        out = [None] * 3
        for i in (2, 1, 0):
            out[i] = self.blocks[i](x)
        return out

    def layer_modules(self):
        return list(self.blocks)


def test_chain_detection_and_truncation(recorded, digits):
    model = recorded.model
    x = digits["test"].x[:32]
    assert is_chain(model, x)
    reversed_model = LayeredModel(_Reversed(), ConcatHead([4, 4, 4], 2))
    assert not is_chain(reversed_model, torch.randn(8, 4))
    assert depth_latency(reversed_model, torch.randn(8, 4)) is None
    # Truncating at depth 1 runs only the first block: count calls of the later ones.
    calls = []
    handles = [
        m.register_forward_hook(lambda mod, a, o, i=i: calls.append(i))
        for i, m in enumerate(model.backbone.layer_modules())
    ]
    try:
        seconds = depth_latency(model, x, repeats=2)
    finally:
        for h in handles:
            h.remove()
    assert seconds.shape == (model.n_layers + 1,) and (seconds > 0).all()
    # is_chain's pass (3 calls), then 1 warm-up + 2 timed rounds of depths 0 (full: 3 calls), 1, 2, 3 (1, 2, 3 calls)
    assert len(calls) == 3 + 3 * (3 + 1 + 2 + 3)


# ----------------------------------------------------------------------------------------- early exit


def test_early_exit_table(pruned, recorded):
    early = pruned.early_exit
    L = recorded.model.n_layers
    oracle = early[early["policy"] == "oracle"]
    assert (oracle["agreement"] == 1.0).all()
    fixed_full = early[(early["policy"] == "fixed") & (early["threshold"] == L)]
    assert (fixed_full["agreement"] == 1.0).all()
    assert (fixed_full["accuracy"] == recorded.metrics["test_accuracy"]).all()
    # LAYA's alpha reads every layer: its renormalised partial predictions cannot save compute; a refit head can.
    renorm = early[(early["partial"] == "gate-renorm") & (early["policy"] != "oracle")]
    assert (renorm["saving"] == "hypothetical").all()
    refit_fixed = early[(early["partial"] == "refit") & (early["policy"] == "fixed")]
    assert (refit_fixed["saving"] == "real").all()
    laya = early[(early["policy"] == "attribution") & (early["method"] == "laya")]
    assert laya["signal_needs_all_layers"].all()
    static = early[(early["policy"] == "attribution") & (early["method"] == "static")]
    assert not static["signal_needs_all_layers"].any()
    # a deeper fixed exit never has a smaller mean depth, and the oracle exits no later than the full depth
    assert (oracle["mean_depth"] <= L).all()


def test_early_exit_oracle_depth_matches_the_partial_predictions(recorded, digits, pruned):
    # Independent route: the model's forward with a keep gate on layers 1..d and renormalised weights.
    model = recorded.model
    x = digits["test"].x
    with torch.no_grad():
        preds = [
            model.head(
                model.hidden_states(x), torch.tril(torch.ones(3, 3))[d].expand(len(x), -1), renormalize=True
            ).argmax(-1)
            for d in range(3)
        ]
        full = model(x).argmax(-1)
    preds[-1] = full
    agree = torch.stack([p == full for p in preds], 1)
    depth = (agree.float().argmax(1) + 1).float().mean().item()
    row = pruned.early_exit[(pruned.early_exit["policy"] == "oracle") & (pruned.early_exit["partial"] == "gate-renorm")]
    assert row["mean_depth"].iloc[0] == pytest.approx(depth, abs=2 / len(x))


def test_pruning_summary_and_comparisons(pruned):
    s = pruned.summary
    assert {"accuracy", "refit"} <= set(s["curve"])
    assert ((s["ci_low"] <= s["auc"] + 1e-12) & (s["auc"] <= s["ci_high"] + 1e-12)).all()
    c = pruned.comparisons
    pair = c[
        (c["method_a"] == "laya") & (c["method_b"] == "oracle") & (c["ablation"] == "gate") & (c["curve"] == "accuracy")
    ].iloc[0]

    def get(m):
        rows = s[
            (s["method"] == m) & (s["ranking"] == "dataset") & (s["ablation"] == "gate") & (s["curve"] == "accuracy")
        ]
        return rows["auc"].iloc[0]

    assert pair["auc_difference"] == pytest.approx(get("laya") - get("oracle"))
    assert isinstance(c, pd.DataFrame) and len(c) > 0
