"""Every command's hot loop under the device guard (tests/device_guard.py), and the guard catching the
mismatches it exists for when they are put back.

The guard runs on the CPU: a host tensor (CPU-side features from the feature cache or ``encode``,
``.cpu()`` results, the datasets' tensors) meeting a tensor of the model (its parameters, what was moved
``.to(device)``) raises as CUDA would, and laya_eval code inside the hot loops may not create a tensor
without ``device=`` nor call ``torch.from_numpy``. faithfulness and profile (the engine's batch loop),
fit-head (training a head on cached features), sanity (attributions from cached features, retraining) and
prune (removal curves, refits, early exit) each run whole under it.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

import laya_eval.engine.evaluation as engine
import laya_eval.pruning.curves as curves
import laya_eval.sanity_checks.cached as cached
import laya_eval.training.trainer as trainer
from laya_eval.data import Dataset, load_dataset
from laya_eval.engine.evaluation import EvalOptions, evaluate
from laya_eval.loading.specs import load_backbone
import laya_eval
from laya_eval.pruning import PruneOptions, prune
from laya_eval.sanity_checks import SanityOptions, retraining_on_model_device, sanity
from laya_eval.training.features import encode_features
from laya_eval.training.head_fit import fit_head
from laya_eval.training.trainer import TrainOptions
from tests.device_guard import NoImplicitCpuTensors, guard_hot_loop, host_device_guard, mark_host

QUICK = TrainOptions(epochs=2, seed=3, batch_size=64)
CNN = "py:tests.byom_models:small_cnn"
HOT_LOOPS = (
    (engine, "_batch_records"),
    (cached, "attribute_features"),
    (trainer, "train_head"),
    (curves, "evaluate_masks"),
)


def _host_splits(limit: int | None = None) -> dict[str, Dataset]:
    """Digits splits whose tensors are tagged as living on the CPU (a dataset always does)."""
    out = {}
    for s in ("train", "val", "test"):
        d = load_dataset("digits", s)
        d = d.subset(slice(0, limit)) if limit else d
        mark_host(d.x, d.y)
        out[s] = d
    return out


@pytest.fixture
def guard(monkeypatch):
    """The hot loops guarded; ``with guard():`` runs a command under the host/device rule (data, models and
    backbones are made before, as a command loads them before its work)."""
    for module, name in HOT_LOOPS:
        guard_hot_loop(monkeypatch, module, name)
    return lambda: host_device_guard(monkeypatch)


@pytest.fixture(scope="module")
def by_reference(tmp_path_factory):
    """A head fitted on a frozen py: backbone stored by reference: its features go through the feature cache."""
    splits = _host_splits()
    backbone = load_backbone(CNN, layers=["block1", "block2", "block3"], example_input=splits["train"].x[:2])
    cache = tmp_path_factory.mktemp("cache")
    model = fit_head(
        backbone, splits, head="laya", head_kwargs={"d_star": 8, "scorer_hidden": 8}, options=QUICK, cache_dir=cache
    ).model
    return model, cache


def test_faithfulness_and_profile_under_the_guard(guard, digits_models):
    data = _host_splits(limit=40)["test"]
    with guard():
        out = evaluate(
            digits_models["laya"],
            data,
            options=EvalOptions(limit=40, batch_size=16, bootstrap=20, n_steps=4, ablation=("gate", "zero", "mean")),
        )
        profile = laya_eval.profile(
            digits_models["scalarmix"],
            data,
            method="ig",
            options=EvalOptions(limit=40, batch_size=16, bootstrap=0, n_steps=4),
        )
    assert set(out) == {"gate", "zero", "mean"}
    assert profile is not None


def test_faithfulness_from_the_feature_cache_under_the_guard(guard, by_reference):
    """Head scope on a by-reference backbone: the batch loop indexes the CPU-side cache and moves the rows."""
    model, cache = by_reference
    data = _host_splits(limit=40)["test"]
    options = EvalOptions(limit=40, batch_size=16, bootstrap=20, n_steps=4, cache_dir=str(cache))
    with guard():
        out = evaluate(model, data, options=dataclasses.replace(options, ablation=("gate", "mean")))
    assert out["gate"].manifest["feature_cache"] is not None


def test_the_guard_catches_cached_states_handed_to_the_head_unmoved(guard, by_reference, monkeypatch):
    model, cache = by_reference
    data = _host_splits(limit=40)["test"]
    monkeypatch.setattr(engine, "_cached_states", lambda plan, rows: [h[rows] for h in plan.features.hidden])
    with guard(), pytest.raises(AssertionError, match="device mismatch"):
        evaluate(
            model,
            data,
            options=EvalOptions(
                limit=40, batch_size=16, bootstrap=20, n_steps=4, cache_dir=str(cache), ablation=("gate",)
            ),
        )


def test_fit_head_under_the_guard(guard, tmp_path):
    splits = _host_splits(limit=120)
    backbone = load_backbone(
        CNN, layers=["block1", "block2", "block3"], example_input=load_dataset("digits", "train").x[:2]
    )
    with guard():
        result = fit_head(
            backbone, splits, head="scalarmix", head_kwargs={"d_star": 8}, options=QUICK, cache_dir=tmp_path / "cache"
        )
    assert result.model.n_layers == 3


def test_sanity_under_the_guard(guard, by_reference):
    model, cache = by_reference
    splits = _host_splits(limit=150)
    options = SanityOptions(
        roar_seeds=1,
        bootstrap=20,
        batch_size=64,
        methods=("laya", "ig", "random"),
        train=dataclasses.replace(QUICK, patience=1),
    )
    with guard():
        result = sanity(model, splits, options=options, cache_dir=cache)
    assert len(result.layer_roar) > 0


def test_prune_under_the_guard(guard, by_reference):
    model, cache = by_reference
    splits = _host_splits(limit=150)
    options = PruneOptions(
        methods=("laya", "contribution"),
        seeds=1,
        n_random=2,
        n_random_refit=1,
        bootstrap=20,
        timing=False,
        train=QUICK,
        ablations=("gate", "mean"),
    )
    with guard():
        result = prune(model, splits, options=options, cache_dir=cache)
    assert len(result.pruning) > 0


def test_the_guard_catches_cached_features_handed_to_the_head_unmoved(guard, by_reference, monkeypatch):
    """The sanity/prune bug put back: batches of the CPU-side feature cache go to the head without .to(device)."""
    model, cache = by_reference
    splits = _host_splits(limit=100)
    monkeypatch.setattr(
        cached,
        "feature_batch",
        lambda features, start, size, device: [h[start : start + size] for h in features.hidden],
    )
    with guard(), pytest.raises(AssertionError, match="device mismatch"):
        sanity(
            model,
            splits,
            options=SanityOptions(roar_seeds=1, bootstrap=20, methods=("laya",), train=QUICK),
            cache_dir=cache,
        )


def test_the_guard_catches_unmoved_batches_in_the_pruning_curves(guard, by_reference, monkeypatch):
    model, cache = by_reference
    splits = _host_splits(limit=100)
    real_to = torch.Tensor.to

    def to_except_features(t, *args, **kwargs):  # .to(device) forgotten where evaluate_masks slices the cache
        import sys

        if sys._getframe(1).f_code.co_name == "<listcomp>" and sys._getframe(2).f_code.co_name == "evaluate_masks":
            return t
        return real_to(t, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", to_except_features)
    with guard(), pytest.raises(AssertionError, match="device mismatch"):
        prune(
            model,
            splits,
            options=PruneOptions(methods=("laya",), seeds=0, n_random=2, bootstrap=20, timing=False, train=QUICK),
            cache_dir=cache,
        )


def test_the_guard_catches_a_cpu_arange_in_the_cached_attributions(guard, by_reference):
    """attribute_features with its sample ids made by torch.arange without device= (the source, edited,
    run in the module's own namespace)."""
    import ast
    import inspect

    model, cache = by_reference
    features = encode_features(model, _host_splits(limit=40)["test"], cache_dir=cache)
    module_source = inspect.getsource(cached)  # the module's text: the fixture wrapped the function object
    node = next(
        n for n in ast.parse(module_source).body if isinstance(n, ast.FunctionDef) and n.name == "attribute_features"
    )
    source = ast.get_source_segment(module_source, node)
    fixed = "torch.arange(start, start + len(hidden[0]), device=device)"
    assert fixed in source
    namespace = dict(vars(cached))
    exec(
        compile(source.replace(fixed, "torch.arange(start, start + len(hidden[0]))"), cached.__file__, "exec"),
        namespace,
    )
    with guard(), NoImplicitCpuTensors(), pytest.raises(AssertionError, match="arange without device"):
        namespace["attribute_features"](model, features, ["laya"])


def test_sanity_retrains_where_the_model_is():
    """Retraining follows the model's device (the CLI loads it onto --device); it was always the CPU."""
    from laya_eval.training.trainer import build_model

    model = build_model("mlp", "laya", load_dataset("digits", "test"), seed=0).to("meta")
    options = retraining_on_model_device(SanityOptions(train=TrainOptions(device="cpu")), model)
    assert options.train.device == "meta"
