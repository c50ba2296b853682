"""Planted ground truth: each family plants what it says (checked by direct computation on the model, not through
the engine), the scores against the truth match independent oracles, and ``laya-eval meta`` runs end to end."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.stats import spearmanr
from sklearn.metrics import roc_auc_score

from laya_eval.data import load_dataset
from laya_eval.planted.families import build_planted, layer_plan
from laya_eval.planted.scoring import metric_verdicts, planted_auroc, planted_rank_correlation
from tests.cli_helpers import assert_one_line_error, run


@pytest.fixture(scope="module")
def splits():
    return load_dataset("digits", "train"), load_dataset("digits", "test").subset(slice(0, 64))


def _head_inputs(pm, x):
    """The planted model in float64 (like the engine's effects) and its hidden states on ``x``."""
    model = pm.model.double()
    with torch.no_grad():
        hidden = [h.double() for h in model.backbone(x.double())]
    return model.head, hidden


def _removed(head, hidden, drop, how, means):
    """Logits with the layers in ``drop`` removed by hand: gate (keep 0), gate-renorm, zero or mean state."""
    with torch.no_grad():
        if how in ("gate", "gate-renorm"):
            keep = torch.ones(len(hidden), dtype=torch.float64)
            keep[list(drop)] = 0
            return head(hidden, keep.expand(hidden[0].shape[0], -1), renormalize=how == "gate-renorm")
        fill = [torch.zeros_like(h) if how == "zero" else means[i].expand_as(h) for i, h in enumerate(hidden)]
        return head([fill[i] if i in drop else h for i, h in enumerate(hidden)])


def _probs(logits):
    return torch.softmax(logits, -1)


def _setup(family, seed, splits):
    train, test = splits
    pm = build_planted(family, seed, train)
    head, hidden = _head_inputs(pm, test.x)
    means = [h.mean(0) for h in hidden]
    with torch.no_grad():
        base = head(hidden)
    return pm, head, hidden, means, base


@pytest.mark.parametrize("seed", [0, 1])
def test_subset_unread_layers_change_no_logit_and_read_layers_do(splits, seed):
    pm, head, hidden, means, base = _setup("subset", seed, splits)
    r = pm.relevance
    assert r.sum() == 3 and set(np.unique(r)) == {0.0, 1.0}
    for i in range(6):
        for how in ("gate", "gate-renorm", "zero", "mean"):
            out = _removed(head, hidden, {i}, how, means)
            if r[i] == 0:  # weight exactly 0: the layer's term is 0 whatever its state
                assert torch.equal(out, base), (i, how)
            else:
                assert (out - base).abs().max() > 1e-3, (i, how)


def test_graded_mean_effect_follows_the_planted_weights(splits):
    pm, head, hidden, means, base = _setup("graded", 0, splits)
    r = pm.relevance
    assert sorted(r.tolist()) == [0, 0, 1, 2, 4, 8]
    c = base.argmax(1, keepdim=True)
    p = _probs(base).gather(1, c)
    effect = [float((p - _probs(_removed(head, hidden, {i}, "gate", means)).gather(1, c)).mean()) for i in range(6)]
    for i in np.flatnonzero(r == 0):
        assert effect[i] == 0.0
    read = np.flatnonzero(r > 0)
    assert list(read[np.argsort(r[read])]) == list(read[np.argsort(np.array(effect)[read])])


def test_noise_layers_shift_every_logit_alike_and_no_probability(splits):
    pm, head, hidden, means, base = _setup("noise", 0, splits)
    noise = np.flatnonzero(pm.relevance == 0)
    assert len(noise) == 3 and all(pm.plan.kinds[i] == "noise" for i in noise)
    with torch.no_grad():
        terms = head.terms(hidden)
    for i in noise:
        # the term adds one number to every class: the trap for logit-space attributions is real and large
        assert torch.allclose(terms[:, i], terms[:, i, :1].expand_as(terms[:, i]), rtol=0, atol=1e-12)
        assert terms[:, i].abs().mean() > terms[:, pm.relevance > 0].abs().mean()
        for how in ("gate", "zero", "mean"):
            out = _removed(head, hidden, {i}, how, means)
            torch.testing.assert_close(_probs(out), _probs(base), rtol=0, atol=1e-12)
    for i in np.flatnonzero(pm.relevance > 0):
        assert (_probs(_removed(head, hidden, {i}, "gate", means)) - _probs(base)).abs().max() > 1e-3


def test_redundant_copies_are_equal_and_vanish_one_at_a_time_under_gate_renorm(splits):
    pm, head, hidden, means, base = _setup("redundant", 2, splits)
    copies = np.flatnonzero(pm.relevance > 0)
    assert len(copies) == 3 and np.all(np.diff(copies) == 1)  # identity blocks follow the first copy
    for i in copies[1:]:
        assert torch.equal(hidden[i], hidden[copies[0]])
    for i in copies:
        # the remaining copies renormalised are the same mix: no leave-one-out effect, by construction
        torch.testing.assert_close(_removed(head, hidden, {i}, "gate-renorm", means), base, rtol=1e-12, atol=1e-12)
        assert (_removed(head, hidden, {i}, "gate", means) - base).abs().max() > 1e-3
    for i in np.flatnonzero(pm.relevance == 0):
        assert torch.equal(_removed(head, hidden, {i}, "zero", means), base)
    # all copies together carry the prediction: with none left only the bias (0) remains
    assert torch.equal(_removed(head, hidden, set(copies), "gate", means), torch.zeros_like(base))


def test_cancelling_pair_contributes_nothing_jointly_but_each_alone_does(splits):
    pm, head, hidden, means, base = _setup("cancel", 0, splits)
    pair = [i for i, role in enumerate(pm.plan.roles) if role == "cancelling"]
    assert len(pair) == 2 and pair[1] == pair[0] + 1 and pm.relevance[pair].sum() == 0
    with torch.no_grad():
        terms = head.terms(hidden)
    assert torch.equal(terms[:, pair[0]], -terms[:, pair[1]])
    for how in ("gate", "zero", "mean"):
        both = _removed(head, hidden, set(pair), how, means)
        torch.testing.assert_close(both, base, rtol=0, atol=1e-12)
    for i in pair:
        assert (_removed(head, hidden, {i}, "gate", means) - base).abs().max() > 1.0


def test_models_are_real_classifiers_and_draws_are_seeded(splits):
    train, test = splits
    for family in ("subset", "graded", "noise", "redundant", "cancel"):
        pm = build_planted(family, 3, train)
        with torch.no_grad():
            acc = float((pm.model(test.x).argmax(1) == test.y).float().mean())
        assert acc > 0.75, (family, acc)
        assert np.array_equal(layer_plan(family, 3, 6).relevance, pm.relevance)
    plans = {tuple(layer_plan("subset", s, 6).relevance) for s in range(8)}
    assert len(plans) > 1  # seeds draw different planted subsets


def test_planted_auroc_and_rank_correlation_match_sklearn_and_scipy():
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 4, size=(20, 6)).astype(float)  # many ties
    relevance = np.array([1, 0, 2, 0, 1, 0.0])
    auroc = planted_auroc(scores, relevance)
    rho = planted_rank_correlation(scores, relevance)
    for n in range(20):
        assert auroc[n] == pytest.approx(roc_auc_score(relevance > 0, scores[n]))
        expected = spearmanr(scores[n], relevance).statistic
        assert (np.isnan(rho[n]) and np.isnan(expected)) or rho[n] == pytest.approx(expected)
    assert planted_auroc(relevance[None], relevance)[0] == 1.0
    assert planted_auroc(-relevance[None], relevance)[0] == 0.0
    assert np.isnan(planted_auroc(scores, np.ones(6))).all()  # no irrelevant layer: undefined


def _runs(planted, inverted, index, index_auroc):
    rows = []
    for seed, values in enumerate(zip(planted, inverted, index, index_auroc)):
        for method, value, auroc in zip(("planted", "inverted", "layer_index"), values[:3], (1.0, 0.0, values[3])):
            rows.append(
                {
                    "family": "f",
                    "seed": seed,
                    "ablation": "gate",
                    "method": method,
                    "kind": "reference",
                    "k": 1,
                    "auroc": auroc,
                    "faithfulness": value,
                    "deletion_at_1": value,
                    "deletion_at_k": value,
                    "aopc": value,
                }
            )
    return pd.DataFrame(rows)


def test_metric_verdicts_by_hand():
    # Five seeds, the fewest an interval over seeds is reported from (MIN_INTERVAL_SAMPLES).
    table = metric_verdicts(
        _runs([0.9, 0.8, 0.7, 0.9, 0.8], [0.1, 0.0, 0.2, 0.1, 0.0], [0.5, 0.4, 0.3, 0.5, 0.4], [0.5] * 5)
    )
    row = table.iloc[0]
    # margins per seed: vs inverted 0.8, 0.8, 0.5, 0.8, 0.8 (mean 0.74); vs layer index 0.4 on every seed
    assert row["verdict"] == "separates" and row["margin_vs_inverted"] == pytest.approx(0.74)
    assert row["margin_vs_layer_index"] == pytest.approx(0.4) and row["share_seeds_separated"] == 1.0
    # equal to the layer-index ranking on every seed: not told apart (the interval of a constant 0 is [0, 0])
    assert (
        metric_verdicts(_runs([0.5] * 5, [0.1] * 5, [0.5] * 5, [0.5] * 5)).iloc[0]["verdict"] == "fails vs layer_index"
    )
    # the seed where ranking by index is itself faithful (AUROC 1) is left out of that margin
    table = metric_verdicts(
        _runs([0.9, 0.8, 0.7, 0.9, 0.8, 0.7], [0.1] * 6, [0.5, 0.9, 0.3, 0.5, 0.4, 0.3], [0.5, 1.0, 0.5, 0.5, 0.5, 0.5])
    )
    assert table.iloc[0]["n_seeds_vs_layer_index"] == 5 and table.iloc[0]["verdict"] == "separates"
    assert table.iloc[0]["margin_vs_layer_index"] == pytest.approx((0.4 + 0.4 + 0.4 + 0.4 + 0.4) / 5)
    nan = float("nan")
    assert metric_verdicts(_runs([nan] * 3, [nan] * 3, [nan] * 3, [0.5] * 3)).iloc[0]["verdict"] == "undefined"


def test_metric_verdicts_without_an_interval_are_undetermined_not_fails():
    nan = float("nan")
    # three seeds, every margin positive: no interval from 3 seeds, so no verdict either way
    table = metric_verdicts(_runs([0.9, 0.8, 0.7], [0.1, 0.0, 0.2], [0.5, 0.4, 0.3], [0.5, 0.5, 0.5]))
    assert table.iloc[0]["verdict"] == "undetermined (3 seeds; an interval needs 5)"
    assert np.isnan(table.iloc[0]["margin_vs_inverted_ci_low"])
    # ... but an interval that exists and reaches 0 still fails, whatever the other margin lacks (here the
    # layer-index margin keeps 3 seeds: no interval there; the margin vs inverted is -0.1 on every seed)
    table = metric_verdicts(_runs([0.5] * 5, [0.6] * 5, [0.1] * 5, [0.5, 1.0, 1.0, 0.5, 0.5]))
    assert table.iloc[0]["verdict"] == "fails vs inverted"
    # the layer-index ranking faithful on two of five seeds: three are left for that margin, and the verdict says so
    table = metric_verdicts(_runs([0.9] * 5, [0.1] * 5, [0.5] * 5, [0.5, 1.0, 1.0, 0.5, 0.5]), n_resamples=100)
    assert table.iloc[0]["verdict"] == (
        "undetermined (2 of 5 seeds dropped: layer index faithful; an interval needs 5)"
    )
    assert metric_verdicts(_runs([0.9], [0.1], [0.5], [0.5])).iloc[0]["verdict"] == "undetermined (one seed)"
    table = metric_verdicts(_runs([0.9, nan], [0.1, nan], [0.5, nan], [0.5, 0.5]), n_resamples=100)
    assert table.iloc[0]["verdict"] == "undetermined (1 of 2 seeds defined; an interval needs 5)"
    # enough seeds, too few resamples: the interval's own reason
    table = metric_verdicts(_runs([0.9] * 5, [0.1] * 5, [0.5] * 5, [0.5] * 5), n_resamples=50)
    assert table.iloc[0]["verdict"] == (
        "undetermined (no interval vs inverted: 50 bootstrap resamples, fewer than the 100 an interval needs; "
        "no interval vs layer_index: 50 bootstrap resamples, fewer than the 100 an interval needs)"
    )


def test_meta_scores_the_truth_ranking_at_auroc_one_and_its_inverse_at_zero(tmp_path):
    from laya_eval.planted.run import MetaOptions, meta

    options = MetaOptions(
        families=("subset", "noise"),
        seeds=2,
        limit=24,
        methods=("contribution", "random"),
        ablations=("gate", "mean"),
        bootstrap=50,
    )
    result = meta(tmp_path / "out", options)
    s = result.summary.set_index(["family", "ablation", "method"])
    for family in ("subset", "noise"):
        for ablation in ("gate", "mean"):
            assert s.loc[(family, ablation, "planted"), "auroc"] == 1.0
            assert s.loc[(family, ablation, "inverted"), "auroc"] == 0.0
            assert s.loc[(family, ablation, "planted"), "rank_correlation"] == 1.0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "manifest.json",
        "meta.csv",
        "meta.png",
        "metrics.csv",
        "models.csv",
        "seeds.csv",
    ]
    # noise layers fool the logit-space contribution (large class-uniform terms), not the effects
    assert s.loc[("noise", "gate", "contribution"), "auroc"] < 0.8
    assert s.loc[("noise", "gate", "lolo_effect"), "auroc"] > 0.9
    # same options, another batch size: the same bytes
    meta(tmp_path / "again", MetaOptions(**{**options.__dict__, "batch_size": 7}))
    for name in ("meta.csv", "metrics.csv", "seeds.csv", "models.csv"):
        assert (tmp_path / "out" / name).read_bytes() == (tmp_path / "again" / name).read_bytes(), name


def test_extra_methods_are_scored_like_registered_ones(splits):
    from laya_eval.catalog import MethodSpec
    from laya_eval.engine.evaluation import evaluate
    from laya_eval.engine.methods import METHODS, AttributionMethod
    from laya_eval.engine.plan import EvalOptions
    from laya_eval.errors import ConfigError

    train, test = splits
    model = build_planted("subset", 0, train).model
    twin = AttributionMethod(MethodSpec("contribution_twin", "the same function"), METHODS["contribution"].fn)
    options = EvalOptions(methods=("contribution",), bootstrap=0)
    out = evaluate(model, test, options=dataclasses.replace(options, ablation=("gate",)), extra_methods=(twin,))[
        "gate"
    ].summary
    a, b = out.iloc[0].drop(["method"]), out.iloc[1].drop(["method"])
    assert list(out["method"]) == ["contribution", "contribution_twin"]
    cols = ["faithfulness", "deletion_at_1", "aopc", "top1_hit_rate", "n_undefined"]
    assert a[cols].tolist() == b[cols].tolist()
    clash = AttributionMethod(MethodSpec("random", "a clash"), METHODS["contribution"].fn)
    with pytest.raises(ConfigError, match="registered method's name; got 'random'"):
        evaluate(model, test, options=dataclasses.replace(options, ablation=("gate",)), extra_methods=(clash,))
    with pytest.raises(ConfigError, match="unique; got 'contribution_twin' twice"):
        evaluate(model, test, options=dataclasses.replace(options, ablation=("gate",)), extra_methods=(twin, twin))
    with pytest.raises(ConfigError, match="partial results"):
        evaluate(model, test, options=dataclasses.replace(options, ablation=("gate",)), extra_methods=(twin,), out=".")


@pytest.mark.parametrize(
    "args, pattern",
    [
        (["--families", "subset,nope"], r"--families.*got .nope."),
        (["--ablations", "gate,none"], r"--ablations.*got .none."),
        (["--layers", "3"], r"--layers"),
        (["--seeds", "0"], r"--seeds"),
        (["--limit", "100000"], r"limit 100000 is larger than the 360 samples"),
    ],
)
def test_cli_refuses_bad_options_before_work(tmp_path, args, pattern):
    out = tmp_path / "out"
    result = run("meta", "--out", out, "-q", *args)
    assert_one_line_error(result, pattern)
    assert not out.exists()


def test_cli_refuses_an_output_that_is_a_file_and_keeps_it(tmp_path):
    out = tmp_path / "file"
    out.write_text("keep me")
    assert_one_line_error(run("meta", "--out", out, "-q"), "file")
    assert out.read_text() == "keep me"


def test_cli_runs_and_prints_the_tables(tmp_path):
    result = run(
        "meta",
        "--out",
        tmp_path / "out",
        "-q",
        "--families",
        "redundant",
        "--seeds",
        "2",
        "--limit",
        "16",
        "--methods",
        "laya,random",
        "--ablations",
        "gate,gate-renorm",
        "--bootstrap",
        "20",
    )
    assert result.exit_code == 0, result.output
    assert "AUROC of the planted relevance" in result.output and "redundant  gate-renorm" in result.output
    metrics = pd.read_csv(tmp_path / "out" / "metrics.csv")
    renorm = metrics[(metrics["ablation"] == "gate-renorm")].set_index("metric")
    # leave-one-out effects of the copies vanish under gate-renorm: Deletion@1 cannot tell the rankings apart
    assert renorm.loc["deletion_at_1", "verdict"] != "separates"
    assert abs(renorm.loc["deletion_at_1", "planted"]) < 1e-9


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        ({"families": ("subset", "bogus")}, r"families must be one of \{subset, .*\}; got 'bogus'"),
        ({"families": ()}, r"MetaOptions.families must be a non-empty sequence of names; got \(\)"),
        (
            {"ablations": ("gate", "zero", "network")},
            r"ablations must be one of \{gate, gate-renorm, zero, mean, resample, noise, skip, mean-update, resample-update, noise-update\}",
        ),
        ({"n_layers": 3}, r"n_layers must be an integer from 4 to 10; got 3"),
        ({"seeds": 3, "first_seed": 2**63 - 2}, r"first_seed must be an integer from 0 to 9223372036854775805"),
        ({"methods": ("gi",)}, r"MetaOptions.methods must be one of .*got 'gi'"),
    ],
)
def test_meta_options_name_what_is_wrong(kwargs, pattern):
    from laya_eval.errors import ConfigError
    from laya_eval.planted.run import MetaOptions

    with pytest.raises(ConfigError, match=pattern):
        MetaOptions(**kwargs)
