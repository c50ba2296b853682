"""Answers one can trust, as the engine writes them: paired tests, the null of faithfulness, float64 effects, ties."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from scipy import stats

from laya_eval.engine.evaluation import EvalOptions, evaluate
from laya_eval.engine.removals import leave_one_out_masks, removal_effects
from laya_eval.models.trace import trace

FAST = dict(bootstrap=50, n_steps=8)


@pytest.fixture(scope="module")
def result(digits_checkpoints):
    return evaluate(digits_checkpoints["laya"], options=EvalOptions(limit=150, **FAST))


def test_comparisons_match_scipy_wilcoxon_on_the_samples_table(result):
    smp, cmp = result.samples, result.comparisons
    k = smp["method"].nunique()
    assert k >= 7 and len(cmp) == 2 * (k - 1)  # each method against contribution, two metrics
    assert set(cmp.reference) == {"contribution"} and (cmp.family_size == k - 1).all()
    for row in cmp.sample(8, random_state=0).itertuples():
        column = "spearman" if row.metric == "faithfulness" else "deletion_at_1"
        wide = smp.pivot(index="sample", columns="method", values=column)
        pair = wide[[row.method_a, row.method_b]].dropna()
        d = (pair[row.method_a] - pair[row.method_b]).to_numpy()
        assert row.n == len(d)
        assert row.mean_difference == pytest.approx(d.mean())
        if np.any(d != 0):
            ref = stats.wilcoxon(pair[row.method_a], pair[row.method_b], zero_method="zsplit")
            assert row.p_value == pytest.approx(ref.pvalue, rel=1e-9)
        else:
            assert row.p_value == 1.0
    assert (cmp.p_holm >= cmp.p_value - 1e-15).all() and (cmp.p_holm <= 1).all()


def test_faithfulness_p_value_separates_random_from_contribution(digits_checkpoints):
    ps = []
    for seed in range(20):
        r = evaluate(
            digits_checkpoints["laya"],
            options=EvalOptions(limit=100, methods=("contribution", "random"), seed=seed, bootstrap=0),
        )
        p = dict(zip(r.summary.method, r.summary.faithfulness_p_value))
        assert p["contribution"] < 1e-6
        ps.append(p["random"])
    assert min(ps) > 0.01 and max(ps) > 0.5  # a null p-value: spread over (0, 1), none tiny


def test_effects_are_float64_at_the_head(digits_models, digits):
    model = digits_models["laya"]
    r = evaluate(model, digits["test"], options=EvalOptions(limit=40, methods=("contribution",), bootstrap=0))
    got = r.layers.sort_values(["sample", "layer"]).effect.to_numpy().reshape(40, 3)
    x = digits["test"].x[:40]
    slow = []
    with torch.no_grad():  # reference: every removal by hand with a float64 copy of the head
        hidden = [h.double() for h in model.hidden_states(x)]
        head = copy.deepcopy(model.head).double()
        logits = head(hidden)
        c = logits.argmax(-1)
        p = torch.softmax(logits, -1).gather(1, c[:, None]).squeeze(1)
        for i in range(3):
            keep = torch.ones(3, dtype=torch.float64)
            keep[i] = 0
            pi = torch.softmax(head(hidden, keep), -1).gather(1, c[:, None]).squeeze(1)
            slow.append((p - pi).numpy())
    np.testing.assert_allclose(got, np.stack(slow, 1), rtol=0, atol=1e-12)
    tr = trace(model, x)
    f32 = removal_effects(tr, model, leave_one_out_masks(3)).numpy()
    assert np.abs(f32 - got).max() > 1e-10  # float32 would have been measurably different


def test_a_collapsed_head_is_flagged(digits_models, digits):
    model = copy.deepcopy(digits_models["laya"])
    with torch.no_grad():  # alpha collapses onto layer 3 whatever the input
        model.head.scorer[2].weight.zero_()
        model.head.scorer[2].bias.copy_(torch.tensor([0.0, 0.0, 30.0]))
    r = evaluate(
        model, digits["test"], options=EvalOptions(limit=60, methods=("laya", "static", "contribution"), **FAST)
    )
    assert any("collapsed" in w for w in r.warnings)
    assert r.manifest["warnings"] == r.warnings
    healthy = evaluate(digits_models["concat"], digits["test"], options=EvalOptions(limit=60, **FAST))
    assert not any("collapsed" in w for w in healthy.warnings)


def test_nonfinite_inputs_are_refused_unless_allowed(digits_models, digits):
    from laya_eval.data import Dataset
    from laya_eval.errors import DataError

    x = digits["test"].x[:20].clone()
    x[7, 3] = float("nan")
    data = Dataset(
        x=x,
        y=digits["test"].y[:20],
        class_names=digits["test"].class_names,
        name="digits-nan",
        split="test",
        preprocessing={},
    )
    with pytest.raises(DataError, match="sample 7 holds nan"):
        evaluate(digits_models["laya"], data, options=EvalOptions(methods=("contribution",), bootstrap=0))
    r = evaluate(
        digits_models["laya"], data, options=EvalOptions(methods=("contribution",), bootstrap=0, allow_nonfinite=True)
    )
    assert len(r.samples) == 20
