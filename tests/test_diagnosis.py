"""Diagnosis from attention shift: scipy and scikit-learn oracles, a hand-computed case, planted data, the CLI."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.spatial.distance import cosine, jensenshannon
from sklearn.metrics import roc_auc_score

from laya_eval.profiling.diagnosis import (
    DIAGNOSIS_COLUMNS,
    SUMMARY_COLUMNS,
    DiagnosisOptions,
    bootstrap_auc,
    cosine_minmax_distance,
    diagnose,
    is_weight_profile,
    jensen_shannon_distance,
    leave_one_out_references,
    minmax_normalise,
    roc_auc,
)
from laya_eval.errors import ConfigError
from tests.cli_helpers import assert_one_line_error, run
from tests.test_profile import assert_plausible_image


def test_jensen_shannon_matches_scipy_base_2():
    rng = np.random.default_rng(1)
    p, q = rng.dirichlet(np.ones(5), size=40), rng.dirichlet(np.full(5, 0.3), size=40)
    p[:5, 0] = 0.0  # zeros: 0 log 0 = 0
    p[:5] /= p[:5].sum(1, keepdims=True)
    got = jensen_shannon_distance(p, q)
    want = np.array([jensenshannon(a, b, base=2) for a, b in zip(p, q)])
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    # Disjoint supports are at the maximum distance 1; equal rows at 0.
    assert jensen_shannon_distance(np.array([[1.0, 0.0]]), np.array([[0.0, 1.0]]))[0] == pytest.approx(1.0)
    assert jensen_shannon_distance(p[:3], p[:3]) == pytest.approx([0.0, 0.0, 0.0], abs=1e-7)


def test_cosine_minmax_matches_scipy_on_hand_normalised_rows():
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=(30, 4)), rng.uniform(size=(30, 4))
    norm = minmax_normalise(a)
    # (a - min) / (max - min) by hand for one row: (3, -1, 1) -> (1, 0, 0.5)
    np.testing.assert_allclose(minmax_normalise(np.array([[3.0, -1.0, 1.0]])), [[1.0, 0.0, 0.5]])
    assert np.isnan(minmax_normalise(np.array([[2.0, 2.0, 2.0]]))).all()  # constant: no normalisation
    want = np.array([cosine(u, v) for u, v in zip(norm, b)])
    np.testing.assert_allclose(cosine_minmax_distance(norm, b), want, rtol=1e-10, atol=1e-12)


def test_roc_auc_matches_sklearn_with_ties():
    rng = np.random.default_rng(3)
    distance = np.round(rng.uniform(size=300), 1)  # many ties
    incorrect = rng.uniform(size=300) < distance * 0.6
    assert roc_auc(distance, incorrect) == pytest.approx(roc_auc_score(incorrect, distance), abs=1e-12)
    assert np.isnan(roc_auc(distance, np.zeros(300, bool)))


def test_stratified_bootstrap_equals_a_slow_sklearn_loop():
    rng = np.random.default_rng(4)
    distance, incorrect = rng.normal(size=120), rng.uniform(size=120) < 0.2
    distance[incorrect] += 0.7
    auc, low, high = bootstrap_auc(distance, incorrect, n_resamples=250, seed=7)
    # The oracle: the same draws (positives then negatives, 100 resamples per chunk), one sklearn AUC each.
    draw = np.random.default_rng(7)
    pos, neg = distance[incorrect], distance[~incorrect]
    aucs = []
    for k in (100, 100, 50):
        ip, ineg = draw.integers(0, pos.size, (k, pos.size)), draw.integers(0, neg.size, (k, neg.size))
        for a, b in zip(ip, ineg):
            aucs.append(roc_auc_score(np.r_[np.ones(pos.size), np.zeros(neg.size)], np.r_[pos[a], neg[b]]))
    assert auc == pytest.approx(roc_auc_score(incorrect, distance))
    np.testing.assert_allclose([low, high], np.quantile(aucs, [0.025, 0.975]), rtol=1e-12)
    assert low < auc < high
    assert bootstrap_auc(distance, incorrect, n_resamples=250, seed=7) == (auc, low, high)
    assert np.isnan(bootstrap_auc(distance, incorrect, n_resamples=0)[1])


def test_leave_one_out_references_equal_a_slow_loop():
    rng = np.random.default_rng(5)
    x = rng.uniform(size=(60, 3))
    x[7] = np.nan  # no profile: in no reference
    cls, correct = rng.integers(0, 4, 60), rng.uniform(size=60) < 0.7
    refs = leave_one_out_references(x, cls, correct, 5)
    for i in range(60):
        others = [j for j in range(60) if j != i and correct[j] and cls[j] == cls[i] and j != 7]
        if others:
            np.testing.assert_allclose(refs[i], x[others].mean(0), rtol=1e-12)
        else:
            assert np.isnan(refs[i]).all()


def test_diagnose_by_hand():
    # Predicted class 0: samples 0 and 1 correct with alpha (1, 0); sample 2 (true class 1) wrongly predicted 0
    # with alpha (0, 1). Leave-one-out: sample 0's reference is sample 1's (1, 0) -> JS 0, likewise sample 1;
    # sample 2's reference is mean(s0, s1) = (1, 0): disjoint support -> JS distance 1.
    # Predicted class 1: sample 3 correct, (0.5, 0.5), alone -> no reference -> undefined.
    # Overall: positives {1}, negatives {0, 0} -> AUC 1.
    scores = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.5, 0.5]])
    diag = diagnose(
        scores, label=np.array([0, 0, 1, 1]), pred=np.array([0, 0, 0, 1]), n_resamples=0, class_names=["cat", "dog"]
    )
    assert list(diag.samples.columns) == DIAGNOSIS_COLUMNS and list(diag.summary.columns) == SUMMARY_COLUMNS
    np.testing.assert_allclose(diag.samples["distance"][:3], [0.0, 0.0, 1.0], atol=1e-7)
    assert np.isnan(diag.samples["distance"][3])
    row = diag.overall
    assert (row["class"], row["n_correct"], row["n_incorrect"], row["n_undefined"]) == ("all", 2, 1, 1)
    assert row["auc"] == 1.0 and row["distance_name"] == "jensen_shannon"
    per_class = diag.summary.set_index("class_name")
    assert per_class.loc["cat", "auc"] == 1.0 and np.isnan(per_class.loc["dog", "auc"])
    # By true label, sample 2 (class 1) is compared with class 1's correct profile: sample 3's (0.5, 0.5);
    # m = (0.25, 0.75): KL(p||m) = log2(4/3), KL(q||m) = 0.5 log2(2) + 0.5 log2(2/3) -> JS^2 = 0.5 (0.41504 + 0.20752).
    by_label = diagnose(scores, np.array([0, 0, 1, 1]), np.array([0, 0, 0, 1]), by="label", n_resamples=0)
    assert by_label.samples["distance"][2] == pytest.approx(
        np.sqrt(0.5 * (np.log2(4 / 3) + 0.5 + 0.5 * np.log2(2 / 3)))
    )


def _planted(shift: bool, n: int = 3000, seed: int = 0):
    """Three classes with their own alpha profile; errors (20 %) draw from another class's profile when shifted,
    from their own predicted class's profile when not."""
    rng = np.random.default_rng(seed)
    centres = np.array([[8.0, 1, 1, 1], [1, 8.0, 1, 1], [1, 1, 8.0, 1]])
    pred = rng.integers(0, 3, n)
    incorrect = rng.uniform(size=n) < 0.2
    label = np.where(incorrect, (pred + 1) % 3, pred)
    source = np.where(incorrect & shift, (pred + 1) % 3, pred)
    alpha = np.stack([rng.dirichlet(centres[k] * 5) for k in source])
    return alpha, label, pred


def test_planted_shift_is_found_and_random_shift_is_chance():
    shifted = diagnose(*_planted(True), n_resamples=200, seed=1).overall
    assert shifted["auc"] > 0.97 and shifted["ci_low"] > 0.95
    null = diagnose(*_planted(False), n_resamples=200, seed=1).overall
    assert 0.45 < null["auc"] < 0.55 and null["ci_low"] < 0.5 < null["ci_high"]
    # Per predicted class: the counts are those of the predicted classes.
    alpha, label, pred = _planted(True)
    summary = diagnose(alpha, label, pred, n_resamples=0).summary.iloc[1:]
    assert summary["n_incorrect"].tolist() == [int(((pred == k) & (label != pred)).sum()) for k in range(3)]


def test_distance_choice_and_errors():
    alpha, label, pred = _planted(True, n=200)
    assert is_weight_profile(alpha) and not is_weight_profile(alpha * 2) and not is_weight_profile(alpha - 0.1)
    signed = np.log(alpha)
    assert diagnose(signed, label, pred, n_resamples=0).meta["distance"] == "cosine_minmax"
    with pytest.raises(
        ConfigError,
        match=r"distance 'jensen_shannon' needs scores that are non-negative and sum "
        r"to one per sample .*Use distance 'cosine_minmax' or 'auto'",
    ):
        diagnose(signed, label, pred, distance="jensen_shannon")
    with pytest.raises(ConfigError, match=r"distance must be one of \{auto, jensen_shannon, cosine_minmax\}; got 'js'"):
        DiagnosisOptions(distance="js")
    with pytest.raises(ConfigError, match=r"by must be 'pred' \(predicted class\) or 'label' \(true class\); got 'y'"):
        DiagnosisOptions(by="y")


def test_sample_order_and_layer_order_do_not_matter():
    alpha, label, pred = _planted(True, n=300)
    base = diagnose(alpha, label, pred, n_resamples=0)
    order = np.random.default_rng(9).permutation(300)
    moved = diagnose(alpha[order], label[order], pred[order], n_resamples=0, sample=order)
    np.testing.assert_allclose(moved.samples["distance"], base.samples["distance"].to_numpy()[order], rtol=1e-12)
    assert moved.overall["auc"] == pytest.approx(base.overall["auc"], abs=1e-12)
    layers = diagnose(alpha[:, ::-1], label, pred, n_resamples=0)  # JS is symmetric in the layer order
    np.testing.assert_allclose(layers.samples["distance"], base.samples["distance"], rtol=1e-9, atol=1e-12)


def test_no_reference_no_distance_and_the_figure_still_draws():
    from laya_eval import figures

    # Every prediction wrong: no class has a correct prediction, so no input has a reference.
    alpha = np.random.default_rng(0).dirichlet([1, 1, 1], 20)
    diag = diagnose(alpha, np.zeros(20, int), np.ones(20, int), n_resamples=50)
    row = diag.overall
    assert (row["n_correct"], row["n_incorrect"], row["n_undefined"]) == (0, 0, 20) and np.isnan(row["auc"])
    fig = figures.diagnosis_figure(diag, meta={"method": "laya", "label": "m.pt", "dataset": "d"})
    assert fig.axes[1].get_title().startswith("ROC AUC undefined")
    assert "no input has a reference profile" in [t.get_text() for t in fig.axes[0].texts]


def _independent_diagnosis(scores: pd.DataFrame) -> pd.DataFrame:
    """Per sample: scipy's JS distance to the mean alpha of the *other* correct samples of its predicted class."""
    wide = scores.pivot(index="sample", columns="layer", values="score")
    who = scores.drop_duplicates("sample").set_index("sample").loc[wide.index]
    ok = (who["label"] == who["pred"]).to_numpy()
    rows = []
    for i, sample in enumerate(wide.index):
        mates = ok & (who["pred"].to_numpy() == who["pred"].iloc[i])
        mates[i] = False
        d = jensenshannon(wide.iloc[i], wide[mates].mean(axis=0), base=2) if mates.any() else np.nan
        rows.append((sample, ok[i], d))
    return pd.DataFrame(rows, columns=["sample", "correct", "distance"])


def test_profile_cli_writes_a_diagnosis_checked_against_scipy_and_sklearn(digits_checkpoints, tmp_path):
    result = run("profile", digits_checkpoints["laya"], "--limit", 200, "--bootstrap", 200, "--out", tmp_path)
    assert result.exit_code == 0, result.output
    layers = pd.read_csv(tmp_path / "profile.csv")
    assert not layers.empty
    got = pd.read_csv(tmp_path / "diagnosis.csv")
    assert list(got.columns) == DIAGNOSIS_COLUMNS and len(got) == 200
    from laya_eval.engine.evaluation import EvalOptions
    import laya_eval

    prof = laya_eval.profile(digits_checkpoints["laya"], options=EvalOptions(limit=200))  # the library's defaults
    want = _independent_diagnosis(prof.scores)
    np.testing.assert_allclose(got["distance"], want["distance"], rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(prof.diagnosis.samples["distance"], want["distance"], rtol=1e-6, atol=1e-9)
    assert prof.meta["diagnosis"]["reference_by"] == "pred"
    undiagnosed = laya_eval.profile(digits_checkpoints["laya"], options=EvalOptions(limit=20), diagnosis=None)
    assert undiagnosed.diagnosis is None
    summary = pd.read_csv(tmp_path / "diagnosis_summary.csv")
    assert list(summary.columns) == SUMMARY_COLUMNS
    overall = summary.iloc[0]
    defined = want.dropna()
    assert overall["auc"] == pytest.approx(roc_auc_score(~defined["correct"], defined["distance"]), rel=1e-6)
    assert overall["distance_name"] == "jensen_shannon" and overall["ci_low"] <= overall["auc"] <= overall["ci_high"]
    for row in summary.iloc[1:].itertuples():
        part = defined[got.loc[defined.index, "pred"] == int(row._1)]
        if part["correct"].all() or not part["correct"].any():
            assert np.isnan(row.auc)
        else:
            assert row.auc == pytest.approx(roc_auc_score(~part["correct"], part["distance"]), rel=1e-6)
    line = [s for s in result.output.splitlines() if s.startswith("error signal: ROC AUC")]
    assert len(line) == 1 and f"ROC AUC {overall['auc']:.3f}, 95% CI [{overall['ci_low']:.3f}," in line[0], line
    assert "Jensen-Shannon distance to the predicted class's correct-prediction profile (leave-one-out)" in line[0]
    assert_plausible_image(tmp_path / "diagnosis.png")


def test_profile_cli_diagnosis_of_signed_scores_and_its_errors(digits_checkpoints, tmp_path):
    result = run(
        "profile",
        digits_checkpoints["concat"],
        "--method",
        "contribution",
        "--limit",
        80,
        "--reference-by",
        "label",
        "--bootstrap",
        0,
        "--out",
        tmp_path / "c",
    )
    assert result.exit_code == 0, result.output
    assert "cosine distance of min-max scores to the true class's" in result.output
    assert "no interval (0 bootstrap resamples, fewer than the 100 an interval needs)" in result.output
    assert set(pd.read_csv(tmp_path / "c" / "diagnosis_summary.csv")["distance_name"]) == {"cosine_minmax"}
    assert_one_line_error(
        run(
            "profile",
            digits_checkpoints["concat"],
            "--method",
            "contribution",
            "--limit",
            20,
            "--distance",
            "jensen_shannon",
            "--out",
            tmp_path / "e",
        ),
        r"distance 'jensen_shannon' needs scores that are non-negative and sum to one",
    )
    assert not (tmp_path / "e").exists() or not list((tmp_path / "e").iterdir())
