"""Where Integrated Gradients starts and how complete it is: baselines per layer and completeness deltas.

The baseline (``--ig-baseline``) is zeros, the dataset mean or the state an ablation puts in
(:func:`baseline_states`; the default at network scope, each ablation its own). Head-scope IG from zeros takes the
fast routes of :mod:`laya_eval.engine.integrated_gradients`; from any other baseline, :func:`head_ig_from` runs
Captum over the pooled head inputs. The completeness deltas check ``sum_i a_i = f_t(x) - f_t(baseline)`` (head
scope) and, per block, ``a_i = f_t(x) - f_t(x with block i at its baseline)`` (network scope).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import Tensor

from laya_eval.catalog import ABLATION_SPECS
from laya_eval.engine.memory_budget import held_bytes, replacement_rows, row_chunks, row_cost
from laya_eval.engine.network_passes import starts_at_block
from laya_eval.engine.removals import ABLATION_REGISTRY, ablation_fill, removed_states
from laya_eval.errors import ConfigError
from laya_eval.models.heads import pool_hidden
from laya_eval.models.layered import LayeredModel
from laya_eval.models.trace import Trace

__all__ = [
    "baseline_description",
    "baseline_needs",
    "baseline_states",
    "head_ig_from",
    "kept_block_outputs",
    "ig_completeness_delta",
    "ig_diagnostic",
    "layer_baseline",
    "network_ig_completeness_delta",
    "replaced_logits",
    "resolved_baseline",
]


def replaced_logits(
    model: LayeredModel, x: Tensor, i: int, value: Tensor, prefix: Sequence[Tensor] | None = None
) -> Tensor:
    """Logits with block ``i``'s full output replaced by ``value`` (its shape) and every later block recomputed.

    With ``prefix``, the hidden states of layers ``0 .. i-1`` of the same rows, the backbone starts at block ``i``
    (:meth:`~laya_eval.models.backbones.base.Backbone.forward_from`): only the blocks after it run. Without it, the
    backbone runs from the input with block ``i``'s output replaced."""
    if prefix is not None:
        return model.head([*prefix, *model.backbone.forward_from(i, value, x)])
    return model.head(model.hidden_states(x, {i: lambda t: value}))


def kept_block_outputs(tr: Trace, model: LayeredModel) -> list[Tensor]:
    """Every block's full output of the trace's pass: the ones the trace kept (start at block), else from one
    more pass without gradients."""
    if starts_at_block(tr, model):
        return list(tr.block_outputs)
    with torch.no_grad():
        return model.block_outputs(tr.inputs)[1]


def layer_baseline(output: Tensor, fill: list[Tensor] | None, i: int) -> Tensor:
    """The baseline of layer ``i``: zeros, or ``fill[i]`` (a dataset mean, a removed state) broadcast to it."""
    return torch.zeros_like(output) if fill is None else fill[i].to(output).expand_as(output)


def _head_touching_all(model: LayeredModel, hidden: tuple[Tensor, ...]) -> Tensor:
    """Head logits with every input on the graph (a head that ignores an input gives it gradient zero)."""
    zero = sum((h * 0).sum() for h in hidden)
    return model.head(list(hidden)) + zero


def head_ig_from(
    tr: Trace,
    model: LayeredModel,
    target: Tensor,
    baseline: list[Tensor],
    *,
    n_steps: int,
    method: str,
    internal_batch_size: int | None,
) -> Tensor:
    """Head-scope IG (B, L) over the pooled head inputs from ``baseline`` (one tensor per layer, broadcast), by
    Captum; ``internal_batch_size`` bounds the (sample x step) rows of one head call."""
    from captum.attr import IntegratedGradients

    pooled = tuple(pool_hidden(h).detach() for h in tr.hidden)
    base = tuple(layer_baseline(p, baseline, i) for i, p in enumerate(pooled))
    n = len(target)
    # Captum cannot go below one row per sample: a smaller bound splits the samples.
    size = n if internal_batch_size is None or internal_batch_size >= n else internal_batch_size
    ig = IntegratedGradients(lambda *hidden: _head_touching_all(model, hidden))
    parts = []
    with torch.enable_grad():
        for lo in range(0, n, size):
            r = slice(lo, min(lo + size, n))
            attr = ig.attribute(
                tuple(p[r] for p in pooled),
                baselines=tuple(b[r] for b in base),
                target=target[r],
                n_steps=n_steps,
                method=method,
                internal_batch_size=internal_batch_size,
            )
            parts.append(torch.stack([a.flatten(1).sum(1) for a in attr], 1).detach())
    return torch.cat(parts)


def _class_logit(logits: Tensor, target: Tensor) -> Tensor:
    return logits.gather(1, target[:, None]).squeeze(1)


def resolved_baseline(choice: str | None, scope: str) -> str:
    """The baseline of methods that need one (``"baseline"``): ``choice``, else zero at head scope and the
    ablation's removed state at network scope (the state the network-scope effect puts in)."""
    return choice or ("zero" if scope == "head" else "removed")


def baseline_needs(choice: str, ablations: Sequence[str], *, explicit: bool = True) -> list[str]:
    """The dataset statistics a baseline needs. An explicit ``removed`` is refused for an ablation that puts in
    no single state (``gate``, ``resample``); by default such an ablation's IG starts from zeros."""
    if choice == "mean":
        return ["stat:hidden_mean"]
    if choice == "removed" and explicit:
        stateless = [a for a in ablations if ABLATION_REGISTRY[a].removed_state is None]
        if stateless:
            raise ConfigError(
                f"ig_baseline 'removed' needs an ablation that puts one state in place of the layer; "
                f"{stateless[0]!r} does not (use --ig-baseline zero or mean)."
            )
    return []


def baseline_description(choice: str, ablation: str) -> str:
    """What the IG baseline of ``ablation``'s results is, in words, for the manifest."""
    mean = "mean of each layer's state over the evaluated data"
    entry = ABLATION_REGISTRY[ablation]
    if choice == "removed" and entry.removed_state is None:
        return f"zero ('{ablation}' puts no single state in place of the layer)"
    if choice == "removed" and entry.sample_fill is not None:
        # a drawn ablation (noise) has no single state: IG starts at the expectation of its draws, the fill
        fill = next((n.split(":", 1)[1] for n in ABLATION_SPECS[ablation].needs if n.startswith("stat:")), None)
        where = mean if fill == "hidden_mean" else f"the '{fill}' statistic"
        return f"removed: {where}, the expectation of the states '{ablation}' draws in place of the layer"
    return {
        "zero": "zero",
        "mean": mean,
        "removed": f"removed (the state '{ablation}' puts in place of the layer)",
    }.get(choice, choice)


def baseline_states(
    choice: str,
    tr: Trace,
    model: LayeredModel,
    scope: str,
    ablations: Sequence[str],
    statistics: dict[str, list[Tensor]],
) -> dict[str, list[Tensor] | None]:
    """One batch's baselines (see :attr:`MethodContext.layer_baseline`): ``{"": shared}`` when the baseline does
    not depend on the ablation, else ``{ablation: its removed state per layer}``."""
    if choice == "zero":
        return {"": None}
    if choice == "mean":
        return {"": statistics["hidden_mean"]}
    if scope == "head":
        states = [pool_hidden(h) for h in tr.hidden]
    else:
        states = kept_block_outputs(tr, model)
    return {a: removed_states(a, states, ablation_fill(a, statistics)) for a in ablations}


@torch.no_grad()
def ig_completeness_delta(
    tr: Trace, model: LayeredModel, scores: Tensor, target: Tensor | None = None, baseline: list[Tensor] | None = None
) -> Tensor:
    """Head-scope IG completeness: ``sum_i a_i - (f_t(h) - f_t(h0))`` per sample, (B,); ``h0`` the baseline of
    the pooled states (zeros when ``None``), ``t`` the target (the predicted class when ``None``)."""
    target = tr.pred if target is None else target
    pooled = [pool_hidden(h) for h in tr.hidden]
    f0 = _class_logit(model.head([layer_baseline(p, baseline, i) for i, p in enumerate(pooled)]), target)
    return scores.sum(1) - (_class_logit(tr.logits, target) - f0)


@torch.no_grad()
def network_ig_completeness_delta(
    tr: Trace,
    model: LayeredModel,
    scores: Tensor,
    baseline: list[Tensor] | None,
    target: Tensor | None = None,
    max_rows: int | None = None,
) -> Tensor:
    """Network-scope IG completeness, per layer ``a_i - (f_t(x) - f_t(x, block i at its baseline))``; mean |.| over
    layers, (B,); at most ``max_rows`` inputs per replacement pass."""
    target = tr.pred if target is None else target
    outputs = kept_block_outputs(tr, model)
    started = starts_at_block(tr, model)
    f = _class_logit(tr.logits, target)
    deltas = []
    for i, out in enumerate(outputs):
        base = layer_baseline(out, baseline, i)
        removed = torch.cat(
            [
                replaced_logits(model, tr.inputs[sl], i, base[sl], [h[sl] for h in tr.hidden[:i]] if started else None)
                for sl in row_chunks(tr.n_samples, max_rows)
            ]
        )
        deltas.append(scores[:, i] - (f - _class_logit(removed, target)))
    return torch.stack(deltas, 1).abs().mean(1)


def ig_diagnostic(tr: Trace, model: LayeredModel, scores: Tensor, context: Any) -> Tensor | None:
    """The completeness delta of ``scores`` at ``context``'s scope, baseline and target, (B,)."""
    if context.scope == "head":
        return ig_completeness_delta(tr, model, scores, context.target, context.layer_baseline)
    held = held_bytes(tr.block_outputs, tr.block_inputs)
    rows = replacement_rows(row_cost(model, tr.inputs), context.max_memory_mb, held=held)
    return network_ig_completeness_delta(tr, model, scores, context.layer_baseline, context.target, rows)
