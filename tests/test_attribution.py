"""Attribution methods against Captum, completeness and hand-derived values."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from captum.attr import LayerGradCam, LayerGradientXActivation
from torch import nn

from laya_eval.engine.methods import METHODS, MethodContext, applicable, ig_completeness_delta, resolve_methods
from laya_eval.errors import ConfigError
from laya_eval.models.heads import make_head
from laya_eval.models.layered import LayeredModel
from laya_eval.models.trace import trace, trace_from_hidden


class _HeadAsNetwork(nn.Module):
    """Feeds each hidden state through an identity module so Captum's layer methods can hook it."""

    def __init__(self, head, n_layers):
        super().__init__()
        self.head = head
        self.taps = nn.ModuleList(nn.Identity() for _ in range(n_layers))

    def forward(self, *hidden):
        return self.head([tap(h) for tap, h in zip(self.taps, hidden)])


def _run(name, tr, model, scope="head"):
    return METHODS[name].fn(tr, model, target=tr.pred, context=MethodContext(scope=scope))


@pytest.mark.parametrize("head", ["concat", "scalarmix", "laya"])
def test_grad_x_act_and_gradcam_equal_captum_on_vectors(digits_models, digits, head):
    model = digits_models[head]
    tr = trace(model, digits["test"].x[:20], digits["test"].y[:20])
    net = _HeadAsNetwork(model.head, 3)
    inputs = tuple(h.clone() for h in tr.hidden)
    for i in range(3):
        gxa = LayerGradientXActivation(net, net.taps[i]).attribute(inputs, target=tr.pred)
        torch.testing.assert_close(_run("grad_x_act", tr, model)[:, i], gxa.sum(1), atol=1e-5, rtol=1e-5)
        cam = LayerGradCam(net, net.taps[i]).attribute(inputs, target=tr.pred, relu_attributions=True)
        torch.testing.assert_close(_run("gradcam", tr, model)[:, i], cam.flatten(1).mean(1), atol=1e-5, rtol=1e-5)


def test_gradcam_equals_captum_on_spatial_maps():
    torch.manual_seed(0)
    head = make_head("laya", [4, 6], 3, d_star=5, scorer_hidden=7)
    g = torch.Generator().manual_seed(1)
    maps = [torch.randn(5, 4, 3, 3, generator=g), torch.randn(5, 6, 2, 2, generator=g)]
    tr = trace_from_hidden(head, maps)
    model = type("M", (), {"head": head})()
    net = _HeadAsNetwork(head, 2)
    ours = _run("gradcam", tr, model)
    for i in range(2):
        cam = LayerGradCam(net, net.taps[i]).attribute(
            tuple(maps), target=tr.pred, relu_attributions=True
        )  # (B, 1, H, W)
        torch.testing.assert_close(ours[:, i], cam.flatten(1).mean(1), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("head", ["lastlayer", "concat", "scalarmix", "laya"])
def test_integrated_gradients_completeness(digits_models, digits, head):
    model = digits_models[head]
    tr = trace(model, digits["test"].x[:64], digits["test"].y[:64])
    scores = _run("ig", tr, model)
    # |sum_i a_i - (f_c(h) - f_c(0))| < 1e-3, f_c(0) computed here independently
    with torch.no_grad():
        f0 = model.head([torch.zeros_like(h) for h in tr.hidden]).gather(1, tr.pred[:, None])[:, 0]
    f = tr.logits.gather(1, tr.pred[:, None])[:, 0]
    assert (scores.sum(1) - (f - f0)).abs().max() < 1e-3
    torch.testing.assert_close(ig_completeness_delta(tr, model, scores), scores.sum(1) - (f - f0))
    if head == "lastlayer":
        assert torch.count_nonzero(scores[:, :2]) == 0


def test_integrated_gradients_is_exact_for_a_linear_head(digits_models, digits):
    """For Concat (linear in h), IG with a zero baseline equals W_c h_i per layer: the contribution."""
    model = digits_models["concat"]
    tr = trace(model, digits["test"].x[:30], digits["test"].y[:30])
    torch.testing.assert_close(_run("ig", tr, model), _run("contribution", tr, model), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("head", ["lastlayer", "concat", "scalarmix", "laya"])
def test_contribution_sums_to_logit_minus_bias(digits_models, digits, head):
    model = digits_models[head]
    tr = trace(model, digits["test"].x[:50], digits["test"].y[:50])
    contrib = _run("contribution", tr, model)
    logit = model(digits["test"].x[:50]).gather(1, tr.pred[:, None])[:, 0]
    torch.testing.assert_close(contrib.sum(1), logit - model.head.bias[tr.pred], atol=1e-5, rtol=1e-5)


def test_laya_method_is_alpha(digits_models, digits):
    model = digits_models["laya"]
    x = digits["test"].x[:10]
    tr = trace(model, x, None)
    z = torch.stack([g(h) for g, h in zip(model.head.adapters, model.hidden_states(x))], 1)
    alpha = torch.softmax(model.head.scorer(z.flatten(1)) / model.head.tau, -1)
    torch.testing.assert_close(_run("laya", tr, model), alpha)


def test_network_scope_grad_x_act_sees_later_layers(digits_models, digits):
    """Total-effect gradient of logit_c w.r.t. block 1's output, by autograd through the blocks by hand."""
    model = digits_models["laya"]
    x = digits["test"].x[:8]
    tr = trace(model, x, None)
    net = _run("grad_x_act", tr, model, scope="network")
    blocks = model.backbone.blocks
    a1 = blocks[0](x.flatten(1)).detach().requires_grad_(True)
    a2 = blocks[1](a1)
    a3 = blocks[2](a2)
    out = model.head([a1, a2, a3]).gather(1, tr.pred[:, None]).sum()
    (g1,) = torch.autograd.grad(out, [a1])
    torch.testing.assert_close(net[:, 0], (g1 * a1).sum(1).detach(), atol=1e-5, rtol=1e-5)
    assert not torch.allclose(net[:, 0], _run("grad_x_act", tr, model)[:, 0], atol=1e-4)


def _context_for(m, tr, model):
    """What the engine provides: the dataset statistics the method declares in its catalog entry, and the ablation
    whose effect a method that needs ``removal`` estimates (here ``zero``: its fill is zeros)."""
    from laya_eval.engine.dataset_stats import batch_statistics

    stats = tuple(n.split(":", 1)[1] for n in m.needs if n.startswith("stat:"))
    return MethodContext(
        statistics=batch_statistics(stats, tr, model, "head").means() if stats else {},
        ablation="zero" if "removal" in m.needs else None,
    )


def test_every_method_returns_B_by_L(digits_models, digits):
    for head, model in digits_models.items():
        tr = trace(model, digits["test"].x[:7], digits["test"].y[:7])
        for m in METHODS.values():
            if applicable(m, model) is None:
                out = m.fn(tr, model, target=tr.pred, context=_context_for(m, tr, model))
                assert out.shape == (7, 3), (head, m.name)
                assert torch.isfinite(out).all()


def test_static_is_the_mean_layer_weight_over_the_set(digits_models, digits):
    model = digits_models["laya"]
    tr = trace(model, digits["test"].x[:40], None)
    out = METHODS["static"].fn(tr, model, target=tr.pred, context=_context_for(METHODS["static"], tr, model))
    torch.testing.assert_close(out, tr.layer_weights.double().mean(0).float().expand(40, -1), rtol=0, atol=0)


def _random_scores(model, x, ids, seed=5):
    tr = trace(model, x, None, sample_ids=ids)
    return METHODS["random"].fn(tr, model, target=None, context=MethodContext(seed=seed))


def test_random_is_drawn_per_sample_whatever_the_batching(digits_models, digits):
    model = digits_models["concat"]
    x, ids = digits["test"].x[:10], torch.arange(100, 110)
    whole = _random_scores(model, x, ids)
    split = torch.cat([_random_scores(model, x[:3], ids[:3]), _random_scores(model, x[3:], ids[3:])])
    assert torch.equal(whole, split)
    perm = torch.randperm(10, generator=torch.Generator().manual_seed(0))
    assert torch.equal(_random_scores(model, x[perm], ids[perm]), whole[perm])  # a sample's scores follow its id
    assert not torch.equal(_random_scores(model, x, ids, seed=6), whole)
    assert not torch.equal(_random_scores(model, x, ids + 1), whole)


def test_random_scores_are_uniform_and_independent_across_layers():
    from scipy import stats as st

    from laya_eval.engine.seeding import per_sample_uniform

    u = per_sample_uniform(3, torch.arange(20000), 4).numpy()
    assert ((u >= 0) & (u < 1)).all()
    for j in range(4):
        assert st.kstest(u[:, j], "uniform").pvalue > 0.001
    corr = np.corrcoef(u.T)[np.triu_indices(4, 1)]
    assert np.abs(corr).max() < 0.03  # 20000 draws: |r| of independent columns is ~ N(0, 0.007)


def test_applicability(digits_models):
    assert applicable(METHODS["laya"], digits_models["laya"]) is None
    assert "it needs a LAYA head; this model has a scalarmix head" in applicable(
        METHODS["laya"], digits_models["scalarmix"]
    )
    assert applicable(METHODS["static"], digits_models["scalarmix"]) is None
    assert "needs a head with layer weights" in applicable(METHODS["static"], digits_models["concat"])


def test_unknown_method_lists_valid_ones():
    with pytest.raises(
        ConfigError,
        match=r"methods must be one of \{laya, static, contribution, ig, gradcam, grad_x_act, random, block_influence, angular_distance, alpha_norm, atp\}; got 'gi'",
    ):
        resolve_methods(["ig", "gi"])


def test_network_scope_gradients_refuse_text_inputs():
    head = make_head("concat", [2, 2], 2)
    tr = trace_from_hidden(head, [torch.ones(1, 2), torch.ones(1, 2)], inputs=["a text"])
    model = LayeredModel(nn.Identity(), head)
    with pytest.raises(ConfigError, match="on text need a backbone that tokenizes texts into tensors .* --scope head"):
        _run("grad_x_act", tr, model, scope="network")


def test_ig_on_spatial_maps_equals_captum_over_the_full_maps():
    """laya-eval integrates over the pooled states; Captum over the full maps must give the same layer sums."""
    from captum.attr import IntegratedGradients

    torch.manual_seed(0)
    head = make_head("laya", [3, 5], 4, d_star=6, scorer_hidden=5).double()
    g = torch.Generator().manual_seed(2)
    maps = [
        torch.randn(6, 3, 4, 4, generator=g, dtype=torch.float64),
        torch.randn(6, 5, 2, 2, generator=g, dtype=torch.float64),
    ]
    tr = trace_from_hidden(head, maps)
    model = type("M", (), {"head": head})()
    ours = _run("ig", tr, model)
    ref = IntegratedGradients(lambda *h: head(list(h))).attribute(
        tuple(maps), target=tr.pred, n_steps=50, method="gausslegendre"
    )
    torch.testing.assert_close(ours, torch.stack([a.flatten(1).sum(1) for a in ref], 1), atol=1e-8, rtol=1e-6)


def test_terms_and_weights_equal_the_separate_calls(digits_models, digits):
    for model in digits_models.values():
        hidden = model.hidden_states(digits["test"].x[:9])
        terms, weights = model.head.terms_and_weights(hidden)
        assert torch.equal(terms, model.head.terms(hidden))
        w = model.head.layer_weights(hidden)
        assert (weights is None and w is None) or torch.equal(weights, w)


def test_network_scope_ig_starts_from_the_removed_layer(digits_models, digits):
    """Completeness against the removal it is scored with: sum of IG over block i's output equals
    f_c(x) - f_c(x with block i's output set to the baseline), the later blocks recomputed by hand."""
    model = digits_models["laya"]
    x = digits["test"].x[:6]
    tr = trace(model, x, None)
    blocks = model.backbone.blocks
    with torch.no_grad():
        hidden, outputs = model.block_outputs(x)
        a1 = outputs[0]
        means = [o.mean(0) for o in outputs]  # a stand-in "mean" fill
    for fill, base1 in ((None, torch.zeros_like(a1)), (means, means[0].expand_as(a1))):
        ctx = MethodContext(scope="network", n_steps=64, layer_baseline=fill)
        ig = METHODS["ig"].fn(tr, model, target=tr.pred, context=ctx)
        with torch.no_grad():
            a2 = blocks[1](base1)
            removed = model.head([base1, a2, blocks[2](a2)]).gather(1, tr.pred[:, None]).squeeze(1)
        full = tr.logits.gather(1, tr.pred[:, None]).squeeze(1)
        torch.testing.assert_close(ig[:, 0], full - removed, atol=2e-4, rtol=1e-3)
