"""Several ablations from one pass: the faithfulness command's numbers, attributions computed once.

``laya_eval.evaluate.evaluate`` scores one ablation per call and recomputes every
attribution each time; Integrated Gradients dominates (50 steps per sample). The
attributions do not depend on the ablation, so :func:`evaluate_ablations` traces
the data and computes each method's scores once, then derives leave-one-layer-out
effects, Deletion@k and the metrics for every ablation from the cached trace —
with the library's own functions, batches, random stream and bootstrap seeds.
:func:`check_against_evaluate` verifies on a few samples that the numbers equal
``evaluate``'s.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from laya_eval.attribution import MethodContext, applicable, resolve_methods
from laya_eval.data import Dataset
from laya_eval.evaluate import EvalOptions, evaluate, score_method
from laya_eval.heads import pool_hidden
from laya_eval.metrics import rank_layers
from laya_eval.model import LayeredModel
from laya_eval.perturb import deletion_masks, leave_one_out_masks, removal_effects
from laya_eval.trace import Trace, trace

__all__ = ["AblationResult", "check_against_evaluate", "evaluate_ablations"]


@dataclass
class AblationResult:
    """``summary`` and ``samples`` tables of one ablation, columns as ``evaluate``'s."""

    summary: pd.DataFrame
    samples: pd.DataFrame


def _pooled(tr: Trace) -> Trace:
    """The trace with its hidden states pooled (the heads pool them first, so nothing else changes)."""
    return dataclasses.replace(tr, hidden=tuple(pool_hidden(h) for h in tr.hidden), inputs=None)


def _cat_traces(traces: list[Trace]) -> Trace:
    """One trace over all batches."""
    weights = None if traces[0].layer_weights is None else torch.cat([t.layer_weights for t in traces])
    return Trace(
        hidden=tuple(torch.cat(parts) for parts in zip(*[t.hidden for t in traces])),
        logits=torch.cat([t.logits for t in traces]), probs=torch.cat([t.probs for t in traces]),
        pred=torch.cat([t.pred for t in traces]), terms=torch.cat([t.terms for t in traces]),
        layer_weights=weights, labels=torch.cat([t.labels for t in traces]),
    )


def _rows(tr: Trace, sl: slice) -> Trace:
    return Trace(hidden=tuple(h[sl] for h in tr.hidden), logits=tr.logits[sl], probs=tr.probs[sl], pred=tr.pred[sl],
                 terms=tr.terms[sl], layer_weights=None if tr.layer_weights is None else tr.layer_weights[sl],
                 labels=tr.labels[sl])


def _effects(tr: Trace, model: LayeredModel, masks: Tensor, ablation: str, fill, batch_size: int) -> np.ndarray:
    """``removal_effects`` in chunks of ``batch_size`` samples; masks (K, L) or (N, K, L)."""
    out = []
    for start in range(0, tr.n_samples, batch_size):
        sl = slice(start, start + batch_size)
        m = masks if masks.dim() == 2 else masks[sl]
        out.append(removal_effects(_rows(tr, sl), model, m, ablation=ablation, scope="head", fill=fill))
    return torch.cat(out).double().numpy()


@torch.no_grad()
def _pass(model: LayeredModel, data: Dataset, methods, options: EvalOptions) -> tuple[Trace, dict[str, Tensor]]:
    """One traced pass over ``data``: the pooled trace and every per-sample method's scores."""
    ctx = MethodContext(scope="head", n_steps=options.n_steps, internal_batch_size=options.internal_batch_size,
                        rng=np.random.default_rng(options.seed))
    traces, scores = [], {m.name: [] for m in methods if not m.dataset_mean}
    for start in range(0, len(data), options.batch_size):
        part = data.subset(slice(start, start + options.batch_size))
        tr = trace(model, part.x, part.y)
        for m in methods:
            if not m.dataset_mean:
                scores[m.name].append(m.fn(tr, model, target=tr.pred, context=ctx).detach().to(tr.terms.dtype))
        traces.append(_pooled(tr))
    full = _cat_traces(traces)
    for m in methods:
        if m.dataset_mean:  # input-independent weights: their mean over the evaluated set
            scores[m.name] = full.layer_weights.mean(0).expand(full.n_samples, -1)
        else:
            scores[m.name] = torch.cat(scores[m.name])
    return full, scores


def _score(tr: Trace, model, data: Dataset, methods, scores, ablation: str, options: EvalOptions) -> AblationResult:
    fill = [h.mean(0) for h in tr.hidden] if ablation == "mean" else None
    effects = _effects(tr, model, leave_one_out_masks(model.n_layers), ablation, fill, options.batch_size)
    n = effects.shape[0]
    summary, samples = [], []
    for k, m in enumerate(methods):
        s = scores[m.name].double().numpy()
        masks = deletion_masks(torch.from_numpy(rank_layers(s)))
        deletion = _effects(tr, model, masks, ablation, fill, options.batch_size)
        scored = score_method(s, effects, deletion, bootstrap=options.bootstrap, seed=[options.seed, k])
        summary.append({"head": model.head.name, "dataset": data.name, "method": m.name, "ablation": ablation,
                        "scope": "head", **scored.summary})
        samples.append(pd.DataFrame({"sample": np.arange(n), "label": tr.labels.numpy(), "pred": tr.pred.numpy(),
                                     "confidence": tr.confidence.double().numpy(), "method": m.name,
                                     "spearman": scored.spearman, "deletion_at_1": deletion[:, 0],
                                     "top1_hit": scored.top1_hit}))
    return AblationResult(pd.DataFrame(summary), pd.concat(samples, ignore_index=True))


def evaluate_ablations(model: LayeredModel, data: Dataset, ablations: Sequence[str], *,
                       options: EvalOptions = EvalOptions()) -> tuple[dict[str, AblationResult], list[str]]:
    """Head-scope faithfulness of every applicable method under each ablation in ``ablations``.

    Parameters
    ----------
    model : LayeredModel
    data : Dataset
        The evaluated samples (already limited).
    ablations : list of str
        Among ``gate``, ``gate-renorm``, ``zero``, ``mean``.
    options : EvalOptions
        ``seed``, ``bootstrap``, ``batch_size``, ``n_steps`` and ``methods`` are used
        as ``evaluate`` uses them; ``ablation``, ``scope`` and ``limit`` are not.

    Returns
    -------
    results : dict of str to AblationResult
    notes : list of str
        Methods skipped because they do not apply to the head.
    """
    model.eval()
    methods, notes = [], []
    for m in resolve_methods(None if options.methods is None else list(options.methods)):
        reason = applicable(m, model)
        (notes.append(f"skipped {reason}") if reason else methods.append(m))
    tr, scores = _pass(model, data, methods, options)
    return {a: _score(tr, model, data, methods, scores, a, options) for a in ablations}, notes


def check_against_evaluate(model: LayeredModel, data: Dataset, ablations: Sequence[str], *,
                           options: EvalOptions = EvalOptions(), atol: float = 1e-6) -> float:
    """Raise if :func:`evaluate_ablations` differs from ``evaluate`` on ``data``; return the largest difference."""
    ours, _ = evaluate_ablations(model, data, ablations, options=options)
    worst = 0.0
    for ablation in ablations:
        ref = evaluate(model, data, options=dataclasses.replace(options, ablation=ablation, scope="head"))
        for name, a, b in (("summary", ours[ablation].summary, ref.summary.drop(columns="checkpoint")),
                           ("samples", ours[ablation].samples, ref.samples)):
            if list(a.columns) != list(b.columns) or len(a) != len(b):
                raise RuntimeError(f"{ablation} {name}: columns or rows differ from evaluate().")
            for column in a.columns:
                x, y = a[column].to_numpy(), b[column].to_numpy()
                if x.dtype.kind in "fc":
                    both = ~(np.isnan(x) & np.isnan(y.astype(float)))
                    diff = float(np.max(np.abs(x[both] - y[both]), initial=0.0))
                    worst = max(worst, diff)
                    if diff > atol:
                        raise RuntimeError(f"{ablation} {name}.{column} differs from evaluate() by {diff:.3g}.")
                elif not (x == y).all():
                    raise RuntimeError(f"{ablation} {name}.{column} differs from evaluate().")
    return worst
