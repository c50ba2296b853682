"""Network-scope work in row chunks within --max-memory: the same results as one call per batch, and a budget
that cannot hold one chunk refused before any work."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

import laya_eval.engine.memory_budget as budget
from laya_eval.engine.evaluation import EvalOptions, evaluate_ablations
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
    # one row of a (256, 64, 64) float32 map: 256 * 64 * 64 * 4 = 4 MiB; IG keeps 8x, replacements 3x
    hidden = [torch.zeros(2, 256, 64, 64)]
    assert ig_rows(hidden, 4096) == 4096 // (8 * 4)  # 4096 MiB / 32 MiB per IG row = 128 rows
    assert replacement_rows(hidden, 1200) == 1200 // 12
    with pytest.raises(ConfigError, match=r"^--max-memory 100 MB cannot hold network-scope gradients through the "
                                          r"backbone for this model: 16 rows need about 512 MB; raise --max-memory"):
        check_network_budget(hidden, 100, gradients=True)
    check_network_budget(hidden, 512, gradients=True)


@pytest.mark.parametrize("methods", [("ig", "grad_x_act", "gradcam"), ("contribution",)])
def test_chunked_network_scope_equals_one_call_per_batch(digits_models, methods):
    model = digits_models["laya"]
    kwargs = dict(limit=40, batch_size=40, scope="network", ablation="zero", bootstrap=0, n_steps=4, methods=methods)
    whole = evaluate_ablations(model, "digits", ["zero", "mean"], options=EvalOptions(**kwargs))
    # 16-row chunks for every IG call and gradient pass
    chunked = evaluate_ablations(model, "digits", ["zero", "mean"],
                                 options=EvalOptions(**kwargs, max_memory_mb=1, internal_batch_size=16))
    for a in ("zero", "mean"):
        for table in ("layers", "samples", "summary"):
            # other row counts per backbone call round differently in float32: equal up to rounding
            pd.testing.assert_frame_equal(getattr(whole[a], table), getattr(chunked[a], table), check_exact=False,
                                          rtol=1e-5, atol=1e-6)


def test_a_budget_that_cannot_hold_a_chunk_is_refused_before_any_work(digits_models, monkeypatch):
    monkeypatch.setattr(budget, "GRAD_FACTOR", 10**9)
    calls = []
    monkeypatch.setattr(type(digits_models["laya"].head), "removal_logits",
                        lambda *a, **k: calls.append(1))  # any effect computed would be recorded here
    with pytest.raises(ConfigError, match="--max-memory 2048 MB cannot hold network-scope gradients"):
        evaluate_ablations(digits_models["laya"], "digits", ["zero"],
                           options=EvalOptions(limit=20, scope="network", ablation="zero", methods=("ig",)))
    assert not calls
