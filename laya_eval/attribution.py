"""Layer attribution methods: one signature, one registry.

Every method is ``f(trace, model, *, target, context) -> Tensor (B, L)`` of
signed per-layer scores for the class ``target`` (the predicted class). The
CLI's ``--methods`` choices come from :data:`METHODS`.

Scope ``head`` (direct effect): gradients are taken with respect to the cached
hidden states at the head input, used as leaf tensors; the backbone is not
re-run. Scope ``network`` (total effect): gradients flow from the output back
to each block's full output inside the backbone, through every later layer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch
from torch import Tensor

from laya_eval.errors import ConfigError
from laya_eval.heads import LayaHead, LayerHead, pool_hidden
from laya_eval.model import LayeredModel
from laya_eval.trace import Trace

__all__ = [
    "METHODS",
    "AttributionMethod",
    "MethodContext",
    "applicable",
    "ig_completeness_delta",
    "method_names",
    "resolve_methods",
]


@dataclass
class MethodContext:
    """Options shared by all methods of one evaluation.

    Attributes
    ----------
    scope : {"head", "network"}
    n_steps : int
        Integrated Gradients steps (Captum's ``n_steps``).
    ig_method : str
        Captum's ``method`` for the IG integral.
    internal_batch_size : int or None
        Captum's ``internal_batch_size`` for IG.
    rng : numpy.random.Generator
        Consumed batch after batch by ``random``, so the scores do not depend
        on the batch size.
    """

    scope: str = "head"
    n_steps: int = 50
    ig_method: str = "gausslegendre"
    internal_batch_size: int | None = None
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))
    # The gradients of the last (trace, target, scope): gradcam and grad_x_act read the
    # same d logit_c / d h_i, so one backward pass serves both.
    _last_grads: tuple | None = field(default=None, init=False, repr=False, compare=False)

    def clear_cache(self) -> None:
        """Drop the gradients kept from the last batch (call when moving to the next batch)."""
        self._last_grads = None


AttributionFn = Callable[..., Tensor]


@dataclass(frozen=True)
class AttributionMethod:
    """A registered method: its function and when it applies.

    Attributes
    ----------
    name : str
    fn : callable
        ``fn(trace, model, *, target, context) -> Tensor (B, L)``.
    description : str
    requires : {"any", "weights", "laya"}
        ``weights``: the head has layer weights (LAYA, ScalarMix); ``laya``: a LAYA head.
    dataset_mean : bool
        The per-sample scores are replaced by their mean over the evaluated set
        (input-independent "static" weights).
    """

    name: str
    fn: AttributionFn
    description: str
    requires: str = "any"
    dataset_mean: bool = False


def _laya(tr: Trace, model: LayeredModel, *, target: Tensor, context: MethodContext) -> Tensor:
    return tr.layer_weights


def _contribution(tr: Trace, model: LayeredModel, *, target: Tensor, context: MethodContext) -> Tensor:
    return tr.terms.gather(2, target[:, None, None].expand(-1, tr.n_layers, 1)).squeeze(2)


def _random(tr: Trace, model: LayeredModel, *, target: Tensor, context: MethodContext) -> Tensor:
    return torch.from_numpy(context.rng.random((tr.n_samples, tr.n_layers))).to(tr.terms.dtype)


def _target_logit_sum(logits: Tensor, target: Tensor) -> Tensor:
    return logits.gather(1, target[:, None]).sum()


def _head_grads(tr: Trace, model: LayeredModel, target: Tensor) -> tuple[list[Tensor], list[Tensor]]:
    """Activations (the cached head inputs, as leaves) and d logit_c / d h_i."""
    # detach() already gives fresh leaves sharing the cached storage; the head never writes into its inputs.
    acts = [h.detach().requires_grad_(True) for h in tr.hidden]
    with torch.enable_grad():
        out = _target_logit_sum(model.head(acts), target)
        # A layer the head ignores (LastLayer) has gradient zero, not "unused".
        grads = torch.autograd.grad(out, acts, allow_unused=True, materialize_grads=True)
    return [a.detach() for a in acts], list(grads)


def _network_grads(tr: Trace, model: LayeredModel, target: Tensor) -> tuple[list[Tensor], list[Tensor]]:
    """Each block's full output inside the backbone and d logit_c / d output (total effect)."""
    if not isinstance(tr.inputs, Tensor):
        raise ConfigError("network-scope gradient methods need tensor inputs; use --scope head for text models.")
    captured: dict[int, Tensor] = {}

    def capture(i: int):
        def fn(t: Tensor) -> Tensor:
            captured[i] = t
            return t

        return fn

    with torch.enable_grad():
        # The input requires grad so every block output is on the graph, frozen backbones included.
        x = tr.inputs.detach().clone().requires_grad_(True)
        hidden = model.hidden_states(x, {i: capture(i) for i in range(tr.n_layers)})
        out = _target_logit_sum(model.head(hidden), target)
        acts = [captured[i] for i in range(tr.n_layers)]
        grads = torch.autograd.grad(out, acts, allow_unused=True, materialize_grads=True)
    return [a.detach() for a in acts], list(grads)


def _grads(tr: Trace, model: LayeredModel, target: Tensor, context: MethodContext):
    """Activations and gradients for ``context.scope``, computed once per (trace, target)."""
    last = context._last_grads
    if last is not None and last[0] is tr and last[1] is target and last[2] == context.scope:
        return last[3]
    scope = context.scope
    result = _head_grads(tr, model, target) if scope == "head" else _network_grads(tr, model, target)
    context._last_grads = (tr, target, scope, result)
    return result


def _channel_first(t: Tensor) -> Tensor:
    """Bring a block output to (B, C, spatial...): maps already are; token sequences (B, T, D) become (B, D, T)."""
    return t.transpose(1, 2) if t.dim() == 3 else t


def _grad_x_act(tr: Trace, model: LayeredModel, *, target: Tensor, context: MethodContext) -> Tensor:
    acts, grads = _grads(tr, model, target, context)
    return torch.stack([(g * a).flatten(1).sum(1) for a, g in zip(acts, grads)], 1)


def _gradcam(tr: Trace, model: LayeredModel, *, target: Tensor, context: MethodContext) -> Tensor:
    acts, grads = _grads(tr, model, target, context)
    scores = []
    for a, g in zip(acts, grads):
        a, g = _channel_first(a), _channel_first(g)
        if a.dim() == 2:
            # A vector layer has no spatial extent: Grad-CAM reduces to ReLU(sum_d grad_d * act_d).
            scores.append(torch.relu((g * a).sum(1)))
            continue
        weights = g.flatten(2).mean(-1)  # (B, C): spatially averaged gradients
        cam = torch.relu((weights[:, :, None] * a.flatten(2)).sum(1))  # (B, spatial)
        scores.append(cam.mean(-1))
    return torch.stack(scores, 1)


def _head_touching_all(model: LayeredModel, hidden: tuple[Tensor, ...]) -> Tensor:
    """Head logits with every input on the graph: Captum cannot take gradients of inputs a head ignores
    (LastLayer's lower layers); adding ``0 * h`` gives them their true gradient, zero."""
    zero = sum((h * 0).sum() for h in hidden)
    return model.head(list(hidden)) + zero


def _ig(tr: Trace, model: LayeredModel, *, target: Tensor, context: MethodContext) -> Tensor:
    from captum.attr import IntegratedGradients, LayerIntegratedGradients

    options = dict(target=target, n_steps=context.n_steps, method=context.ig_method,
                   internal_batch_size=context.internal_batch_size)
    with torch.enable_grad():
        if context.scope == "head":
            ig = IntegratedGradients(lambda *hidden: _head_touching_all(model, hidden))
            # The heads pool maps first and pooling is linear, so IG over the pooled states gives the
            # same per-layer sums as IG over the full maps, at a fraction of the memory (50 steps x maps).
            attr = ig.attribute(tuple(pool_hidden(h).detach() for h in tr.hidden), **options)
            return torch.stack([a.flatten(1).sum(1) for a in attr], 1).detach()
        if not isinstance(tr.inputs, Tensor):
            raise ConfigError("network-scope IG needs tensor inputs; use --scope head for text models.")
        scores = []
        for layer in model.backbone.layer_modules():
            lig = LayerIntegratedGradients(model, layer)
            attr = lig.attribute(tr.inputs, baselines=torch.zeros_like(tr.inputs), **options)
            attr = attr[0] if isinstance(attr, tuple) else attr
            scores.append(attr.flatten(1).sum(1).detach())
    return torch.stack(scores, 1)


@torch.no_grad()
def ig_completeness_delta(tr: Trace, model: LayeredModel, scores: Tensor) -> Tensor:
    """Head-scope IG completeness: ``sum_i a_i - (f_c(h) - f_c(0))`` per sample, (B,)."""
    zeros = [torch.zeros_like(pool_hidden(h)) for h in tr.hidden]
    f0 = model.head(zeros).gather(1, tr.pred[:, None]).squeeze(1)
    f = tr.logits.gather(1, tr.pred[:, None]).squeeze(1)
    return scores.sum(1) - (f - f0)


METHODS: dict[str, AttributionMethod] = {
    m.name: m
    for m in (
        AttributionMethod("laya", _laya, "LAYA attention alpha(x) from the forward pass.", requires="laya"),
        AttributionMethod(
            "static", _laya,
            "Input-independent layer weights: softmax(w) for ScalarMix, the mean alpha over the evaluated set for LAYA.",
            requires="weights", dataset_mean=True,
        ),
        AttributionMethod("contribution", _contribution, "Exact per-layer term of the predicted logit, t_{i,c}(x)."),
        AttributionMethod(
            "ig", _ig,
            "Integrated Gradients (Captum; zero baseline, 50 Gauss-Legendre steps), summed over each layer's dimensions.",
        ),
        AttributionMethod(
            "gradcam", _gradcam,
            "Grad-CAM-style (Captum LayerGradCam semantics): ReLU of the gradient-weighted channel sum, "
            "averaged over space; on a vector layer ReLU(sum grad*act).",
        ),
        AttributionMethod("grad_x_act", _grad_x_act, "Sum over dimensions of gradient x activation."),
        AttributionMethod("random", _random, "Seeded uniform scores: the chance baseline."),
    )
}


def method_names() -> list[str]:
    """Registered method names, in registry order."""
    return list(METHODS)


def applicable(method: AttributionMethod, model: LayeredModel) -> str | None:
    """``None`` if ``method`` applies to ``model``'s head, else the reason it is skipped."""
    head = model.head
    if method.requires == "laya" and not isinstance(head, LayaHead):
        return f"'{method.name}' needs a LAYA head; this model has a {head.name} head."
    if method.requires == "weights" and type(head).layer_weights is LayerHead.layer_weights:
        return f"'{method.name}' needs a head with layer weights (LAYA or ScalarMix); this model has a {head.name} head."
    return None


def resolve_methods(names: list[str] | None) -> list[AttributionMethod]:
    """Methods by name (all when ``None``), validated against the registry."""
    if names is None:
        return list(METHODS.values())
    unknown = [n for n in names if n not in METHODS]
    if unknown:
        raise ConfigError(f"methods must be among {{{', '.join(METHODS)}}}; got {unknown[0]!r}.")
    if not names:
        raise ConfigError(f"give at least one method among {{{', '.join(METHODS)}}}.")
    return [METHODS[n] for n in dict.fromkeys(names)]
