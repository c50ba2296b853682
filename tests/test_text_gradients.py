"""Gradient methods at network scope on text, and attribution patching (``atp``), against independent oracles.

A small random BERT (transformers' own modules) with a LAYA head on its three ``BertLayer`` outputs. Texts of
different lengths, so the batch is padded. The oracles:

- Captum ``LayerGradientXActivation`` and ``LayerIntegratedGradients`` hooked on ``layer[i].output`` (the
  ``BertOutput`` whose output is the block's output): its hook then runs before transformers records the block's
  output in ``hidden_states``. Hooked on the ``BertLayer`` itself after the model has run once, Captum's hook runs
  after transformers' recording hook: LayerIntegratedGradients' interpolated output reaches the later blocks while
  the head reads the recorded, untouched one (the trap, shown in the test, so the oracle is seen to be able to fail).
- Grad-CAM by hand (autograd on each text alone: no padding at all).
- ``atp`` by hand: the blocks called one by one, ``torch.autograd.grad`` of the explained probability, the dot
  product with ``h_i - new_i`` for ``zero``, ``skip`` and ``mean-update``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from laya_eval.data import Dataset
from laya_eval.engine.evaluation import EvalOptions, evaluate
from laya_eval.errors import ConfigError
from laya_eval.models.heads import make_head
from laya_eval.models.layered import LayeredModel, ModelInfo
from tests.cli_helpers import assert_one_line_error, run

transformers = pytest.importorskip("transformers")
captum_attr = pytest.importorskip("captum.attr")

WORDS = ["good", "bad", "fine", "poor", "great", "awful", "nice", "dull"]
N_SAMPLES, N_CLASSES, N_LAYERS = 16, 3, 3


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
        num_hidden_layers=N_LAYERS,
        num_attention_heads=2,
        intermediate_size=16,
        max_position_embeddings=32,
        initializer_range=0.5,
    )
    transformers.BertModel(config).save_pretrained(folder, safe_serialization=True)
    return folder


def _texts(lengths, seed: int) -> list[str]:
    gen = torch.Generator().manual_seed(seed)
    return [" ".join(WORDS[j] for j in torch.randint(len(WORDS), (n,), generator=gen)) for n in lengths]


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    """A LAYA head on the three BertLayer outputs of a random BERT; ``ragged``: texts of 2 to 9 words (padding),
    ``even``: texts of 6 words (no padding)."""
    from laya_eval.models.backbones.hf import HFBackbone

    folder = _tiny_bert(tmp_path_factory.mktemp("bert") / "bert")
    backbone = HFBackbone(str(folder), layers=["layer*"])
    torch.manual_seed(1)
    head = make_head("laya", backbone.layer_dims, N_CLASSES)
    model = LayeredModel(backbone, head, ModelInfo(num_classes=N_CLASSES))
    y = torch.arange(N_SAMPLES) % N_CLASSES

    def data(texts):
        return Dataset(x=texts, y=y, class_names=("a", "b", "c"), name="t", split="test")

    ragged = data(_texts([2 + i % 8 for i in range(N_SAMPLES)], 2))
    even = data(_texts([6] * N_SAMPLES, 3))
    return model, ragged, even


def _tool(model, data, methods, ablation="zero"):
    """The tool's scores (N, L) per method, samples in order, and the predicted classes (N,)."""
    opts = EvalOptions(scope="network", ablation=(ablation,), methods=tuple(methods), bootstrap=0, seed=3)
    result = evaluate(model, data, options=opts)[ablation]
    table = result.layers.pivot_table(index=["method", "sample"], columns="layer", values="attribution")
    pred = torch.tensor(result.samples.drop_duplicates("sample").sort_values("sample").pred.to_numpy())
    return {m: torch.tensor(table.loc[m].sort_index().to_numpy()) for m in methods}, pred


def _batch(model, texts):
    return model.backbone.tokenizer(texts, padding=True, return_tensors="pt")


def _pooled_logits(model, hidden, mask):
    """The LAYA head on masked token means of transformers' recorded layer outputs."""
    m = mask[:, :, None].to(hidden[0].dtype)
    return model.head([(h * m).sum(1) / m.sum(1) for h in hidden])


def _forward(model):
    encoder = model.backbone.model

    def forward(input_ids, attention_mask):
        out = encoder(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
        return _pooled_logits(model, out.hidden_states[1:], attention_mask)

    return forward


def _close(tool: torch.Tensor, oracle: torch.Tensor, rtol: float) -> float:
    tool, oracle = tool.detach(), oracle.detach()
    scale = float(oracle.abs().max())
    assert scale > 1e-3  # not all zero: the comparison can fail
    diff = float((tool.double() - oracle.double()).abs().max())
    assert diff <= rtol * scale, (diff, scale)
    return diff


def _captum_grad_x_act(model, texts, pred, module_of):
    forward = _forward(model)
    batch = _batch(model, texts)
    encoder = model.backbone.model
    with torch.no_grad():
        forward(batch["input_ids"], batch["attention_mask"])  # transformers installs its recording hooks
    cols = []
    for i in range(N_LAYERS):
        attr = captum_attr.LayerGradientXActivation(forward, module_of(encoder.encoder.layer[i]))
        a = attr.attribute(batch["input_ids"], target=pred, additional_forward_args=(batch["attention_mask"],))
        cols.append(a.detach().flatten(1).sum(1))
    return torch.stack(cols, 1)


def test_network_grad_x_act_on_text_equals_captum_hooked_where_transformers_records(bert):
    model, ragged, _ = bert
    scores, pred = _tool(model, ragged, ["grad_x_act"])
    oracle = _captum_grad_x_act(model, ragged.x, pred, lambda layer: layer.output)
    _close(scores["grad_x_act"], oracle, 1e-6)
    # Captum takes gradients at the tensor the layer returned (it passes a clone on), so hooked on the BertLayer
    # itself it gives the same: the recording order matters only where Captum replaces the output (IG, below)
    _close(_captum_grad_x_act(model, ragged.x, pred, lambda layer: layer), oracle, 1e-6)


def _layer_ig(model, texts, pred, i, module_of, n_steps):
    """Captum LayerIntegratedGradients of block i's output from zeros: the forward's input ``z`` is put in place of
    the block's output by a hook registered before Captum's, so the layer's baseline is z = 0."""
    encoder = model.backbone.model
    batch = _batch(model, texts)
    with torch.no_grad():
        _, outputs = model.block_outputs(dict(batch))
    module = module_of(encoder.encoder.layer[i])
    target_module = encoder.encoder.layer[i].output
    forward = _forward(model)
    handle = target_module.register_forward_hook(lambda mod, args, out: state["z"])
    state = {}

    def forward_z(z, input_ids, attention_mask):
        state["z"] = z
        return forward(input_ids, attention_mask)

    try:
        ig = captum_attr.LayerIntegratedGradients(forward_z, module)
        attr = ig.attribute(
            outputs[i],
            baselines=torch.zeros_like(outputs[i]),
            target=pred,
            additional_forward_args=(batch["input_ids"], batch["attention_mask"]),
            n_steps=n_steps,
            method="gausslegendre",
        )
    finally:
        handle.remove()
    return attr.detach().flatten(1).sum(1)


def test_network_ig_on_text_equals_captum_layer_integrated_gradients(bert):
    model, ragged, _ = bert
    scores, pred = _tool(model, ragged, ["ig"])
    oracle = torch.stack([_layer_ig(model, ragged.x, pred, i, lambda layer: layer.output, 50) for i in range(3)], 1)
    # the trap: hooked on the BertLayer (after the model has run once), Captum's interpolated output reaches the later
    # blocks but transformers has already recorded the block's own output for hidden_states: the head reads that one
    trapped = _layer_ig(model, ragged.x, pred, 0, lambda layer: layer, 50)
    assert float((trapped - oracle[:, 0]).abs().max()) > 1e-2 * float(oracle.abs().max())
    _close(scores["ig"], oracle, 1e-6)


def test_network_gradcam_on_text_averages_over_real_tokens_only(bert):
    model, ragged, _ = bert
    scores, pred = _tool(model, ragged, ["gradcam", "grad_x_act"])
    encoder = model.backbone.model
    forward = _forward(model)
    rows = []
    for text, t in zip(ragged.x, pred):
        batch = _batch(model, [text])  # one text alone: no padding
        outs = {}

        def keep(i):
            def hook(mod, args, out):
                if not out.requires_grad:  # the frozen first block: its output becomes the graph's leaf
                    out = out.detach().requires_grad_(True)
                outs[i] = out
                return out

            return hook

        handles = [encoder.encoder.layer[i].output.register_forward_hook(keep(i)) for i in range(N_LAYERS)]
        try:
            logits = forward(batch["input_ids"], batch["attention_mask"])
            grads = torch.autograd.grad(logits[0, t], [outs[i] for i in range(N_LAYERS)])
        finally:
            for h in handles:
                h.remove()
        row = []
        for i, g in enumerate(grads):
            a = outs[i].detach()[0]  # (T, D)
            weights = g[0].mean(0)  # (D,): the gradient averaged over the text's tokens
            row.append(torch.relu(a @ weights).mean())
        rows.append(torch.stack(row))
    _close(scores["gradcam"], torch.stack(rows), 1e-6)


# --------------------------------------------------------------------------- attribution patching
def _hand_atp(model, texts, new_of):
    """First-order estimates (N, L) by hand: embeddings, then each BertLayer called one by one (one length: no
    attention mask), p_t of the predicted class from the head on token means, its gradient at every block output,
    dotted with ``h_i - new_of(i, h_{i-1}, h_i)``."""
    encoder = model.backbone.model
    batch = _batch(model, texts)
    assert bool(batch["attention_mask"].all())
    h = encoder.embeddings(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"]).detach()
    h.requires_grad_(True)
    inputs, outputs = [], []
    with torch.enable_grad():
        for layer in encoder.encoder.layer:
            out = layer(h)
            out = out[0] if isinstance(out, tuple) else out
            inputs.append(h)
            outputs.append(out)
            h = out
        probs = torch.softmax(model.head([o.mean(1) for o in outputs]), -1)
        pred = probs.argmax(1)
        grads = torch.autograd.grad(probs.gather(1, pred[:, None]).sum(), outputs)
    cols = []
    for i, (g, b, o) in enumerate(zip(grads, inputs, outputs)):
        new = new_of(i, b.detach().double(), o.detach().double())
        cols.append((g.double() * (o.detach().double() - new)).flatten(1).sum(1))
    return torch.stack(cols, 1)


def _update_means(model, texts):
    encoder = model.backbone.model
    batch = _batch(model, texts)
    means = []
    with torch.no_grad():
        h = encoder.embeddings(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"])
        for layer in encoder.encoder.layer:
            out = layer(h)
            out = out[0] if isinstance(out, tuple) else out
            means.append((out.double() - h.double()).mean((0, 1)).float().double())
            h = out
    return means


def test_atp_equals_a_hand_first_order_estimate_for_zero_skip_and_mean_update(bert):
    model, _, even = bert
    zero = _hand_atp(model, even.x, lambda i, b, o: torch.zeros_like(o))
    skip = _hand_atp(model, even.x, lambda i, b, o: b)
    means = _update_means(model, even.x)
    mean_update = _hand_atp(model, even.x, lambda i, b, o: b + means[i])
    assert float((skip - zero).abs().max()) > 1e-3  # the operators differ: the comparisons can tell them apart
    for ablation, hand in (("zero", zero), ("skip", skip), ("mean-update", mean_update)):
        scores, _ = _tool(model, even, ["atp"], ablation)
        _close(scores["atp"], hand, 1e-6)


def test_atp_on_padded_text_ignores_the_padding(bert):
    """The same texts scored in one padded batch and each alone agree (padding adds nothing to the estimate)."""
    model, ragged, _ = bert
    batched, _ = _tool(model, ragged, ["atp"], "skip")
    alone = []
    for k in range(4):  # a few texts, each in a batch of copies of itself (no padding)
        one = Dataset(x=[ragged.x[k]] * 16, y=ragged.y[:16], class_names=("a", "b", "c"), name="t", split="test")
        alone.append(_tool(model, one, ["atp"], "skip")[0]["atp"][0])
    _close(batched["atp"][:4], torch.stack(alone), 1e-5)


def test_head_scope_atp_equals_the_heads_first_order_estimate(digits_models):
    model = digits_models["laya"]
    opts = EvalOptions(ablation=("zero", "mean"), methods=("atp",), bootstrap=0, limit=32)
    result = evaluate(model, "digits", options=opts)
    from laya_eval.data import load_dataset

    x = load_dataset("digits", "test").x[:32]
    with torch.no_grad():
        states = model.hidden_states(x)
    acts = [s.detach().requires_grad_(True) for s in states]
    with torch.enable_grad():
        probs = torch.softmax(model.head(acts), -1)
        pred = probs.argmax(1)
        grads = torch.autograd.grad(probs.gather(1, pred[:, None]).sum(), acts)
    means = [s.double().mean(0) for s in states]
    for ablation, fill in (("zero", [torch.zeros_like(m) for m in means]), ("mean", means)):
        hand = torch.stack([(g.double() * (s.double() - f)).sum(1) for g, s, f in zip(grads, states, fill)], 1)
        table = result[ablation].layers.pivot_table(index="sample", columns="layer", values="attribution")
        _close(torch.tensor(table.sort_index().to_numpy()), hand, 1e-6)


def test_atp_of_a_drawn_ablation_estimates_with_the_mean_of_its_draws(digits_models):
    """resample with 3 donors: the estimate is linear in the fill, so it uses the donors' mean pooled state."""
    from laya_eval.data import load_dataset

    model = digits_models["laya"]
    opts = EvalOptions(ablation=("resample",), methods=("atp",), bootstrap=0, limit=32, draws=3, seed=4)
    result = evaluate(model, "digits", options=opts)["resample"]
    x = load_dataset("digits", "test").x[:32]
    with torch.no_grad():
        states = model.hidden_states(x)
    acts = [s.detach().requires_grad_(True) for s in states]
    with torch.enable_grad():
        probs = torch.softmax(model.head(acts), -1)
        grads = torch.autograd.grad(probs.gather(1, probs.argmax(1)[:, None]).sum(), acts)
    donors = torch.tensor(result.donors.sort_values(["sample", "draw"]).donor.to_numpy().reshape(32, 3))
    hand = torch.stack(
        [(g.double() * (s.double() - s.double()[donors].mean(1))).sum(1) for g, s in zip(grads, states)], 1
    )
    table = result.layers.pivot_table(index="sample", columns="layer", values="attribution")
    _close(torch.tensor(table.sort_index().to_numpy()), hand, 1e-6)


def test_several_ablations_give_atp_one_estimate_each(digits_models):
    model = digits_models["laya"]
    opts = EvalOptions(ablation=("zero", "mean"), methods=("atp", "random"), bootstrap=0, limit=32)
    result = evaluate(model, "digits", options=opts)
    zero = result["zero"].layers.query("method == 'atp'").attribution.to_numpy()
    mean = result["mean"].layers.query("method == 'atp'").attribution.to_numpy()
    assert np.abs(zero - mean).max() > 1e-4  # each folder's atp estimates its own operator
    assert set(result["zero"].summary.ablation) == {"zero"}
    assert result["zero"].manifest["estimates"] == {"atp": "zero"} and result["mean"].manifest["estimates"] == {
        "atp": "mean"
    }


# --------------------------------------------------------------------------- refusals
def test_atp_with_an_ablation_that_puts_no_state_is_refused_in_one_line(digits_checkpoints, tmp_path):
    out = tmp_path / "out"
    result = run("faithfulness", digits_checkpoints["laya"], "--methods", "atp,random", "--out", out)
    assert_one_line_error(
        result,
        r"^Error: method 'atp': it estimates the effect of putting a state in place of a layer, and ablation 'gate' "
        r"puts none \(use one of zero, mean, resample, noise, skip, mean-update, resample-update, noise-update\)\.$",
    )
    assert not out.exists()


def test_gradients_at_network_scope_on_text_without_a_tokenizer_are_refused(bert, tmp_path):
    from torch import nn

    from laya_eval.models.backbones import ModuleBackbone

    class Texts(nn.Module):
        """A text model that takes the strings themselves: no tensors to take gradients through."""

        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(1, 4), nn.Linear(4, 4)

        def forward(self, texts):
            lengths = torch.tensor([[float(len(t))] for t in texts])
            return self.b(self.a(lengths))

    _, ragged, _ = bert
    backbone = ModuleBackbone(Texts(), ["a", "b"], example_input=["ab", "c"])
    model = LayeredModel(backbone, make_head("concat", backbone.layer_dims, N_CLASSES), ModelInfo(N_CLASSES))
    for method in ("grad_x_act", "ig", "atp"):
        with pytest.raises(ConfigError, match=rf"^method '{method}': gradients at network scope on text need a"):
            evaluate(
                model,
                ragged,
                options=EvalOptions(scope="network", ablation=("zero",), methods=(method,)),
                out=tmp_path / "out",
            )
    assert not (tmp_path / "out").exists()


def test_summary_recall_columns_equal_a_hand_count_from_the_layers_table(bert):
    """recall@1 per sample by hand from layers.csv: is the method's top layer one with the largest effect? (L = 3, so
    recall@3 is undefined and left empty.)"""
    model, ragged, _ = bert
    opts = EvalOptions(scope="network", ablation=("skip",), methods=("atp", "grad_x_act"), bootstrap=0, seed=3)
    result = evaluate(model, ragged, options=opts)["skip"]
    for method, rows in result.layers.groupby("method"):
        hits = []
        for _, one in rows.groupby("sample"):
            top = one.sort_values(["attribution", "layer"], ascending=[False, True]).iloc[0]
            hits.append(float(top.effect >= one.effect.max()))
        row = result.summary.set_index("method").loc[method]
        assert row.recall_at_1 == pytest.approx(np.mean(hits))
        assert np.isnan(row.recall_at_3)


@pytest.mark.parametrize("command", ["sanity", "prune"])
def test_commands_that_score_without_an_ablation_refuse_atp_before_any_work(command):
    from laya_eval.pruning.options import PruneOptions
    from laya_eval.sanity_checks.options import SanityOptions

    options = {"sanity": SanityOptions, "prune": PruneOptions}[command]
    with pytest.raises(
        ConfigError,
        match=rf"^method 'atp' estimates the effect of the evaluation's ablation and runs in `laya-eval faithfulness` "
        rf"only; `laya-eval {command}` scores methods without one: remove it from --methods\.$",
    ):
        options(methods=("ig", "atp"))


def test_network_atp_of_skip_on_a_residual_cnn_equals_a_hand_estimate():
    """Tensor inputs: a py:-style residual CNN (blocks of one shape), blocks called one by one by hand."""
    from laya_eval.models.backbones import ModuleBackbone
    from tests.test_update_ablations import ResidualCNN

    torch.manual_seed(4)
    net = ResidualCNN().eval()
    x = torch.randn(N_SAMPLES, 1, 6, 6)
    backbone = ModuleBackbone(net, ["blocks.0", "blocks.1", "blocks.2"], example_input=x[:2], pool="avg")
    model = LayeredModel(
        backbone, make_head("laya", backbone.layer_dims, N_CLASSES), ModelInfo(N_CLASSES, input_shape=(1, 6, 6))
    )
    data = Dataset(x=x, y=torch.arange(N_SAMPLES) % N_CLASSES, class_names=("a", "b", "c"), name="r", split="test")
    scores, _ = _tool(model, data, ["atp"], "skip")
    with torch.enable_grad():
        h = net.stem(x).detach().requires_grad_(True)
        inputs, outputs = [], []
        for block in net.blocks:
            inputs.append(h)
            h = block(h)
            outputs.append(h)
        probs = torch.softmax(model.head([o.mean((2, 3)) for o in outputs]), -1)
        grads = torch.autograd.grad(probs.gather(1, probs.argmax(1)[:, None]).sum(), outputs)
    hand = torch.stack(
        [(g.double() * (o.double() - b.double())).flatten(1).sum(1) for g, o, b in zip(grads, outputs, inputs)], 1
    )
    _close(scores["atp"], hand, 1e-6)


@pytest.mark.parametrize("scope", ["head", "network"])
def test_one_backward_call_for_both_gradients_leaves_the_logit_gradient_methods_unchanged(digits_models, scope):
    """grad_x_act and gradcam give the same bytes with and without atp beside them (whose d p_c then rides on their
    backward call), on a head that ignores all layers but the last (unused inputs get zero gradients)."""
    for head in ("lastlayer", "laya"):
        model = digits_models[head]

        def run(methods):
            opts = EvalOptions(scope=scope, ablation=("zero",), methods=methods, bootstrap=0, limit=32)
            layers = evaluate(model, "digits", options=opts)["zero"].layers
            return layers.set_index(["method", "sample", "layer"]).attribution

        alone, both = run(("grad_x_act", "gradcam")), run(("grad_x_act", "gradcam", "atp"))
        pd.testing.assert_series_equal(alone, both[both.index.get_level_values("method") != "atp"])
        atp = both.loc["atp"].unstack()
        if head == "lastlayer" and scope == "head":
            assert (atp[[1, 2]] == 0).all().all() and (atp[3] != 0).any()  # only the last layer is read


def test_both_gradients_of_one_backward_call_give_an_unused_input_zeros():
    """A head that ignores an input: both gradients of the one backward call are zeros of that input's shape (torch
    returns one unbatched zero tensor for it), and the used input's equal two separate autograd calls."""
    from laya_eval.engine.gradients import _backward

    used, unused = torch.randn(4, 3, requires_grad=True), torch.randn(4, 5, requires_grad=True)
    with torch.enable_grad():
        logits = torch.stack([used.sum(1), (used**2).sum(1), used[:, 0]], 1)
        target = torch.tensor([0, 1, 2, 1])
        p = torch.softmax(logits, -1).gather(1, target[:, None]).sum()
        ref_prob = torch.autograd.grad(p, used, retain_graph=True)[0]
        ref_logit = torch.autograd.grad(logits.gather(1, target[:, None]).sum(), used, retain_graph=True)[0]
        d_logit, d_prob = _backward(logits, target, [used, unused], True, True)
    torch.testing.assert_close(d_logit[0], ref_logit, rtol=0, atol=0)
    torch.testing.assert_close(d_prob[0], ref_prob, rtol=1e-6, atol=1e-7)
    assert d_logit[1].shape == d_prob[1].shape == (4, 5) and not d_logit[1].any() and not d_prob[1].any()
