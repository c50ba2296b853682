"""Head logits after replacing some hidden states by fill vectors: the ``zero`` / ``mean`` removals.

A removal replaces the pooled state ``p_i`` of every removed layer ``i`` by a
fill vector ``v_i`` (zeros for ``zero``, the dataset mean for ``mean``) and asks
the head for its logits. With a keep mask ``m`` (1 keeps a layer, 0 removes it)
the head sees

    h_i' = m_i p_i + (1 - m_i) v_i

for every removal ``k`` and input ``b`` at once. :func:`recompute_removal_logits`
computes that literally: it builds the ``B x K`` replaced inputs and calls the
whole head on them. It is the generic route every head inherits and the oracle
the fast paths are tested against.

The fast paths reuse everything a removal does not touch:

- :func:`affine_removal_logits` (LastLayer, Concat, ScalarMix): each term
  ``t_i`` is an affine function of ``h_i`` alone with input-independent
  weights, so ``t_i(h_i') = m_i t_i(p_i) + (1 - m_i) t_i(v_i)``: one term pass
  on the batch and one on the fill vectors, then an einsum over removals.
- :func:`laya_removal_logits`: ``z_i = g_i(p_i)`` and ``z_i' = g_i(v_i)`` once;
  the scorer's first Linear over ``[psi(z_1) || ... || psi(z_L)]`` is a sum of
  per-layer blocks ``W1_i psi(z_i)``, so a removal swaps layer ``i``'s block for
  ``W1_i psi(z_i')`` (computed once) in its pre-activation; only the small rest
  of the scorer (GELU, Linear(hidden -> L), softmax) runs per removal.

The functions take the head as their first argument and read its public
attributes; :mod:`laya_eval.models.heads` exposes them as ``LayerHead.removal_logits``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch import Tensor, nn

from laya_eval.errors import ConfigError

# heads.py imports this module, so heads are annotated as nn.Module here (a LayerHead, a LayaHead).

__all__ = [
    "AFFINE_FAST_PATH",
    "LAYA_FAST_PATH",
    "SCALARMIX_FAST_PATH",
    "FastPath",
    "affine_removal_logits",
    "check_removal_inputs",
    "fast_path_unchanged",
    "fast_route",
    "is_binary",
    "laya_removal_logits",
    "recompute_removal_logits",
]


def check_removal_inputs(pooled: Sequence[Tensor], keep: Tensor, fill: Sequence[Tensor]) -> tuple[Tensor, list[Tensor]]:
    """Validate a removal request; return the masks and the fills on the inputs' device and dtype.

    Parameters
    ----------
    pooled : list of Tensor, each (B, d_i)
    keep : Tensor, (K, L) or (B, K, L)
    fill : list of Tensor, each (d_i,)

    Returns
    -------
    keep : Tensor, (K, L) or (B, K, L) as given, dtype and device of ``pooled[0]``
    fill : list of Tensor, each (d_i,), dtype and device of ``pooled[i]``
    """
    batch, n_layers = pooled[0].shape[0], len(pooled)
    if keep.dim() not in (2, 3) or keep.shape[-1] != n_layers:
        raise ConfigError(
            f"keep must have shape (K, {n_layers}) or (B, K, {n_layers}), one column per layer; "
            f"got {tuple(keep.shape)}."
        )
    if keep.dim() == 3 and keep.shape[0] != batch:
        raise ConfigError(f"keep of shape (B, K, L) must have B = {batch} rows, one per input; got {keep.shape[0]}.")
    if len(fill) != n_layers:
        raise ConfigError(
            f"fill must hold one replacement vector per layer ({n_layers}); got {len(fill)}. "
            "Pass zeros for the zero ablation and the dataset means for the mean ablation."
        )
    out = []
    for i, (p, v) in enumerate(zip(pooled, fill)):
        if tuple(v.shape) != (p.shape[-1],):
            raise ConfigError(
                f"fill vector {i + 1} must have shape ({p.shape[-1]},), the pooled width of layer {i + 1}; "
                f"got {tuple(v.shape)}."
            )
        out.append(v.to(p))
    return keep.to(pooled[0]), out


def recompute_removal_logits(
    head: nn.Module,
    pooled: Sequence[Tensor],
    keep: Tensor,
    fill: Sequence[Tensor],
    *,
    terms: Tensor | None = None,
    adapted: Tensor | None = None,
) -> Tensor:
    """Logits of every removal by calling the whole head on the ``B x K`` replaced inputs (the generic route).

    Parameters
    ----------
    head : LayerHead
    pooled : list of Tensor, each (B, d_i)
        Pooled hidden states (the heads pool maps first, so replacing the pooled state is exact).
    keep : Tensor, (K, L) or (B, K, L)
        1 keeps a layer, 0 replaces it by its fill; values in between mix the two inputs.
    fill : list of Tensor, each (d_i,)
    terms, adapted : Tensor, optional
        The head's own ``terms(pooled)`` (B, L, C) and adapter outputs ``z`` (B, L, d*), when the caller
        already has them (a :class:`~laya_eval.models.trace.Trace`); the fast paths reuse them, this route
        ignores them.

    Returns
    -------
    Tensor, (B, K, C)
    """
    batch = pooled[0].shape[0]
    keep = keep.expand(batch, *keep.shape[-2:])
    k = keep.shape[1]
    hidden = []
    for i, (p, v) in enumerate(zip(pooled, fill)):
        m = keep[:, :, i : i + 1]  # (B, K, 1)
        hidden.append((m * p[:, None, :] + (1 - m) * v).reshape(batch * k, -1))
    return head(hidden).reshape(batch, k, -1)


def affine_removal_logits(
    head: nn.Module,
    pooled: Sequence[Tensor],
    keep: Tensor,
    fill: Sequence[Tensor],
    *,
    terms: Tensor | None = None,
    adapted: Tensor | None = None,
) -> Tensor:
    """Fast path for heads whose terms are affine in their own layer and weighted independently of the input.

    ``t_i(m p + (1 - m) v) = m t_i(p) + (1 - m) t_i(v)`` for any ``m`` (LastLayer, Concat: ``W_i h``;
    ScalarMix: ``gamma s_i W g_i(h)``), so the logits of every removal are
    ``sum_i m_i t_i(p_i) + (1 - m_i) t_i(v_i) + b``.

    Parameters and return value as :func:`recompute_removal_logits`.
    """
    if terms is None:
        terms = head.terms(pooled)  # (B, L, C)
    fill_terms = head.terms([v[None] for v in fill])[0]  # (L, C): t_i(v_i), once per call
    return _mix_layers(keep, terms, fill_terms) + head.bias


def laya_removal_logits(
    head: nn.Module,
    pooled: Sequence[Tensor],
    keep: Tensor,
    fill: Sequence[Tensor],
    *,
    terms: Tensor | None = None,
    adapted: Tensor | None = None,
) -> Tensor:
    """Fast path for LAYA: adapters and the scorer's per-layer blocks once, the rest of the scorer per removal.

    With ``P_i = W1_i psi(z_i)`` (B, hidden) and ``Q_i = W1_i psi(z_i')`` (hidden,) the scorer's
    pre-activation of removal ``k`` is ``b1 + sum_i m_i P_i + (1 - m_i) Q_i``; ``psi`` is applied per
    layer, so this holds for ``psi`` identity and MLP alike when ``m`` is 0 or 1 (for ``psi``
    identity also in between, since the adapters are affine). The logits are
    ``sum_i alpha'_i (m_i W z_i + (1 - m_i) W z_i') + b``.

    Parameters and return value as :func:`recompute_removal_logits`; ``keep`` must hold only 0
    and 1 when ``psi`` is an MLP (:func:`fast_route` takes the generic route
    otherwise).
    """
    first, act, second = head.scorer[0], head.scorer[1], head.scorer[2]
    n_layers, d_star = len(pooled), head.d_star
    z = adapted if adapted is not None else torch.stack([g(p) for g, p in zip(head.adapters, pooled)], dim=1)
    z_fill = torch.stack([g(v) for g, v in zip(head.adapters, fill)], dim=0)  # (L, d*)
    # first.weight is (hidden, L*d*) over the concatenation [psi(z_1) || ... ]: block i is [:, i*d*:(i+1)*d*].
    w1 = first.weight.view(-1, n_layers, d_star)  # (hidden, L, d*)
    blocks = torch.einsum("bld,hld->blh", head.psi(z), w1)  # (B, L, hidden): W1_i psi(z_i)
    fill_blocks = torch.einsum("ld,hld->lh", head.psi(z_fill), w1)  # (L, hidden): W1_i psi(z_i')
    pre = _mix_layers(keep, blocks, fill_blocks) + first.bias  # (B, K, hidden)
    alpha = torch.softmax(second(act(pre)) / head.tau, dim=-1)  # (B, K, L)
    readout = z @ head.classifier.weight.T  # (B, L, C): W z_i
    fill_readout = z_fill @ head.classifier.weight.T  # (L, C): W z_i'
    m = keep.unsqueeze(-1)  # (K, L, 1) or (B, K, L, 1)
    replaced = m * readout.unsqueeze(1) + (1 - m) * fill_readout  # (B, K, L, C): W z_i or W z_i'
    return (alpha.unsqueeze(-1) * replaced).sum(2) + head.bias


def _mix_layers(keep: Tensor, values: Tensor, fill_values: Tensor) -> Tensor:
    """``sum_i keep_ki values_bi + (1 - keep_ki) fill_values_i`` for every removal ``k``.

    Parameters
    ----------
    keep : Tensor, (K, L) or (B, K, L)
    values : Tensor, (B, L, F)
    fill_values : Tensor, (L, F)

    Returns
    -------
    Tensor, (B, K, F)
    """
    # Two contractions, not keep @ (values - fill) + sum(fill): that form cancels digits in float32.
    shared = keep.dim() == 2
    kept = torch.einsum("kl,blf->bkf" if shared else "bkl,blf->bkf", keep, values)
    return kept + torch.einsum("kl,lf->kf" if shared else "bkl,lf->bkf", 1 - keep, fill_values)


def is_binary(keep: Tensor) -> bool:
    """Whether every entry of ``keep`` is exactly 0 or 1."""
    return bool(((keep == 0) | (keep == 1)).all())


Route = Callable[..., Tensor]


@dataclass(frozen=True)
class FastPath:
    """A head class's removal fast path.

    Attributes
    ----------
    route : callable ``(head, pooled, keep, fill, *, terms=None, adapted=None) -> Tensor (B, K, C)``
    relies_on : tuple of str
        Methods of the class that declares the fast path which the route assumes unchanged.
    applies : callable ``(head, keep) -> bool``
        Whether the route is exact for this head instance and these masks.
    """

    route: Route
    relies_on: tuple[str, ...]
    applies: Callable[[nn.Module, Tensor], bool] = lambda head, keep: True


def fast_route(head: nn.Module, keep: Tensor) -> Route:
    """The route :meth:`LayerHead.removal_logits` takes: the class's fast path where it is exact, else the generic one.

    The fast path is the ``removal_fast_path`` of the nearest class that sets one (``None`` opts
    out). A subclass that overrides any method that fast path relies on (say a custom ``terms``)
    falls back to :func:`recompute_removal_logits`, which only calls the head.
    """
    if not fast_path_unchanged(head):
        return recompute_removal_logits
    fast = _fast_path(head)[1]
    return fast.route if fast.applies(head, keep) else recompute_removal_logits


def _fast_path(head: nn.Module) -> tuple[type | None, FastPath | None]:
    owner = next((c for c in type(head).__mro__ if "removal_fast_path" in vars(c)), None)
    return owner, (None if owner is None else vars(owner)["removal_fast_path"])


def fast_path_unchanged(head: nn.Module) -> bool:
    """Whether ``head``'s class keeps every method its removal fast path relies on (False without a fast path)."""
    owner, fast = _fast_path(head)
    return fast is not None and all(getattr(type(head), name) is getattr(owner, name) for name in fast.relies_on)


def _linear_adapters(head: nn.Module, keep: Tensor) -> bool:
    # t_i is affine in h_i only while the adapters are.
    return all(type(g) is nn.Linear for g in head.adapters)


def _laya_applies(head: nn.Module, keep: Tensor) -> bool:
    # The block decomposition needs linear adapters and the reference scorer; psi(m z + (1 - m) z')
    # = m psi(z) + (1 - m) psi(z') holds for an MLP psi only when m is 0 or 1.
    scorer = head.scorer
    layout = len(scorer) == 3 and type(scorer[0]) is nn.Linear and type(scorer[2]) is nn.Linear
    return layout and _linear_adapters(head, keep) and (head.psi_kind == "identity" or is_binary(keep))


AFFINE_FAST_PATH = FastPath(affine_removal_logits, ("terms", "forward", "bias"))
SCALARMIX_FAST_PATH = FastPath(
    affine_removal_logits,
    (
        "terms",
        "forward",
        "bias",
        "adapted",
        "mix_weights",
        "_weighted_terms",
        "trace_parts",
        "adapted_logits",
        "_layer_mix",
    ),
    _linear_adapters,
)
LAYA_FAST_PATH = FastPath(
    laya_removal_logits,
    (
        "terms",
        "terms_and_weights",
        "forward",
        "bias",
        "adapted",
        "_alpha",
        "_weighted_terms",
        "trace_parts",
        "adapted_logits",
        "_layer_mix",
    ),
    _laya_applies,
)
