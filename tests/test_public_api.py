"""The public names: verbs are functions at the top, old names warn and name their replacement."""

from __future__ import annotations

import inspect
import warnings

import pytest

import laya_eval


def test_no_public_name_is_also_a_submodule():
    import pkgutil

    modules = {m.name.rpartition(".")[2] for m in pkgutil.walk_packages(laya_eval.__path__, "laya_eval.")}
    public = set(laya_eval.VERBS) | set(laya_eval._NAMES) | set(laya_eval._DEPRECATED)
    assert not public & modules


def test_evaluate_is_a_function_returning_an_evaluation(digits_checkpoints):
    result = laya_eval.evaluate(laya_eval.load_model(digits_checkpoints["laya"]).model, "digits",
                                options=laya_eval.EvalOptions(limit=20, bootstrap=0, methods=("laya",)))
    assert isinstance(result, laya_eval.Evaluation) and isinstance(result["gate"], laya_eval.EvaluationResult)
    assert result.summary is result["gate"].summary  # one ablation: its tables read directly
    assert list(result.summary["method"]) == ["laya"] and int(result.summary["n"].iloc[0]) == 20
    both = laya_eval.evaluate(laya_eval.load_model(digits_checkpoints["laya"]).model, "digits",
                              options=laya_eval.EvalOptions(limit=20, bootstrap=0, ablation=("gate", "mean")))
    with pytest.raises(AttributeError, match=r"holds 2 ablations \(gate, mean\); read one of them"):
        both.summary
    assert list(both) == ["gate", "mean"] and both.operators is not None


@pytest.mark.parametrize("name, replacement", [("load_checkpoint", "load_model"), ("read_checkpoint", "load_model"),
                                               ("layer_profile", "laya_eval.profile")])
def test_deprecated_names_warn_and_still_work(name, replacement):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = getattr(laya_eval, name)
    assert inspect.isfunction(value)
    assert len(caught) == 1 and issubclass(caught[0].category, DeprecationWarning)
    assert replacement in str(caught[0].message)


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
