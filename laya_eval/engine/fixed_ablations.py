"""The fixed ablations: ``gate``, ``gate-renorm``, ``zero``, ``mean``, ``skip`` and ``mean-update`` (one fill for
every sample).

Their logits after each removal at each scope they are defined for, and the state each puts in place of a layer,
with the signatures of :class:`laya_eval.engine.removals.Ablation`; :mod:`laya_eval.engine.removals` registers
them (the ablations drawn per sample live in :mod:`laya_eval.engine.interventions`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from laya_eval.engine.network_passes import network_replacement_logits
from laya_eval.errors import ConfigError
from laya_eval.models.heads import LayerHead, pool_hidden
from laya_eval.models.layered import LayeredModel
from laya_eval.models.trace import Trace

__all__ = [
    "fill_state",
    "gate_logits",
    "gate_renorm_logits",
    "mean_head_logits",
    "mean_network_logits",
    "mean_update_network_logits",
    "skip_network_logits",
    "zero_head_logits",
    "zero_network_logits",
    "zero_state",
]


def gate_logits(tr: Trace, head: LayerHead, masks: Tensor, fill, *, renormalise: bool = False) -> Tensor:
    """``gate``: the kept layers' terms plus the bias (``renormalise``: over the kept layers' weight)."""
    logits = torch.einsum("blc,bkl->bkc", tr.terms, masks)
    if renormalise and tr.layer_weights is not None:
        mass = torch.einsum("bl,bkl->bk", tr.layer_weights, masks).unsqueeze(-1)
        # With every layer removed no weight is left to renormalise: the logits are the bias alone.
        logits = logits / torch.where(mass > 0, mass, torch.ones_like(mass))
    return logits + head.bias


def gate_renorm_logits(tr: Trace, head: LayerHead, masks: Tensor, fill) -> Tensor:
    """``gate-renorm``: :func:`gate_logits` with the remaining layer weights renormalised."""
    return gate_logits(tr, head, masks, fill, renormalise=True)


def zero_head_logits(tr: Trace, head: LayerHead, masks: Tensor, fill) -> Tensor:
    """``zero`` at head scope: the removed layers' pooled states set to zeros."""
    # The heads pool maps first, so replacing the pooled state is exact; the head's removal_logits reuses
    # what a removal does not touch (generic recomputation for custom heads).
    pooled = [pool_hidden(h) for h in tr.hidden]
    return head.removal_logits(
        pooled, masks, [p.new_zeros(p.shape[-1]) for p in pooled], terms=tr.terms, adapted=tr.adapted
    )


def mean_head_logits(tr: Trace, head: LayerHead, masks: Tensor, fill) -> Tensor:
    """``mean`` at head scope: the removed layers' pooled states set to ``fill`` (their dataset means)."""
    pooled = [pool_hidden(h) for h in tr.hidden]
    if fill is None or len(fill) != masks.shape[-1]:
        raise ConfigError("mean ablation needs the mean of every hidden state over the evaluated data.")
    return head.removal_logits(pooled, masks, list(fill), terms=tr.terms, adapted=tr.adapted)


def zero_network_logits(tr: Trace, model: LayeredModel, masks: Tensor, fill, *, max_rows: int | None = None) -> Tensor:
    """``zero`` at network scope: the removed blocks' outputs set to zeros."""
    return network_replacement_logits(tr, model, masks, None, max_rows)


def mean_network_logits(tr: Trace, model: LayeredModel, masks: Tensor, fill, *, max_rows: int | None = None) -> Tensor:
    """``mean`` at network scope: the removed blocks' outputs set to ``fill`` (their dataset means)."""
    return network_replacement_logits(tr, model, masks, fill, max_rows)


def skip_network_logits(tr: Trace, model: LayeredModel, masks: Tensor, fill, *, max_rows: int | None = None) -> Tensor:
    """``skip`` at network scope: the removed blocks' updates set to zero, each output replaced by its input."""
    return network_replacement_logits(tr, model, masks, None, max_rows, on_update=True)


def mean_update_network_logits(
    tr: Trace, model: LayeredModel, masks: Tensor, fill, *, max_rows: int | None = None
) -> Tensor:
    """``mean-update`` at network scope: the removed blocks' outputs set to their inputs plus ``fill`` (the dataset
    means of their updates)."""
    if fill is None or len(fill) != masks.shape[-1]:
        raise ConfigError("mean-update needs the mean of every block's update over the evaluated data.")
    return network_replacement_logits(tr, model, masks, fill, max_rows, on_update=True)


def zero_state(state: Tensor, layer: int, fill) -> Tensor:
    """The state ``zero`` puts in: zeros."""
    return torch.zeros_like(state)


def fill_state(state: Tensor, layer: int, fill) -> Tensor:
    """The state ``mean`` (and ``noise``, in expectation) puts in: ``fill[layer]``."""
    return fill[layer].to(state).expand_as(state)
