"""Heads: additivity over layers, the keep gate, layer weights, golden values."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from laya_eval.errors import ConfigError
from laya_eval.models.heads import HEADS, ConcatHead, LastLayerHead, LayaHead, ScalarMixHead, make_head

DIMS = [5, 4, 3]
C = 4


def _hidden(batch=6, seed=0, dims=DIMS):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, d, generator=g) for d in dims]


def _randomised(head):
    """Heads start with w = 0 (ScalarMix); perturb every parameter so tests see non-trivial weights."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in head.parameters():
            p.add_(0.5 * torch.randn(p.shape, generator=g))
    return head.double()


@pytest.fixture(params=sorted(HEADS))
def head(request):
    torch.manual_seed(0)
    return _randomised(make_head(request.param, DIMS, C))


def _reference_logits(head, hidden):
    """The head's forward written from its definition, independently of ``terms``."""
    if isinstance(head, LastLayerHead):
        return F.linear(hidden[-1], head.classifier.weight, head.classifier.bias)
    if isinstance(head, ConcatHead):
        return F.linear(torch.cat(hidden, 1), head.classifier.weight, head.classifier.bias)
    z = [F.linear(h, g.weight, g.bias) for g, h in zip(head.adapters, hidden)]
    if isinstance(head, ScalarMixHead):
        s = torch.softmax(head.scalar_weights, 0)
        mixed = head.gamma * sum(s[i] * z[i] for i in range(len(z)))
    else:
        lin1, lin2 = head.scorer[0], head.scorer[2]
        scores = F.linear(F.gelu(F.linear(torch.cat(z, 1), lin1.weight, lin1.bias)), lin2.weight, lin2.bias)
        alpha = torch.softmax(scores / head.tau, -1)
        mixed = sum(alpha[:, i : i + 1] * z[i] for i in range(len(z)))
    return F.linear(mixed, head.classifier.weight, head.classifier.bias)


def test_logits_equal_terms_plus_bias_exactly(head):
    hidden = [h.double() for h in _hidden()]
    terms = head.terms(hidden)
    assert terms.shape == (6, 3, C)
    assert torch.equal(head(hidden), terms.sum(1) + head.bias)


def test_forward_matches_definition(head):
    hidden = [h.double() for h in _hidden()]
    torch.testing.assert_close(head(hidden), _reference_logits(head, hidden), rtol=1e-10, atol=1e-10)


def test_keep_all_ones_is_no_gate(head):
    hidden = [h.double() for h in _hidden()]
    ones = torch.ones(6, 3, dtype=torch.float64)
    torch.testing.assert_close(head(hidden, ones), head(hidden), rtol=0, atol=1e-12)


@pytest.mark.parametrize("i", [0, 1, 2])
def test_keep_zero_removes_exactly_term_i(head, i):
    hidden = [h.double() for h in _hidden()]
    keep = torch.ones(6, 3, dtype=torch.float64)
    keep[:, i] = 0
    expected = head(hidden) - head.terms(hidden)[:, i]
    torch.testing.assert_close(head(hidden, keep), expected, rtol=0, atol=1e-12)


def test_keep_is_per_sample(head):
    hidden = [h.double() for h in _hidden()]
    keep = torch.ones(6, 3, dtype=torch.float64)
    keep[0, 1] = 0
    out = head(hidden, keep)
    torch.testing.assert_close(out[1:], head(hidden)[1:], rtol=0, atol=1e-12)
    torch.testing.assert_close(out[0], head(hidden)[0] - head.terms(hidden)[0, 1], rtol=0, atol=1e-12)


def test_laya_alpha_is_a_distribution_that_depends_on_the_input():
    torch.manual_seed(0)
    head = _randomised(LayaHead(DIMS, C))
    alpha = head.layer_weights([h.double() for h in _hidden(batch=8)])
    assert alpha.shape == (8, 3)
    torch.testing.assert_close(alpha.sum(1), torch.ones(8, dtype=torch.float64))
    assert (alpha > 0).all()
    assert alpha.std(0).max() > 1e-3, "alpha should vary across inputs"


def test_scalarmix_weights_are_softmax_w_repeated():
    head = ScalarMixHead(DIMS, C)
    hidden = _hidden(batch=5)
    # AllenNLP initialisation: w = 0 (uniform), gamma = 1.
    torch.testing.assert_close(head.layer_weights(hidden), torch.full((5, 3), 1 / 3))
    assert float(head.gamma.detach()) == 1.0
    with torch.no_grad():
        head.scalar_weights.copy_(torch.tensor([0.0, math.log(2.0), math.log(5.0)]))
    # softmax([0, ln 2, ln 5]) = [1, 2, 5] / 8
    expected = torch.tensor([1 / 8, 2 / 8, 5 / 8]).expand(5, 3)
    torch.testing.assert_close(head.layer_weights(hidden), expected)


def test_lastlayer_terms_are_zero_below_L_and_weights_none():
    head = LastLayerHead(DIMS, C)
    hidden = _hidden()
    terms = head.terms(hidden)
    assert torch.count_nonzero(terms[:, :2]) == 0
    assert torch.count_nonzero(terms[:, 2]) > 0
    assert head.layer_weights(hidden) is None
    assert ConcatHead(DIMS, C).layer_weights(hidden) is None


def _golden_laya():
    """L = 3 scalar layers, d* = 1, tau = 10, integer weights.

    adapters: identity (w = 1, b = 0)      -> z = h
    scorer:   Linear(3->3) = 10 I, GELU, Linear(3->3) = I with bias (0, 0, -20)
    classifier W = [[1], [-1]], b = (0.5, 0)
    """
    head = LayaHead([1, 1, 1], 2, d_star=1, tau=10.0, scorer_hidden=3)
    with torch.no_grad():
        for g in head.adapters:
            g.weight.fill_(1.0)
            g.bias.zero_()
        head.scorer[0].weight.copy_(10 * torch.eye(3))
        head.scorer[0].bias.zero_()
        head.scorer[2].weight.copy_(torch.eye(3))
        head.scorer[2].bias.copy_(torch.tensor([0.0, 0.0, -20.0]))
        head.classifier.weight.copy_(torch.tensor([[1.0], [-1.0]]))
        head.classifier.bias.copy_(torch.tensor([0.5, 0.0]))
    return head.double()


def test_golden_laya_head():
    head = _golden_laya()
    hidden = [torch.tensor([[1.0]], dtype=torch.float64) * v for v in (1, 2, 3)]
    # z = (1, 2, 3); pre-GELU = (10, 20, 30), GELU(x) = x to 1e-20 for x >= 10;
    # s = (10, 20, 30 - 20) = (10, 20, 10); s / tau = (1, 2, 1)
    # alpha = (e, e^2, e) / (2e + e^2) = (1, e, 1) / (2 + e)
    e = math.e
    alpha = torch.tensor([[1 / (2 + e), e / (2 + e), 1 / (2 + e)]], dtype=torch.float64)
    torch.testing.assert_close(head.layer_weights(hidden), alpha)
    # sum_i alpha_i z_i = (1 + 2e + 3) / (2 + e) = 2  ->  logits = (2 + 0.5, -2)
    torch.testing.assert_close(head(hidden), torch.tensor([[2.5, -2.0]], dtype=torch.float64))
    # terms: t_i = alpha_i * z_i * (1, -1)
    terms = head.terms(hidden)
    torch.testing.assert_close(
        terms[0, :, 0], torch.tensor([1 / (2 + e), 2 * e / (2 + e), 3 / (2 + e)], dtype=torch.float64)
    )
    # drop layer 2 with the gate: (1 + 3) / (2 + e) remains
    keep = torch.tensor([[1.0, 0.0, 1.0]], dtype=torch.float64)
    torch.testing.assert_close(
        head(hidden, keep), torch.tensor([[4 / (2 + e) + 0.5, -4 / (2 + e)]], dtype=torch.float64)
    )
    # drop layer 3 and renormalise: (alpha_1 * 1 + alpha_2 * 2) / (alpha_1 + alpha_2) = (1 + 2e) / (1 + e)
    keep = torch.tensor([[1.0, 1.0, 0.0]], dtype=torch.float64)
    v = (1 + 2 * e) / (1 + e)
    torch.testing.assert_close(head(hidden, keep, renormalize=True), torch.tensor([[v + 0.5, -v]], dtype=torch.float64))


def test_renormalize_matches_reweighted_mixture():
    torch.manual_seed(3)
    for cls in (LayaHead, ScalarMixHead):
        head = _randomised(cls(DIMS, C))
        hidden = [h.double() for h in _hidden()]
        w = head.layer_weights(hidden)
        keep = torch.tensor([1.0, 0.0, 1.0], dtype=torch.float64)
        z = head.adapted(hidden)
        gamma = head.gamma if isinstance(head, ScalarMixHead) else 1.0
        wk = w * keep / (w * keep).sum(1, keepdim=True)
        mixed = gamma * (wk.unsqueeze(-1) * z).sum(1)
        expected = F.linear(mixed, head.classifier.weight, head.classifier.bias)
        torch.testing.assert_close(head(hidden, keep.expand(6, 3), renormalize=True), expected)


def test_renormalize_is_ignored_without_weights():
    head = _randomised(ConcatHead(DIMS, C))
    hidden = [h.double() for h in _hidden()]
    keep = torch.tensor([[1.0, 0.0, 1.0]], dtype=torch.float64).expand(6, 3)
    torch.testing.assert_close(head(hidden, keep, renormalize=True), head(hidden, keep))


def test_spatial_maps_are_global_average_pooled(head):
    g = torch.Generator().manual_seed(5)
    maps = [torch.randn(2, d, 3, 4, generator=g, dtype=torch.float64) for d in DIMS]
    vectors = [m.mean(dim=(2, 3)) for m in maps]
    torch.testing.assert_close(head(maps), head(vectors))


def test_psi_mlp_enters_the_scores():
    torch.manual_seed(0)
    head = _randomised(LayaHead(DIMS, C, psi="mlp", d_star=8))
    hidden = [h.double() for h in _hidden()]
    z = head.adapted(hidden)
    lin1, lin2 = head.scorer[0], head.scorer[2]
    scores = lin2(F.gelu(lin1(head.psi(z).flatten(1))))
    torch.testing.assert_close(head.layer_weights(hidden), torch.softmax(scores / head.tau, -1))
    # h_agg uses z, not psi(z)
    alpha = head.layer_weights(hidden)
    torch.testing.assert_close(head(hidden), head.classifier((alpha.unsqueeze(-1) * z).sum(1)))


def test_laya_defaults_are_the_papers():
    head = LayaHead([512, 256, 128], 10)
    assert (head.d_star, head.tau, head.scorer_hidden, head.psi_kind) == (96, 1.5, 192, "identity")
    assert head.scorer[0].in_features == 3 * 96 and head.scorer[2].out_features == 3


def test_config_round_trip(head):
    rebuilt = make_head(head.config()["name"], DIMS, C, **head.config()["kwargs"])
    assert type(rebuilt) is type(head) and rebuilt.config() == head.config()


def test_unknown_head_name():
    with pytest.raises(ConfigError, match=r"head must be one of \{concat, lastlayer, laya, scalarmix\}; got 'lay'"):
        make_head("lay", DIMS, C)


def test_wrong_number_of_hidden_states():
    with pytest.raises(ConfigError, match="expects 3 hidden states; got 2"):
        LayaHead(DIMS, C)(_hidden()[:2])


def test_wrong_width():
    hidden = _hidden()
    hidden[1] = torch.randn(6, 7)
    with pytest.raises(ConfigError, match="hidden state 2 has 7 features; the head was built for 4"):
        ConcatHead(DIMS, C)(hidden)


def test_bad_hyper_parameters():
    with pytest.raises(ConfigError, match="tau must be positive; got -1"):
        LayaHead(DIMS, C, tau=-1)
    with pytest.raises(ConfigError, match="psi must be one of"):
        LayaHead(DIMS, C, psi="relu")
    with pytest.raises(ConfigError, match="invalid option for the concat head"):
        make_head("concat", DIMS, C, tau=2.0)
