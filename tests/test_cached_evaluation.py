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
from laya_eval.engine.evaluation import EvalOptions, evaluate
from laya_eval.engine.plan import KeptStates, make_plan, with_cached_features
from laya_eval.loading.specs import load_backbone
import laya_eval
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
    fitted = fit_head(
        backbone,
        splits,
        head="laya",
        head_kwargs={"d_star": 8, "scorer_hidden": 8},
        options=options,
        cache_dir=tmp_path_factory.mktemp("fit-cache"),
    )
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
    return EvalOptions(
        **{
            "limit": LIMIT,
            "bootstrap": 100,
            "n_steps": 8,
            "draws": 2,
            "methods": ("laya", "contribution", "ig", "gradcam", "random"),
            **kw,
        }
    )


def test_a_run_that_fills_the_cache_one_that_reads_it_and_one_without_it_write_the_same_bytes(frozen, tmp_path):
    model, test = frozen
    ablations = ["gate", "mean", "resample"]  # a statistic (mean) and donors (resample) come from the cache too
    cache = tmp_path / "cache"
    runs = {}
    for name, options in (
        ("fill", _options(cache_dir=str(cache), batch_size=256)),
        ("read", _options(cache_dir=str(cache), batch_size=7)),
        ("none", _options(cache=False, batch_size=13)),
    ):
        with backbone_calls(model) as calls:
            evaluate(model, test, options=dataclasses.replace(options, ablation=tuple(ablations)), out=tmp_path / name)
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
    for options in (
        _options(cache_dir=cache, limit=40),
        _options(cache_dir=cache, limit=40, batch_size=16),
        _options(cache=False, limit=40, batch_size=32),
    ):
        with backbone_calls(model) as calls:
            profiles.append(laya_eval.profile(model, test, method="ig", options=options, diagnosis=None))
        calls_seen.append(len(calls))
    assert calls_seen == [1, 0, 2]  # fill: 40 rows in one call; read: none; without the cache: 32 + 8 (padded)
    for other in profiles[1:]:
        assert other.scores.equals(profiles[0].scores)
        assert other.table.equals(profiles[0].table)


def test_changed_data_content_under_the_same_name_is_a_cache_miss(frozen, tmp_path):
    model, test = frozen
    options = _options(cache_dir=str(tmp_path / "cache"), bootstrap=0, limit=40, methods=("laya", "ig"))
    evaluate(model, test, options=dataclasses.replace(options, ablation=("gate",)))
    changed = dataclasses.replace(test, x=test.x.clone())
    changed.x[5] = changed.x[5].flip(-1)  # one image mirrored: same name, split and size
    with backbone_calls(model) as calls:
        cached = evaluate(model, changed, options=dataclasses.replace(options, ablation=("gate",)))["gate"]
    assert len(calls) == 1  # encoded again (40 rows, one call), not read back
    direct = evaluate(model, changed, options=dataclasses.replace(options, cache=False, ablation=("gate",)))["gate"]
    assert cached.layers.equals(direct.layers)
    assert len(list((tmp_path / "cache").iterdir())) == 2


def test_network_scope_and_trainable_backbones_run_the_backbone(frozen, digits_models, digits, tmp_path):
    model, test = frozen
    cache = str(tmp_path / "cache")
    head = make_plan(model, test, options=_options(cache_dir=cache, limit=20, ablation=("zero",)))
    network = make_plan(
        model,
        test,
        options=dataclasses.replace(
            _options(cache_dir=cache, limit=20, scope="network", ablation="zero"), ablation=("zero",)
        ),
    )
    half = make_plan(model, test, options=_options(cache_dir=cache, limit=20, dtype="bfloat16", ablation=("zero",)))
    switched_off = make_plan(model, test, options=_options(cache=False, limit=20, ablation=("zero",)))
    trainable = make_plan(
        digits_models["laya"], digits["test"], options=_options(cache_dir=cache, limit=20, ablation=("zero",))
    )
    assert with_cached_features(head).features is not None
    for plan in (network, half, switched_off, trainable):
        assert with_cached_features(plan).features is None
    with backbone_calls(model) as calls:
        evaluate(
            model,
            test,
            options=dataclasses.replace(
                _options(cache_dir=cache, limit=20, scope="network", ablation="zero", methods=("laya",), bootstrap=0),
                ablation=("zero",),
            ),
        )
    assert len(calls) > 0


def test_a_backbone_without_vector_states_is_not_read_from_the_cache(frozen):
    model, test = frozen
    plan = make_plan(model, test, options=_options(limit=20, ablation=("gate",)))
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


@contextmanager
def backbone_rows(model):
    """Count the rows of every forward call of ``model.backbone`` inside the block."""
    rows = []
    handle = model.backbone.register_forward_pre_hook(lambda module, args: rows.append(len(args[0])))
    try:
        yield rows
    finally:
        handle.remove()


def _without_kept_states(monkeypatch):
    """The engine as it runs where no state is kept: the main pass runs the backbone again (the oracle)."""
    monkeypatch.setattr(KeptStates, "for_plan", classmethod(lambda cls, plan, world=None: None))


@pytest.mark.parametrize("head", ["laya", "concat"])
def test_a_trainable_backbone_runs_once_its_states_kept_between_the_passes(
    digits_models, digits, tmp_path, monkeypatch, head
):
    """Without a feature cache, a run that needs a dataset statistic keeps the statistics pass's pooled states for
    the main pass: the backbone sees each sample once (40 samples in batches of 16: 16 + 16 + 8 padded to 16), and
    the tables are the bytes of the run that runs the backbone in both passes."""
    model, ablations = digits_models[head], ["gate", "mean", "resample"]
    options = _options(
        limit=40,
        batch_size=16,
        methods=("laya", "static", "contribution", "ig", "random")
        if head == "laya"
        else ("contribution", "ig", "random"),
    )
    with backbone_rows(model) as kept:
        evaluate(
            model,
            digits["test"],
            options=dataclasses.replace(options, ablation=tuple(ablations)),
            out=tmp_path / "kept",
        )
    _without_kept_states(monkeypatch)
    with backbone_rows(model) as twice:
        evaluate(
            model,
            digits["test"],
            options=dataclasses.replace(options, ablation=tuple(ablations)),
            out=tmp_path / "twice",
        )
    assert kept == [16, 16, 16] and sum(twice) > 2 * sum(kept)  # twice: both passes and the resample donors
    for a in ablations:
        assert _tables(tmp_path / "kept", a) == _tables(tmp_path / "twice", a)


def test_states_are_not_kept_when_they_are_maps_or_exceed_the_memory_budget(digits):
    from laya_eval.data import Dataset
    from laya_eval.training.trainer import build_model

    def images(d):
        return Dataset(d.x.view(-1, 1, 8, 8), d.y, d.class_names, "digits-8x8", d.split)

    train, test = digits["train"], digits["test"]
    cnn = build_model("cnn", "concat", images(train), seed=0).eval()
    test = images(test)
    plan = make_plan(cnn, test, options=_options(limit=40, methods=("contribution",), ablation=("mean",)))
    keep = KeptStates.for_plan(plan)
    with backbone_rows(cnn) as rows:
        evaluate(cnn, test, options=_options(limit=40, methods=("contribution",), bootstrap=0, ablation=("mean",)))
    assert keep is not None and sum(rows) == 2 * 48  # maps (B, C, H, W) at head scope: the backbone runs twice
    from laya_eval.engine.evaluation import _batches, _trace

    for x, y, ids, index in _batches(plan, 0, 40):
        keep.add(_trace(plan, x, y, ids, index)[0].hidden, ids, index)
    assert keep.into(plan) is plan
    # 360 samples x (2048 + 2048) float32 states = 5.6 MiB: kept within 2048 MiB, not within 1 MiB
    test = digits["test"]
    wide = build_model("mlp", "concat", train, backbone_kwargs={"widths": [2048, 2048]}, seed=0).eval()
    every = dict(methods=("contribution",), limit=None)
    assert (
        KeptStates.for_plan(make_plan(wide, test, options=dataclasses.replace(_options(**every), ablation=("mean",))))
        is not None
    )
    assert (
        KeptStates.for_plan(
            make_plan(wide, test, options=dataclasses.replace(_options(**every, max_memory_mb=1), ablation=("mean",)))
        )
        is None
    )
