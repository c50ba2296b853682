"""Effects in float64 at the head.

A leave-one-layer-out effect ``p_c(x) - p_c(x removed)`` subtracts two probabilities that are
often both close to 1; in float32 the difference carries rounding of ~1e-7, which is as large
as many real effects of a layer the head barely reads (``benchmarks/results/tie_tolerance.md``).
The head is small, so the engine evaluates every removal with a float64 copy of the head on the
(float32) hidden states; the backbone keeps its own precision. :func:`float64_view` builds that
copy once per evaluation and :func:`float64_trace` re-reads a batch's trace through it.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import Any, Callable

from torch import Tensor, nn

from laya_eval.models.layered import LayeredModel
from laya_eval.models.trace import Trace, trace_from_hidden

__all__ = ["float64_trace", "float64_view"]


class _Float64Outputs(nn.Module):
    """The same backbone (shared, not copied) with its hidden states cast to float64 (network-scope removals)."""

    def __init__(self, backbone: nn.Module) -> None:
        super().__init__()
        self.inner = backbone
        self.layer_dims = list(backbone.layer_dims)
        self.layer_names = list(getattr(backbone, "layer_names", []) or [])

    @property
    def n_layers(self) -> int:
        return len(self.layer_dims)

    @property
    def starts_at_block(self) -> bool:
        return bool(getattr(self.inner, "starts_at_block", False))

    def forward(self, x: Any, replace: Mapping[int, Callable[[Tensor], Tensor]] | None = None) -> list[Tensor]:
        hidden = self.inner(x, replace=replace) if replace else self.inner(x)
        return [h.double() if h.is_floating_point() else h for h in hidden]

    def forward_from(
        self, start: int, output: Tensor, x: Any, replace: Mapping[int, Callable[[Tensor], Tensor]] | None = None
    ) -> list[Tensor]:
        hidden = self.inner.forward_from(start, output, x, replace)
        return [h.double() if h.is_floating_point() else h for h in hidden]


def float64_view(model: LayeredModel) -> LayeredModel:
    """A model whose head is a float64 copy of ``model``'s and whose backbone is ``model``'s own, cast on output."""
    head = copy.deepcopy(model.head).double().eval()
    return LayeredModel(_Float64Outputs(model.backbone), head, model.info)


def float64_trace(tr: Trace, model64: LayeredModel) -> Trace:
    """``tr`` re-read through the float64 head; the predicted class stays the one the model predicted."""
    hidden = [h.double() if h.is_floating_point() else h for h in tr.hidden]
    out = trace_from_hidden(model64.head, hidden, labels=tr.labels, inputs=tr.inputs, sample_ids=tr.sample_ids)
    return dataclasses.replace(out, pred=tr.pred, block_outputs=tr.block_outputs, block_inputs=tr.block_inputs)
