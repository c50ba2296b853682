"""Layer scores practitioners prune by: representation similarity and norm-weighted layer weights.

All three read only the states the head sees, so they cost one head pass and no gradient.

The *state* ``s_i`` of layer ``i`` is the layer as the head reads it: the adapted state ``z_i = g_i(p_i)``
for heads with adapters (LAYA, ScalarMix; ``z``, not ``psi(z)``), otherwise the pooled hidden state ``p_i``
(global average pooling of maps, as the heads pool), which needs every layer to have the same width.

``block_influence`` (ShortGPT, Men et al. 2024)
    ``BI_i = 1 - cos(s_{i-1}, s_i)``: how much layer ``i`` turns the state it receives. The first layer's
    input is not among the head's inputs, so ``cos`` is taken as 0 there: ``BI_1 = 1``.
``angular_distance`` (Gromov et al. 2024)
    ``d_i = arccos(cos(s_{i-1}, s_{i+n-1})) / pi`` for the block of ``n`` layers starting at ``i`` (a block
    that would pass the last layer ends at it); ``d_1 = 1/2`` (``cos`` taken as 0, as above). With ``n = 1``
    it is the angular form of block influence.
``alpha_norm`` (Kobayashi et al. 2020)
    ``alpha_i(x) * ||W z_i||`` for LAYA, ``gamma * s_i * ||W z_i||`` for ScalarMix, ``W`` the classifier's
    weight (C, d*): a weight counts only as much as the vector it weights.

A state of norm zero has no direction: its cosine with anything is taken as 0.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import Tensor

from laya_eval.errors import ConfigError
from laya_eval.models.heads import LayaHead, LayerHead, ScalarMixHead, pool_hidden

__all__ = ["alpha_norm", "angular_distance", "block_influence", "cosine_rows", "has_common_states", "layer_states"]


def has_common_states(head: LayerHead) -> bool:
    """Whether the head's layer states share one width (adapters, or hidden states of equal widths)."""
    return isinstance(head, (LayaHead, ScalarMixHead)) or len(set(head.layer_dims)) == 1


def layer_states(head: LayerHead, hidden: Sequence[Tensor]) -> Tensor:
    """The states ``s_i`` the head reads, stacked: (B, L, d)."""
    if isinstance(head, (LayaHead, ScalarMixHead)):
        return head.adapted(hidden)
    if not has_common_states(head):
        raise ConfigError(f"layer states of widths {list(head.layer_dims)} cannot be compared without adapters.")
    return torch.stack([pool_hidden(h) for h in hidden], 1)


def cosine_rows(a: Tensor, b: Tensor) -> Tensor:
    """Cosine similarity along the last dimension; 0 where either vector has norm zero."""
    norms = a.norm(dim=-1) * b.norm(dim=-1)
    dot = (a * b).sum(-1)
    return torch.where(norms > 0, dot / torch.where(norms > 0, norms, torch.ones_like(norms)), torch.zeros_like(dot))


@torch.no_grad()
def block_influence(head: LayerHead, hidden: Sequence[Tensor]) -> Tensor:
    """``1 - cos(s_{i-1}, s_i)``, ``BI_1 = 1``: (B, L)."""
    s = layer_states(head, hidden)
    first = torch.zeros_like(s[:, :1, 0])
    cos = torch.cat([first, cosine_rows(s[:, :-1], s[:, 1:])], 1)
    return 1.0 - cos


@torch.no_grad()
def angular_distance(head: LayerHead, hidden: Sequence[Tensor], *, span: int = 1) -> Tensor:
    """``arccos(cos(s_{i-1}, s_{min(i+n-1, L)})) / pi``, ``d_1 = 1/2``: (B, L)."""
    if int(span) < 1:
        raise ConfigError(f"angular_span must be a positive integer; got {span!r}.")
    s = layer_states(head, hidden)
    n_layers = s.shape[1]
    cols = [torch.zeros_like(s[:, 0, 0])]
    for i in range(1, n_layers):  # 0-based: the block starting at layer i reads s_{i-1} and ends at s_{i+n-1}
        end = min(i + int(span) - 1, n_layers - 1)
        cols.append(cosine_rows(s[:, i - 1], s[:, end]))
    cos = torch.stack(cols, 1).clamp(-1.0, 1.0)
    return torch.arccos(cos) / math.pi


@torch.no_grad()
def alpha_norm(head: LayerHead, hidden: Sequence[Tensor]) -> Tensor:
    """``w_i(x) * ||W z_i||`` with ``w = alpha(x)`` (LAYA) or ``gamma * softmax(w)`` (ScalarMix): (B, L)."""
    if not isinstance(head, (LayaHead, ScalarMixHead)):
        raise ConfigError(f"alpha_norm needs a LAYA or ScalarMix head; got a {head.name} head.")
    z = head.adapted(hidden)  # (B, L, d*)
    norms = (z @ head.classifier.weight.T).norm(dim=-1)  # (B, L): ||W z_i||
    weights = head.layer_weights(hidden)
    if isinstance(head, ScalarMixHead):
        weights = head.gamma * weights
    return weights * norms
