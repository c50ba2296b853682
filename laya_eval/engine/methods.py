"""Layer attribution methods: one signature, one registry.

Every method is ``f(trace, model, *, target, context) -> Tensor (B, L)`` of
signed per-layer scores for the class ``target`` (by default the predicted class). Names,
descriptions and needs live in :mod:`laya_eval.catalog` (read by the CLI without
torch); :data:`METHODS` binds each to its function here. What a method needs
(shared gradients, a dataset statistic) is declared there and provided by the
engine through :class:`MethodContext`.

Scope ``head`` (direct effect): gradients are taken with respect to the cached
hidden states at the head input, used as leaf tensors; the backbone is not
re-run. Scope ``network`` (total effect): gradients flow from the output back
to each block's full output inside the backbone, through every later layer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import Tensor

from laya_eval.catalog import METHOD_SPECS, MethodSpec
from laya_eval.errors import ConfigError
from laya_eval.models.heads import LayaHead, LayerHead, ScalarMixHead
from laya_eval.models.layered import LayeredModel
from laya_eval.engine.ig_baselines import (
    baseline_needs,
    baseline_states,
    head_ig_from,
    ig_completeness_delta,
    ig_diagnostic,
    layer_baseline,
    network_ig_completeness_delta,
    kept_block_outputs,
    replaced_logits,
    resolved_baseline,
)
from laya_eval.engine.integrated_gradients import head_ig
from laya_eval.engine.plugins import load_installed_plugins
from laya_eval.engine.memory_budget import ig_rows, one_row_block_outputs, row_chunks
from laya_eval.engine.network_passes import starts_at_block
from laya_eval.engine.representation_scores import alpha_norm, angular_distance, block_influence, has_common_states
from laya_eval.engine.seeding import per_sample_uniform
from laya_eval.models.trace import Trace
from laya_eval.checks import check_choice, fail

__all__ = [
    "METHODS",
    "AttributionMethod",
    "MethodContext",
    "applicable",
    "baseline_needs",
    "baseline_states",
    "resolved_baseline",
    "register_method",
    "ig_completeness_delta",
    "layer_gradients",
    "network_ig_completeness_delta",
    "resolve_methods",
]


@dataclass(frozen=True)
class MethodContext:
    """What the engine provides to a method for one batch.

    Attributes
    ----------
    scope : {"head", "network"}
    n_steps : int
        Integrated Gradients steps (Captum's ``n_steps``).
    ig_method : str
        Captum's ``method`` for the IG integral.
    internal_batch_size : int or None
        Captum's ``internal_batch_size`` for IG.
    seed : int
        Per-sample randomness is drawn from (seed, sample id): see :mod:`laya_eval.engine.seeding`.
    statistics : dict of str to list of Tensor
        Dataset statistics the method declared in its ``needs`` (e.g. ``mean_layer_weights``).
    gradients : tuple of (list of Tensor, list of Tensor), optional
        ``(activations, d logit_c / d activation)`` for the batch at ``scope``, computed once
        by the engine for every method that needs ``"gradients"``; computed on demand when
        absent.
    max_memory_mb : int
        At network scope, the budget of IG's and the gradients' row chunks (:mod:`laya_eval.engine.memory_budget`).
    layer_baseline : list of Tensor, optional
        Where Integrated Gradients starts its path, one tensor per layer broadcastable to the layer's state
        (pooled (d_i,) or (B, d_i) at head scope, the block output at network scope): the dataset mean or the
        state the ablation puts in (``--ig-baseline``); ``None`` means zeros.
    target : Tensor of int64, (B,), optional
        The class the scores explain (``fn``'s ``target``), for diagnostics; ``None``: the predicted class.
    angular_span : int
        ``n`` of ``angular_distance``: the number of layers in each block whose angular distance is taken.
    """

    scope: str = "head"
    n_steps: int = 50
    ig_method: str = "gausslegendre"
    internal_batch_size: int | None = None
    seed: int = 0
    statistics: dict[str, list[Tensor]] = field(default_factory=dict)
    gradients: tuple[list[Tensor], list[Tensor]] | None = None
    layer_baseline: list[Tensor] | None = None
    max_memory_mb: int = 2048
    angular_span: int = 1
    target: Tensor | None = None


AttributionFn = Callable[..., Tensor]


@dataclass(frozen=True)
class AttributionMethod:
    """A registered method: its catalog entry, its function and an optional diagnostic.

    Attributes
    ----------
    spec : laya_eval.catalog.MethodSpec
        Name, description, what the head must have (``requires``) and what the engine must
        provide (``needs``).
    fn : callable
        ``fn(trace, model, *, target, context) -> Tensor (B, L)``.
    diagnostic : callable, optional
        ``diagnostic(trace, model, scores, context) -> Tensor (B,) or None``: a per-sample check
        of the scores recorded with them (IG's completeness delta).
    diagnostic_note : str
        What the diagnostic measures, for the manifest.
    """

    spec: MethodSpec
    fn: AttributionFn
    diagnostic: Callable[..., Tensor | None] | None = None
    diagnostic_note: str = ""

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def description(self) -> str:
        return self.spec.description

    @property
    def requires(self) -> str:
        return self.spec.requires

    @property
    def needs(self) -> tuple[str, ...]:
        return self.spec.needs


def _laya(tr: Trace, model: LayeredModel, *, target: Tensor, context: MethodContext) -> Tensor:
    return tr.layer_weights


def _static(tr: Trace, model: LayeredModel, *, target: Tensor, context: MethodContext) -> Tensor:
    if "mean_layer_weights" not in context.statistics:
        raise ConfigError("'static' needs the mean layer weights over the evaluated set (context.statistics).")
    mean = context.statistics["mean_layer_weights"][0]
    return mean.to(tr.terms).expand(tr.n_samples, -1)


def _contribution(tr: Trace, model: LayeredModel, *, target: Tensor, context: MethodContext) -> Tensor:
    return tr.terms.gather(2, target[:, None, None].expand(-1, tr.n_layers, 1)).squeeze(2)


def _random(tr: Trace, model: LayeredModel, *, target: Tensor, context: MethodContext) -> Tensor:
    ids = tr.sample_ids
    if ids is None:
        ids = torch.arange(tr.n_samples, device=tr.terms.device)
    return per_sample_uniform(context.seed, ids.to(tr.terms.device), tr.n_layers).to(tr.terms.dtype)


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


def _network_grads(
    tr: Trace, model: LayeredModel, target: Tensor, max_memory_mb: int
) -> tuple[list[Tensor], list[Tensor]]:
    """Each block's full output inside the backbone and d logit_c / d output (total effect), in row chunks."""
    if not isinstance(tr.inputs, Tensor):
        raise ConfigError("network-scope gradient methods need tensor inputs; use --scope head for text models.")
    acts_parts, grad_parts = [], []
    for sl in row_chunks(tr.n_samples, ig_rows(one_row_block_outputs(model, tr.inputs), max_memory_mb)):
        with torch.enable_grad():
            # The input requires grad so every block output is on the graph, frozen backbones included.
            x = tr.inputs[sl].detach().clone().requires_grad_(True)
            hidden, acts = model.block_outputs(x)
            out = _target_logit_sum(model.head(hidden), target[sl])
            grads = torch.autograd.grad(out, acts, allow_unused=True, materialize_grads=True)
        acts_parts.append([a.detach() for a in acts])
        grad_parts.append(list(grads))
    return [torch.cat(a) for a in zip(*acts_parts)], [torch.cat(g) for g in zip(*grad_parts)]


def layer_gradients(
    tr: Trace, model: LayeredModel, target: Tensor, scope: str, *, max_memory_mb: int = 2048
) -> tuple[list[Tensor], list[Tensor]]:
    """``(activations, d logit_target / d activation)`` per layer at ``scope`` ("head" or "network"); at network
    scope in row chunks within ``max_memory_mb`` (:mod:`laya_eval.engine.memory_budget`)."""
    return _head_grads(tr, model, target) if scope == "head" else _network_grads(tr, model, target, max_memory_mb)


def _grads(tr: Trace, model: LayeredModel, target: Tensor, context: MethodContext):
    """The batch's gradients from the engine, or computed now when the caller gave none."""
    if context.gradients is not None:
        return context.gradients
    return layer_gradients(tr, model, target, context.scope, max_memory_mb=context.max_memory_mb)


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


def _ig(tr: Trace, model: LayeredModel, *, target: Tensor, context: MethodContext) -> Tensor:
    options = dict(
        target=target,
        n_steps=context.n_steps,
        method=context.ig_method,
        internal_batch_size=context.internal_batch_size,
    )
    if context.scope == "head" and context.layer_baseline is not None:
        return head_ig_from(
            tr,
            model,
            target,
            context.layer_baseline,
            n_steps=context.n_steps,
            method=context.ig_method,
            internal_batch_size=context.internal_batch_size,
        )
    if context.scope == "head":
        # Through the affine adapters where the head has them (laya_eval.engine.integrated_gradients).
        return head_ig(
            model.head,
            tr.hidden,
            target,
            n_steps=context.n_steps,
            method=context.ig_method,
            internal_batch_size=context.internal_batch_size,
            terms=tr.terms,
            adapted=tr.adapted,
        )
    from captum.attr import IntegratedGradients  # here: the head routes above run without Captum

    with torch.enable_grad():
        if not isinstance(tr.inputs, Tensor):
            raise ConfigError("network-scope IG needs tensor inputs; use --scope head for text models.")
        outputs = kept_block_outputs(tr, model)
        # Start at block: the path of block i runs through the blocks after it only, the states before it are the
        # trace's (engine/network_passes.py); otherwise the backbone runs from the input with block i replaced.
        started = starts_at_block(tr, model)
        # Row chunks within the memory budget: at most `rows` (input, step) pairs per backbone call.
        rows = context.internal_batch_size or ig_rows(outputs, context.max_memory_mb)
        options["internal_batch_size"] = rows
        scores = []
        for i, out in enumerate(outputs):
            # The path runs from the baseline (by default the state the ablation puts in) to the block's actual
            # output, with every later block recomputed: the same total effect the network-scope effect measures.
            ig = IntegratedGradients(
                lambda value, x, *prefix, i=i: replaced_logits(model, x, i, value, prefix if started else None)
            )
            base = layer_baseline(out.detach(), context.layer_baseline, i)
            parts = []
            for sl in row_chunks(tr.n_samples, rows):
                prefix = tuple(h[sl] for h in tr.hidden[:i]) if started else ()
                attr = ig.attribute(
                    out[sl].detach(),
                    baselines=base[sl],
                    additional_forward_args=(tr.inputs[sl], *prefix),
                    **{**options, "target": target[sl]},
                )
                parts.append(attr.flatten(1).sum(1).detach())
            scores.append(torch.cat(parts))
    return torch.stack(scores, 1)


def _block_influence(tr: Trace, model: LayeredModel, *, target: Tensor, context: MethodContext) -> Tensor:
    return block_influence(model.head, tr.hidden)


def _angular_distance(tr: Trace, model: LayeredModel, *, target: Tensor, context: MethodContext) -> Tensor:
    return angular_distance(model.head, tr.hidden, span=context.angular_span)


def _alpha_norm(tr: Trace, model: LayeredModel, *, target: Tensor, context: MethodContext) -> Tensor:
    return alpha_norm(model.head, tr.hidden)


#: Every registered method by name: the built-ins below and plug-ins, all through :func:`register_method`.
METHODS: dict[str, AttributionMethod] = {}


def register_method(
    spec: MethodSpec,
    fn: AttributionFn,
    *,
    diagnostic: Callable[..., Tensor | None] | None = None,
    diagnostic_note: str = "",
) -> AttributionMethod:
    """Register an attribution method: its catalog entry and its function, the path every method takes.

    Parameters
    ----------
    spec : laya_eval.catalog.MethodSpec
        Its name, description, what the head must have (``requires``) and what the engine provides
        (``needs``: ``"gradients"``, ``"tensor_inputs"``, ``"baseline"``, ``"stat:<name>"``).
    fn : callable
        ``fn(trace, model, *, target, context) -> Tensor (B, L)``: signed scores for the class ``target``
        (``(B,)`` int64), made on ``trace``'s device.
    diagnostic, diagnostic_note
        As :class:`AttributionMethod`.

    Raises
    ------
    ConfigError
        If the name is taken (a built-in's or an earlier registration's), or the entry is malformed.
    """
    from laya_eval.catalog import add_method_spec

    if not isinstance(spec, MethodSpec):
        raise ConfigError(f"a method is registered with a catalog.MethodSpec; got {type(spec).__name__}.")
    if not callable(fn):
        raise ConfigError(f"method {spec.name!r}: its function must be callable; got {type(fn).__name__}.")
    try:
        add_method_spec(spec)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    if spec.name in METHODS:
        raise ConfigError(f"method {spec.name!r} is already registered; choose another name.")
    method = AttributionMethod(spec, fn, diagnostic=diagnostic, diagnostic_note=diagnostic_note)
    METHODS[spec.name] = method
    return method


_IG_NOTE = (
    "IG completeness delta, for the baseline the run used (manifest 'integrated_gradients'). Head scope: "
    "sum_i a_i - (f_t(h) - f_t(h0)) per sample, h0 the baseline of the pooled states (IG over the head's "
    "cached inputs measures the direct effect of each layer). Network scope: mean over layers of "
    "|a_i - (f_t(x) - f_t(x with block i's output replaced by the baseline))|, injected inside the backbone."
)
_BUILTIN = {
    "laya": (_laya,),
    "static": (_static,),
    "contribution": (_contribution,),
    "ig": (_ig, ig_diagnostic, _IG_NOTE),
    "gradcam": (_gradcam,),
    "grad_x_act": (_grad_x_act,),
    "random": (_random,),
    "block_influence": (_block_influence,),
    "angular_distance": (_angular_distance,),
    "alpha_norm": (_alpha_norm,),
}
for _name in [n for n in METHOD_SPECS if n in _BUILTIN]:  # catalog order is registry order
    _fn, *_diagnostic = _BUILTIN[_name]
    register_method(
        METHOD_SPECS[_name],
        _fn,
        diagnostic=_diagnostic[0] if _diagnostic else None,
        diagnostic_note=_diagnostic[1] if _diagnostic else "",
    )
# Methods come only through register_method; the catalog names each one the engine can run.
if set(METHODS) != set(METHOD_SPECS):
    raise ImportError(f"catalog methods without a function: {sorted(set(METHOD_SPECS) - set(METHODS))}")


def applicable(method: AttributionMethod, model: LayeredModel) -> str | None:
    """``None`` if ``method`` applies to ``model``'s head, else the reason it is skipped, as a sentence
    about the method ("it needs a LAYA head; this model has a concat head.")."""
    head = model.head
    if method.requires == "laya" and not isinstance(head, LayaHead):
        return f"it needs a LAYA head; this model has a {head.name} head."
    if method.requires == "weights" and type(head).layer_weights is LayerHead.layer_weights:
        return f"it needs a head with layer weights (LAYA or ScalarMix); this model has a {head.name} head."
    if method.requires == "adapted" and not isinstance(head, (LayaHead, ScalarMixHead)):
        return (
            f"it needs a head with adapters and layer weights (LAYA or ScalarMix); this model has a {head.name} head."
        )
    if method.requires == "states" and not has_common_states(head):
        return (
            f"it compares layer states of one width; this {head.name} head has no adapters and "
            f"layers of widths {list(head.layer_dims)}."
        )
    return None


def resolve_methods(names: list[str] | None) -> list[AttributionMethod]:
    """Methods by name (all when ``None``, installed plug-ins included), validated against the registry."""
    load_installed_plugins()
    if names is None:
        return list(METHODS.values())
    for n in names:
        check_choice("methods", n, METHODS)
    if not names:
        raise fail("methods", f"at least one method among {{{', '.join(METHODS)}}}", names)
    return [METHODS[n] for n in dict.fromkeys(names)]
