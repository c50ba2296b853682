"""Output heads that aggregate every hidden layer of a backbone.

Every head here is *additive over layers* (docs/architecture.md, "Heads and removal"): with ``t_i(x)`` the
logit-space term of layer ``i`` and ``b`` the classifier bias,

    logits(x) = sum_i keep_i * t_i(x) + b

The keep gate ``keep`` ((B, L), 1 keeps a layer's term, 0 drops it) expresses leave-one-layer-out
removal. ``forward`` is computed from ``terms`` so that ``logits == terms.sum(1) + bias`` holds exactly.

Heads accept vector states ``(B, d_i)`` and spatial maps ``(B, C_i, *spatial)``;
maps are reduced by global average pooling before the adapters, so gradient
methods can still see the maps.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor, nn

from laya_eval.catalog import D_STAR, HEAD_NAMES, LAYA_TAU, PSI_CHOICES, SCORER_HIDDEN
from laya_eval.checks import check_choice
from laya_eval.errors import ConfigError
from laya_eval.models.removal import (
    AFFINE_FAST_PATH,
    LAYA_FAST_PATH,
    SCALARMIX_FAST_PATH,
    FastPath,
    check_removal_inputs,
    fast_route,
)

__all__ = [
    "HEADS",
    "ConcatHead",
    "LastLayerHead",
    "LayaHead",
    "LayerHead",
    "ScalarMixHead",
    "head_names",
    "make_head",
    "pool_hidden",
]


def pool_hidden(h: Tensor) -> Tensor:
    """Global-average-pool a hidden state to ``(B, d)``.

    Parameters
    ----------
    h : Tensor, (B, d) or (B, C, *spatial)

    Returns
    -------
    Tensor, (B, d) or (B, C)
    """
    if h.dim() == 2:
        return h
    return h.flatten(2).mean(-1)


def _kept_mass(weights: Tensor, keep: Tensor) -> Tensor:
    """``sum_i keep_i w_i`` as (B, 1); 1 where nothing is kept (the logits are then the bias alone)."""
    mass = (weights * keep).sum(1, keepdim=True)
    return torch.where(mass > 0, mass, torch.ones_like(mass))


class LayerHead(nn.Module):
    """Base class: a classifier head over ``L`` hidden states.

    Subclasses implement :meth:`terms`, :attr:`bias` and, where the head has
    layer weights, :meth:`layer_weights`.
    """

    name: str = ""

    def __init__(self, layer_dims: Sequence[int], num_classes: int) -> None:
        super().__init__()
        layer_dims = [int(d) for d in layer_dims]
        if not layer_dims or min(layer_dims) < 1:
            raise ConfigError(f"layer_dims must be a non-empty list of positive sizes; got {layer_dims}.")
        if int(num_classes) < 2:
            raise ConfigError(f"num_classes must be at least 2; got {num_classes}.")
        self.layer_dims = layer_dims
        self.num_classes = int(num_classes)

    @property
    def n_layers(self) -> int:
        """Number of hidden states ``L`` the head aggregates."""
        return len(self.layer_dims)

    def config(self) -> dict:
        """JSON-serialisable description that :func:`make_head` rebuilds the head from."""
        return {"name": self.name, "kwargs": self._kwargs()}

    def _kwargs(self) -> dict:
        return {}

    def _check(self, hidden: Sequence[Tensor]) -> list[Tensor]:
        if len(hidden) != self.n_layers:
            raise ConfigError(f"{self.name} head expects {self.n_layers} hidden states; got {len(hidden)}.")
        pooled = [pool_hidden(h) for h in hidden]
        for i, (h, d) in enumerate(zip(pooled, self.layer_dims)):
            if h.shape[-1] != d:
                raise ConfigError(f"hidden state {i + 1} has {h.shape[-1]} features; the head was built for {d}.")
        return pooled

    def terms(self, hidden: Sequence[Tensor]) -> Tensor:
        """Per-layer logit terms ``t_i(x)``, (B, L, C), of ``hidden``: list of (B, d_i) or (B, C_i, *spatial)."""
        raise NotImplementedError

    @property
    def bias(self) -> Tensor:
        """Classifier bias ``b``, shape (C,)."""
        raise NotImplementedError

    def layer_weights(self, hidden: Sequence[Tensor]) -> Tensor | None:
        """Per-input layer weights (B, L) summing to 1, or ``None`` if the head has none."""
        return None

    def terms_and_weights(self, hidden: Sequence[Tensor]) -> tuple[Tensor, Tensor | None]:
        """``(terms(hidden), layer_weights(hidden))`` in one call; heads whose weights are an
        intermediate of their terms (LAYA) compute both from one adapter pass."""
        return self.terms(hidden), self.layer_weights(hidden)

    def trace_parts(self, hidden: Sequence[Tensor]) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """``(terms, layer_weights, adapted)`` for a trace: :meth:`terms_and_weights` and, for heads with
        adapters, their outputs ``z`` (B, L, d*), which the removal fast paths reuse; ``None`` otherwise."""
        return (*self.terms_and_weights(hidden), None)

    #: The removal fast path of this class (laya_eval.models.removal); None: the generic recomputation.
    removal_fast_path: FastPath | None = None

    def removal_logits(
        self,
        pooled: Sequence[Tensor],
        keep: Tensor,
        fill: Sequence[Tensor],
        *,
        terms: Tensor | None = None,
        adapted: Tensor | None = None,
    ) -> Tensor:
        """Logits after replacing the removed layers' pooled states by fill vectors (``zero``/``mean`` removals).

        For every input ``b`` and removal ``k`` the head sees ``m p_i + (1 - m) fill_i`` with
        ``m = keep[b, k, i]``. The generic route recomputes the whole head on the ``B x K``
        replaced inputs; the built-in heads reuse what a removal does not touch
        (:mod:`laya_eval.models.removal`) and agree with the generic route to rounding. A subclass
        that overrides a method its parent's fast path relies on gets the generic route.

        ``pooled``: the head's inputs, list of (B, d_i) or (B, C_i, *spatial), maps pooled first as in
        :meth:`forward`; ``keep`` (K, L) or (B, K, L): 1 keeps layer ``i``, 0 replaces it (several at once
        allowed); ``fill``: list of (d_i,), zeros for ``zero``, dataset means for ``mean``; ``terms``,
        ``adapted``: this head's :meth:`trace_parts` of ``pooled`` (a trace's), which the fast paths reuse
        instead of recomputing the adapters. Returns (B, K, C).
        """
        pooled = self._check(pooled)
        keep, fill = check_removal_inputs(pooled, keep, fill)
        return fast_route(self, keep)(self, pooled, keep, fill, terms=terms, adapted=adapted)

    def forward(self, hidden: Sequence[Tensor], keep: Tensor | None = None, renormalize: bool = False) -> Tensor:
        """Logits (B, C) of ``hidden`` (list of (B, d_i) or (B, C_i, *spatial)) with an optional keep gate.

        ``keep`` (B, L) or (L,): 1 keeps a layer's term, 0 drops it, values in between scale it.
        ``renormalize``: for heads with layer weights, divide the kept terms by the kept weight mass
        ``sum_i keep_i w_i`` (the ``gate-renorm`` ablation); heads without weights ignore it.
        """
        t = self.terms(hidden)
        if keep is None:
            return t.sum(1) + self.bias
        keep = keep.to(t.dtype)
        logits = (t * keep.expand(t.shape[:2]).unsqueeze(-1)).sum(1)
        if renormalize:
            w = self.layer_weights(hidden)
            if w is not None:
                logits = logits / _kept_mass(w, keep)
        return logits + self.bias


class LastLayerHead(LayerHead):
    """A linear readout of the last hidden state only: ``t_L = W h_L``, other terms 0."""

    name = "lastlayer"

    def __init__(self, layer_dims: Sequence[int], num_classes: int) -> None:
        super().__init__(layer_dims, num_classes)
        self.classifier = nn.Linear(self.layer_dims[-1], self.num_classes)

    def terms(self, hidden: Sequence[Tensor]) -> Tensor:
        pooled = self._check(hidden)
        last = pooled[-1] @ self.classifier.weight.T
        out = last.new_zeros(last.shape[0], self.n_layers, self.num_classes)
        out[:, -1] = last
        return out

    @property
    def bias(self) -> Tensor:
        return self.classifier.bias

    removal_fast_path = AFFINE_FAST_PATH


class ConcatHead(LayerHead):
    """One linear readout over ``[h_1 || ... || h_L]``; term ``i`` is its block ``W_i h_i``."""

    name = "concat"

    def __init__(self, layer_dims: Sequence[int], num_classes: int) -> None:
        super().__init__(layer_dims, num_classes)
        self.classifier = nn.Linear(sum(self.layer_dims), self.num_classes)

    def terms(self, hidden: Sequence[Tensor]) -> Tensor:
        pooled = self._check(hidden)
        blocks = torch.split(self.classifier.weight, self.layer_dims, dim=1)
        return torch.stack([h @ w.T for h, w in zip(pooled, blocks)], dim=1)

    @property
    def bias(self) -> Tensor:
        return self.classifier.bias

    removal_fast_path = AFFINE_FAST_PATH


class _AdaptedHead(LayerHead):
    """Shared part of ScalarMix and LAYA: linear adapters to ``d*`` and a linear classifier."""

    def __init__(self, layer_dims: Sequence[int], num_classes: int, d_star: int) -> None:
        super().__init__(layer_dims, num_classes)
        if int(d_star) < 1:
            raise ConfigError(f"d_star must be a positive integer; got {d_star}.")
        self.d_star = int(d_star)
        self.adapters = nn.ModuleList(nn.Linear(d, self.d_star) for d in self.layer_dims)
        self.classifier = nn.Linear(self.d_star, self.num_classes)

    def adapted(self, hidden: Sequence[Tensor]) -> Tensor:
        """Adapted states ``z_i = g_i(h_i)``, stacked to (B, L, d*)."""
        pooled = self._check(hidden)
        return torch.stack([g(h) for g, h in zip(self.adapters, pooled)], dim=1)

    def _weighted_terms(self, z: Tensor, weights: Tensor) -> Tensor:
        # t_i = w_i * W z_i: the classifier is linear, so W(sum_i w_i z_i) = sum_i t_i.
        return weights.unsqueeze(-1) * (z @ self.classifier.weight.T)

    def adapted_logits(self, z: Tensor) -> Tensor:
        """Logits from the adapter outputs ``z`` (B, L, d*): the head after its adapters, (B, C)."""
        return self._weighted_terms(z, self._layer_mix(z)).sum(1) + self.bias

    def _layer_mix(self, z: Tensor) -> Tensor:  # the per-layer weights w_i of the terms, (B, L)
        raise NotImplementedError

    @property
    def bias(self) -> Tensor:
        return self.classifier.bias


class ScalarMixHead(_AdaptedHead):
    """ScalarMix (AllenNLP semantics): ``h = gamma * sum_i softmax(w)_i z_i``.

    ``w`` starts at 0 (uniform mix) and ``gamma`` at 1. The layer weights are
    input-independent.
    """

    name = "scalarmix"

    def __init__(self, layer_dims: Sequence[int], num_classes: int, d_star: int = D_STAR) -> None:
        super().__init__(layer_dims, num_classes, d_star)
        self.scalar_weights = nn.Parameter(torch.zeros(self.n_layers))
        self.gamma = nn.Parameter(torch.ones(()))

    def _kwargs(self) -> dict:
        return {"d_star": self.d_star}

    def mix_weights(self) -> Tensor:
        """``softmax(w)``, shape (L,)."""
        return torch.softmax(self.scalar_weights, dim=0)

    def layer_weights(self, hidden: Sequence[Tensor]) -> Tensor:
        batch = hidden[0].shape[0]
        return self.mix_weights().unsqueeze(0).expand(batch, -1)

    def terms(self, hidden: Sequence[Tensor]) -> Tensor:
        z = self.adapted(hidden)
        w = self.gamma * self.mix_weights().unsqueeze(0).expand(z.shape[0], -1)
        return self._weighted_terms(z, w)

    def _layer_mix(self, z: Tensor) -> Tensor:
        return self.gamma * self.mix_weights().unsqueeze(0).expand(z.shape[0], -1)

    def trace_parts(self, hidden: Sequence[Tensor]) -> tuple[Tensor, Tensor, Tensor]:
        z = self.adapted(hidden)
        return self._weighted_terms(z, self._layer_mix(z)), self.layer_weights(hidden), z

    removal_fast_path = SCALARMIX_FAST_PATH


class LayaHead(_AdaptedHead):
    """LAYA: input-conditioned attention over layers (Vessio, 2025).

    ``z_i = g_i(h_i)`` (linear adapters to ``d*``), scores
    ``s = scorer([psi(z_1) || ... || psi(z_L)])`` with the scorer
    Linear(L*d* -> hidden) -> GELU -> Linear(hidden -> L),
    ``alpha = softmax(s / tau)`` and logits ``W sum_i alpha_i z_i + b``.
    ``psi`` is the identity or a shared 2-layer GELU MLP.
    """

    name = "laya"

    def __init__(
        self,
        layer_dims: Sequence[int],
        num_classes: int,
        d_star: int = D_STAR,
        tau: float = LAYA_TAU,
        scorer_hidden: int = SCORER_HIDDEN,
        psi: str = "identity",
    ) -> None:
        super().__init__(layer_dims, num_classes, d_star)
        if not float(tau) > 0:
            raise ConfigError(f"tau must be positive; got {tau}.")
        check_choice("psi", psi, PSI_CHOICES)
        self.tau = float(tau)
        self.scorer_hidden = int(scorer_hidden)
        self.psi_kind = psi
        if psi == "mlp":
            self.psi = nn.Sequential(
                nn.Linear(self.d_star, self.d_star), nn.GELU(), nn.Linear(self.d_star, self.d_star)
            )
        else:
            self.psi = nn.Identity()
        self.scorer = nn.Sequential(
            nn.Linear(self.n_layers * self.d_star, self.scorer_hidden),
            nn.GELU(),
            nn.Linear(self.scorer_hidden, self.n_layers),
        )

    def _kwargs(self) -> dict:
        return {"d_star": self.d_star, "tau": self.tau, "scorer_hidden": self.scorer_hidden, "psi": self.psi_kind}

    def _alpha(self, z: Tensor) -> Tensor:
        scores = self.scorer(self.psi(z).flatten(1))
        return torch.softmax(scores / self.tau, dim=-1)

    _layer_mix = _alpha

    def layer_weights(self, hidden: Sequence[Tensor]) -> Tensor:
        return self._alpha(self.adapted(hidden))

    def terms(self, hidden: Sequence[Tensor]) -> Tensor:
        return self.terms_and_weights(hidden)[0]

    def terms_and_weights(self, hidden: Sequence[Tensor]) -> tuple[Tensor, Tensor]:
        z = self.adapted(hidden)
        alpha = self._alpha(z)
        return self._weighted_terms(z, alpha), alpha

    def trace_parts(self, hidden: Sequence[Tensor]) -> tuple[Tensor, Tensor, Tensor]:
        z = self.adapted(hidden)
        alpha = self._alpha(z)
        return self._weighted_terms(z, alpha), alpha, z

    def forward(self, hidden: Sequence[Tensor], keep: Tensor | None = None, renormalize: bool = False) -> Tensor:
        if not renormalize or keep is None:
            return super().forward(hidden, keep)
        # One adapter pass for both the terms and the weights used to renormalise.
        z = self.adapted(hidden)
        alpha = self._alpha(z)
        t = self._weighted_terms(z, alpha)
        keep = keep.to(t.dtype).expand(t.shape[:2])
        return (t * keep.unsqueeze(-1)).sum(1) / _kept_mass(alpha, keep) + self.bias

    removal_fast_path = LAYA_FAST_PATH


HEADS: dict[str, type[LayerHead]] = {cls.name: cls for cls in (LastLayerHead, ConcatHead, ScalarMixHead, LayaHead)}
if tuple(HEADS) != HEAD_NAMES:  # the catalog owns the names (read by the CLI without torch)
    raise ImportError(f"heads {list(HEADS)} do not match the catalog's {list(HEAD_NAMES)}")


def head_names() -> list[str]:
    """Registered head names, sorted."""
    return sorted(HEADS)


def make_head(name: str, layer_dims: Sequence[int], num_classes: int, **kwargs) -> LayerHead:
    """Build a head by registry name.

    Parameters
    ----------
    name : {"concat", "lastlayer", "laya", "scalarmix"}
    layer_dims : list of int
        Feature size of each hidden state (channels for spatial maps).
    num_classes : int
    **kwargs
        Head hyper-parameters (``d_star``, ``tau``, ``scorer_hidden``, ``psi``).
    """
    check_choice("head", name, head_names())
    cls = HEADS[name]
    try:
        return cls(layer_dims, num_classes, **kwargs)
    except TypeError as exc:
        raise ConfigError(f"invalid option for the {name} head: {exc}.") from None
