"""Head-scope Integrated Gradients: through the affine adapters where the head has them, Captum's otherwise.

IG of the target logit ``f_c`` over the pooled head inputs ``p = (p_1 ... p_L)`` from the zero baseline
(Sundararajan et al. 2017) is ``a_i = sum_d p_id * int_0^1 df_c/dp_id(t p) dt``. The built-in heads start
with affine maps of each layer, so the integral has a cheaper exact form:

- LAYA and ScalarMix read ``z_i = g_i(p_i) = A_i p_i + b_i`` only. Along the path ``t p`` the adapter
  outputs run on the straight line ``b + t (z - b)`` and ``df/dp_i = A_i^T df/dz_i``, so
  ``a_i = sum_k (z_ik - b_ik) int_0^1 dF_c/dz_ik(b + t (z - b)) dt``: IG over ``z`` from the adapter bias
  ``b``, where ``F`` is the head after its adapters. The adapters (the widest matrices of the head) leave
  the integral; they ran once, in the trace.
- Concat and LastLayer are affine in ``p``: the integrand is constant and ``a_i`` is the layer's logit
  term ``t_ic(p) = (W_i p_i)_c`` (times the quadrature's weight sum), in closed form.

Any other head (a subclass that changes a method the head's removal fast path relies on, non-linear
adapters, a custom head) takes the general route: Captum's ``IntegratedGradients`` over the pooled inputs.
It is also the oracle of the two routes above in the tests. The quadrature (``n_steps``, ``method``) is
Captum's, so both routes integrate at the same points.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn

from laya_eval.errors import ConfigError
from laya_eval.models.heads import ConcatHead, LastLayerHead, LayerHead, pool_hidden
from laya_eval.models.removal import fast_path_unchanged
from laya_eval.checks import check_choice

__all__ = ["head_ig", "head_ig_captum", "head_ig_route"]


def head_ig_route(head: LayerHead) -> str:
    """``"adapted"`` (IG over the adapter outputs), ``"linear"`` (closed form) or ``"captum"`` (general)."""
    if not fast_path_unchanged(head):
        return "captum"
    if isinstance(head, (ConcatHead, LastLayerHead)):
        return "linear"
    adapters = getattr(head, "adapters", None)
    if adapters is not None and all(type(g) is nn.Linear for g in adapters) and hasattr(head, "adapted_logits"):
        return "adapted"
    return "captum"


def head_ig(
    head: LayerHead,
    hidden: tuple[Tensor, ...],
    target: Tensor,
    *,
    n_steps: int = 50,
    method: str = "gausslegendre",
    internal_batch_size: int | None = None,
    terms: Tensor | None = None,
    adapted: Tensor | None = None,
) -> Tensor:
    """Per-layer IG of the ``target`` logit at the head input, from the zero baseline, (B, L).

    Parameters
    ----------
    head : LayerHead
    hidden : tuple of Tensor, each (B, d_i) or (B, C_i, *spatial)
        The head's inputs (maps are pooled first, as the heads pool them).
    target : Tensor of int, (B,)
    n_steps, method, internal_batch_size
        Captum's meaning; ``internal_batch_size`` bounds the rows of one head call (steps x inputs).
    terms, adapted : Tensor, optional
        The head's trace parts for ``hidden`` (:meth:`LayerHead.trace_parts`); computed when absent.
    """
    route = head_ig_route(head)
    if route == "captum":
        return head_ig_captum(
            head, hidden, target, n_steps=n_steps, method=method, internal_batch_size=internal_batch_size
        )
    with torch.no_grad():
        if terms is None or (route == "adapted" and adapted is None):
            terms, _, adapted = head.trace_parts(hidden)
    if route == "linear":
        # The integrand is constant: the quadrature gives the term times the sum of its weights (1 for
        # Gauss-Legendre; (n - 1) / n for Captum's Riemann trapezoid).
        weight_sum = float(sum(_quadrature(method, n_steps)[0]))
        term = terms.gather(2, target[:, None, None].expand(-1, terms.shape[1], 1)).squeeze(2)
        return (term * weight_sum).detach()
    bias = torch.stack([g.bias for g in head.adapters]).detach()  # (L, d*): z at the zero baseline
    return _ig_over_adapted(head, adapted.detach(), bias, target, n_steps, method, internal_batch_size)


def _ig_over_adapted(
    head: nn.Module, z: Tensor, base: Tensor, target: Tensor, n_steps: int, method: str, internal_batch_size: int | None
) -> Tensor:
    """``sum_k (z - base)_k * sum_s w_s dF_c/dz_k(base + t_s (z - base))`` per layer, (B, L), in steps chunks."""
    weights, points = _quadrature(method, n_steps)
    batch = z.shape[0]
    per_call = max(1, (internal_batch_size or n_steps * batch) // batch)
    diff = z - base
    total = torch.zeros_like(z)
    for lo in range(0, n_steps, per_call):
        t = torch.tensor(points[lo : lo + per_call], dtype=z.dtype, device=z.device)
        w = torch.tensor(weights[lo : lo + per_call], dtype=z.dtype, device=z.device)
        with torch.enable_grad():
            path = (base + t[:, None, None, None] * diff).reshape(-1, *z.shape[1:]).requires_grad_(True)
            logits = head.adapted_logits(path)
            out = logits.gather(1, target.repeat(len(t))[:, None]).sum()
            (grad,) = torch.autograd.grad(out, path)
        total = total + (w[:, None, None, None] * grad.reshape(len(t), *z.shape)).sum(0)
    return (diff * total).sum(-1).detach()


# Captum's integration rules: Riemann points on [0, 1] by rule (as Captum lays them out), Gauss-Legendre besides.
_RIEMANN_ENDS = {
    "riemann_left": lambda n: (0, 1 - 1 / n),
    "riemann_right": lambda n: (1 / n, 1),
    "riemann_middle": lambda n: (1 / (2 * n), 1 - 1 / (2 * n)),
    "riemann_trapezoid": lambda n: (0, 1),
}
IG_METHODS = ("gausslegendre", *_RIEMANN_ENDS)


def _quadrature(method: str, n_steps: int) -> tuple[list[float], list[float]]:
    """Captum's quadrature for ``method``: (weights, points in [0, 1]), ``n_steps`` of each.

    The numbers Captum's ``IntegratedGradients`` integrates with (the tests compare them with Captum's own), made
    here so that the head routes run without importing Captum: numpy's Gauss-Legendre nodes and weights moved from
    [-1, 1] to [0, 1]; for the Riemann rules equal weights ``1/n`` (halved at both ends for the trapezoid) at points
    spaced evenly by ``torch.linspace``, as Captum spaces them.
    """
    check_choice("method", method, IG_METHODS)
    fewest = 1 if method == "gausslegendre" else 2
    if n_steps < fewest:
        raise ConfigError(f"IG with {method} needs at least {fewest} steps; got {n_steps}.")
    if method == "gausslegendre":
        nodes, weights = np.polynomial.legendre.leggauss(n_steps)
        return (0.5 * weights).tolist(), (0.5 * (1 + nodes)).tolist()
    weights = [1 / n_steps] * n_steps
    if method == "riemann_trapezoid":
        weights[0] /= 2
        weights[-1] /= 2
    return weights, torch.linspace(*_RIEMANN_ENDS[method](n_steps), n_steps).tolist()


def _touching_all(head: LayerHead, hidden: tuple[Tensor, ...]) -> Tensor:
    """Head logits with every input on the graph: Captum cannot take gradients of inputs a head ignores
    (LastLayer's lower layers); adding ``0 * h`` gives them their true gradient, zero."""
    zero = sum((h * 0).sum() for h in hidden)
    return head(list(hidden)) + zero


def head_ig_captum(
    head: LayerHead,
    hidden: tuple[Tensor, ...],
    target: Tensor,
    *,
    n_steps: int = 50,
    method: str = "gausslegendre",
    internal_batch_size: int | None = None,
) -> Tensor:
    """The general route: Captum ``IntegratedGradients`` over the pooled head inputs from zeros, (B, L).

    The heads pool maps first and pooling is linear, so IG over the pooled states gives the same per-layer
    sums as IG over the full maps, at a fraction of the memory (``n_steps`` copies of the maps).
    """
    from captum.attr import IntegratedGradients

    with torch.enable_grad():
        ig = IntegratedGradients(lambda *h: _touching_all(head, h))
        attr = ig.attribute(
            tuple(pool_hidden(h).detach() for h in hidden),
            target=target,
            n_steps=n_steps,
            method=method,
            internal_batch_size=internal_batch_size,
        )
    return torch.stack([a.flatten(1).sum(1) for a in attr], 1).detach()
