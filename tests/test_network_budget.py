"""Network-scope work in row chunks within --max-memory: the same results as one call per batch, and a budget
that cannot hold one chunk refused before any work."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest
import torch

import laya_eval.engine.memory_budget as budget
from laya_eval.engine.evaluation import EvalOptions, evaluate
from laya_eval.engine.memory_budget import check_network_budget, ig_rows, replacement_rows, row_chunks
from laya_eval.errors import ConfigError


def test_row_chunks_by_hand():
    # 40 rows in chunks of 16: [0, 16), [16, 40) -- the 8-row tail joins the chunk before it
    assert row_chunks(40, 16) == [slice(0, 16), slice(16, 40)]
    assert row_chunks(48, 16) == [slice(0, 16), slice(16, 32), slice(32, 48)]
    assert row_chunks(10, 16) == [slice(0, 10)]
    assert row_chunks(40, None) == [slice(0, 40)]
    assert row_chunks(40, 3) == [slice(0, 16), slice(16, 40)]  # never below MIN_ROWS


def test_rows_follow_the_budget_by_hand():
    # one row of a (256, 64, 64) float32 map: 256 * 64 * 64 * 4 = 4 MiB; IG keeps 10x, replacements 3x
    hidden = [torch.zeros(2, 256, 64, 64)]
    assert ig_rows(hidden, 4096) == 96  # 4096 MiB / 40 MiB per IG row = 102 rows, down to a multiple of 16
    assert replacement_rows(hidden, 1200) == 96  # 1200 MiB / 12 MiB = 100 rows, down to a multiple of 16
    with pytest.raises(
        ConfigError,
        match=r"^--max-memory 100 MB cannot hold network-scope gradients through the "
        r"backbone for this model: 16 rows need about 640 MB; raise --max-memory",
    ):
        check_network_budget(hidden, 100, gradients=True)
    check_network_budget(hidden, 640, gradients=True)


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
    monkeypatch.setattr(budget, "GRAD_FACTOR", 10**9)
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
    monkeypatch.setattr(budget, "FORWARD_FACTOR", 100)
    chunked = evaluate(model, "digits", options=EvalOptions(**{**kwargs, "ablation": (ablation,)}, max_memory_mb=1))[
        ablation
    ]
    # a row's block outputs are 64 + 32 + 16 float32 = 448 bytes; at 100x that, 1 MiB holds 2**20 // 44800 = 23
    # rows, down to a multiple of 16: the 40-row batch, padded to 48 rows, goes as [0, 16), [16, 32), [32, 48)
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
    net = nn.Sequential(nn.Unflatten(1, (1, 8, 8)), nn.Conv2d(1, 32, 3, padding=1), nn.Conv2d(32, 32, 3, padding=1))
    backbone = ModuleBackbone(net, ["1", "2"], layer_dims=[32, 32], pool="avg")
    model = LayeredModel(
        backbone,
        LayaHead([32, 32], 10, d_star=8, scorer_hidden=8),
        ModelInfo(num_classes=10, class_names=tuple("0123456789"), input_shape=(64,)),
    )
    # each block outputs a (32, 8, 8) float32 map: 2 * 32 * 64 * 4 bytes = 16 KiB per input; gradients keep 8x
    # that for 16 rows: 16 * 10 * 16 KiB = 2.5 MiB, about 3 MB. (The pooled states alone, 2 * 32 * 4 bytes, would
    # fit in 1 MB.)
    with pytest.raises(ConfigError, match="16 rows need about 3 MB"):
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
    # a row's block outputs are 64 + 32 + 16 float32 = 448 bytes; at 100x that, 1 MiB holds 2**20 // 44800 = 23
    # gradient rows, down to a multiple of 16: batches of 16 rows, not the 48 asked for
    monkeypatch.setattr(budget, "GRAD_FACTOR", 100)
    cut = evaluate(model, "digits", options=EvalOptions(**{**kwargs, "ablation": ("zero",)}, batch_size=48))["zero"]
    assert rows == [16, 16, 16]
    for table in ("layers", "samples", "summary"):
        pd.testing.assert_frame_equal(getattr(small, table), getattr(cut, table))
