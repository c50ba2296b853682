"""Attribution patching (``atp``): the first-order estimate of an ablation's effect, from the run's one backward pass.

The effect of removing layer ``i`` is ``p_t(x) - p_t(x with h_i replaced by new_i)``. Its first-order (Taylor)
estimate around the intact pass is ``dp_t/dh_i . (h_i - new_i)``, summed over every element of the state (over the
real tokens of a text). ``new_i`` is what the ablation puts in:

- a state operator (``zero``, ``mean``, ``noise``, ``resample``): its fill; for a drawn one the mean of its draws
  (the estimate is linear in the fill, so this is the mean of the draws' estimates, as the effect is the mean of
  the draws' effects);
- an update operator (``skip``, ``mean-update``, ``resample-update``, ``noise-update``): the block's input plus the
  new update, ``h_{i-1} + fill_i``; for ``skip`` (no fill) ``h_i - new_i = h_i - h_{i-1}``, the block's update.

At head scope ``h_i`` is the pooled state at the head input and the gradient is the head's; at network scope
``h_i`` is the block's full output inside the backbone and the gradient flows through every later block. The
gradients come from the same backward pass as the gradient methods' (:mod:`laya_eval.engine.gradients`). An
ablation that puts no state in place of the layer (``gate``, ``gate-renorm``: they drop or renormalise the head's
term) has no such estimate: refused while planning (:func:`removal_problem`).

See ``docs/concepts/attributions.md``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from laya_eval.catalog import ABLATION_SPECS
from laya_eval.engine.gradients import LayerGradients, gradient_pass
from laya_eval.engine.interventions import SampleFills
from laya_eval.engine.removals import ABLATION_REGISTRY
from laya_eval.errors import ConfigError
from laya_eval.models.heads import pool_hidden
from laya_eval.models.layered import LayeredModel
from laya_eval.models.trace import Trace

__all__ = ["attribution_patching", "expected_fill", "puts_state", "removal_problem"]


def puts_state(ablation: str) -> bool:
    """Whether ``ablation`` puts a state (or, for an update form, an update) in place of a layer."""
    spec, entry = ABLATION_SPECS[ablation], ABLATION_REGISTRY[ablation]
    return entry.removed_state is not None or spec.drawn_per_sample or "updates" in spec.needs


def removal_problem(ablation: str) -> str | None:
    """``None`` if ``ablation`` puts a state in place of a layer (its first-order estimate exists), else why not."""
    if puts_state(ablation):
        return None
    states = [a for a in ABLATION_SPECS if puts_state(a)]
    return (
        f"it estimates the effect of putting a state in place of a layer, and ablation {ablation!r} puts none "
        f"(use one of {', '.join(states)})"
    )


def expected_fill(fill: Any) -> list[Tensor] | None:
    """One replacement per layer: ``fill`` itself (a list, or ``None`` for zeros), or the mean of a drawn fill's
    draws (:class:`~laya_eval.engine.interventions.SampleFills`), per sample."""
    if isinstance(fill, SampleFills):
        return [torch.stack(layer).mean(0) for layer in zip(*fill.draws)]
    return None if fill is None else list(fill)


def _new_state(h: Tensor, fill: Tensor | None, block_input: Tensor | None, updates: bool, name: str) -> Tensor:
    """What the ablation puts in place of ``h``, in float64."""
    value = None if fill is None else fill.to(h.device, torch.float64).expand_as(h)
    if not updates:
        return torch.zeros_like(h, dtype=torch.float64) if value is None else value
    if block_input is None or block_input.shape != h.shape:
        raise ConfigError(f"atp of an update operator needs layer {name!r}'s block to keep its shape.")
    base = block_input.to(torch.float64)
    return base if value is None else base + value


def attribution_patching(tr: Trace, model: LayeredModel, target: Tensor, context: Any) -> Tensor:
    """The first-order estimate of ``context.ablation``'s effect of removing each layer, (B, L), in float64.

    ``context`` is a :class:`~laya_eval.engine.methods.MethodContext` with ``ablation`` and ``removal_fill`` (the
    engine sets them per ablation of the run) and, optionally, the batch's ``backward`` pass with ``d p_t``."""
    ablation = context.ablation
    if ablation is None:
        raise ConfigError("method 'atp' estimates an ablation's effect; it runs within an evaluation of one.")
    problem = removal_problem(ablation)
    if problem is not None:
        raise ConfigError(f"method 'atp': {problem}.")
    updates = "updates" in ABLATION_SPECS[ablation].needs
    grads: LayerGradients | None = context.backward
    if grads is None or grads.probability is None or (updates and grads.block_inputs is None):
        grads = gradient_pass(
            tr,
            model,
            target,
            context.scope,
            max_memory_mb=context.max_memory_mb,
            logit=False,
            probability=True,
            with_inputs=updates,
        )
    fill = expected_fill(context.removal_fill)
    scores = []
    for i, (h, g) in enumerate(zip(grads.activations, grads.probability)):
        if context.scope == "head" and h.dim() > 2:
            # the head reads a map through its average: the ablation replaces the pooled state, whose gradient is
            # the map's gradient summed over the positions
            h, g = pool_hidden(h), g.flatten(2).sum(-1)
        block_input = None if grads.block_inputs is None else grads.block_inputs[i]
        new = _new_state(h, None if fill is None else fill[i], block_input, updates, model.layer_names[i])
        change = g.double() * (h.double() - new)
        mask = grads.token_mask
        if mask is not None and h.dim() == 3 and h.shape[:2] == mask.shape:
            change = change * mask[:, :, None].to(change.dtype)  # padding is no part of the input
        scores.append(change.flatten(1).sum(1))
    return torch.stack(scores, 1)
