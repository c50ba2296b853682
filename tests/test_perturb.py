"""Leave-one-layer-out and deletion@k effects against independent oracles."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from captum.attr import FeatureAblation

from laya_eval.errors import ConfigError
from laya_eval.models.heads import pool_hidden
from laya_eval.engine.removals import deletion_masks, leave_one_out_masks, removal_effects
from laya_eval.models.trace import trace, trace_from_hidden

ABLATIONS = ["gate", "gate-renorm", "zero", "mean"]


def _batch(digits, n=40):
    return digits["test"].x[:n], digits["test"].y[:n]


def _slow_effects(model, x, ablation, fill=None):
    """Reference: one sample and one removed layer at a time, straight through the head's public call."""
    hidden = [pool_hidden(h) for h in model.hidden_states(x)]
    n_layers = len(hidden)
    out = torch.empty(len(x), n_layers)
    with torch.no_grad():
        for b in range(len(x)):
            h_b = [h[b : b + 1] for h in hidden]
            p = torch.softmax(model.head(h_b), -1)[0]
            c = int(p.argmax())
            for i in range(n_layers):
                if ablation.startswith("gate"):
                    keep = torch.ones(1, n_layers)
                    keep[0, i] = 0
                    logits = model.head(h_b, keep, renormalize=ablation == "gate-renorm")
                else:
                    h_mod = list(h_b)
                    h_mod[i] = torch.zeros_like(h_b[i]) if ablation == "zero" else fill[i][None]
                    logits = model.head(h_mod)
                out[b, i] = p[c] - torch.softmax(logits, -1)[0, c]
    return out


@pytest.mark.parametrize("ablation", ABLATIONS)
@pytest.mark.parametrize("head", ["lastlayer", "concat", "scalarmix", "laya"])
def test_effects_equal_slow_loop(digits_models, digits, head, ablation):
    model = digits_models[head]
    x, y = _batch(digits)
    fill = [pool_hidden(h).mean(0) for h in model.hidden_states(x)] if ablation == "mean" else None
    tr = trace(model, x, y)
    got = removal_effects(tr, model, leave_one_out_masks(3), ablation=ablation, fill=fill)
    torch.testing.assert_close(got, _slow_effects(model, x, ablation, fill), atol=1e-6, rtol=0)


@pytest.mark.parametrize("head", ["concat", "laya"])
def test_zero_ablation_equals_captum_feature_ablation(digits_models, digits, head):
    model = digits_models[head]
    x, y = _batch(digits)
    hidden = tuple(pool_hidden(h).detach() for h in model.hidden_states(x))
    tr = trace_from_hidden(model.head, list(hidden))
    ablator = FeatureAblation(lambda *h: torch.softmax(model.head(list(h)), -1))
    # one feature group per layer: every unit of layer i belongs to group i
    masks = tuple(torch.full((1, h.shape[1]), i, dtype=torch.long) for i, h in enumerate(hidden))
    baselines = tuple(torch.zeros_like(h) for h in hidden)
    attr = ablator.attribute(hidden, baselines=baselines, target=tr.pred, feature_mask=masks)
    captum_effects = torch.stack([a[:, 0] for a in attr], 1)
    ours = removal_effects(tr, model, leave_one_out_masks(3), ablation="zero")
    torch.testing.assert_close(ours, captum_effects, atol=1e-6, rtol=0)


def test_network_scope_recomputes_later_layers(digits_models, digits):
    """Oracle: run the MLP blocks by hand with block i's output replaced by zeros."""
    model = digits_models["laya"]
    x, y = _batch(digits, 16)
    tr = trace(model, x, y)
    got = removal_effects(tr, model, leave_one_out_masks(3), ablation="zero", scope="network")
    blocks = model.backbone.blocks
    with torch.no_grad():
        for i in range(3):
            out, hidden = x.flatten(1), []
            for j, block in enumerate(blocks):
                out = block(out)
                if j == i:
                    out = torch.zeros_like(out)
                hidden.append(out)
            p = torch.softmax(model.head(hidden), -1).gather(1, tr.pred[:, None])[:, 0]
            torch.testing.assert_close(got[:, i], tr.confidence - p, atol=1e-6, rtol=0)
    # removing layer 1 in the network changes layers 2 and 3 too, so it differs from the head-scope effect
    head_scope = removal_effects(tr, model, leave_one_out_masks(3), ablation="zero", scope="head")
    assert not torch.allclose(got[:, 0], head_scope[:, 0], atol=1e-4)
    # the last layer has no later layers: both scopes agree there
    torch.testing.assert_close(got[:, 2], head_scope[:, 2], atol=1e-6, rtol=0)


def test_lastlayer_gate_control(digits_models, digits):
    """On a LastLayer model only layer L can have an effect under the gate."""
    model = digits_models["lastlayer"]
    x, y = _batch(digits, 100)
    effects = removal_effects(trace(model, x, y), model, leave_one_out_masks(3), ablation="gate")
    assert torch.count_nonzero(effects[:, :2]) == 0
    assert (effects[:, 2].abs() > 0).all()


@pytest.mark.parametrize("ablation", ABLATIONS)
def test_deletion_at_k_equals_slow_loop(digits_models, digits, ablation):
    model = digits_models["laya"]
    x, y = _batch(digits, 12)
    tr = trace(model, x, y)
    fill = [pool_hidden(h).mean(0) for h in tr.hidden] if ablation == "mean" else None
    ranking = torch.stack([torch.randperm(3, generator=torch.Generator().manual_seed(b)) for b in range(12)])
    got = removal_effects(tr, model, deletion_masks(ranking), ablation=ablation, fill=fill)
    hidden = [pool_hidden(h) for h in tr.hidden]
    with torch.no_grad():
        for b in range(12):
            h_b = [h[b : b + 1] for h in hidden]
            c = int(tr.pred[b])
            for k in range(1, 4):
                removed = ranking[b, :k].tolist()
                if ablation.startswith("gate"):
                    keep = torch.tensor([[0.0 if i in removed else 1.0 for i in range(3)]])
                    logits = model.head(h_b, keep, renormalize=ablation == "gate-renorm")
                else:
                    h_mod = [
                        (torch.zeros_like(h) if ablation == "zero" else fill[i][None]) if i in removed else h
                        for i, h in enumerate(h_b)
                    ]
                    logits = model.head(h_mod)
                expected = tr.confidence[b] - torch.softmax(logits, -1)[0, c]
                torch.testing.assert_close(got[b, k - 1], expected, atol=1e-6, rtol=0)


def test_deletion_masks_by_hand():
    ranking = torch.tensor([[2, 0, 1]])
    # k = 1 removes layer 2; k = 2 removes layers 2 and 0; k = 3 removes all
    expected = torch.tensor([[[1.0, 1.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]]])
    assert torch.equal(deletion_masks(ranking), expected)
    assert torch.equal(leave_one_out_masks(3), torch.tensor([[0.0, 1, 1], [1, 0, 1], [1, 1, 0]]))


def test_golden_effects_on_hand_built_head():
    """The hand-built LAYA head of test_heads: alpha = (1, e, 1)/(2+e), z = (1, 2, 3), W = (1, -1), b = (0.5, 0).

    Intact logit gap = 2.5 - (-2) = 4.5, so p_0 = sigmoid(4.5). Dropping layer i (gate) lowers the gap by
    2 * alpha_i * z_i: 2/(2+e), 4e/(2+e), 6/(2+e).
    """
    from tests.test_heads import _golden_laya

    head = _golden_laya()
    hidden = [torch.tensor([[float(v)]], dtype=torch.float64) for v in (1, 2, 3)]
    tr = trace_from_hidden(head, hidden)

    class _Model:
        pass

    model = _Model()
    model.head = head
    e = math.e

    def sig(v):
        return 1 / (1 + math.exp(-v))

    expected = [sig(4.5) - sig(4.5 - d) for d in (2 / (2 + e), 4 * e / (2 + e), 6 / (2 + e))]
    got = removal_effects(tr, model, leave_one_out_masks(3).double(), ablation="gate")
    torch.testing.assert_close(got[0], torch.tensor(expected, dtype=torch.float64))


def test_bad_ablation_and_scope():
    with pytest.raises(
        ConfigError,
        match=r"ablation must be one of \{gate, gate-renorm, zero, mean, resample, noise, skip, mean-update, resample-update, noise-update\}; got 'drop'",
    ):
        removal_effects(None, None, leave_one_out_masks(2), ablation="drop")
    with pytest.raises(
        ConfigError,
        match=r"ablation must be an ablation defined at network scope \(zero, mean, "
        r"resample, noise, skip, mean-update, resample-update, noise-update: gate acts on the head's terms, not inside the backbone\)",
    ):
        removal_effects(None, None, leave_one_out_masks(2), ablation="gate", scope="network")
    with pytest.raises(ConfigError, match=r"scope must be one of \{head, network\}; got 'model'"):
        removal_effects(None, None, leave_one_out_masks(2), scope="model")


def test_probability_drop_definition(digits_models, digits):
    """Effects are drops of the intact prediction's probability: removing every layer's term under the gate
    leaves softmax(bias); check that against a hand computation."""
    model = digits_models["concat"]
    x, y = _batch(digits, 8)
    tr = trace(model, x, y)
    got = removal_effects(tr, model, torch.zeros(1, 3), ablation="gate")[:, 0]
    p_bias = F.softmax(model.head.bias.detach(), -1)[tr.pred]
    torch.testing.assert_close(got, tr.confidence - p_bias, atol=1e-6, rtol=0)
