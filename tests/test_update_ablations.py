"""``skip`` and the update forms of mean, resample and noise against hand loops over the blocks.

The oracle calls a network's blocks one by one (transformers' own ``BertLayer`` modules for a small random BERT, the
residual blocks of a small CNN), puts block i's input (plus the replacement update) in place of its output, pools
as the backbone does and reads the float64 head. It first reproduces ``zero`` at network scope, which the tool
already handles, before it judges the update forms.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from laya_eval.data import Dataset
from laya_eval.engine.evaluation import EvalOptions, evaluate
from laya_eval.engine.interventions import NOISE_STREAM
from laya_eval.engine.seeding import derived_seed, per_sample_normal
from laya_eval.errors import ConfigError
from laya_eval.models.backbones import ModuleBackbone
from laya_eval.models.heads import make_head
from laya_eval.models.layered import LayeredModel, ModelInfo
from tests.cli_helpers import assert_one_line_error, run

transformers = pytest.importorskip("transformers")

WORDS = ["good", "bad", "fine", "poor", "great", "awful", "nice", "dull"]
N_SAMPLES, N_CLASSES = 20, 3


# --------------------------------------------------------------------------- the tool's effects
def _effects(model, data, ablation: str, **options) -> torch.Tensor:
    """The tool's leave-one-layer-out effects (N, L) of ``ablation`` at network scope, samples in order."""
    opts = EvalOptions(scope="network", ablation=(ablation,), methods=("random",), seed=3, **options)
    return _effect_table(evaluate(model, data, options=opts)[ablation].layers)


def _effect_table(layers) -> torch.Tensor:
    """The ``effect`` column of a layers table as (N, L): samples in order, layers 1..L."""
    table = layers.pivot_table(index="sample", columns="layer", values="effect")
    return torch.tensor(table.sort_index().sort_index(axis=1).to_numpy())


def _hand_effects(head64, states_of, n_layers: int, replace_of) -> torch.Tensor:
    """Effects (N, L) by hand: ``states_of(replace)`` runs the blocks one by one with ``replace`` {layer: fn(input,
    output) -> output} and returns the pooled states; the head reads them in float64."""
    with torch.no_grad():
        probs = torch.softmax(head64([s.double() for s in states_of({})]), -1)
        pred = probs.argmax(-1, keepdim=True)
        p = probs.gather(1, pred).squeeze(1)
        out = []
        for i in range(n_layers):
            removed = torch.softmax(head64([s.double() for s in states_of({i: replace_of(i)})]), -1)
            out.append(p - removed.gather(1, pred).squeeze(1))
    return torch.stack(out, 1)


def _assert_agree(tool: torch.Tensor, hand: torch.Tensor) -> float:
    scale = float(hand.abs().max())
    assert scale > 1e-3  # the effects are not all zero: the comparison can fail
    diff = float((tool - hand).abs().max())
    assert diff <= 1e-6 * scale, (diff, scale)
    return diff


# --------------------------------------------------------------------------- a small random BERT
def _tiny_bert(folder):
    folder.mkdir()
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tok = transformers.BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)}, do_lower_case=True)
    tok.save_pretrained(folder)
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=len(vocab),
        hidden_size=8,
        num_hidden_layers=3,
        num_attention_heads=2,
        intermediate_size=16,
        max_position_embeddings=32,
        initializer_range=0.5,  # blocks that change the stream a lot: large effects to compare
    )
    transformers.BertModel(config).save_pretrained(folder, safe_serialization=True)
    return folder


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    """A LAYA head on the three BertLayer outputs of a random BERT, and texts of one length (no padding)."""
    from laya_eval.models.backbones.hf import HFBackbone

    folder = _tiny_bert(tmp_path_factory.mktemp("bert") / "bert")
    backbone = HFBackbone(str(folder), layers=["layer*"])
    torch.manual_seed(1)
    head = make_head("laya", backbone.layer_dims, N_CLASSES)
    model = LayeredModel(backbone, head, ModelInfo(num_classes=N_CLASSES))
    gen = torch.Generator().manual_seed(2)
    texts = [" ".join(WORDS[j] for j in torch.randint(len(WORDS), (6,), generator=gen)) for _ in range(N_SAMPLES)]
    data = Dataset(x=texts, y=torch.arange(N_SAMPLES) % N_CLASSES, class_names=("a", "b", "c"), name="t", split="test")
    return model, data


def _bert_states(model, texts):
    """``states_of`` for :func:`_hand_effects`: embeddings, then each BertLayer called by hand; mean over tokens."""
    encoder = model.backbone.model
    batch = model.backbone.tokenizer(texts, padding=True, return_tensors="pt")
    assert bool(batch["attention_mask"].all())  # one length: the layers need no attention mask

    def states_of(replace):
        h = encoder.embeddings(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"])
        states = []
        for i, layer in enumerate(encoder.encoder.layer):
            out = layer(h)
            h = replace[i](h, out) if i in replace else out
            states.append(h.mean(1))
        return states

    return states_of


def _bert_update_mean(model, texts):
    """The mean of each BertLayer's update over every token of every text, in float64, rounded to float32 once."""
    encoder = model.backbone.model
    batch = model.backbone.tokenizer(texts, padding=True, return_tensors="pt")
    means = []
    with torch.no_grad():
        h = encoder.embeddings(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"])
        for layer in encoder.encoder.layer:
            out = layer(h)
            means.append((out.double() - h.double()).mean((0, 1)).float())
            h = out
    return means


def test_the_bert_oracle_reproduces_zero_then_judges_skip_and_mean_update(bert):
    model, data = bert
    head64 = copy.deepcopy(model.head).double().eval()
    states_of = _bert_states(model, data.x)
    zero = _hand_effects(head64, states_of, 3, lambda i: lambda inp, out: torch.zeros_like(out))
    _assert_agree(_effects(model, data, "zero"), zero)
    skip = _hand_effects(head64, states_of, 3, lambda i: lambda inp, out: inp)
    _assert_agree(_effects(model, data, "skip"), skip)
    assert float((skip - zero).abs().max()) > 1e-3  # skip is not zero in disguise
    mean = _bert_update_mean(model, data.x)
    mean_update = _hand_effects(head64, states_of, 3, lambda i: lambda inp, out: inp + mean[i])
    _assert_agree(_effects(model, data, "mean-update"), mean_update)
    assert float((mean_update - skip).abs().max()) > 1e-4


def test_skip_refuses_the_embeddings_before_any_work(bert, tmp_path):
    from laya_eval.models.backbones.hf import HFBackbone

    model, data = bert
    backbone = HFBackbone(model.backbone.model_ref)  # embeddings, layer1 .. layer3
    whole = LayeredModel(backbone, make_head("concat", backbone.layer_dims, N_CLASSES), ModelInfo(N_CLASSES))
    with pytest.raises(ConfigError, match=r"layer 'embeddings' is given no tensor input, so it has no update to repl"):
        evaluate(whole, data, options=EvalOptions(scope="network", ablation=("skip",)), out=tmp_path / "out")
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- a residual CNN (py: kind of model)
class _ResidualBlock(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x):
        return x + self.conv2(torch.tanh(self.conv1(x)))


class ResidualCNN(nn.Module):
    """A stem and three residual blocks of one shape."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(1, 4, 3, padding=1)
        self.blocks = nn.ModuleList(_ResidualBlock(4) for _ in range(3))

    def forward(self, x):
        h = self.stem(x)
        for block in self.blocks:
            h = block(h)
        return h


@pytest.fixture(scope="module")
def cnn():
    torch.manual_seed(4)
    net = ResidualCNN().eval()
    x = torch.randn(N_SAMPLES, 1, 6, 6)
    backbone = ModuleBackbone(net, ["blocks.0", "blocks.1", "blocks.2"], example_input=x[:2], pool="avg")
    head = make_head("laya", backbone.layer_dims, N_CLASSES)
    model = LayeredModel(backbone, head, ModelInfo(num_classes=N_CLASSES, input_shape=(1, 6, 6)))
    data = Dataset(x=x, y=torch.arange(N_SAMPLES) % N_CLASSES, class_names=("a", "b", "c"), name="r", split="test")
    return model, data


def _cnn_states(net, x):
    def states_of(replace):
        h = net.stem(x)
        states = []
        for i, block in enumerate(net.blocks):
            out = block(h)
            h = replace[i](h, out) if i in replace else out
            states.append(h.mean((2, 3)))
        return states

    return states_of


def _cnn_updates(net, x):
    """Each block's update (N, C, H, W) in the plain pass, in float64."""
    with torch.no_grad():
        h, updates = net.stem(x), []
        for block in net.blocks:
            out = block(h)
            updates.append(out.double() - h.double())
            h = out
    return updates


def test_the_cnn_oracle_reproduces_zero_then_judges_skip_and_mean_update(cnn):
    model, data = cnn
    net, head64 = model.backbone.module, copy.deepcopy(model.head).double().eval()
    states_of = _cnn_states(net, data.x)
    _assert_agree(_effects(model, data, "zero"), _hand_effects(head64, states_of, 3, lambda i: lambda a, o: 0 * o))
    skip = _hand_effects(head64, states_of, 3, lambda i: lambda inp, out: inp)
    _assert_agree(_effects(model, data, "skip"), skip)
    mean = [u.mean(0).float() for u in _cnn_updates(net, data.x)]
    _assert_agree(
        _effects(model, data, "mean-update"), _hand_effects(head64, states_of, 3, lambda i: lambda a, o: a + mean[i])
    )


def _drawn_hand_effects(model, data, fill_of, draws: int) -> torch.Tensor:
    """Effects (N, L) by hand for an update drawn per sample: ``fill_of(j, i)`` is draw ``j``'s update of block ``i``
    for every sample, (N, C, H, W); the probabilities are averaged over the draws."""
    net, head64 = model.backbone.module, copy.deepcopy(model.head).double().eval()
    states_of = _cnn_states(net, data.x)
    with torch.no_grad():
        probs = torch.softmax(head64([s.double() for s in states_of({})]), -1)
        pred = probs.argmax(-1, keepdim=True)
        out = []
        for i in range(3):
            mean_p = 0
            for j in range(draws):
                v = fill_of(j, i)
                removed = torch.softmax(head64([s.double() for s in states_of({i: lambda a, o: a + v})]), -1)
                mean_p = mean_p + removed
            out.append(probs.gather(1, pred).squeeze(1) - (mean_p / draws).gather(1, pred).squeeze(1))
    return torch.stack(out, 1)


def test_resample_update_puts_a_donors_update_on_the_blocks_input(cnn):
    model, data = cnn
    opts = EvalOptions(scope="network", ablation=("resample-update",), methods=("random",), seed=3, draws=2)
    result = evaluate(model, data, options=opts)["resample-update"]
    donors = result.donors.sort_values(["sample", "draw"])["donor"].to_numpy().reshape(N_SAMPLES, 2)
    updates = [u.float() for u in _cnn_updates(model.backbone.module, data.x)]
    hand = _drawn_hand_effects(model, data, lambda j, i: updates[i][torch.as_tensor(donors[:, j].copy())], 2)
    _assert_agree(_effect_table(result.layers), hand)


def test_noise_update_draws_noise_of_the_updates_moments(cnn):
    model, data = cnn
    updates = _cnn_updates(model.backbone.module, data.x)
    mu = [u.mean(0).float() for u in updates]
    sq = [(u * u).mean(0).float() for u in updates]
    ids = torch.arange(N_SAMPLES)

    def fill_of(j, i):  # the same random numbers the noise ablations draw: (seed, stream, draw, layer), per sample
        std = torch.sqrt(torch.clamp(sq[i].double() - mu[i].double() ** 2, min=0.0))
        eps = per_sample_normal(derived_seed(3, NOISE_STREAM, j, i), ids, mu[i].numel()).view(-1, *mu[i].shape)
        return (mu[i].double() + std * eps).float()

    hand = _drawn_hand_effects(model, data, fill_of, 2)
    _assert_agree(_effects(model, data, "noise-update", draws=2), hand)


# --------------------------------------------------------------------------- depth mixers (DenseFormer, AttnRes)
def _mixer_model(kind: str):
    """A LAYA head on the block states of a reference depth-mixer classifier (trained-looking random weights)."""
    from laya_eval.mixers.reference import PatchDepthClassifier

    torch.manual_seed(5)
    net = PatchDepthClassifier(kind, image_size=8, patch=4, dim=8, depth=3, heads=2, n_classes=N_CLASSES)
    with torch.no_grad():
        for p in net.parameters():
            p.normal_(0, 0.5)
    net.eval()
    x = torch.randn(N_SAMPLES, 1, 8, 8, generator=torch.Generator().manual_seed(6))
    names = [f"block_states.{i}" for i in range(3)]
    backbone = ModuleBackbone(net, names, example_input=x[:2], pool="flatten")
    head = make_head("laya", backbone.layer_dims, N_CLASSES)
    model = LayeredModel(backbone, head, ModelInfo(num_classes=N_CLASSES, input_shape=(1, 8, 8)))
    data = Dataset(x=x, y=torch.arange(N_SAMPLES) % N_CLASSES, class_names=("a", "b", "c"), name="m", split="test")
    return model, data


def _mixer_states(net, x):
    """``states_of`` by hand from the DenseFormer definition: block i reads the mix of the embedding and the states
    so far, its state is its input plus its update (``replace`` sees that input and that state); flattened."""

    def states_of(replace):
        e = net.embed(x).flatten(2).transpose(1, 2) + net.pos
        sources, h, states = [e], e, []
        for i, (block, mixer) in enumerate(zip(net.blocks, net.mixers)):
            out = h + block(h)
            out = replace[i](h, out) if i in replace else out
            sources.append(out)
            states.append(out.flatten(1))
            h = mixer(sources)
        return states

    return states_of


def test_denseformer_block_states_take_skip_and_mean_update_as_hand_loops_do():
    model, data = _mixer_model("denseformer")
    net, head64 = model.backbone.module, copy.deepcopy(model.head).double().eval()
    states_of = _mixer_states(net, data.x)
    with torch.no_grad():  # the oracle is the model: its own forward gives the logits the hand loop implies
        e = net.embed(data.x).flatten(2).transpose(1, 2) + net.pos
        sources = [e, *(state.view_as(e) for state in states_of({}))]
        torch.testing.assert_close(net(data.x), net.classifier(net.norm(net.mixers[-1](sources)).mean(1)))
    _assert_agree(_effects(model, data, "zero"), _hand_effects(head64, states_of, 3, lambda i: lambda a, o: 0 * o))
    skip = _hand_effects(head64, states_of, 3, lambda i: lambda inp, out: inp)
    _assert_agree(_effects(model, data, "skip"), skip)
    with torch.no_grad():  # each block's update over the plain pass: its state minus the mix it read
        e = net.embed(data.x).flatten(2).transpose(1, 2) + net.pos
        sources, h, mean = [e], e, []
        for block, mixer in zip(net.blocks, net.mixers):
            u = block(h)
            mean.append(u.double().mean(0).float())
            sources.append(h + u)
            h = mixer(sources)
    mean_update = _hand_effects(head64, states_of, 3, lambda i: lambda a, o: a + mean[i])
    _assert_agree(_effects(model, data, "mean-update"), mean_update)
    assert float((mean_update - skip).abs().max()) > 1e-4


def test_attnres_block_states_have_no_block_input_so_skip_is_refused(tmp_path):
    model, data = _mixer_model("attnres")
    with pytest.raises(ConfigError, match=r"layer 'block_states.0' is given no tensor input, so it has no update"):
        evaluate(model, data, options=EvalOptions(scope="network", ablation=("skip",)), out=tmp_path / "out")
    assert not (tmp_path / "out").exists()
    net = model.backbone.module
    with torch.no_grad():  # its state is the block's output itself (block 1 reads the embedding): zero removes it
        states = model.backbone(data.x)
        e = net.embed(data.x).flatten(2).transpose(1, 2) + net.pos
        torch.testing.assert_close(states[0], net.blocks[0](e).flatten(1))


# --------------------------------------------------------------------------- refusals
def test_skip_on_the_mlps_shape_changing_layer_is_refused_in_one_line(digits_checkpoints, tmp_path):
    out = tmp_path / "out"
    result = run("faithfulness", digits_checkpoints["concat"], "--scope", "network", "--ablation", "skip", "--out", out)
    # the digits MLP's blocks map 64 -> 64 -> 32 -> 16: fc1 keeps its shape, fc2 is the first that does not
    assert_one_line_error(
        result,
        r"^Error: ablation 'skip' replaces a block's update \(output minus input\), so every layer's block must keep "
        r"its shape; layer 'fc2' maps \(64,\) to \(32,\): use an ablation that replaces the state \(zero, mean, "
        r"resample, noise\) or a head on layers whose blocks keep their shape\.$",
    )
    assert not out.exists()


def test_update_ablations_are_refused_at_head_scope_in_one_line(digits_checkpoints):
    assert_one_line_error(
        run("faithfulness", digits_checkpoints["concat"], "--ablation", "skip"),
        r"--ablation must be an ablation defined at head scope \(gate, gate-renorm, zero, mean, resample, noise: "
        r"skip acts inside the backbone: use scope 'network'\); got 'skip'\.",
    )


def test_the_update_statistics_read_the_blocks_of_the_statistics_pass_itself(cnn):
    """mean-update's statistics come from one backbone pass per batch: the pass that traces the batch records each
    block's input and output, and the update statistics read them instead of running the blocks again."""
    from laya_eval.engine.evaluation import collect_statistics
    from laya_eval.engine.plan import make_plan

    model, data = cnn
    plan = make_plan(model, data, options=EvalOptions(scope="network", ablation="mean-update", batch_size=4))
    assert "update_mean" in plan.statistics
    calls = []
    handle = model.backbone.module.blocks[0].register_forward_hook(lambda *a: calls.append(1))
    try:
        means = collect_statistics(plan, 0, len(data))
    finally:
        handle.remove()
    batches = -(-len(data) // 4)
    assert len(calls) == batches  # one pass per batch, not one more per update statistic
    torch.testing.assert_close(means["update_mean"][0].double(), _cnn_updates(model.backbone.module, data.x)[0].mean(0))
