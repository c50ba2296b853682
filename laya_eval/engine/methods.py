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
from typing import Any, Callable, Sequence

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
from laya_eval.engine.attribution_patching import attribution_patching
from laya_eval.engine.gradients import LayerGradients, gradient_pass, network_inputs
from laya_eval.engine.integrated_gradients import head_ig
from laya_eval.engine.plugins import load_installed_plugins, plugin_function
from laya_eval.engine.memory_budget import held_bytes, ig_rows, row_chunks, row_cost
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
    "check_without_ablation",
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
    backward : LayerGradients, optional
        The batch's one backward pass (:func:`laya_eval.engine.gradients.gradient_pass`): the states, the gradients
        the run's methods asked for (``"gradients"``, ``"probability_gradients"``), the block inputs and the token
        mask; computed on demand when absent.
    ablation : str, optional
        For a method that needs ``"removal"``: the ablation whose effect its scores estimate.
    removal_fill : list of Tensor, SampleFills or None
        That ablation's replacement values for the batch (as :func:`laya_eval.engine.removals.batch_fill` gives
        them; ``None``: zeros, or for an update form the zero update).
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
    backward: LayerGradients | None = None
    ablation: str | None = None
    removal_fill: Any = None


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


def layer_gradients(
    tr: Trace, model: LayeredModel, target: Tensor, scope: str, *, max_memory_mb: int = 2048
) -> tuple[list[Tensor], list[Tensor]]:
    """``(activations, d logit_target / d activation)`` per layer at ``scope`` ("head" or "network"); at network
    scope in row chunks within ``max_memory_mb`` (:mod:`laya_eval.engine.memory_budget`)."""
    grads = gradient_pass(tr, model, target, scope, max_memory_mb=max_memory_mb)
    return grads.activations, grads.logit


def _grads(tr: Trace, model: LayeredModel, target: Tensor, context: MethodContext) -> LayerGradients:
    """The batch's gradients of the explained logit from the engine, or computed now when the caller gave none."""
    if context.backward is not None and context.backward.logit is not None:
        return context.backward
    if context.gradients is not None:
        return LayerGradients(*context.gradients)
    return gradient_pass(tr, model, target, context.scope, max_memory_mb=context.max_memory_mb)


def _channel_first(t: Tensor) -> Tensor:
    """Bring a block output to (B, C, spatial...): maps already are; token sequences (B, T, D) become (B, D, T)."""
    return t.transpose(1, 2) if t.dim() == 3 else t


def _real_tokens(t: Tensor, mask: Tensor | None) -> Tensor | None:
    """The token mask (B, T, 1) that applies to a block output ``t`` (B, T, D) of text, else ``None``."""
    if mask is None or t.dim() != 3 or t.shape[:2] != mask.shape:
        return None
    return mask[:, :, None].to(t.dtype)


def _grad_x_act(tr: Trace, model: LayeredModel, *, target: Tensor, context: MethodContext) -> Tensor:
    grads = _grads(tr, model, target, context)
    scores = []
    for a, g in zip(grads.activations, grads.logit):
        real = _real_tokens(a, grads.token_mask)
        scores.append((g * a if real is None else g * a * real).flatten(1).sum(1))
    return torch.stack(scores, 1)


def _gradcam(tr: Trace, model: LayeredModel, *, target: Tensor, context: MethodContext) -> Tensor:
    grads = _grads(tr, model, target, context)
    scores = []
    for a, g in zip(grads.activations, grads.logit):
        real = _real_tokens(a, grads.token_mask)
        a, g = _channel_first(a), _channel_first(g)
        if a.dim() == 2:
            # A vector layer has no spatial extent: Grad-CAM reduces to ReLU(sum_d grad_d * act_d).
            scores.append(torch.relu((g * a).sum(1)))
            continue
        if real is not None:
            # Text: the averages run over the real tokens only (padding is no position of the input).
            m = real[:, :, 0][:, None, :]  # (B, 1, T)
            count = m.sum(-1).clamp_min(1.0)
            weights = (g * m).sum(-1) / count  # (B, D)
            cam = torch.relu((weights[:, :, None] * a).sum(1))  # (B, T)
            scores.append((cam * m[:, 0]).sum(-1) / count[:, 0])
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

    # Texts are tokenized once; Captum repeats tensor arguments per step, so the tokenized tensors go in one by one.
    x, mask = network_inputs(model, tr.inputs)
    keys = None if isinstance(x, Tensor) else list(x)
    args = (x,) if keys is None else tuple(x[k] for k in keys)

    def rows_of(sl: slice) -> tuple[Tensor, ...]:
        return tuple(a[sl] for a in args)

    def forward(value: Tensor, i: int, started: bool, *tensors: Tensor) -> Tensor:
        inputs, prefix = tensors[: len(args)], tensors[len(args) :]
        batch = inputs[0] if keys is None else dict(zip(keys, inputs))
        return replaced_logits(model, batch, i, value, prefix if started else None)

    with torch.enable_grad():
        outputs = kept_block_outputs(tr, model)
        # Start at block: the path of block i runs through the blocks after it only, the states before it are the
        # trace's (engine/network_passes.py); otherwise the backbone runs from the input with block i replaced.
        started = starts_at_block(tr, model)
        # Row chunks within the memory budget: at most `rows` (input, step) pairs per backbone call.
        held = held_bytes(outputs, tr.block_inputs)  # every block's output (and input) of the batch, kept meanwhile
        rows = context.internal_batch_size or ig_rows(row_cost(model, tr.inputs), context.max_memory_mb, held=held)
        options["internal_batch_size"] = rows
        scores = []
        for i, out in enumerate(outputs):
            # The path runs from the baseline (by default the state the ablation puts in) to the block's actual
            # output, with every later block recomputed: the same total effect the network-scope effect measures.
            ig = IntegratedGradients(lambda value, *tensors, i=i: forward(value, i, started, *tensors))
            base = layer_baseline(out.detach(), context.layer_baseline, i)
            parts = []
            for sl in row_chunks(tr.n_samples, rows):
                prefix = tuple(h[sl] for h in tr.hidden[:i]) if started else ()
                attr = ig.attribute(
                    out[sl].detach(),
                    baselines=base[sl],
                    additional_forward_args=(*rows_of(sl), *prefix),
                    **{**options, "target": target[sl]},
                )
                # on text, the sum runs over the real tokens (padding is masked out of every later block anyway)
                real = None if mask is None else _real_tokens(attr, mask[sl])
                parts.append((attr if real is None else attr * real).flatten(1).sum(1).detach())
            scores.append(torch.cat(parts))
    return torch.stack(scores, 1)


def _atp(tr: Trace, model: LayeredModel, *, target: Tensor, context: MethodContext) -> Tensor:
    return attribution_patching(tr, model, target, context)


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
    # a plug-in's functions, registered while it loads, raise one line naming the plug-in
    fn, diagnostic = (plugin_function("method", spec.name, f) for f in (fn, diagnostic))
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
    "atp": (_atp,),
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


def check_without_ablation(names: Sequence[str] | None, command: str) -> None:
    """Refuse, before any work, a method that estimates an ablation's effect (``"removal"``) in ``command``, which
    scores methods without one."""
    for n in names or ():
        if n in METHODS and "removal" in METHODS[n].needs:
            raise ConfigError(
                f"method {n!r} estimates the effect of the evaluation's ablation and runs in `laya-eval faithfulness` "
                f"only; `laya-eval {command}` scores methods without one: remove it from --methods."
            )


def resolve_methods(names: list[str] | None) -> list[AttributionMethod]:
    """Methods by name (all when ``None``, installed plug-ins included), validated against the registry."""
    load_installed_plugins()
    if names is None:
        return [m for m in METHODS.values() if not m.spec.opt_in]
    for n in names:
        check_choice("methods", n, METHODS)
    if not names:
        raise fail("methods", f"at least one method among {{{', '.join(METHODS)}}}", names)
    return [METHODS[n] for n in dict.fromkeys(names)]
