"""Trace -> attributions + leave-one-layer-out effects -> metrics -> tidy tables.

The data stream batch by batch: the backbone runs once per batch (plus one
pre-pass when a dataset-level statistic is needed before the effects: the
``mean`` ablation's fill values, or ``static`` weights under ``zero``/``mean``
or network scope). Per sample only ``L`` numbers per method are kept.
"""

from __future__ import annotations

import json
import os
import platform
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from laya_eval.attribution import AttributionMethod, MethodContext, applicable, ig_completeness_delta, resolve_methods
from laya_eval.data import Dataset, load_dataset
from laya_eval.errors import ConfigError, DataError
from laya_eval.metrics import METRICS, bootstrap_mean, rank_layers, spearman_per_sample, top1_hit
from laya_eval.model import LayeredModel
from laya_eval.perturb import check_ablation, deletion_masks, leave_one_out_masks, removal_effects
from laya_eval.trace import Trace, trace

__all__ = ["EvalOptions", "EvaluationResult", "MethodScore", "evaluate", "score_method", "write_results"]

SUMMARY_COLUMNS = [
    "checkpoint", "head", "dataset", "method", "ablation", "scope", "n", "n_undefined",
    "faithfulness", "faithfulness_ci_low", "faithfulness_ci_high",
    "deletion_at_1", "deletion_at_1_ci_low", "deletion_at_1_ci_high", "top1_hit_rate", "aopc",
]


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
class EvaluationResult:
    """The three tables of an evaluation and its manifest.

    Attributes
    ----------
    layers : DataFrame
        One row per (sample, method, layer): sample, method, layer, attribution, effect.
    samples : DataFrame
        One row per (sample, method): sample, label, pred, confidence, method,
        spearman, deletion_at_1, top1_hit.
    summary : DataFrame
        One row per method (columns :data:`SUMMARY_COLUMNS` plus deletion_at_k, k = 2..L).
    manifest : dict
    notes : list of str
        Methods skipped because they do not apply to the head, with the reason.
    """

    layers: pd.DataFrame
    samples: pd.DataFrame
    summary: pd.DataFrame
    manifest: dict[str, Any]
    notes: list[str] = field(default_factory=list)


@dataclass
class _Store:
    """Per-sample arrays gathered batch after batch."""

    labels: list[Tensor] = field(default_factory=list)
    preds: list[Tensor] = field(default_factory=list)
    confidence: list[Tensor] = field(default_factory=list)
    effects: list[Tensor] = field(default_factory=list)
    scores: dict[str, list[Tensor]] = field(default_factory=dict)
    deletion: dict[str, list[Tensor]] = field(default_factory=dict)
    terms: list[Tensor] = field(default_factory=list)
    weights: list[Tensor] = field(default_factory=list)
    ig_delta: list[Tensor] = field(default_factory=list)


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


def _prepass(model: LayeredModel, data: Dataset, options: EvalOptions, device, progress) -> tuple[list[Tensor] | None, Tensor | None]:
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
    fill = [s / n for s in sums] if options.ablation == "mean" else None
    return fill, None if weight_sum is None else weight_sum / n


def _method_scores(method: AttributionMethod, tr: Trace, model, ctx: MethodContext, static: Tensor | None) -> Tensor:
    if method.dataset_mean:
        return static.expand(tr.n_samples, -1).to(tr.terms.dtype)
    scores = method.fn(tr, model, target=tr.pred, context=ctx)
    return scores.detach().to(tr.terms.dtype)


def _deletion(tr: Trace, model, scores: Tensor, options: EvalOptions, fill) -> Tensor:
    ranking = torch.from_numpy(rank_layers(scores.cpu().numpy())).to(scores.device)
    return removal_effects(tr, model, deletion_masks(ranking).to(scores.device),
                           ablation=options.ablation, scope=options.scope, fill=fill)


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
    from laya_eval.train import resolve_device

    options = options or EvalOptions()
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
    deferred = wants_static and options.scope == "head" and options.ablation.startswith("gate")
    fill, static = None, None
    prepass = options.ablation == "mean" or (wants_static and not deferred)
    tick = None
    if progress is not None:
        progress.total = len(data) * (2 if prepass else 1)
        progress.refresh()
        tick = progress.update
    if prepass:
        fill, static = _prepass(model, data, options, device, tick)

    ctx = MethodContext(scope=options.scope, n_steps=options.n_steps, internal_batch_size=options.internal_batch_size,
                        rng=np.random.default_rng(options.seed))
    store = _Store()
    lolo = leave_one_out_masks(model.n_layers).to(device)
    for x, y in _batches(data, options.batch_size, device):
        tr = trace(model, x, y)
        effects = removal_effects(tr, model, lolo, ablation=options.ablation, scope=options.scope, fill=fill)
        store.labels.append(y)
        store.preds.append(tr.pred.cpu())
        store.confidence.append(tr.confidence.cpu())
        store.effects.append(effects.cpu())
        if deferred:
            store.terms.append(tr.terms)
            store.weights.append(tr.layer_weights)
        for m in methods:
            if m.dataset_mean and deferred:
                continue
            scores = _method_scores(m, tr, model, ctx, static)
            store.scores.setdefault(m.name, []).append(scores.cpu())
            store.deletion.setdefault(m.name, []).append(_deletion(tr, model, scores, options, fill).cpu())
            if m.name == "ig" and options.scope == "head":
                store.ig_delta.append(ig_completeness_delta(tr, model, scores).cpu())
        ctx.clear_cache()
        if tick:
            tick(len(y))
    if deferred:
        _finish_deferred(store, model, methods, options)
    return _tables(store, model, data, options, ckpt, methods, notes)


def _finish_deferred(store: _Store, model: LayeredModel, methods: Sequence[AttributionMethod], options: EvalOptions) -> None:
    """Static weights under gate ablation: their dataset mean is known only now, and the gate needs only the terms."""
    terms, weights = torch.cat(store.terms), torch.cat(store.weights)
    logits = terms.sum(1) + model.head.bias.detach()
    tr = Trace(hidden=(), logits=logits, probs=torch.softmax(logits, -1), pred=logits.argmax(-1), terms=terms,
               layer_weights=weights)
    scores = weights.mean(0).expand(tr.n_samples, -1).clone()
    for m in methods:
        if m.dataset_mean:
            store.scores[m.name] = [scores.cpu()]
            store.deletion[m.name] = [_deletion(tr, model, scores, options, None).cpu()]


def _cat(parts: list[Tensor]) -> np.ndarray:
    return torch.cat(parts).double().numpy()


@dataclass
class MethodScore:
    """Per-sample and summary metrics of one method.

    Attributes
    ----------
    spearman : ndarray, (N,)
        NaN where undefined.
    top1_hit : ndarray of bool, (N,)
    summary : dict
        ``n, n_undefined, faithfulness(+_ci_low/_ci_high), deletion_at_1(+ci), top1_hit_rate, aopc,
        deletion_at_2..L`` in the column order of ``summary.csv``.
    """

    spearman: np.ndarray
    top1_hit: np.ndarray
    summary: dict[str, Any]


def score_method(
    scores: np.ndarray, effects: np.ndarray, deletion: np.ndarray, *, bootstrap: int, seed: Sequence[int]
) -> MethodScore:
    """Faithfulness, Deletion@k, top-1 hits and AOPC of one method.

    Parameters
    ----------
    scores, effects : ndarray, (N, L)
        Attributions and leave-one-layer-out effects.
    deletion : ndarray, (N, L)
        Effect of removing the k top-ranked layers, k = 1..L.
    bootstrap : int
        Resamples for the 95% intervals.
    seed : sequence of int
        Seeds the bootstrap; faithfulness and Deletion@1 draw from ``[*seed, 0]`` and ``[*seed, 1]``.
    """
    rho = spearman_per_sample(scores, effects)
    hit = top1_hit(scores, effects)
    faith = bootstrap_mean(rho, n_resamples=bootstrap, seed=[*seed, 0])
    d1 = bootstrap_mean(deletion[:, 0], n_resamples=bootstrap, seed=[*seed, 1])
    summary = {
        "n": int(effects.shape[0]), "n_undefined": faith.n_undefined, "faithfulness": faith.mean,
        "faithfulness_ci_low": faith.low, "faithfulness_ci_high": faith.high, "deletion_at_1": d1.mean,
        "deletion_at_1_ci_low": d1.low, "deletion_at_1_ci_high": d1.high, "top1_hit_rate": float(hit.mean()),
        "aopc": float(deletion.mean()),
    }
    summary.update({f"deletion_at_{j}": float(deletion[:, j - 1].mean()) for j in range(2, deletion.shape[1] + 1)})
    return MethodScore(spearman=rho, top1_hit=hit, summary=summary)


def _tables(store: _Store, model: LayeredModel, data: Dataset, options: EvalOptions, ckpt: dict,
            methods: Sequence[AttributionMethod], notes: list[str]) -> EvaluationResult:
    n_layers = model.n_layers
    effects = _cat(store.effects)
    n = effects.shape[0]
    sample = np.arange(n)
    labels, preds, conf = torch.cat(store.labels).numpy(), torch.cat(store.preds).numpy(), _cat(store.confidence)
    layer_rows, sample_rows, summary_rows = [], [], []
    for k, m in enumerate(methods):
        scores, deletion = _cat(store.scores[m.name]), _cat(store.deletion[m.name])
        scored = score_method(scores, effects, deletion, bootstrap=options.bootstrap, seed=[options.seed, k])
        layer_rows.append(pd.DataFrame({
            "sample": np.repeat(sample, n_layers), "method": m.name,
            "layer": np.tile(np.arange(1, n_layers + 1), n),
            "attribution": scores.reshape(-1), "effect": effects.reshape(-1),
        }))
        sample_rows.append(pd.DataFrame({
            "sample": sample, "label": labels, "pred": preds, "confidence": conf, "method": m.name,
            "spearman": scored.spearman, "deletion_at_1": deletion[:, 0], "top1_hit": scored.top1_hit,
        }))
        summary_rows.append({
            "checkpoint": ckpt["path"] or "<in-memory>", "head": model.head.name, "dataset": data.name,
            "method": m.name, "ablation": options.ablation, "scope": options.scope, **scored.summary,
        })
    manifest = _manifest(model, data, options, ckpt, methods, notes, n, store)
    return EvaluationResult(
        layers=pd.concat(layer_rows, ignore_index=True) if layer_rows else pd.DataFrame(),
        samples=pd.concat(sample_rows, ignore_index=True) if sample_rows else pd.DataFrame(),
        summary=pd.DataFrame(summary_rows),
        manifest=manifest,
        notes=notes,
    )


def _versions() -> dict[str, str]:
    import captum
    import scipy

    import laya_eval

    return {"laya_eval": laya_eval.__version__, "python": platform.python_version(), "torch": torch.__version__,
            "captum": captum.__version__, "numpy": np.__version__, "scipy": scipy.__version__, "pandas": pd.__version__}


def _model_record(model: LayeredModel) -> dict[str, Any]:
    """What the checkpoint says about how the model was trained and how well it did (history left out)."""
    training = {k: v for k, v in model.info.training.items() if k != "history"}
    return {"training": training, "metrics": dict(model.info.metrics)}


def _manifest(model, data, options, ckpt, methods, notes, n, store) -> dict[str, Any]:
    ig = None
    if store.ig_delta:
        delta = torch.cat(store.ig_delta).abs()
        ig = {"mean_abs_completeness_delta": float(delta.mean()), "max_abs_completeness_delta": float(delta.max()),
              "note": "head scope: IG over the head's cached inputs measures the direct effect of each layer."}
    return {
        "versions": _versions(),
        "checkpoint": ckpt,
        "model": _model_record(model),
        "head": model.head.name,
        "dataset": data.name,
        "split": options.split,
        "n_samples": n,
        "n_layers": model.n_layers,
        "layer_names": model.layer_names,
        "seed": options.seed,
        "options": asdict(options),
        "methods": {m.name: m.description for m in methods},
        "skipped": notes,
        "effect": ("p_c(x) - p_c(x with the layer removed), c = class predicted on the intact input; "
                   f"ablation {options.ablation!r}, scope {options.scope!r}."),
        "metrics": {name: asdict(info) for name, info in METRICS.items()},
        "integrated_gradients": ig,
    }


def write_results(result: EvaluationResult, out_dir: str | os.PathLike) -> list[Path]:
    """Write layers.csv, samples.csv, summary.csv and manifest.json into ``out_dir``.

    Each file is written under a temporary name and renamed, so an interrupted
    run never leaves a file that looks complete.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    payloads = {
        "layers.csv": result.layers.to_csv(index=False, float_format="%.8g", lineterminator="\n"),
        "samples.csv": result.samples.to_csv(index=False, float_format="%.8g", lineterminator="\n"),
        "summary.csv": result.summary.to_csv(index=False, float_format="%.8g", lineterminator="\n"),
        "manifest.json": json.dumps(result.manifest, indent=2, sort_keys=True, default=str) + "\n",
    }
    # Every file goes to a temporary name first; only when all are written are they renamed, the
    # manifest last, so an interruption never leaves a half-written file under a final name.
    temps = {name: out / f".{name}.tmp" for name in payloads}
    try:
        for name, text in payloads.items():
            temps[name].write_text(text)
        for name in payloads:
            os.replace(temps[name], out / name)
    finally:
        for tmp in temps.values():
            tmp.unlink(missing_ok=True)
    return [out / name for name in payloads]
