"""A checkpoint's frozen Hugging Face encoder is loaded only when a pooled state is missing from the feature cache.

Oracles: the same run with the cache switched off (the encoder batch by batch, as always) and the eagerly built
backbone. Loading is observed by replacing ``_load_pretrained``, the one place the weights and tokenizer are read.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from laya_eval.data.dataset import Dataset
from laya_eval.engine.evaluation import EvalOptions, evaluate
from laya_eval.errors import CheckpointError
from laya_eval.loading import feature_cache
from laya_eval.loading.checkpoints import load_checkpoint, save_checkpoint
from laya_eval.models.backbones import hf
from laya_eval.models.heads import make_head
from laya_eval.models.layered import LayeredModel, ModelInfo
from tests.test_content_keys import WORDS, _tiny_bert

TABLES = ("layers.csv", "samples.csv", "summary.csv", "comparisons.csv")


@pytest.fixture()
def setup(tmp_path):
    """A concat head on a tiny BERT saved by reference, 40 sentences, a spy on the encoder loads."""
    folder = _tiny_bert(tmp_path / "bert")
    backbone = hf.HFBackbone(str(folder))
    torch.manual_seed(2)
    info = ModelInfo(num_classes=2, class_names=("n", "p"), input_shape=None, dataset=None)
    save_checkpoint(LayeredModel(backbone, make_head("concat", backbone.layer_dims, 2), info), tmp_path / "c.pt")
    rng = np.random.default_rng(0)
    data = Dataset(
        x=[" ".join(rng.choice(WORDS, 7)) for _ in range(40)],
        y=torch.arange(40) % 2,
        class_names=("n", "p"),
        name="texts",
        split="test",
    )
    return tmp_path / "c.pt", data, tmp_path


def _run(ckpt, data, out, cache_dir, **kw):
    options = EvalOptions(bootstrap=100, n_steps=4, methods=("contribution", "ig", "random"), cache_dir=cache_dir, **kw)
    evaluate(ckpt, data, options=dataclasses.replace(options, ablation=("gate",)), out=out)
    return {name: (out / name).read_bytes() for name in TABLES}


def _count_loads(monkeypatch, fail: bool = False) -> list:
    loads, real = [], hf._load_pretrained

    def spy(*args, **kwargs):
        loads.append(args[0])
        if fail:
            raise AssertionError("the encoder was loaded")
        return real(*args, **kwargs)

    monkeypatch.setattr(hf, "_load_pretrained", spy)
    return loads


def test_a_warm_head_scope_run_never_loads_the_encoder_and_writes_the_same_bytes(setup, monkeypatch):
    ckpt, data, tmp = setup
    cache = tmp / "cache"
    loads = _count_loads(monkeypatch)
    cold = _run(ckpt, data, tmp / "cold", cache)
    assert len(loads) == 1  # the probe batch and the split were encoded
    monkeypatch.undo()
    _count_loads(monkeypatch, fail=True)
    warm = _run(ckpt, data, tmp / "warm", cache)
    monkeypatch.undo()
    without = _run(ckpt, data, tmp / "nocache", tmp / "unused", cache=False)
    assert cold == warm == without
    assert not (tmp / "unused").exists()


def test_network_scope_and_a_cache_miss_load_the_encoder(setup, monkeypatch):
    ckpt, data, tmp = setup
    cache = tmp / "cache"
    _run(ckpt, data, tmp / "cold", cache)
    loads = _count_loads(monkeypatch)
    _run(ckpt, data.subset(slice(0, 24)), tmp / "fewer", cache)  # the probe is cached, these 24 sentences are not
    assert len(loads) == 1
    load_checkpoint(ckpt, feature_cache=True, cache_dir=cache)(data.x[:3])  # a lazy model runs when called
    assert len(loads) == 2


def test_another_transformers_version_misses_the_cache(setup, monkeypatch):
    ckpt, data, tmp = setup
    cache = tmp / "cache"
    cold = _run(ckpt, data, tmp / "cold", cache)
    real = feature_cache.library_versions
    monkeypatch.setattr(
        feature_cache,
        "library_versions",
        lambda config: {**real(config), "transformers": "0.0.1"} if config.get("name") == "hf" else real(config),
    )
    assert real({"name": "hf"})["transformers"] is not None
    loads = _count_loads(monkeypatch)
    assert _run(ckpt, data, tmp / "other", cache) == cold
    assert len(loads) == 1


def test_the_probe_guard_holds_when_the_probe_is_read_from_the_cache(setup, monkeypatch):
    ckpt, data, tmp = setup
    cache = tmp / "cache"
    _run(ckpt, data, tmp / "cold", cache)
    _count_loads(monkeypatch, fail=True)
    head_class = type(make_head("concat", [8, 8, 8], 2))
    real_forward = head_class.forward
    monkeypatch.setattr(head_class, "forward", lambda self, *a, **k: real_forward(self, *a, **k) + 1e-3)
    with pytest.raises(CheckpointError, match="other logits on the probe batch"):
        load_checkpoint(ckpt, feature_cache=True, cache_dir=cache)


def test_a_lazy_backbone_equals_the_eager_one_and_follows_moves_made_before_it_loads(setup):
    _, data, tmp = setup
    eager = hf.HFBackbone(str(tmp / "bert"))
    lazy = hf.HFBackbone(str(tmp / "bert"), lazy=True)
    assert not lazy.loaded and (lazy.layer_names, lazy.layer_dims) == (eager.layer_names, eager.layer_dims)
    assert list(lazy.parameters()) == []
    lazy.eval()  # switching modes does not load it
    assert not lazy.loaded
    with torch.no_grad():
        for got, want in zip(lazy(data.x[:5]), eager(data.x[:5])):
            torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert lazy.loaded and not lazy.model.training
    double = hf.HFBackbone(str(tmp / "bert"), lazy=True).to(torch.float64)
    assert {p.dtype for p in double.model.parameters()} == {torch.float64}


def test_only_a_single_process_head_scope_float32_run_with_the_cache_loads_lazily(setup):
    from laya_eval.engine.distributed import World
    from laya_eval.engine.plan import _resolve_model

    ckpt, _, tmp = setup
    cpu = torch.device("cpu")

    def loaded(world=World(), **kw):
        model, _ = _resolve_model(str(ckpt), cpu, EvalOptions(cache_dir=tmp / "cache", **kw), world)
        return model.backbone.loaded

    assert loaded()  # the probe batch is not cached yet: its states are computed (and stored)
    assert not loaded()
    # torchrun ranks do not read the cache (nor fill the same entry at once); the others run the encoder anyway
    assert loaded(World(rank=0, size=2)) and loaded(cache=False) and loaded(scope="network", ablation="zero")
    assert loaded(dtype="bfloat16")


def test_a_lazy_build_refuses_a_config_declaring_more_layers_than_a_checkpoint_may_hold(tmp_path):
    import json

    from laya_eval.errors import ConfigError

    folder = _tiny_bert(tmp_path / "bert")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 10**9}))
    with pytest.raises(ConfigError, match="declares 1000000000 layers of width 8; laya-eval reads 1 to 1024 layers"):
        hf.HFBackbone(str(folder), lazy=True)


def test_a_config_read_through_autoconfig_is_bounded_alike(tmp_path):
    # DistilBERT names its sizes n_layers / dim: config.json lacks num_hidden_layers, so AutoConfig reads them
    import json

    from laya_eval.errors import ConfigError

    pytest.importorskip("transformers")
    folder = tmp_path / "distil"
    folder.mkdir()
    (folder / "config.json").write_text(
        json.dumps(
            {"model_type": "distilbert", "n_layers": 1025, "dim": 8, "n_heads": 2, "hidden_dim": 16, "vocab_size": 20}
        )
    )
    with pytest.raises(ConfigError, match="declares 1025 layers of width 8; laya-eval reads 1 to 1024 layers"):
        hf.HFBackbone(str(folder), lazy=True)
