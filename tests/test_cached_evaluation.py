"""faithfulness and profile at head scope read (and fill) the feature cache of a frozen backbone stored by reference.

The oracle is the backbone itself: a run with the cache switched off runs it batch by batch, as the engine always
did, and the tables of a run that fills the cache and of one that reads it must be the same bytes. Backbone calls are
counted with a forward pre-hook on the backbone module (the cache's encoder and the engine both call it).
"""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager

import pytest
import torch

from laya_eval.data import load_dataset
from laya_eval.engine.evaluation import EvalOptions, evaluate_ablations, evaluate_to_folder
from laya_eval.engine.plan import make_plan, with_cached_features
from laya_eval.loading.specs import load_backbone
from laya_eval.profiling.profiles import layer_profile
from laya_eval.training.head_fit import fit_head
from laya_eval.training.trainer import TrainOptions

CNN = "py:tests.byom_models:small_cnn"
TABLES = ("layers.csv", "samples.csv", "summary.csv", "comparisons.csv")
LIMIT = 40


@pytest.fixture(scope="module")
def frozen(tmp_path_factory):
    """A LAYA head fitted on a frozen py: CNN stored by reference (pool avg: vector states)."""
    splits = {s: load_dataset("digits", s) for s in ("train", "val", "test")}
    backbone = load_backbone(CNN, layers=["block1", "block2", "block3"], example_input=splits["train"].x[:2])
    options = TrainOptions(epochs=2, seed=3, batch_size=64)
    fitted = fit_head(backbone, splits, head="laya", head_kwargs={"d_star": 8, "scorer_hidden": 8}, options=options,
                      cache_dir=tmp_path_factory.mktemp("fit-cache"))
    return fitted.model, splits["test"]


@contextmanager
def backbone_calls(model):
    """Count the forward calls of ``model.backbone`` inside the block."""
    calls = []
    handle = model.backbone.register_forward_pre_hook(lambda module, args: calls.append(1))
    try:
        yield calls
    finally:
        handle.remove()


def _tables(folder, ablation):
    return {name: (folder / ablation / name).read_bytes() for name in TABLES}


def _options(**kw):
    return EvalOptions(**{"limit": LIMIT, "bootstrap": 100, "n_steps": 8, "draws": 2,
                          "methods": ("laya", "contribution", "ig", "gradcam", "random"), **kw})


def test_a_run_that_fills_the_cache_one_that_reads_it_and_one_without_it_write_the_same_bytes(frozen, tmp_path):
    model, test = frozen
    ablations = ["gate", "mean", "resample"]  # a statistic (mean) and donors (resample) come from the cache too
    cache = tmp_path / "cache"
    runs = {}
    for name, options in (("fill", _options(cache_dir=str(cache), batch_size=256)),
                          ("read", _options(cache_dir=str(cache), batch_size=7)),
                          ("none", _options(cache=False, batch_size=13))):
        with backbone_calls(model) as calls:
            evaluate_to_folder(model, test, ablations, tmp_path / name, options=options)
        runs[name] = len(calls)
    # fill: the 40 rows in one call; read: none; without the cache: per batch, statistics pass and donors included
    assert runs["fill"] == 1 and runs["read"] == 0 and runs["none"] > 1
    for a in ablations:
        fill = _tables(tmp_path / "fill", a)
        assert _tables(tmp_path / "read", a) == fill
        assert _tables(tmp_path / "none", a) == fill
    assert len(list(cache.iterdir())) == 1  # one entry: the test split's 40 samples


def test_the_profile_reads_the_cache_and_matches_the_backbone_pass(frozen, tmp_path):
    model, test = frozen
    cache = str(tmp_path / "cache")
    profiles, calls_seen = [], []
    for options in (_options(cache_dir=cache, limit=40), _options(cache_dir=cache, limit=40, batch_size=16),
                    _options(cache=False, limit=40, batch_size=32)):
        with backbone_calls(model) as calls:
            profiles.append(layer_profile(model, test, method="ig", options=options, diagnosis=None))
        calls_seen.append(len(calls))
    assert calls_seen == [1, 0, 2]  # fill: 40 rows in one call; read: none; without the cache: 32 + 8 (padded)
    for other in profiles[1:]:
        assert other.scores.equals(profiles[0].scores)
        assert other.table.equals(profiles[0].table)


def test_changed_data_content_under_the_same_name_is_a_cache_miss(frozen, tmp_path):
    model, test = frozen
    options = _options(cache_dir=str(tmp_path / "cache"), bootstrap=0, limit=40, methods=("laya", "ig"))
    evaluate_ablations(model, test, ["gate"], options=options)
    changed = dataclasses.replace(test, x=test.x.clone())
    changed.x[5] = changed.x[5].flip(-1)  # one image mirrored: same name, split and size
    with backbone_calls(model) as calls:
        cached = evaluate_ablations(model, changed, ["gate"], options=options)["gate"]
    assert len(calls) == 1  # encoded again (40 rows, one call), not read back
    direct = evaluate_ablations(model, changed, ["gate"], options=dataclasses.replace(options, cache=False))["gate"]
    assert cached.layers.equals(direct.layers)
    assert len(list((tmp_path / "cache").iterdir())) == 2


def test_network_scope_and_trainable_backbones_run_the_backbone(frozen, digits_models, digits, tmp_path):
    model, test = frozen
    cache = str(tmp_path / "cache")
    head = make_plan(model, test, ["zero"], options=_options(cache_dir=cache, limit=20))
    network = make_plan(model, test, ["zero"], options=_options(cache_dir=cache, limit=20, scope="network",
                                                               ablation="zero"))
    half = make_plan(model, test, ["zero"], options=_options(cache_dir=cache, limit=20, dtype="bfloat16"))
    switched_off = make_plan(model, test, ["zero"], options=_options(cache=False, limit=20))
    trainable = make_plan(digits_models["laya"], digits["test"], ["zero"], options=_options(cache_dir=cache, limit=20))
    assert with_cached_features(head).features is not None
    for plan in (network, half, switched_off, trainable):
        assert with_cached_features(plan).features is None
    with backbone_calls(model) as calls:
        evaluate_ablations(model, test, ["zero"], options=_options(cache_dir=cache, limit=20, scope="network",
                                                                   ablation="zero", methods=("laya",), bootstrap=0))
    assert len(calls) > 0


def test_a_backbone_without_vector_states_is_not_read_from_the_cache(frozen):
    model, test = frozen
    plan = make_plan(model, test, ["gate"], options=_options(limit=20))
    model.backbone.vector_states = False  # e.g. a py: backbone without pooling: its maps reach the methods
    try:
        assert with_cached_features(plan).features is None
    finally:
        model.backbone.vector_states = True


def test_the_cached_states_equal_the_backbone_on_a_split_whose_last_batch_is_small(frozen, tmp_path):
    """The oracle: the backbone on 256 rows and on the last 17; the cache encodes 256 rows, then 1 row padded to 16
    (unpadded, that one row's deeper states differ in their last bits on the CPU)."""
    from laya_eval.loading.feature_cache import backbone_features

    model, test = frozen
    part = test.subset(slice(0, 257))
    features = backbone_features(model.backbone, part, cache_dir=tmp_path)
    with torch.no_grad():
        direct = model.backbone(part.x[:256]), model.backbone(part.x[240:257])
    for i, h in enumerate(features.hidden):
        assert torch.equal(h[:256], direct[0][i])
        assert torch.equal(h[256:], direct[1][i][16:])
