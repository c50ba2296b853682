"""The public names: verbs are functions at the top; names that moved are gone from it."""

from __future__ import annotations

import pytest

import laya_eval


def test_no_public_name_is_also_a_submodule():
    import pkgutil

    modules = {m.name.rpartition(".")[2] for m in pkgutil.walk_packages(laya_eval.__path__, "laya_eval.")}
    public = set(laya_eval.VERBS) | set(laya_eval._NAMES)
    assert not public & modules


def test_evaluate_is_a_function_returning_an_evaluation(digits_checkpoints):
    result = laya_eval.evaluate(
        laya_eval.load_model(digits_checkpoints["laya"]).model,
        "digits",
        options=laya_eval.EvalOptions(limit=20, bootstrap=0, methods=("laya",)),
    )
    assert isinstance(result, laya_eval.Evaluation) and isinstance(result["gate"], laya_eval.EvaluationResult)
    assert result.summary is result["gate"].summary  # one ablation: its tables read directly
    assert list(result.summary["method"]) == ["laya"] and int(result.summary["n"].iloc[0]) == 20
    both = laya_eval.evaluate(
        laya_eval.load_model(digits_checkpoints["laya"]).model,
        "digits",
        options=laya_eval.EvalOptions(limit=20, bootstrap=0, ablation=("gate", "mean")),
    )
    with pytest.raises(AttributeError, match=r"holds 2 ablations \(gate, mean\); read one of them"):
        both.summary
    assert list(both) == ["gate", "mean"] and both.operators is not None


@pytest.mark.parametrize(
    "name",
    [
        "load_checkpoint",
        "read_checkpoint",
        "layer_profile",
        "report_to_folder",
        "profile_to_folder",
        "sanity_to_folder",
        "prune_to_folder",
        "audit_mixers_to_folder",
        "write_report",
        "write_profile",
        "evaluate_ablations",
        "evaluate_to_folder",
        "write_results",
    ],
)
def test_removed_names_are_not_public(name):
    assert name not in dir(laya_eval)
    with pytest.raises(AttributeError, match=f"no attribute '{name}'"):
        getattr(laya_eval, name)


def test_unknown_names_raise_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'evaluatee'"):
        laya_eval.evaluatee  # noqa: B018


def test_readme_lower_level_call_works():
    import torch

    from laya_eval.models.trace import trace

    backbone = laya_eval.make_backbone("mlp", in_features=6, widths=[4, 3])
    model = laya_eval.LayeredModel(backbone, laya_eval.make_head("laya", backbone.layer_dims, 5, d_star=2))
    x = torch.randn(4, 6)
    tr = trace(model, x)
    with torch.no_grad():
        torch.testing.assert_close(tr.logits, model(x))


def test_the_operator_comparison_is_computed_when_read_and_once(digits_checkpoints, monkeypatch):
    """A permutation test over the ablations: a caller that reads only the tables (meta, profile) does not run it."""
    import laya_eval.engine.operators as operators

    calls = []
    real = operators.operator_sensitivity
    monkeypatch.setattr(operators, "operator_sensitivity", lambda *a, **k: calls.append(1) or real(*a, **k))
    both = laya_eval.evaluate(
        laya_eval.load_model(digits_checkpoints["laya"]).model,
        "digits",
        options=laya_eval.EvalOptions(limit=20, bootstrap=0, methods=("laya", "random"), ablation=("gate", "mean")),
    )
    assert both["gate"].summary is not None and calls == []
    first = both.operators
    assert both.operators is first and calls == [1]
