"""Attributions over one mixer's sources and the effects of removing them, for one batch.

Every method is ``fn(model, mixer, call, x, *, target, context) -> Tensor (B, J)``, registered by name in
:data:`MIXER_METHODS`; ``call`` is the mixer's :class:`~laya_eval.mixers.protocol.MixerCall` from the intact
pass. Gradients are of the predicted class's logit (as the layer gradient methods), by autograd or Captum.

The effect of removing a set of sources from a mixer is ``p_c(x) - p_c(x with them removed)``, ``c`` the class
predicted on the intact input, the removal made inside that mixer (:func:`~laya_eval.mixers.protocol.removed_sources`)
and every later part of the network recomputed: the total effect at the model output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch import Tensor, nn

from laya_eval.catalog import MIXER_METHODS as MIXER_METHOD_SPECS
from laya_eval.engine.removals import deletion_masks, layer_ranking
from laya_eval.engine.seeding import per_sample_uniform
from laya_eval.mixers.protocol import MixerCall, removed_sources, set_weights

__all__ = ["MIXER_METHODS", "MixerContext", "deletion_effects", "leave_one_source_out", "removal_probs"]


@dataclass(frozen=True)
class MixerContext:
    """What a method gets besides the batch: global sample ids (B,), the mixer's index, seed, IG steps."""

    sample_ids: Tensor
    mixer_index: int
    n_mixers: int
    seed: int = 0
    ig_steps: int = 16


def _mass(model, mixer, call: MixerCall, x, *, target, context) -> Tensor:
    return call.weights


def _norm_mass(model, mixer, call: MixerCall, x, *, target, context) -> Tensor:
    weighted = call.weights.reshape(*call.weights.shape, 1) * torch.stack(call.sources, 1).flatten(2)
    return torch.linalg.vector_norm(weighted, dim=-1)


def _target_logit(model: nn.Module, mixer: nn.Module, weights: Tensor, x: Tensor) -> Tensor:
    with set_weights(mixer, weights):
        return model(x)


def _grad_x_weight(model, mixer, call: MixerCall, x, *, target, context) -> Tensor:
    weights = call.weights.clone().requires_grad_(True)
    with torch.enable_grad():
        logits = _target_logit(model, mixer, weights, x)
        (grad,) = torch.autograd.grad(logits.gather(1, target[:, None]).sum(), weights)
    return (grad * call.weights).detach()


def _ig(model, mixer, call: MixerCall, x, *, target, context) -> Tensor:
    """One Captum call per sample (``n_steps`` rows each): a sample's scores then do not depend on which
    other samples share its batch, or where it sits in it (the kernels' rounding does)."""
    from captum.attr import IntegratedGradients

    ig = IntegratedGradients(lambda w, inputs: _target_logit(model, mixer, w, inputs))
    out = []
    for b in range(len(target)):
        weights = call.weights[b : b + 1].clone()
        with torch.enable_grad():
            scores = ig.attribute(
                weights,
                baselines=torch.zeros_like(weights),
                target=target[b : b + 1],
                additional_forward_args=(x[b : b + 1],),
                n_steps=context.ig_steps,
                method="gausslegendre",
            )
        out.append(scores.detach())
    return torch.cat(out)


def _random(model, mixer, call: MixerCall, x, *, target, context) -> Tensor:
    ids = context.sample_ids * context.n_mixers + context.mixer_index  # one stream per (sample, mixer)
    return per_sample_uniform(context.seed, ids, call.weights.shape[1]).to(call.weights)


_FUNCTIONS = {"mass": _mass, "norm_mass": _norm_mass, "grad_x_weight": _grad_x_weight, "ig": _ig, "random": _random}
if set(_FUNCTIONS) != set(MIXER_METHOD_SPECS):  # the catalog owns the names and the CLI's choices
    raise ImportError(f"mixer methods {sorted(_FUNCTIONS)} do not match the catalog's {sorted(MIXER_METHOD_SPECS)}")

#: name -> (description, function), in the catalog's order
MIXER_METHODS: dict[str, tuple[str, Callable[..., Tensor]]] = {
    name: (description, _FUNCTIONS[name]) for name, description in MIXER_METHOD_SPECS.items()
}


@torch.no_grad()
def removal_probs(
    model: nn.Module,
    mixer: nn.Module,
    x: Tensor,
    keeps: Sequence[Tensor],
    target: Tensor,
    removal: str,
    fills: Sequence[Sequence[Tensor] | None],
) -> Tensor:
    """``p_target`` with each keep mask (B, J) of ``keeps`` applied to ``mixer``, averaged over ``fills``: (B, K).

    ``fills`` holds the alternative replacements of the sources (one for ``"mean"``, one per draw for
    ``"resample"``, ``(None,)`` for ``"weight"``); the probabilities after each are summed in float64 and
    averaged once.
    """
    out = []
    for keep in keeps:
        total = torch.zeros(len(x), dtype=torch.float64, device=x.device)
        for fill in fills:
            with removed_sources(mixer, keep, removal, fill):
                probs = torch.softmax(model(x), -1)
            total += probs.gather(1, target[:, None]).squeeze(1).double()
        out.append((total / len(fills)).to(x.dtype if x.is_floating_point() else torch.float32))
    return torch.stack(out, 1)


def leave_one_source_out(model, mixer, x, call: MixerCall, target, confidence, removal, fills) -> Tensor:
    """Effects of removing each single source, (B, J)."""
    batch, n = call.weights.shape
    eye = torch.eye(n, device=x.device)
    keeps = [(1.0 - eye[j]).expand(batch, n) for j in range(n)]
    return confidence[:, None] - removal_probs(model, mixer, x, keeps, target, removal, fills)


def deletion_effects(model, mixer, x, scores: Tensor, target, confidence, removal, fills) -> Tensor:
    """Effects of removing the ``k`` top-scored sources, k = 1..J, (B, J) (ties: the lowest index first)."""
    masks = deletion_masks(layer_ranking(scores))  # (B, J, J)
    keeps = [masks[:, k] for k in range(masks.shape[1])]
    return confidence[:, None] - removal_probs(model, mixer, x, keeps, target, removal, fills)
