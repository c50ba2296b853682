"""evaluate(): tables, controls, invariants and files."""

from __future__ import annotations

import dataclasses
import json
import math
import sys

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import stats

from laya_eval.data import Dataset
from laya_eval.errors import ConfigError, DataError
from laya_eval.engine.evaluation import SUMMARY_COLUMNS, EvalOptions, evaluate
from laya_eval.engine.outcome import write_evaluation
from laya_eval.training.trainer import build_model

FAST = dict(bootstrap=100, n_steps=8)


@pytest.fixture(scope="module")
def laya_result(digits_checkpoints):
    return evaluate(digits_checkpoints["laya"], options=EvalOptions(limit=120, batch_size=32, **FAST))


def test_tables_have_the_documented_columns(laya_result):
    r = laya_result
    assert list(r.layers.columns) == ["sample", "method", "layer", "attribution", "effect"]
    assert list(r.samples.columns) == [
        "sample",
        "label",
        "pred",
        "confidence",
        "method",
        "spearman",
        "deletion_at_1",
        "top1_hit",
        "n_tied_effects",
    ]
    assert list(r.summary.columns) == SUMMARY_COLUMNS + ["deletion_at_2", "deletion_at_3"]
    assert list(r.summary.method) == [
        "laya",
        "static",
        "contribution",
        "ig",
        "gradcam",
        "grad_x_act",
        "random",
        "block_influence",
        "angular_distance",
        "alpha_norm",
    ]
    assert len(r.layers) == 120 * 10 * 3 and len(r.samples) == 120 * 10
    assert sorted(r.layers.layer.unique()) == [1, 2, 3]
    assert (r.summary.n == 120).all()


def _tied_by_hand(e, rtol=1e-4):
    """The documented tie rule, one sample at a time: walk the sorted effects, a value within rtol x max|e|
    of its sorted neighbour joins that neighbour's group, every group is replaced by its mean."""
    tol = rtol * max(abs(v) for v in e)
    order = sorted(range(len(e)), key=lambda i: e[i])
    groups, out = [[order[0]]], list(e)
    for prev, cur in zip(order, order[1:]):
        (groups[-1].append(cur) if e[cur] - e[prev] <= tol else groups.append([cur]))
    for g in groups:
        for i in g:
            out[i] = sum(e[j] for j in g) / len(g)
    return np.array(out), sum(len(g) for g in groups if len(g) > 1)


def test_per_sample_numbers_follow_from_the_layer_table(laya_result):
    """spearman / deletion@1 / top1_hit recomputed from layers.csv with scipy and pandas (ties by hand)."""
    r = laya_result
    for method in ("laya", "ig", "random"):
        lay = r.layers[r.layers.method == method].sort_values(["sample", "layer"])
        a = lay.attribution.to_numpy().reshape(-1, 3)
        raw = lay.effect.to_numpy().reshape(-1, 3)
        smp = r.samples[r.samples.method == method].sort_values("sample")
        for i in range(0, 120, 7):
            e_i, n_tied = _tied_by_hand(raw[i])
            assert smp.n_tied_effects.iloc[i] == n_tied
            e = {i: e_i}
            rho = stats.spearmanr(a[i], e[i]).statistic
            if np.isnan(rho):
                assert np.isnan(smp.spearman.iloc[i])
            else:
                assert smp.spearman.iloc[i] == pytest.approx(rho)
            top = int(np.argmax(a[i]))  # numpy's argmax takes the first maximum: lowest layer index
            assert smp.deletion_at_1.iloc[i] == pytest.approx(raw[i, top])
            assert bool(smp.top1_hit.iloc[i]) == (top == int(np.argmax(e[i])))


def test_summary_is_the_mean_of_defined_samples(laya_result):
    r = laya_result
    for row in r.summary.itertuples():
        smp = r.samples[r.samples.method == row.method]
        assert row.n_undefined == int(smp.spearman.isna().sum())
        assert row.n_effect_ties == int((smp.n_tied_effects > 0).sum())
        assert row.faithfulness == pytest.approx(smp.spearman.dropna().mean())
        assert row.faithfulness_ci_low <= row.faithfulness <= row.faithfulness_ci_high
        assert row.deletion_at_1 == pytest.approx(smp.deletion_at_1.mean())
        assert row.top1_hit_rate == pytest.approx(smp.top1_hit.mean())
        assert row.aopc == pytest.approx(np.mean([row.deletion_at_1, row.deletion_at_2, row.deletion_at_3]))
    assert not r.summary[["faithfulness", "deletion_at_1", "aopc"]].isna().any().any()


def test_deletion_at_L_is_the_same_for_every_method(laya_result):
    # removing all L layers removes the same set whatever the ranking
    assert r_spread(laya_result.summary.deletion_at_3) < 1e-9


def r_spread(series):
    return float(series.max() - series.min())


def test_static_is_the_mean_alpha(laya_result):
    lay = laya_result.layers
    alpha = lay[lay.method == "laya"].groupby("layer").attribution.mean()
    static = lay[lay.method == "static"].groupby("layer").attribution
    np.testing.assert_allclose(static.min(), alpha, atol=1e-7)
    np.testing.assert_allclose(static.max(), alpha, atol=1e-7)


def test_manifest(laya_result, digits_checkpoints):
    import hashlib

    m = laya_result.manifest
    path = digits_checkpoints["laya"]
    assert m["checkpoint"]["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert m["n_samples"] == 120 and m["seed"] == 0 and m["options"]["ablation"] == "gate"
    assert set(m["versions"]) >= {"laya_eval", "torch", "captum", "numpy", "scipy", "pandas", "python"}
    assert m["metrics"]["faithfulness"]["higher_is_better"] is True
    assert m["metrics"]["faithfulness"]["lower_bound"] == -1.0
    assert m["diagnostics"]["ig"]["mean_abs"] < 1e-3  # IG completeness delta
    json.dumps(m)


def test_batch_size_does_not_change_results(digits_checkpoints):
    opts = dict(limit=50, methods=("laya", "static", "ig", "random"), **FAST)
    a = evaluate(digits_checkpoints["laya"], options=EvalOptions(batch_size=7, **opts))
    b = evaluate(digits_checkpoints["laya"], options=EvalOptions(batch_size=50, **opts))
    pd.testing.assert_frame_equal(a.layers, b.layers, atol=1e-6, rtol=0)
    pd.testing.assert_frame_equal(a.summary, b.summary, atol=1e-6, rtol=0)


@pytest.mark.parametrize("ablation", ["gate-renorm", "zero", "mean"])
def test_static_under_other_ablations_matches_deferred_path(digits_checkpoints, ablation):
    """static needs the dataset-mean alpha before deletion@k: a pre-pass computes it (zero/mean) — check
    that its deletion@k equals removing the layers ranked by the mean alpha, with ranks worked out here."""
    r = evaluate(
        digits_checkpoints["laya"], options=EvalOptions(limit=40, methods=("static", "laya"), ablation=ablation, **FAST)
    )
    lay = r.layers[r.layers.method == "static"]
    mean_alpha = r.layers[r.layers.method == "laya"].groupby("layer").attribution.mean().to_numpy()
    np.testing.assert_allclose(lay.groupby("layer").attribution.mean().to_numpy(), mean_alpha, atol=1e-7)
    top = int(np.argmax(mean_alpha)) + 1
    eff = lay[lay.layer == top].sort_values("sample").effect.to_numpy()
    np.testing.assert_allclose(r.samples[r.samples.method == "static"].deletion_at_1.to_numpy(), eff, atol=1e-7)


def test_random_control_is_near_zero(digits_models, digits):
    """2,000 inputs: the seeded random method has faithfulness within 0.05 of 0."""
    g = torch.Generator().manual_seed(0)
    base = digits["test"].x
    x = (base[torch.randint(len(base), (2000,), generator=g)] + 0.05 * torch.randn(2000, 64, generator=g)).clamp(0, 1)
    data = Dataset(
        x=x,
        y=torch.zeros(2000, dtype=torch.long),
        class_names=digits["test"].class_names,
        name="digits-jitter",
        split="test",
        preprocessing={},
    )
    r = evaluate(digits_models["laya"], data, options=EvalOptions(methods=("random",), bootstrap=200, seed=11))
    assert abs(float(r.summary.faithfulness.iloc[0])) < 0.05


def test_lastlayer_control(digits_checkpoints):
    r = evaluate(digits_checkpoints["lastlayer"], options=EvalOptions(limit=60, methods=("contribution",), **FAST))
    eff = r.layers.pivot(index="sample", columns="layer", values="effect")
    assert (eff[[1, 2]] == 0).all().all() and (eff[3] != 0).all()
    assert "skipped laya: it needs a LAYA head" not in " ".join(r.notes)  # not requested, so no note


def test_inapplicable_methods_are_skipped_with_a_note(digits_checkpoints):
    r = evaluate(digits_checkpoints["concat"], options=EvalOptions(limit=20, methods=("laya", "contribution"), **FAST))
    assert list(r.summary.method) == ["contribution"]
    assert r.notes == ["skipped laya: it needs a LAYA head; this model has a concat head."]


def test_same_seed_same_bytes(digits_checkpoints, tmp_path):
    outs = []
    for k in range(2):
        r = evaluate(digits_checkpoints["scalarmix"], options=EvalOptions(limit=30, seed=4, **FAST))
        write_evaluation(r, tmp_path / str(k))
        outs.append({p.name: p.read_bytes() for p in sorted((tmp_path / str(k)).iterdir())})
    assert outs[0] == outs[1]
    assert sorted(outs[0]) == ["comparisons.csv", "layers.csv", "manifest.json", "samples.csv", "summary.csv"]


def test_interrupted_write_leaves_nothing_that_looks_complete(digits_checkpoints, tmp_path, monkeypatch):
    r = evaluate(digits_checkpoints["concat"], options=EvalOptions(limit=10, **FAST))
    old = evaluate(digits_checkpoints["concat"], options=EvalOptions(limit=12, **FAST))
    write_evaluation(old, tmp_path / "out")
    before = {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()}
    import laya_eval.output.files as fileio

    calls = []

    def flaky(fd):
        calls.append(fd)
        if len(calls) == 2:  # the second file of the new set
            raise KeyboardInterrupt

    monkeypatch.setattr(fileio.os, "fsync", flaky)
    with pytest.raises(KeyboardInterrupt):
        write_evaluation(r, tmp_path / "out")
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == before  # nothing already written is lost
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # and no half-written set is left beside it


def test_bad_input(digits_checkpoints, digits):
    with pytest.raises(ConfigError, match="limit 5000 is larger than the 360 samples of 'digits'"):
        evaluate(digits_checkpoints["laya"], options=EvalOptions(limit=5000))
    one_layer = build_model("mlp", "laya", digits["train"], backbone_kwargs={"widths": [8]})
    with pytest.raises(ConfigError, match="single hidden layer: faithfulness .* is undefined"):
        evaluate(one_layer, digits["test"])
    no_dataset = build_model("mlp", "concat", digits["train"])
    no_dataset.info.dataset = None
    with pytest.raises(DataError, match="records no dataset; name one with --data"):
        evaluate(no_dataset)
    wrong = Dataset(
        x=torch.zeros(4, 10),
        y=torch.zeros(4, dtype=torch.long),
        class_names=("a", "b"),
        name="npz:x.npz",
        split="test",
        preprocessing={},
    )
    with pytest.raises(DataError, match=r"has samples of shape \(10,\); the model expects \(64,\)"):
        evaluate(digits_checkpoints["laya"], wrong)
    with pytest.raises(ConfigError, match="no CUDA GPU is available"):
        if torch.cuda.is_available():
            pytest.skip("a GPU is present")
        evaluate(digits_checkpoints["laya"], options=EvalOptions(device="cuda"))


def test_network_scope_runs_end_to_end(digits_checkpoints):
    r = evaluate(digits_checkpoints["laya"], options=EvalOptions(limit=20, scope="network", ablation="mean", **FAST))
    assert list(r.summary.method)[:3] == ["laya", "static", "contribution"]
    assert not math.isnan(float(r.summary.faithfulness.iloc[0]))


@pytest.mark.parametrize(
    "head, scope, ablations",
    [
        ("laya", "head", ("gate", "gate-renorm", "zero", "mean")),
        ("scalarmix", "head", ("gate", "gate-renorm")),
        ("laya", "network", ("zero", "mean")),
    ],
)
def test_several_ablations_equal_one_evaluate_per_ablation(digits_checkpoints, head, scope, ablations):
    """The oracle is evaluate() called once per ablation (itself checked against scipy, Captum and slow loops)."""
    opts = EvalOptions(limit=40, batch_size=16, scope=scope, ablation=ablations[0], **FAST)
    many = evaluate(digits_checkpoints[head], options=dataclasses.replace(opts, ablation=tuple(ablations)))
    assert list(many) == list(ablations)
    first = evaluate(digits_checkpoints[head], options=opts)
    for a in ablations:
        one = evaluate(digits_checkpoints[head], options=dataclasses.replace(opts, ablation=a))
        # Every table equals the single run's, IG included: at network scope IG starts from each ablation's own
        # removed state, exactly as a run of that ablation alone does.
        for table in ("layers", "samples", "summary"):
            pd.testing.assert_frame_equal(getattr(many[a], table), getattr(one, table), atol=1e-6, rtol=0)
        ig = many[a].layers[many[a].layers.method == "ig"].attribution.to_numpy()
        first_ig = first.layers[first.layers.method == "ig"].attribution.to_numpy()
        if scope == "head" or a == ablations[0]:  # head scope: one zero baseline for every ablation
            np.testing.assert_allclose(ig, first_ig, atol=1e-6)
        else:  # zero and mean put different states in: their IG differ
            assert np.abs(ig - first_ig).max() > 1e-3
        assert many[a].manifest["options"] == one.manifest["options"] and many[a].notes == one.notes
        assert (many[a].summary.ablation == a).all()
    # the ablations really differ: leave-one-layer-out effects are not all the same
    effects = [many[a].layers.effect.to_numpy() for a in ablations]
    assert not all(np.allclose(effects[0], e) for e in effects[1:])


def test_several_ablations_compute_each_attribution_once(digits_checkpoints, monkeypatch):
    from laya_eval.engine import methods as attribution

    calls = []
    ig = attribution.METHODS["ig"]

    def counting(*args, **kwargs):
        calls.append(1)
        return ig.fn(*args, **kwargs)

    monkeypatch.setitem(attribution.METHODS, "ig", dataclasses.replace(ig, fn=counting))
    opts = EvalOptions(limit=40, batch_size=20, methods=("ig",), **FAST)
    evaluate(digits_checkpoints["laya"], options=dataclasses.replace(opts, ablation=("gate", "zero", "mean")))
    assert len(calls) == 2  # one call per batch of 20, not one per batch and ablation (6)


def test_bad_ablation_lists_are_refused(digits_checkpoints):
    with pytest.raises(
        ConfigError,
        match=r"ablation must be one of \{gate, gate-renorm, zero, mean, resample, noise, skip, mean-update, resample-update, noise-update\}; got 'bogus'",
    ):
        evaluate(digits_checkpoints["laya"], options=EvalOptions(ablation=("gate", "bogus")))
    with pytest.raises(ConfigError, match=r"EvalOptions.ablation must be a non-empty sequence of names; got \(\)"):
        evaluate(digits_checkpoints["laya"], options=EvalOptions(ablation=()))
    with pytest.raises(ConfigError, match="network"):
        evaluate(
            digits_checkpoints["laya"],
            options=dataclasses.replace(EvalOptions(scope="network", ablation="zero"), ablation=("zero", "gate")),
        )


def test_the_manifest_names_captums_version_without_importing_captum(monkeypatch):
    """A run without gradient methods never imports Captum; its manifest still records the installed version."""
    import captum

    from laya_eval.output.origin import provenance

    monkeypatch.delitem(sys.modules, "captum")
    assert provenance()["versions"]["captum"] == captum.__version__
    assert "captum" not in sys.modules


def test_without_paired_tests_only_the_comparisons_are_left_out(digits_checkpoints):
    """``paired_tests=False`` (what ``meta`` asks for) empties ``comparisons`` and changes no other table."""
    options = EvalOptions(limit=40, bootstrap=100, methods=("laya", "contribution", "random"))
    full = evaluate(digits_checkpoints["laya"], options=dataclasses.replace(options, ablation=("gate", "zero")))
    lean = evaluate(
        digits_checkpoints["laya"], options=dataclasses.replace(options, ablation=("gate", "zero")), paired_tests=False
    )
    for ablation in ("gate", "zero"):
        assert len(full[ablation].comparisons) == 4  # 2 methods against the reference (contribution) x 2 metrics
        assert lean[ablation].comparisons.empty
        assert list(lean[ablation].comparisons.columns) == list(full[ablation].comparisons.columns)
        for table in ("layers", "samples", "summary"):
            pd.testing.assert_frame_equal(getattr(lean[ablation], table), getattr(full[ablation], table))
