"""The batch's one backward pass: each layer's state and the gradients of the explained class at it.

Head scope: the cached hidden states at the head input are leaves; the backbone is not re-run. Network scope: each
block's full output inside the backbone (what ``replace[i]`` acts on), in row chunks within ``--max-memory``; on
text the batch is tokenized once and the chunks are rows gathered from the tokenized tensors
(:func:`~laya_eval.engine.network_passes.take_rows`), so every chunk has the batch's padded length and the token mask
says which positions are real.

One backward pass gives every gradient a run asks for: ``d logit_t / d h_i`` (gradient x activation, Grad-CAM) and
``d p_t / d h_i`` (attribution patching). When both are asked for they are two vectors of one backward call
(``torch.autograd.grad(..., is_grads_batched=True)``), not two passes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from laya_eval.engine.memory_budget import held_bytes, ig_rows, row_chunks, row_cost
from laya_eval.engine.network_passes import take_rows
from laya_eval.errors import ConfigError
from laya_eval.models.layered import LayeredModel
from laya_eval.models.trace import Trace

__all__ = ["LayerGradients", "gradient_pass", "network_gradient_problem", "network_inputs"]


@dataclass(frozen=True)
class LayerGradients:
    """One batch's states and gradients at a scope.

    Attributes
    ----------
    activations : list of Tensor
        Each layer's state: the pooled head input (B, d_i) at head scope, the block's full output at network scope.
    logit : list of Tensor or None
        ``d logit_t / d activation``, one per layer; ``None`` when not asked for.
    probability : list of Tensor or None
        ``d p_t / d activation`` (``p_t`` the softmax probability of the explained class); ``None`` when not asked.
    block_inputs : list of Tensor or None
        At network scope with ``with_inputs``: each block's input of the same pass (``h_{i-1}`` where the block
        keeps its shape; ``None`` entries where it was not called with one tensor).
    token_mask : Tensor or None
        (B, T), 1 for real tokens and 0 for padding, where the network-scope states are token sequences of text.
    """

    activations: list[Tensor]
    logit: list[Tensor] | None = None
    probability: list[Tensor] | None = None
    block_inputs: list[Tensor | None] | None = None
    token_mask: Tensor | None = None


def network_gradient_problem(model: LayeredModel, inputs: Any) -> str | None:
    """``None`` if gradients through ``model``'s backbone can be taken on ``inputs`` (a tensor, tokenized tensors,
    or texts a backbone tokenizes into tensors), else why not, as the end of a sentence."""
    if isinstance(inputs, Tensor) or isinstance(inputs, Mapping):
        return None
    backbone = model.backbone
    if callable(getattr(backbone, "tokenize", None)) and getattr(backbone, "tokenizer", None) is not None:
        return None
    return (
        f"gradients at network scope on text need a backbone that tokenizes texts into tensors (an hf: text "
        f"encoder); this {type(backbone).__name__} takes the texts as they are: use --scope head"
    )


def network_inputs(model: LayeredModel, inputs: Any) -> tuple[Any, Tensor | None]:
    """The batch's inputs as tensors for gradients through the backbone, and the token mask (B, T) of text.

    A tensor stays as it is (no mask); texts are tokenized once by the backbone (padded to the batch's longest
    text); tokenized inputs keep their ``attention_mask``.
    """
    if isinstance(inputs, Tensor):
        return inputs, None
    if not isinstance(inputs, Mapping):
        problem = network_gradient_problem(model, inputs)
        if problem is not None:
            raise ConfigError(problem + ".")
        inputs = model.backbone.tokenize(list(inputs))
    mask = inputs.get("attention_mask")
    if mask is None:
        mask = torch.ones_like(inputs["input_ids"])
    return dict(inputs), mask


def _sum_target(values: Tensor, target: Tensor) -> Tensor:
    return values.gather(1, target[:, None]).sum()


def _backward(logits: Tensor, target: Tensor, acts: list[Tensor], logit: bool, probability: bool):
    """``(d logit_t, d p_t)`` at ``acts`` from one backward call; the one not asked for is ``None``."""
    outputs = []
    if logit:
        outputs.append(_sum_target(logits, target))
    if probability:
        outputs.append(_sum_target(torch.softmax(logits, -1), target))
    if len(outputs) == 1:
        grads = [list(torch.autograd.grad(outputs[0], acts, allow_unused=True, materialize_grads=True))]
    else:
        batched = torch.autograd.grad(
            torch.stack(outputs),
            acts,
            grad_outputs=torch.eye(2, dtype=outputs[0].dtype, device=outputs[0].device),
            is_grads_batched=True,
            allow_unused=True,
            materialize_grads=True,
        )
        # an input the outputs do not use comes back as one unbatched zero tensor (materialize_grads)
        batched = [g if g.dim() > a.dim() else a.new_zeros((2, *a.shape)) for g, a in zip(batched, acts)]
        grads = [[g[0] for g in batched], [g[1] for g in batched]]
    return (grads[0] if logit else None), (grads[-1] if probability else None)


def _head_pass(tr: Trace, model: LayeredModel, target: Tensor, logit: bool, probability: bool) -> LayerGradients:
    # detach() already gives fresh leaves sharing the cached storage; the head never writes into its inputs.
    acts = [h.detach().requires_grad_(True) for h in tr.hidden]
    with torch.enable_grad():
        # A layer the head ignores (LastLayer) has gradient zero, not "unused".
        d_logit, d_prob = _backward(model.head(acts), target, acts, logit, probability)
    return LayerGradients([a.detach() for a in acts], d_logit, d_prob)


def _outputs_on_graph(model: LayeredModel, x: Any, with_inputs: bool):
    """Hidden states, block inputs and block outputs of one pass, every block output on the autograd graph.

    Tensor inputs require grad (so every block output is on the graph, frozen backbones included). Token ids cannot:
    a block output that is not on the graph (the first block of a frozen encoder) becomes a leaf, which every later
    block output then depends on."""
    if isinstance(x, Tensor):
        x = x.detach().clone().requires_grad_(True)
    hidden, inputs, outputs = model.block_inputs_and_outputs(x, on_graph=True)
    return hidden, inputs if with_inputs else None, outputs


def _network_pass(
    tr: Trace,
    model: LayeredModel,
    target: Tensor,
    *,
    max_memory_mb: int,
    logit: bool,
    probability: bool,
    with_inputs: bool,
) -> LayerGradients:
    x, mask = network_inputs(model, tr.inputs)
    parts = []
    cost = row_cost(model, x)
    # held while the chunks run: the trace's kept states, and every block's output and gradient gathered per chunk
    held = held_bytes(tr.block_outputs, tr.block_inputs) + 2 * tr.n_samples * cost.outputs
    for sl in row_chunks(tr.n_samples, ig_rows(cost, max_memory_mb, held=held)):
        rows = x[sl] if isinstance(x, Tensor) else take_rows(x, torch.arange(sl.start, sl.stop))
        with torch.enable_grad():
            hidden, block_inputs, acts = _outputs_on_graph(model, rows, with_inputs)
            d_logit, d_prob = _backward(model.head(hidden), target[sl], acts, logit, probability)
        block_inputs = None if block_inputs is None else [b if b is None else b.detach() for b in block_inputs]
        parts.append(([a.detach() for a in acts], d_logit, d_prob, block_inputs))

    def joined(k: int) -> list[Tensor | None] | None:
        if parts[0][k] is None:
            return None
        return [None if p[0] is None else torch.cat(p) for p in zip(*(part[k] for part in parts))]

    return LayerGradients(joined(0), joined(1), joined(2), joined(3), mask)


def gradient_pass(
    tr: Trace,
    model: LayeredModel,
    target: Tensor,
    scope: str,
    *,
    max_memory_mb: int = 2048,
    logit: bool = True,
    probability: bool = False,
    with_inputs: bool = False,
) -> LayerGradients:
    """Each layer's state and the gradients asked for (``logit``: ``d logit_t``, ``probability``: ``d p_t``) at
    ``scope`` from one backward pass; at network scope in row chunks within ``max_memory_mb``
    (:mod:`laya_eval.engine.memory_budget`), with each block's input when ``with_inputs``."""
    if scope == "head":
        return _head_pass(tr, model, target, logit, probability)
    return _network_pass(
        tr,
        model,
        target,
        max_memory_mb=max_memory_mb,
        logit=logit,
        probability=probability,
        with_inputs=with_inputs,
    )
