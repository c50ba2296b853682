"""A verdict carries the model's own state: a model at chance, one predicting one class, or one whose effects are
negligible gets a warning and a ``verdict`` in summary.csv and the manifest; a working model gets ``ok``."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch

from laya_eval.engine.evaluation import EvalOptions, evaluate
from laya_eval.training.trainer import build_model

N = 120
OPTIONS = EvalOptions(limit=N, bootstrap=0, methods=("contribution", "random"))


def _accuracy_by_hand(model, digits) -> tuple[float, np.ndarray]:
    """The model's own forward pass on the first N test inputs against their labels (not the tool's records)."""
    with torch.no_grad():
        pred = model(digits["test"].x[:N]).argmax(-1).numpy()
    return float((pred == digits["test"].y[:N].numpy()).mean()), pred


def test_a_working_model_has_no_verdict_note(digits_models, digits, tmp_path):
    model = digits_models["concat"]
    accuracy, _ = _accuracy_by_hand(model, digits)
    assert accuracy > 0.8  # the conftest model works: the rule must leave it alone
    r = evaluate(model, digits["test"], options=OPTIONS)
    assert r.model_state.accuracy == pytest.approx(accuracy, abs=1e-12)
    majority = np.bincount(digits["test"].y[:N].numpy()).max() / N
    assert r.model_state.describe() == (
        f"accuracy {accuracy:.3f} on these {N} samples (chance 0.100, majority class {majority:.3f})"
    )
    assert r.verdict == "ok" and (r.summary.verdict == "ok").all()
    assert not any("chance" in w or "one class" in w or "absolute" in w for w in r.warnings)


def test_an_untrained_model_is_at_chance(digits, tmp_path):
    torch.manual_seed(0)  # 0 training steps: the initial weights
    model = build_model("mlp", "concat", digits["train"], backbone_kwargs={"widths": [64, 32, 16]}, seed=0).eval()
    accuracy, pred = _accuracy_by_hand(model, digits)
    labels = digits["test"].y[:N].numpy()
    chance = max(0.1, np.bincount(labels).max() / N)
    # above chance beyond noise would need P(X >= correct | Binomial(N, chance)) < 0.05: about chance + 2 sd
    assert accuracy < chance + 1.645 * np.sqrt(chance * (1 - chance) / N)
    out = tmp_path / "untrained"
    r = evaluate(model, digits["test"], options=OPTIONS, out=out)
    assert r.model_state.accuracy == pytest.approx(accuracy, abs=1e-12) and r.model_state.at_chance
    assert r.verdict.split(";")[0] == "model-at-chance"
    assert r.warnings[0].startswith(f"the model is at chance on these samples: accuracy {accuracy:.3f} is not above")
    summary = (out / "summary.csv").read_text().splitlines()
    assert summary[0].split(",")[6] == "verdict" and all(r.verdict in row for row in summary[1:])
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["verdict"]["value"] == r.verdict and manifest["model_state"]["accuracy"] == accuracy
    assert manifest["model_state"]["top_prediction_share"] == np.bincount(pred).max() / N


def test_a_classifier_biased_to_one_class_gets_the_one_class_note(digits_models, digits):
    model = copy.deepcopy(digits_models["concat"])
    with torch.no_grad():
        model.head.classifier.bias[3] += 1e3  # class 3 wins on every input, by a margin no term can close
    accuracy, pred = _accuracy_by_hand(model, digits)
    assert (pred == 3).all() and accuracy == (digits["test"].y[:N].numpy() == 3).mean()
    r = evaluate(model, digits["test"], options=OPTIONS)
    assert (r.model_state.top_prediction, r.model_state.top_prediction_share) == (3, 1.0)
    # removing a layer cannot move p(3) = 1 - 1e-400ish: the effects are negligible in absolute terms too
    assert r.verdict == "model-at-chance;one-class;negligible-effects"
    assert any(w.startswith("the model predicts class 3 for 100% of these samples") for w in r.warnings)
    assert any(w.startswith("the effects are negligible in absolute terms") for w in r.warnings)


def test_the_written_summary_has_the_verdict_of_a_working_model(digits_models, digits, tmp_path):
    r = evaluate(digits_models["concat"], digits["test"], options=OPTIONS, out=tmp_path / "ok")
    header, *rows = (tmp_path / "ok" / "summary.csv").read_text().splitlines()
    assert header.split(",")[4:8] == ["ablation", "scope", "verdict", "n"]
    assert all(row.split(",")[6] == "ok" for row in rows) and len(rows) == len(r.summary)
    assert json.loads((tmp_path / "ok" / "manifest.json").read_text())["verdict"]["value"] == "ok"


def test_the_report_shows_each_runs_model_and_verdict(digits_models, digits, tmp_path):
    from laya_eval.reporting.write import report

    torch.manual_seed(0)
    untrained = build_model("mlp", "concat", digits["train"], backbone_kwargs={"widths": [64, 32, 16]}, seed=0).eval()
    accuracy, _ = _accuracy_by_hand(untrained, digits)
    evaluate(untrained, digits["test"], options=OPTIONS, out=tmp_path / "untrained")
    evaluate(digits_models["concat"], digits["test"], options=OPTIONS, out=tmp_path / "working")
    report([tmp_path / "untrained", tmp_path / "working"], out=tmp_path / "report", html_report=False)
    runs = (tmp_path / "report" / "runs.csv").read_text().splitlines()
    header = runs[0].split(",")
    verdicts = [row.split(",")[header.index("verdict")] for row in runs[1:]]
    assert verdicts[0].startswith("model-at-chance") and verdicts[1] == "ok"
    md = (tmp_path / "report" / "report.md").read_text()
    assert md.count("Verdict of ") == 1  # the working run has none
    assert f": {verdicts[0]}. The model is at chance on these samples: accuracy {accuracy:.3f} is not above" in md
    assert f"| accuracy {accuracy:.3f} (chance " in md and ", ok |" in md  # the runs table's model column
