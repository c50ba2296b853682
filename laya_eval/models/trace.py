"""One backbone pass -> a frozen :class:`Trace` that every analysis reads.

Cache once, analyse many times: attributions, leave-one-layer-out effects and
metrics are functions of the trace and the head, so the backbone runs once per
batch (network-scope analyses are the documented exception).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from laya_eval.models.heads import LayerHead
from laya_eval.models.layered import LayeredModel
from laya_eval.models.removal import fast_path_unchanged

__all__ = ["Trace", "trace", "trace_from_hidden"]


@dataclass(frozen=True)
class Trace:
    """Everything one forward pass yields, detached.

    Attributes
    ----------
    hidden : tuple of Tensor, each (B, d_i) or (B, C_i, *spatial)
        The head's inputs ``h_1 ... h_L``.
    logits : Tensor, (B, C)
    probs : Tensor, (B, C)
        ``softmax(logits)``.
    pred : Tensor, (B,)
        Predicted class on the intact input; the target of every method.
    terms : Tensor, (B, L, C)
        Per-layer logit terms of the head.
    layer_weights : Tensor, (B, L) or None
        LAYA alpha(x) or ScalarMix softmax(w); ``None`` for other heads.
    labels : Tensor, (B,) or None
    inputs : Any
        The raw input batch (kept for network-scope analyses).
    sample_ids : Tensor, (B,) int64, or None
        Global index of each sample in the evaluated set; per-sample randomness is drawn
        from (seed, sample id), so it does not depend on batching or sharding.
    adapted : Tensor, (B, L, d*), or None
        The head's adapter outputs ``z_i = g_i(h_i)`` (LAYA, ScalarMix), which the ``zero``/``mean``
        removal fast paths reuse; ``None`` for heads without adapters or whose class changes a method
        the fast path relies on.
    block_outputs, block_inputs : tuple of Tensor, or None
        Each block's full output and input in this pass (what ``replace`` acts on and reads), kept at network
        scope when the backbone can start at a block: a removal then starts at its first removed block from these
        states instead of re-running the backbone from the input. ``None`` otherwise.
    """

    hidden: tuple[Tensor, ...]
    logits: Tensor
    probs: Tensor
    pred: Tensor
    terms: Tensor
    layer_weights: Tensor | None
    labels: Tensor | None = None
    inputs: Any = None
    sample_ids: Tensor | None = None
    adapted: Tensor | None = None
    block_outputs: tuple[Tensor, ...] | None = None
    block_inputs: tuple[Tensor | None, ...] | None = None

    @property
    def n_samples(self) -> int:
        """Batch size ``B``."""
        return int(self.logits.shape[0])

    @property
    def n_layers(self) -> int:
        """Number of layers ``L``."""
        return len(self.hidden)

    @property
    def confidence(self) -> Tensor:
        """``p_c(x)`` for the predicted class, (B,)."""
        return self.probs.gather(1, self.pred[:, None]).squeeze(1)


@torch.no_grad()
def trace_from_hidden(
    head: LayerHead,
    hidden: list[Tensor],
    labels: Tensor | None = None,
    inputs: Any = None,
    sample_ids: Tensor | None = None,
) -> Trace:
    """Build a :class:`Trace` from hidden states that are already computed."""
    hidden = tuple(h.detach() for h in hidden)
    if fast_path_unchanged(head):
        terms, weights, adapted = head.trace_parts(hidden)
    else:  # a subclass's own terms decide; nothing is kept for a fast path it does not take
        (terms, weights), adapted = head.terms_and_weights(hidden), None
    logits = terms.sum(1) + head.bias
    return Trace(
        hidden=hidden,
        logits=logits,
        probs=torch.softmax(logits, -1),
        pred=logits.argmax(-1),
        terms=terms,
        layer_weights=None if weights is None else weights.detach(),
        labels=labels,
        inputs=inputs,
        sample_ids=sample_ids,
        adapted=adapted,
    )


@torch.no_grad()
def trace(model: LayeredModel, x: Any, labels: Tensor | None = None, sample_ids: Tensor | None = None) -> Trace:
    """Run the backbone once on the batch ``x`` and cache what every analysis needs."""
    return trace_from_hidden(model.head, model.hidden_states(x), labels=labels, inputs=x, sample_ids=sample_ids)
