"""Start at block: backbones continue from a block's output, and network scope reuses the plain pass up to the first
removed block.

Oracles: each backbone's own ``forward`` from the input (transformers' ``BertModel.forward`` and
``DistilBertModel.forward`` for the ``hf:`` layouts), and the from-input route of the engine (the backbone told it
cannot start at a block). Block evaluations are counted by forward hooks on the blocks (rows per call, summed).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from laya_eval.data import Dataset
from laya_eval.engine.evaluation import EvalOptions, evaluate
from laya_eval.errors import ConfigError
from laya_eval.models.backbones import ModuleBackbone, make_backbone
from laya_eval.models.heads import make_head
from laya_eval.models.layered import LayeredModel, ModelInfo

transformers = pytest.importorskip("transformers")

N, CLASSES = 32, 3
TEXTS = [
    " ".join(["good", "bad", "fine", "poor", "great", "awful", "nice", "dull"][j % 8] for j in range(i, i + 2 + i % 5))
    for i in range(N)
]  # 2 to 6 words: padded batches


def _assert_continues(backbone, x) -> None:
    """``forward_from(i, output_i, x)`` gives the states ``forward(x)`` gives from layer i on, to the bit."""
    model = LayeredModel(backbone, make_head("concat", backbone.layer_dims, CLASSES)).eval()
    with torch.no_grad():
        hidden, outputs = model.block_outputs(x)
        for i in range(backbone.n_layers):
            got = backbone.forward_from(i, outputs[i], x)
            assert len(got) == backbone.n_layers - i
            for a, b in zip(got, hidden[i:]):
                assert torch.equal(a, b), (type(backbone).__name__, i)
        # a replacement after the start acts as in forward
        last = backbone.n_layers - 1
        replace = {last: lambda t: 0.5 * t}
        for a, b in zip(backbone.forward_from(0, outputs[0], x, replace), backbone(x, replace=replace)):
            assert torch.equal(a, b)


def _bert_folder(root, distil: bool = False):
    from tests.test_update_ablations import _tiny_bert

    folder = _tiny_bert(root / "bert")
    if not distil:
        return folder
    torch.manual_seed(0)
    config = transformers.DistilBertConfig(
        vocab_size=13, dim=8, n_layers=3, n_heads=2, hidden_dim=16, max_position_embeddings=32
    )
    transformers.DistilBertModel(config).save_pretrained(root / "distil", safe_serialization=True)
    transformers.AutoTokenizer.from_pretrained(folder).save_pretrained(root / "distil")
    return root / "distil"


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(6, 6)

    def forward(self, h):
        return h + torch.tanh(self.linear(h))


class _Residual(nn.Module):
    """Residual blocks in a ModuleList (not a Sequential) and the protocol's ``forward_from(name, output)``."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Linear(6, 6)
        self.blocks = nn.ModuleList(_Block() for _ in range(3))
        self.out = nn.Linear(6, 2)

    def forward(self, x):
        h = self.stem(x)
        for block in self.blocks:
            h = block(h)
        return self.out(h)

    def forward_from(self, name, h):
        for block in self.blocks[int(name.rpartition(".")[2]) + 1 :]:
            h = block(h)
        return self.out(h)


class _NoProtocol(_Residual):
    forward_from = None


def _sequential() -> nn.Sequential:
    torch.manual_seed(5)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh()).eval()


def test_every_built_in_backbone_continues_from_a_block_as_it_runs_from_the_input():
    torch.manual_seed(0)
    _assert_continues(make_backbone("mlp", in_features=16, widths=[8, 8, 4]), torch.randn(16, 16))
    _assert_continues(make_backbone("cnn", in_channels=3, channels=[4, 4, 8]), torch.randn(16, 3, 8, 8))
    vit = make_backbone("vit", image_size=8, patch_size=4, in_channels=1, dim=8, depth=3, heads=2)
    _assert_continues(vit, torch.randn(16, 1, 8, 8))


@pytest.mark.parametrize("distil", [False, True], ids=["bert", "distilbert"])
def test_hf_encoders_continue_through_their_own_blocks_with_the_attention_mask(tmp_path, distil):
    from laya_eval.models.backbones.hf import HFBackbone

    folder = _bert_folder(tmp_path, distil)
    for layers in (None, ["layer*"], ["embeddings", "layer2", "layer3"]):
        backbone = HFBackbone(str(folder), layers=layers)
        assert backbone.starts_at_block
        _assert_continues(backbone, TEXTS[:16])  # padded: the mask matters


def test_py_models_continue_as_an_nn_sequential_or_through_forward_from():
    x = torch.randn(16, 6)
    seq = ModuleBackbone(_sequential(), ["1", "3", "5"], example_input=x)
    assert seq.starts_at_block
    _assert_continues(seq, x)
    nested = nn.Sequential(nn.Linear(6, 6), _sequential())  # the blocks of a Sequential inside the network
    _assert_continues(ModuleBackbone(nested, ["1.1", "1.5"], example_input=x), x)
    torch.manual_seed(1)
    protocol = ModuleBackbone(_Residual().eval(), ["blocks.0", "blocks.1", "blocks.2"], example_input=x)
    assert protocol.starts_at_block
    _assert_continues(protocol, x)
    other = ModuleBackbone(_NoProtocol().eval(), ["blocks.0", "blocks.1", "blocks.2"], example_input=x)
    assert not other.starts_at_block
    with pytest.raises(ConfigError, match="cannot start at a block; run it from the input"):
        other.forward_from(0, torch.zeros(2, 6), x)


# --------------------------------------------------------------------------- the engine: counts and results
def _ordered_laya(dims, seed: int):
    """A LAYA head whose layer weights are the same for every input and grow with depth: every method that reads
    them ranks the last layer first, so its deletion curve removes the last k layers (one set per k)."""
    torch.manual_seed(seed)
    head = make_head("laya", dims, CLASSES)
    with torch.no_grad():
        head.scorer[-1].weight.zero_()
        head.scorer[-1].bias.copy_(torch.arange(len(dims), dtype=torch.float32))
    return head


def _from_the_input(model, monkeypatch) -> None:
    """Tell the backbone it cannot start at a block (an instance's own flag, or its class's property)."""
    owner = model.backbone if "starts_at_block" in vars(model.backbone) else type(model.backbone)
    monkeypatch.setattr(owner, "starts_at_block", False)


def _counted(model, data, blocks, ablation: str, monkeypatch, from_input: bool):
    """(block evaluations per input, result) of a network-scope run with method ``laya``."""
    if from_input:
        _from_the_input(model, monkeypatch)
    rows = [0]
    handles = [b.register_forward_hook(lambda m, a, out: rows.__setitem__(0, rows[0] + len(out))) for b in blocks]
    try:
        opts = EvalOptions(scope="network", ablation=(ablation,), methods=("laya",), bootstrap=0, batch_size=N)
        result = evaluate(model, data, options=opts)[ablation]
    finally:
        for h in handles:
            h.remove()
        monkeypatch.undo()
    return rows[0] / N, result


def _vit_case():
    torch.manual_seed(0)
    backbone = make_backbone("vit", image_size=8, patch_size=4, in_channels=1, dim=8, depth=4, heads=2)
    model = LayeredModel(backbone, _ordered_laya(backbone.layer_dims, 1), ModelInfo(CLASSES, input_shape=(1, 8, 8)))
    data = Dataset(
        x=torch.randn(N, 1, 8, 8), y=torch.arange(N) % CLASSES, class_names=("a", "b", "c"), name="v", split="test"
    )
    return model.eval(), data, list(backbone.blocks), "skip"


def _bert_case(tmp_path):
    from laya_eval.models.backbones.hf import HFBackbone

    backbone = HFBackbone(str(_bert_folder(tmp_path)), layers=["layer*"])
    model = LayeredModel(backbone, _ordered_laya(backbone.layer_dims, 2), ModelInfo(CLASSES))
    data = Dataset(x=TEXTS, y=torch.arange(N) % CLASSES, class_names=("a", "b", "c"), name="t", split="test")
    return model.eval(), data, list(backbone.model.encoder.layer), "skip"


def _sequential_case():
    net = _sequential()
    backbone = ModuleBackbone(net, ["1", "3", "5"], example_input=torch.zeros(2, 6))
    model = LayeredModel(backbone, _ordered_laya(backbone.layer_dims, 3), ModelInfo(CLASSES, input_shape=(6,)))
    data = Dataset(
        x=torch.randn(N, 6), y=torch.arange(N) % CLASSES, class_names=("a", "b", "c"), name="s", split="test"
    )
    return model.eval(), data, [net[0], net[2], net[4]], "zero"


@pytest.mark.parametrize("case", ["vit", "bert", "sequential"])
def test_leave_one_out_at_network_scope_stays_within_its_floor_and_gives_the_same_effects(case, tmp_path, monkeypatch):
    model, data, blocks, ablation = {
        "vit": _vit_case,
        "bert": lambda: _bert_case(tmp_path),
        "sequential": _sequential_case,
    }[case]()
    n = len(blocks)
    before, old = _counted(model, data, blocks, ablation, monkeypatch, from_input=True)
    after, new = _counted(model, data, blocks, ablation, monkeypatch, from_input=False)
    assert old.manifest["network_route"].startswith("from the input")
    assert new.manifest["network_route"].startswith("start at block")
    # From the input: the plain pass (L), then L leave-one-out removals and the L - 1 deletion sets beyond k = 1
    # (the last k layers), each through all L blocks: 2 L^2 (32 for L = 4, 18 for L = 3), plus one-row probes; a
    # list of texts cannot be gathered by rows, so there k = 1 runs again (2 L^2 + L: 21 for L = 3).
    assert before >= 2 * n * n
    # From the first removed block: L + L(L-1)/2 (leave-one-out) + L(L-1)/2 (the deletion sets), plus the probes;
    # the bound of a leave-one-out run, probes and the float64 effect pass included, is L(L+1)/2 + 2L.
    assert after < n + n * (n - 1) + 1
    assert after <= n * (n + 1) / 2 + 2 * n
    if case != "sequential":
        for table in ("layers", "samples"):
            assert getattr(new, table).equals(getattr(old, table)), table  # the same arithmetic: the same bytes
        return
    # The small Linear layers round a row by its position in the call (one float32 ulp; a row's position differs
    # between the routes' gathered passes): measured 6.4e-10 at sample 30, layer 2, effects up to 0.0155.
    assert new.layers["attribution"].equals(old.layers["attribution"])
    scale = float(old.layers["effect"].abs().max())
    assert float((new.layers["effect"] - old.layers["effect"]).abs().max()) <= 1e-6 * scale


def test_network_ig_runs_each_path_through_the_blocks_after_its_block_only(monkeypatch):
    model, data, blocks, _ = _vit_case()
    n, steps = len(blocks), 4
    counts = {}
    results = {}
    for route in ("old", "new"):
        if route == "old":
            _from_the_input(model, monkeypatch)
        rows = [0]
        handles = [b.register_forward_hook(lambda m, a, out: rows.__setitem__(0, rows[0] + len(out))) for b in blocks]
        try:
            opts = EvalOptions(
                scope="network", ablation=("zero",), methods=("ig",), n_steps=steps, bootstrap=0, batch_size=N
            )
            results[route] = evaluate(model, data, options=opts)["zero"]
        finally:
            for h in handles:
                h.remove()
            monkeypatch.undo()
        counts[route] = rows[0] / N
    floor = steps * n * (n - 1) / 2  # the IG paths' forward passes: block i's path runs the n - 1 - i blocks after it
    # plain pass, leave-one-out (L(L-1)/2) and IG's own deletion sets beyond k = 1 (at most L - 1 blocks each)
    removals = n + n * (n - 1) / 2 + (n - 1) ** 2
    completeness = n * (n - 1) / 2  # the completeness check: block i at its baseline through the blocks after it
    assert counts["new"] < floor + removals + completeness + 1
    assert counts["old"] > n * steps * n  # from the input: every path through all n blocks
    old, new = results["old"].layers, results["new"].layers
    assert new["effect"].equals(old["effect"])
    # the states before block i come from the batch's own pass instead of a pass over steps x rows: rounding only
    scale = float(old["attribution"].abs().max())
    assert float((new["attribution"] - old["attribution"]).abs().max()) <= 1e-6 * scale
