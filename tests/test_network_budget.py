"""Network-scope work in row chunks within --max-memory: the same results as one call per batch, and a budget
that cannot hold one chunk refused before any work."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest
import torch

import laya_eval.engine.memory_budget as budget
from laya_eval.engine.evaluation import EvalOptions, evaluate
from laya_eval.engine.memory_budget import (
    RowCost,
    gradient_batch_rows,
    check_network_budget,
    ig_rows,
    replacement_rows,
    row_chunks,
    row_cost,
)
from laya_eval.errors import ConfigError


def test_row_chunks_by_hand():
    # 40 rows in chunks of 16: [0, 16), [16, 40) -- the 8-row tail joins the chunk before it
    assert row_chunks(40, 16) == [slice(0, 16), slice(16, 40)]
    assert row_chunks(48, 16) == [slice(0, 16), slice(16, 32), slice(32, 48)]
    assert row_chunks(10, 16) == [slice(0, 10)]
    assert row_chunks(40, None) == [slice(0, 40)]
    assert row_chunks(40, 3) == [slice(0, 16), slice(16, 40)]  # never below MIN_ROWS


def test_rows_follow_the_budget_by_hand():
    mib = 1 << 20
    # per row: block outputs 4 MiB, kept outputs and inputs 8 MiB, the largest block's inner maps 8 MiB, the graph
    # 28 MiB: a replacement row holds 4 + 8 = 12 MiB, a gradient row 28 + 4 + 8 = 40 MiB
    cost = RowCost(outputs=4 * mib, kept=8 * mib, block=8 * mib, graph=28 * mib)
    assert ig_rows(cost, 4096) == 96  # 4096 MiB / 40 MiB per IG row = 102 rows, down to a multiple of 16
    assert replacement_rows(cost, 1200) == 96  # 1200 MiB / 12 MiB = 100 rows, down to a multiple of 16
    assert replacement_rows(cost, 1200, held=600 * mib) == 48  # (1200 - 600) MiB / 12 MiB = 50 rows
    assert ig_rows(cost, 4096, held=4000 * mib) == 16  # 96 MiB / 40 MiB = 2 rows: never below MIN_ROWS
    assert gradient_batch_rows(cost, 4096) == 80  # 4096 MiB / (8 + 40) MiB per batch row = 85 rows
    with pytest.raises(
        ConfigError,
        match=r"^--max-memory 100 MB cannot hold network-scope gradients through the "
        r"backbone for this model: 16 rows need about 768 MB; raise --max-memory",  # 16 x (8 + 40) MiB
    ):
        check_network_budget(cost, 100, gradients=True)
    check_network_budget(cost, 768, gradients=True)
    check_network_budget(cost, 320, gradients=False)  # 16 x (8 + 12) MiB


def _expanding_cnn(c: int = 16):
    """digits (64 pixels) as a 1 x 8 x 8 image -> 1x1 stem convolution to ``c`` channels -> three blocks, each a 1x1
    convolution to 4c channels -> Tanh -> a 1x1 convolution back to c (the shape of an inverted-residual block)."""
    from torch import nn

    from laya_eval import LayeredModel, ModelInfo, ModuleBackbone
    from laya_eval.models.heads import LayaHead

    torch.manual_seed(0)

    def block():
        return nn.Sequential(nn.Conv2d(c, 4 * c, 1), nn.Tanh(), nn.Conv2d(4 * c, c, 1))

    net = nn.Sequential(nn.Unflatten(1, (1, 8, 8)), nn.Conv2d(1, c, 1), block(), block(), block())
    backbone = ModuleBackbone(net, ["2", "3", "4"], layer_dims=[c] * 3, pool="avg")
    head = LayaHead([c] * 3, 10, d_star=8, scorer_hidden=8)
    info = ModelInfo(num_classes=10, class_names=tuple("0123456789"), input_shape=(64,))
    return LayeredModel(backbone, head, info).eval()


# What autograd saves in _expanding_cnn, per row (float32; torch's derivatives: a convolution saves its input and
# weight, Tanh its result; weights and biases are the model's own and not counted):
#   the stem saves the input row (64 values, 256 B); block i's first convolution saves the block's input (a 16 x 8 x 8
#   map, 4096 B), Tanh its 64 x 8 x 8 result (16384 B), which the second convolution saves again (one storage).
#   block 0: 256 + 4096 + 16384 = 20736 B (the stem's input counts with the first block); blocks 1, 2: 20480 B each;
#   graph 20736 + 2 x 20480 = 61696 B; largest block 20736 B.
#   outputs: three 16 x 8 x 8 maps, 12288 B; kept: those and the blocks' inputs (block 0's: the stem's output, 4096 B;
#   the others' are the outputs before them), 16384 B.
EXPANDING = RowCost(outputs=12288, kept=16384, block=20736, graph=61696)


def test_row_cost_counts_the_maps_inside_the_blocks_by_hand(digits):
    model = _expanding_cnn()
    x = digits["test"].x[:5]
    assert row_cost(model, x) == EXPANDING
    # a replacement row 12288 + 20736 = 33024 B, a gradient row 61696 + 12288 + 20736 = 94720 B: the block outputs
    # alone (12288 B) would let far more rows in
    assert replacement_rows(row_cost(model, x), 4) == 4 * 2**20 // 33024 // 16 * 16 == 112
    assert ig_rows(row_cost(model, x), 4) == 4 * 2**20 // 94720 // 16 * 16 == 32
    # the model's parameters (what autograd also saves for the convolutions) are not counted, trainable or not
    model.requires_grad_(False)
    assert row_cost(model, x) == EXPANDING


def test_row_cost_of_a_tensor_row_is_measured_once_per_model_and_shape(digits):
    """Every batch of a network-scope run asks for the row cost (replacement passes, IG, gradients): the backbone
    pass that measures it runs once per model and row shape (counted by a hook on the stem); another model is
    measured on its own."""
    model = _expanding_cnn()
    calls = []
    model.backbone.module[1].register_forward_hook(lambda m, a, out: calls.append(1))
    x = digits["test"].x
    assert row_cost(model, x[:5]) == row_cost(model, x[5:9]) == EXPANDING
    assert len(calls) == 1
    wide = _expanding_cnn(c=8)  # another model: measured on its own
    assert row_cost(wide, x[:5]) != EXPANDING and len(calls) == 1


def test_network_gradient_chunks_leave_room_for_what_the_batch_holds(digits, monkeypatch):
    """IG and the network gradients run in chunks of the budget less the batch's kept block outputs and inputs (and,
    for the gradients, every block's output and gradient gathered over the chunks)."""
    import captum.attr

    from laya_eval import LayeredModel

    model = _expanding_cnn()
    grad_rows, ig_calls = [], []
    inner = LayeredModel.block_inputs_and_outputs

    def recording(self, x, *, on_graph=False):
        if on_graph:
            grad_rows.append(x.shape[0])
        return inner(self, x, on_graph=on_graph)

    attribute = captum.attr.IntegratedGradients.attribute

    def ig_recording(self, *args, **kwargs):
        ig_calls.append(kwargs["internal_batch_size"])
        return attribute(self, *args, **kwargs)

    monkeypatch.setattr(LayeredModel, "block_inputs_and_outputs", recording)
    monkeypatch.setattr(captum.attr.IntegratedGradients, "attribute", ig_recording)
    options = EvalOptions(
        limit=32, scope="network", bootstrap=0, n_steps=2, methods=("ig", "grad_x_act"), max_memory_mb=4
    )
    evaluate(model, "digits", options=dataclasses.replace(options, ablation=("zero",)))
    # a batch row holds its kept states and one gradient row: 4 MiB / (16384 + 94720) B = 37 rows -> batches of 32;
    # IG: (4 MiB - 32 x 16384 B kept) / 94720 B = 38 rows -> 32; the gradient pass also gathers 32 x 2 x 12288 B of
    # outputs and gradients: (4 MiB - 524288 - 786432) / 94720 = 30 rows -> chunks of 16
    assert set(ig_calls) == {32}
    assert grad_rows == [16, 16]


@pytest.mark.parametrize("methods", [("ig", "grad_x_act", "gradcam"), ("contribution",)])
def test_chunked_network_scope_equals_one_call_per_batch(digits_models, methods):
    model = digits_models["laya"]
    kwargs = dict(limit=40, batch_size=40, scope="network", ablation="zero", bootstrap=0, n_steps=4, methods=methods)
    whole = evaluate(model, "digits", options=EvalOptions(**{**kwargs, "ablation": ("zero", "mean")}))
    # 16-row chunks for every IG call and gradient pass
    chunked = evaluate(
        model,
        "digits",
        options=EvalOptions(**{**kwargs, "ablation": ("zero", "mean")}, max_memory_mb=1, internal_batch_size=16),
    )
    for a in ("zero", "mean"):
        for table in ("layers", "samples", "summary"):
            # other row counts per backbone call round differently in float32: equal up to rounding
            pd.testing.assert_frame_equal(
                getattr(whole[a], table), getattr(chunked[a], table), check_exact=False, rtol=1e-5, atol=1e-6
            )


def test_a_budget_that_cannot_hold_a_chunk_is_refused_before_any_work(digits_models, monkeypatch):
    monkeypatch.setattr(budget.RowCost, "backward", property(lambda self: 10**15))
    calls = []
    monkeypatch.setattr(
        type(digits_models["laya"].head), "removal_logits", lambda *a, **k: calls.append(1)
    )  # any effect computed would be recorded here
    with pytest.raises(ConfigError, match="--max-memory 2048 MB cannot hold network-scope gradients"):
        evaluate(
            digits_models["laya"],
            "digits",
            options=dataclasses.replace(
                EvalOptions(limit=20, scope="network", ablation="zero", methods=("ig",)), ablation=("zero",)
            ),
        )
    assert not calls


def _drawn_replacement_rows(model, monkeypatch) -> list[int]:
    """Rows of every backbone pass that puts per-sample draws in place of a block output."""
    from tests.test_network_passes import backbone_rows

    return backbone_rows(model, monkeypatch, "_per_sample_replacer")


@pytest.mark.parametrize("ablation", ["resample", "noise"])
def test_drawn_network_removals_run_in_row_chunks(digits_models, monkeypatch, ablation):
    model = digits_models["laya"]
    kwargs = dict(
        limit=40, batch_size=40, scope="network", ablation=ablation, bootstrap=0, methods=("contribution",), draws=2
    )
    whole = evaluate(model, "digits", options=EvalOptions(**{**kwargs, "ablation": (ablation,)}))[ablation]
    seen = _drawn_replacement_rows(model, monkeypatch)
    monkeypatch.setattr(budget.RowCost, "forward", property(lambda self: 50_000))
    chunked = evaluate(model, "digits", options=EvalOptions(**{**kwargs, "ablation": (ablation,)}, max_memory_mb=1))[
        ablation
    ]
    # at 50,000 bytes a replacement row, 1 MiB less the batch's kept states (48 x 704 bytes) holds 20 rows, down to
    # a multiple of 16: the 40-row batch, padded to 48 rows, goes as [0, 16), [16, 32), [32, 48)
    assert seen and set(seen) == {16}
    for table in ("layers", "samples", "summary"):
        pd.testing.assert_frame_equal(
            getattr(whole, table), getattr(chunked, table), check_exact=False, rtol=1e-5, atol=1e-6
        )


def test_the_budget_of_a_pooled_backbone_counts_its_full_block_outputs():
    from torch import nn

    from laya_eval import LayeredModel, ModelInfo, ModuleBackbone
    from laya_eval.models.heads import LayaHead

    torch.manual_seed(0)
    net = nn.Sequential(nn.Unflatten(1, (1, 8, 8)), nn.Conv2d(1, 64, 3, padding=1), nn.Conv2d(64, 64, 3, padding=1))
    backbone = ModuleBackbone(net, ["1", "2"], layer_dims=[64, 64], pool="avg")
    model = LayeredModel(
        backbone,
        LayaHead([64, 64], 10, d_star=8, scorer_hidden=8),
        ModelInfo(num_classes=10, class_names=tuple("0123456789"), input_shape=(64,)),
    )
    # each block outputs a (64, 8, 8) float32 map, 16384 B per input. Per row: the graph is what the convolutions
    # save, their inputs (the input row, 256 B, and block 1's output); the largest block's share is 16384 B. A
    # gradient row: graph 16640 + outputs 32768 + one block 16384 = 65792 B; kept beside it: the outputs and block 1's
    # input (the row), 33024 B. 16 rows: 16 x 98816 B = 1.5 MiB, about 2 MB. (The pooled states alone, 2 * 64 * 4
    # bytes, would fit in 1 MB.)
    with pytest.raises(ConfigError, match="16 rows need about 2 MB"):
        evaluate(
            model,
            "digits",
            options=dataclasses.replace(
                EvalOptions(limit=20, scope="network", ablation="zero", methods=("grad_x_act",), max_memory_mb=1),
                ablation=("zero",),
            ),
        )


def test_a_batch_with_network_gradients_holds_no_more_rows_than_one_gradient_call(digits_models, monkeypatch):
    """The methods read every block's output and its gradient for the whole batch: at network scope a batch is cut
    to the rows of one gradient call within the budget, and gives what that batch size gives."""
    import laya_eval.engine.evaluation as evaluation

    model = digits_models["laya"]
    kwargs = dict(
        limit=48,
        scope="network",
        ablation="zero",
        bootstrap=0,
        methods=("grad_x_act", "gradcam", "laya"),
        max_memory_mb=1,
    )
    small = evaluate(model, "digits", options=EvalOptions(**{**kwargs, "ablation": ("zero",)}, batch_size=16))["zero"]
    rows, gradients = [], evaluation.gradient_pass

    def recording(tr, *args, **kw):
        rows.append(tr.n_samples)
        return gradients(tr, *args, **kw)

    monkeypatch.setattr(evaluation, "gradient_pass", recording)
    # at 50,000 bytes a gradient row, 1 MiB holds 2**20 // (50000 + kept states) = 20 batch rows, down to a
    # multiple of 16: batches of 16 rows, not the 48 asked for
    monkeypatch.setattr(budget.RowCost, "backward", property(lambda self: 50_000))
    cut = evaluate(model, "digits", options=EvalOptions(**{**kwargs, "ablation": ("zero",)}, batch_size=48))["zero"]
    assert rows == [16, 16, 16]
    for table in ("layers", "samples", "summary"):
        pd.testing.assert_frame_equal(getattr(small, table), getattr(cut, table))
