"""Trace -> attributions + leave-one-layer-out effects -> metrics -> tidy tables.

The data stream batch by batch: the backbone runs once per batch (plus one
pre-pass when a dataset-level statistic is needed before the effects: the
``mean`` ablation's fill values, or ``static`` weights under ``zero``/``mean``
or network scope). Per sample only ``L`` numbers per method are kept.
:func:`evaluate_ablations` scores several ablations from the same pass: the
attributions (Integrated Gradients above all) do not depend on how a layer is
removed, so they are computed once.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import torch
from torch import Tensor

from laya_eval.attribution import AttributionMethod, MethodContext, applicable, ig_completeness_delta, resolve_methods
from laya_eval.data import Dataset, load_dataset
from laya_eval.errors import ConfigError, DataError
from laya_eval.metrics import rank_layers
from laya_eval.model import LayeredModel
from laya_eval.perturb import check_ablation, deletion_masks, leave_one_out_masks, removal_effects
from laya_eval.results import (SUMMARY_COLUMNS, Collected, EvaluationResult, MethodScore, build_result, score_method,
                               write_results)
from laya_eval.trace import Trace, trace

__all__ = ["SUMMARY_COLUMNS", "EvalOptions", "EvaluationResult", "MethodScore", "evaluate", "evaluate_ablations",
           "score_method", "write_results"]


@dataclass(frozen=True)
class EvalOptions:
    """Options of one evaluation (the CLI's flags)."""

    methods: tuple[str, ...] | None = None
    ablation: str = "gate"
    scope: str = "head"
    split: str = "test"
    limit: int | None = None
    batch_size: int = 256
    seed: int = 0
    bootstrap: int = 1000
    device: str = "cpu"
    n_steps: int = 50
    internal_batch_size: int | None = None

    def __post_init__(self) -> None:
        check_ablation(self.ablation, self.scope)
        if self.batch_size < 1:
            raise ConfigError(f"batch_size must be a positive integer; got {self.batch_size}.")
        if self.limit is not None and self.limit < 1:
            raise ConfigError(f"limit must be a positive integer; got {self.limit}.")
        if self.bootstrap < 0:
            raise ConfigError(f"bootstrap must be 0 or more resamples; got {self.bootstrap}.")
        resolve_methods(None if self.methods is None else list(self.methods))


@dataclass
class _Store:
    """Per-sample arrays gathered batch after batch; effects and deletion curves per ablation."""

    labels: list[Tensor] = field(default_factory=list)
    preds: list[Tensor] = field(default_factory=list)
    confidence: list[Tensor] = field(default_factory=list)
    scores: dict[str, list[Tensor]] = field(default_factory=dict)
    effects: dict[str, list[Tensor]] = field(default_factory=dict)
    deletion: dict[str, dict[str, list[Tensor]]] = field(default_factory=dict)
    terms: list[Tensor] = field(default_factory=list)
    weights: list[Tensor] = field(default_factory=list)
    ig_delta: list[Tensor] = field(default_factory=list)

    def collected(self, ablation: str) -> Collected:
        """Everything gathered for ``ablation``, concatenated over batches."""
        return Collected(
            labels=torch.cat(self.labels).numpy(), preds=torch.cat(self.preds).numpy(),
            confidence=_cat(self.confidence), effects=_cat(self.effects[ablation]),
            scores={name: _cat(parts) for name, parts in self.scores.items()},
            deletion={name: _cat(parts) for name, parts in self.deletion.get(ablation, {}).items()},
            ig_delta=_cat(self.ig_delta) if self.ig_delta else None,
        )


def _resolve_model(model: LayeredModel | str | os.PathLike, device: torch.device) -> tuple[LayeredModel, dict]:
    from laya_eval.checkpoint import file_sha256, load_checkpoint

    if isinstance(model, LayeredModel):
        return model.to(device).eval(), {"path": None, "sha256": None}
    return load_checkpoint(model, map_location=device), {"path": str(model), "sha256": file_sha256(model)}


def _resolve_data(model: LayeredModel, data: Dataset | str | None, split: str, data_dir: Any) -> Dataset:
    if isinstance(data, Dataset):
        return data
    name = data or model.info.dataset
    if not name:
        raise DataError("the checkpoint records no dataset; name one with --data (e.g. --data digits or --data npz:PATH).")
    return load_dataset(name, split, data_dir=data_dir)


def _batches(data: Dataset, batch_size: int, device: torch.device):
    for start in range(0, len(data), batch_size):
        part = data.subset(slice(start, start + batch_size))
        x = part.x.to(device) if isinstance(part.x, Tensor) else part.x
        yield x, part.y


def _prepass(model: LayeredModel, data: Dataset, options: EvalOptions, device, progress,
             need_fill: bool) -> tuple[list[Tensor] | None, Tensor | None]:
    """Dataset means needed before the effects: the fill values and the mean layer weights."""
    from laya_eval.heads import pool_hidden

    network = options.scope == "network"
    sums: list[Tensor] | None = None
    weight_sum, n = None, 0
    with torch.no_grad():
        for x, _ in _batches(data, options.batch_size, device):
            captured: dict[int, Tensor] = {}

            def grab(i):
                def fn(t):
                    captured[i] = t.sum(0)
                    return t
                return fn

            if network:
                hidden = model.hidden_states(x, {i: grab(i) for i in range(model.n_layers)})
                batch_sums = [captured[i] for i in range(model.n_layers)]
            else:
                hidden = model.hidden_states(x)
                batch_sums = [pool_hidden(h).sum(0) for h in hidden]
            sums = batch_sums if sums is None else [a + b for a, b in zip(sums, batch_sums)]
            w = model.head.layer_weights(hidden)
            if w is not None:
                weight_sum = w.sum(0) if weight_sum is None else weight_sum + w.sum(0)
            n += len(hidden[0])
            if progress:
                progress(len(hidden[0]))
    fill = [s / n for s in sums] if need_fill else None
    return fill, None if weight_sum is None else weight_sum / n


def _method_scores(method: AttributionMethod, tr: Trace, model, ctx: MethodContext, static: Tensor | None) -> Tensor:
    if method.dataset_mean:
        return static.expand(tr.n_samples, -1).to(tr.terms.dtype)
    scores = method.fn(tr, model, target=tr.pred, context=ctx)
    return scores.detach().to(tr.terms.dtype)


def _ranked_masks(scores: Tensor) -> Tensor:
    """(B, L, L) masks removing the k top-ranked layers, k = 1..L; shared by every ablation."""
    ranking = torch.from_numpy(rank_layers(scores.cpu().numpy())).to(scores.device)
    return deletion_masks(ranking).to(scores.device)


def _check_ablations(ablations: Sequence[str], scope: str) -> tuple[str, ...]:
    if isinstance(ablations, str):
        ablations = (ablations,)
    ablations = tuple(dict.fromkeys(ablations))
    if not ablations:
        raise ConfigError("give at least one ablation among {gate, gate-renorm, zero, mean}.")
    for a in ablations:
        check_ablation(a, scope)
    return ablations


def evaluate(
    model: LayeredModel | str | os.PathLike,
    data: Dataset | str | None = None,
    *,
    options: EvalOptions | None = None,
    data_dir: str | os.PathLike | None = None,
    progress: Any = None,
) -> EvaluationResult:
    """Score layer attributions against leave-one-layer-out effects.

    Parameters
    ----------
    model : LayeredModel or path to a checkpoint
    data : Dataset, dataset name, or None
        ``None`` uses the dataset recorded in the checkpoint (split ``options.split``).
    options : EvalOptions
    data_dir : path, optional
        Where to look for the dataset files.
    progress : tqdm-like, optional
        Its ``total`` is set to the number of samples times the number of
        passes, and ``update(n)`` is called after every batch.

    Returns
    -------
    EvaluationResult

    Examples
    --------
    >>> result = evaluate("ckpt.pt", options=EvalOptions(limit=500))  # doctest: +SKIP
    >>> result.summary[["method", "faithfulness", "deletion_at_1"]]  # doctest: +SKIP
    """
    options = options or EvalOptions()
    results = evaluate_ablations(model, data, (options.ablation,), options=options, data_dir=data_dir, progress=progress)
    return results[options.ablation]


def evaluate_ablations(
    model: LayeredModel | str | os.PathLike,
    data: Dataset | str | None = None,
    ablations: Sequence[str] = ("gate", "gate-renorm", "zero", "mean"),
    *,
    options: EvalOptions | None = None,
    data_dir: str | os.PathLike | None = None,
    progress: Any = None,
) -> dict[str, EvaluationResult]:
    """:func:`evaluate` under several ablations, with every attribution computed once.

    Each result equals what ``evaluate`` returns with ``options.ablation`` set to that
    ablation (same tables, seeds and manifest); only the shared work is done once.
    ``options.ablation`` itself is not used (it must still be valid for ``options.scope``).

    Parameters
    ----------
    model, data, options, data_dir, progress
        As for :func:`evaluate`.
    ablations : sequence of str
        Among ``gate``, ``gate-renorm``, ``zero``, ``mean`` (network scope: ``zero``, ``mean``).

    Returns
    -------
    dict of str to EvaluationResult
        One result per ablation, in the order given.

    Examples
    --------
    >>> results = evaluate_ablations("ckpt.pt", ablations=["gate", "mean"])  # doctest: +SKIP
    >>> results["mean"].summary[["method", "faithfulness"]]  # doctest: +SKIP
    """
    from laya_eval.train import resolve_device

    options = options or EvalOptions()
    ablations = _check_ablations(ablations, options.scope)
    device = resolve_device(options.device)
    model, ckpt = _resolve_model(model, device)
    if model.n_layers < 2:
        raise ConfigError("the model has a single hidden layer: faithfulness (a rank correlation across layers) is undefined.")
    data = _resolve_data(model, data, options.split, data_dir)
    if options.limit is not None:
        if options.limit > len(data):
            raise ConfigError(f"limit {options.limit} is larger than the {len(data)} samples of '{data.name}' ({options.split}).")
        data = data.subset(slice(0, options.limit))
    model.check_fits(data)

    methods, notes = [], []
    for m in resolve_methods(None if options.methods is None else list(options.methods)):
        reason = applicable(m, model)
        (notes.append(f"skipped {reason}") if reason else methods.append(m))
    wants_static = any(m.dataset_mean for m in methods)
    # Under gate ablations at head scope static weights need only the cached terms: finish them after the stream.
    deferred = wants_static and options.scope == "head" and all(a.startswith("gate") for a in ablations)
    prepass = "mean" in ablations or (wants_static and not deferred)
    tick = None
    if progress is not None:
        progress.total = len(data) * (2 if prepass else 1)
        progress.refresh()
        tick = progress.update
    fill, static = None, None
    if prepass:
        fill, static = _prepass(model, data, options, device, tick, need_fill="mean" in ablations)
    fills = {a: fill if a == "mean" else None for a in ablations}
    store = _stream(model, data, methods, fills, options, device, static, deferred, tick)
    if deferred:
        _finish_deferred(store, model, methods, ablations)
    return {a: build_result(store.collected(a), model, data.name, dataclasses.replace(options, ablation=a), ckpt,
                            methods, notes) for a in ablations}


def _stream(model: LayeredModel, data: Dataset, methods: Sequence[AttributionMethod], fills: dict[str, Any],
            options: EvalOptions, device, static: Tensor | None, deferred: bool, tick) -> _Store:
    """The one pass over the data: trace, effects under each ablation, attributions once, deletion curves."""
    ctx = MethodContext(scope=options.scope, n_steps=options.n_steps, internal_batch_size=options.internal_batch_size,
                        rng=np.random.default_rng(options.seed))
    store = _Store()
    lolo = leave_one_out_masks(model.n_layers).to(device)
    for x, y in _batches(data, options.batch_size, device):
        tr = trace(model, x, y)
        store.labels.append(y)
        store.preds.append(tr.pred.cpu())
        store.confidence.append(tr.confidence.cpu())
        for a, fill in fills.items():
            effects = removal_effects(tr, model, lolo, ablation=a, scope=options.scope, fill=fill)
            store.effects.setdefault(a, []).append(effects.cpu())
        if deferred:
            store.terms.append(tr.terms)
            store.weights.append(tr.layer_weights)
        for m in methods:
            if m.dataset_mean and deferred:
                continue
            scores = _method_scores(m, tr, model, ctx, static)
            store.scores.setdefault(m.name, []).append(scores.cpu())
            masks = _ranked_masks(scores)
            for a, fill in fills.items():
                curve = removal_effects(tr, model, masks, ablation=a, scope=options.scope, fill=fill)
                store.deletion.setdefault(a, {}).setdefault(m.name, []).append(curve.cpu())
            if m.name == "ig" and options.scope == "head":
                store.ig_delta.append(ig_completeness_delta(tr, model, scores).cpu())
        ctx.clear_cache()
        if tick:
            tick(len(y))
    return store


def _finish_deferred(store: _Store, model: LayeredModel, methods: Sequence[AttributionMethod],
                     ablations: Sequence[str]) -> None:
    """Static weights under gate ablations: their dataset mean is known only now, and the gate needs only the terms."""
    terms, weights = torch.cat(store.terms), torch.cat(store.weights)
    logits = terms.sum(1) + model.head.bias.detach()
    tr = Trace(hidden=(), logits=logits, probs=torch.softmax(logits, -1), pred=logits.argmax(-1), terms=terms,
               layer_weights=weights)
    scores = weights.mean(0).expand(tr.n_samples, -1).clone()
    masks = _ranked_masks(scores)
    for m in methods:
        if m.dataset_mean:
            store.scores[m.name] = [scores.cpu()]
            for a in ablations:
                curve = removal_effects(tr, model, masks, ablation=a, scope="head", fill=None)
                store.deletion.setdefault(a, {})[m.name] = [curve.cpu()]


def _cat(parts: list[Tensor]) -> np.ndarray:
    return torch.cat(parts).double().numpy()
