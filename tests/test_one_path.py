"""One encode path and one scoring path: every command that encodes or reports faithfulness goes through the
same function, so their numbers agree with each other and with independent computations."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from laya_eval import evaluate
from laya_eval.engine.evaluation import EvalOptions
from laya_eval.engine.results import mean_faithfulness
from laya_eval.sanity_checks import SanityOptions, attribute_features, cascading_randomisation
from laya_eval.training.features import encode, encode_features
from laya_eval.training.head_fit import fit_head
from laya_eval.training.trainer import TrainOptions, train_in_place
from tests import byom_models

CNN = "py:tests.byom_models:small_cnn"


@pytest.fixture(scope="module")
def digits_splits():
    from laya_eval.data import load_dataset

    return {s: load_dataset("digits", s) for s in ("train", "val", "test")}


def test_sanity_faithfulness_is_the_summary_tables(digits_models, digits):
    """Step 0 of the cascading randomisation is the unchanged model: its faithfulness column equals the
    ``faithfulness`` of ``evaluate``'s summary on the same samples (the same reduction, not a look-alike)."""
    model, test = digits_models["laya"], digits["test"].subset(slice(0, 120))
    methods = ("laya", "contribution", "random")
    table = cascading_randomisation(model, encode_features(model, test), SanityOptions(methods=methods, bootstrap=0))
    step0 = table[table.step == 0].set_index("method")["faithfulness"]
    summary = evaluate(model, test, options=EvalOptions(methods=methods, bootstrap=0)).summary.set_index("method")
    for name in methods:
        assert step0[name] == pytest.approx(summary.loc[name, "faithfulness"], abs=1e-12)


def test_mean_faithfulness_against_scipy():
    """The mean over samples of scipy's Spearman rho, samples with a constant row left out."""
    rng = np.random.default_rng(3)
    scores, effects = rng.normal(size=(40, 5)), rng.normal(size=(40, 5))
    scores[7] = 1.0  # undefined rho: constant scores
    expected = np.mean([spearmanr(s, e).statistic for i, (s, e) in enumerate(zip(scores, effects)) if i != 7])
    assert mean_faithfulness(scores, effects) == pytest.approx(expected, abs=1e-12)


def test_frozen_training_reads_the_cache_fit_head_filled(digits_splits, tmp_path, monkeypatch):
    """``train`` on a frozen by-reference backbone encodes through the feature cache that ``fit_head`` filled:
    the backbone does not run again, and the features are those of an in-memory encoding."""
    monkeypatch.setenv("LAYA_EVAL_CACHE", str(tmp_path))
    first = fit_head(
        CNN,
        digits_splits,
        layers=["block*"],
        head="concat",
        options=TrainOptions(epochs=1, seed=0),
        cache_dir=tmp_path / "features",
    )
    assert not first.reused_cache
    calls = byom_models.CALLS["forward"]
    train_in_place(first.model, digits_splits["train"], digits_splits["val"], TrainOptions(epochs=1, seed=1))
    assert byom_models.CALLS["forward"] == calls
    in_memory = encode(first.model, digits_splits["val"])
    cached = encode_features(first.model, digits_splits["val"])
    assert cached.reused
    for a, b in zip(in_memory, cached.hidden):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


def test_cache_false_encodes_in_memory(digits_splits, tmp_path, monkeypatch):
    monkeypatch.setenv("LAYA_EVAL_CACHE", str(tmp_path))
    result = fit_head(CNN, digits_splits, layers=["block*"], head="concat", options=TrainOptions(epochs=1, seed=0))
    calls = byom_models.CALLS["forward"]
    fresh = encode_features(result.model, digits_splits["val"], cache=False)
    assert byom_models.CALLS["forward"] > calls and not fresh.reused and fresh.path is None


def test_attribute_features_scores_the_summary_uses(digits_models, digits):
    """The head-only attributions sanity and prune score are the engine's: same per-sample faithfulness."""
    model, test = digits_models["scalarmix"], digits["test"].subset(slice(0, 60))
    scores, effects = attribute_features(model, encode_features(model, test), ["static"])
    summary = evaluate(model, test, options=EvalOptions(methods=("static",), bootstrap=0)).summary
    assert mean_faithfulness(scores["static"], effects) == pytest.approx(
        float(summary.loc[summary.method == "static", "faithfulness"].iloc[0]), abs=1e-12
    )
