"""Head-scope Integrated Gradients through the affine adapters against Captum over the pooled inputs.

Oracle: Captum's ``IntegratedGradients`` over the pooled head inputs from zeros
(``head_ig_captum``, the general route, no code of the adapted or closed-form routes involved). IG
over the adapter outputs from the adapter bias equals it in exact arithmetic (the path ``t p`` maps
to ``b + t (z - b)`` and ``df/dp_i = A_i^T df/dz_i``); for Concat and LastLayer, affine in their
inputs, IG is the layer's logit term. Agreement is required within 1e-6 of the attribution scale
(the largest |score|); in float64 too only 1e-7, since Captum casts its quadrature weights to float32
(a relative error of ~1e-8 in the oracle itself). Each test checks which route was taken.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from laya_eval.engine.integrated_gradients import head_ig, head_ig_captum, head_ig_route
from laya_eval.models.heads import LayaHead, ScalarMixHead, make_head
from laya_eval.models.removal import recompute_removal_logits
from laya_eval.models.trace import trace_from_hidden

C, B = 5, 9
SHAPES = [(6,), (4, 3, 3), (5,), (3, 2, 4)]  # two spatial maps: the heads pool them first
DIMS = [s[0] for s in SHAPES]
CASES = {
    "lastlayer": ("lastlayer", {}, "linear"),
    "concat": ("concat", {}, "linear"),
    "scalarmix": ("scalarmix", {"d_star": 6}, "adapted"),
    "laya-identity": ("laya", {"d_star": 6, "scorer_hidden": 9, "tau": 0.7}, "adapted"),
    "laya-mlp": ("laya", {"d_star": 6, "scorer_hidden": 9, "tau": 0.7, "psi": "mlp"}, "adapted"),
}


def _head(name, kwargs, dtype):
    torch.manual_seed(0)
    head = make_head(name, DIMS, C, **kwargs)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # non-trivial weights and adapter biases everywhere
        for p in head.parameters():
            p.add_(0.5 * torch.randn(p.shape, generator=g))
    return head.to(dtype).eval()


def _hidden(dtype):
    g = torch.Generator().manual_seed(2)
    return [torch.randn(B, *s, generator=g, dtype=torch.float64).to(dtype) for s in SHAPES]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("method", ["gausslegendre", "riemann_trapezoid"])
def test_ig_routes_agree_with_captum_over_the_pooled_inputs(case, dtype, method):
    name, kwargs, route = CASES[case]
    head = _head(name, kwargs, dtype)
    tr = trace_from_hidden(head, _hidden(dtype))
    assert head_ig_route(head) == route
    got = head_ig(head, tr.hidden, tr.pred, n_steps=24, method=method, terms=tr.terms, adapted=tr.adapted)
    expected = head_ig_captum(head, tr.hidden, tr.pred, n_steps=24, method=method)
    scale = float(expected.abs().max())
    tol = (1e-6 if dtype == torch.float32 else 1e-7) * scale
    assert got.shape == (B, len(DIMS)) and got.dtype == dtype
    assert float((got - expected).abs().max()) <= tol
    # without the trace parts the route recomputes them and gives the same scores
    torch.testing.assert_close(head_ig(head, tr.hidden, tr.pred, n_steps=24, method=method), got, rtol=0, atol=0)


@pytest.mark.parametrize("internal_batch_size", [B, 2 * B + 1, 1000])
def test_steps_in_chunks_give_the_same_scores(internal_batch_size):
    head = _head("laya", CASES["laya-identity"][1], torch.float64)
    tr = trace_from_hidden(head, _hidden(torch.float64))
    whole = head_ig(head, tr.hidden, tr.pred, n_steps=20)
    chunked = head_ig(head, tr.hidden, tr.pred, n_steps=20, internal_batch_size=internal_batch_size)
    torch.testing.assert_close(chunked, whole, rtol=0, atol=1e-13)


def test_completeness_holds_on_the_adapted_route():
    # sum_i a_i = f_c(p) - f_c(0) up to the quadrature error, shrinking with the steps (Sundararajan et al.)
    head = _head("laya", CASES["laya-identity"][1], torch.float64)
    tr = trace_from_hidden(head, _hidden(torch.float64))
    f = tr.logits.gather(1, tr.pred[:, None]).squeeze(1)
    with torch.no_grad():
        f0 = head([torch.zeros(B, d, dtype=torch.float64) for d in DIMS]).gather(1, tr.pred[:, None]).squeeze(1)
    gaps = [float((head_ig(head, tr.hidden, tr.pred, n_steps=n).sum(1) - (f - f0)).abs().max()) for n in (4, 64)]
    assert gaps[1] < 1e-6 < gaps[0] or gaps[1] < gaps[0] / 100


class _OwnTerms(LayaHead):
    def terms(self, hidden):  # a subclass's own terms: neither the IG shortcut nor the trace parts may apply
        return 2 * super().terms(hidden)


class _NonLinearAdapters(ScalarMixHead):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.adapters = nn.ModuleList(nn.Sequential(nn.Linear(d, self.d_star), nn.Tanh()) for d in self.layer_dims)


@pytest.mark.parametrize("cls", [_OwnTerms, _NonLinearAdapters])
def test_heads_outside_the_shortcut_take_the_captum_route(cls):
    head = cls(DIMS, C, d_star=6).double().eval()
    assert head_ig_route(head) == "captum"
    tr = trace_from_hidden(head, _hidden(torch.float64))
    if cls is _OwnTerms:  # its terms are not LAYA's: the trace keeps no adapter outputs for a fast path
        assert tr.adapted is None
    torch.testing.assert_close(
        head_ig(head, tr.hidden, tr.pred, n_steps=8),
        head_ig_captum(head, tr.hidden, tr.pred, n_steps=8),
        rtol=0,
        atol=0,
    )


@pytest.mark.parametrize("case", ["scalarmix", "laya-identity", "laya-mlp", "concat"])
def test_removals_reusing_the_trace_equal_the_recomputation(case):
    """The trace's adapter outputs and terms are the head's own: removals that reuse them agree with the
    generic route (the whole head on the replaced inputs) and with the fast path that recomputes them, bit for bit."""
    name, kwargs, _ = CASES[case]
    head = _head(name, kwargs, torch.float64)
    tr = trace_from_hidden(head, _hidden(torch.float64))
    if hasattr(head, "adapters"):
        expected_z = torch.stack(
            [g(h.flatten(2).mean(-1) if h.dim() > 2 else h) for g, h in zip(head.adapters, tr.hidden)], 1
        )
        torch.testing.assert_close(tr.adapted, expected_z, rtol=0, atol=0)
    pooled = [h.flatten(2).mean(-1) if h.dim() > 2 else h for h in tr.hidden]
    keep = 1.0 - torch.eye(len(DIMS), dtype=torch.float64)
    fill = [torch.full((d,), 0.3, dtype=torch.float64) for d in DIMS]
    reused = head.removal_logits(pooled, keep, fill, terms=tr.terms, adapted=tr.adapted)
    torch.testing.assert_close(reused, head.removal_logits(pooled, keep, fill), rtol=0, atol=0)
    torch.testing.assert_close(reused, recompute_removal_logits(head, pooled, keep, fill), rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    "method", ["gausslegendre", "riemann_left", "riemann_right", "riemann_middle", "riemann_trapezoid"]
)
def test_the_quadrature_is_captums_to_the_bit(method):
    """The head routes integrate at Captum's points with Captum's weights, equal as floats, without Captum."""
    from captum.attr._utils.approximation_methods import approximation_parameters

    from laya_eval.engine.integrated_gradients import _quadrature

    step_sizes, alphas = approximation_parameters(method)
    for n in (2, 3, 7, 32, 50, 51, 128, 300):
        assert _quadrature(method, n) == (step_sizes(n), alphas(n)), (method, n)


def test_the_quadrature_names_a_bad_rule_or_step_count():
    from laya_eval.engine.integrated_gradients import _quadrature
    from laya_eval.errors import ConfigError

    with pytest.raises(
        ConfigError,
        match=r"method must be one of \{gausslegendre, riemann_left, .*\}; "
        r"got 'simpson'",
    ):
        _quadrature("simpson", 10)
    with pytest.raises(ConfigError, match="riemann_trapezoid needs at least 2 steps; got 1"):
        _quadrature("riemann_trapezoid", 1)
    assert _quadrature("gausslegendre", 1) == ([1.0], [0.5])  # one node: the midpoint, the whole weight


def test_head_scope_ig_runs_without_importing_captum(monkeypatch):
    """IG through a LAYA head's adapters leaves Captum unimported (the CLI starts faster), with Captum's scores."""
    import sys

    head = _head("laya", CASES["laya-identity"][1], torch.float32)
    tr = trace_from_hidden(head, _hidden(torch.float32))
    expected = head_ig_captum(head, tr.hidden, tr.pred, n_steps=8)
    for name in [m for m in sys.modules if m == "captum" or m.startswith("captum.")]:
        monkeypatch.delitem(sys.modules, name)
    got = head_ig(head, tr.hidden, tr.pred, n_steps=8)
    assert "captum" not in sys.modules
    assert float((got - expected).abs().max()) <= 1e-6 * float(expected.abs().max())
