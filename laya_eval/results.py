"""What an evaluation produces: per-method metrics, the three tables, the manifest, the files.

:func:`score_method` turns one method's attributions, effects and deletion curve into
per-sample and summary metrics; :func:`build_result` assembles the tables of one
ablation; :func:`write_results` writes them all-or-nothing.
"""

from __future__ import annotations

import json
import os
import platform
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import pandas as pd
import torch

from laya_eval.metrics import METRICS, bootstrap_mean, spearman_per_sample, top1_hit
from laya_eval.model import LayeredModel

if TYPE_CHECKING:
    from laya_eval.attribution import AttributionMethod
    from laya_eval.evaluate import EvalOptions

__all__ = ["SUMMARY_COLUMNS", "Collected", "EvaluationResult", "MethodScore", "build_result", "score_method",
           "write_results"]

SUMMARY_COLUMNS = [
    "checkpoint", "head", "dataset", "method", "ablation", "scope", "n", "n_undefined",
    "faithfulness", "faithfulness_ci_low", "faithfulness_ci_high",
    "deletion_at_1", "deletion_at_1_ci_low", "deletion_at_1_ci_high", "top1_hit_rate", "aopc",
]


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
class Collected:
    """Per-sample arrays of one ablation, gathered over the whole evaluated set.

    Attributes
    ----------
    labels, preds : ndarray, (N,)
    confidence : ndarray, (N,)
        Probability of the predicted class on the intact input.
    effects : ndarray, (N, L)
        Leave-one-layer-out effects.
    scores, deletion : dict of str to ndarray, each (N, L)
        Each method's attributions and its Deletion@k curve, k = 1..L.
    ig_delta : ndarray or None
        Integrated Gradients' completeness deltas (head scope only).
    """

    labels: np.ndarray
    preds: np.ndarray
    confidence: np.ndarray
    effects: np.ndarray
    scores: dict[str, np.ndarray]
    deletion: dict[str, np.ndarray]
    ig_delta: np.ndarray | None = None


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


def build_result(got: Collected, model: LayeredModel, data_name: str, options: EvalOptions, ckpt: dict,
                 methods: Sequence[AttributionMethod], notes: list[str]) -> EvaluationResult:
    """The tables and manifest of one ablation (``options.ablation``)."""
    n_layers, effects = model.n_layers, got.effects
    n = effects.shape[0]
    sample = np.arange(n)
    layer_rows, sample_rows, summary_rows = [], [], []
    for k, m in enumerate(methods):
        scores, deletion = got.scores[m.name], got.deletion[m.name]
        scored = score_method(scores, effects, deletion, bootstrap=options.bootstrap, seed=[options.seed, k])
        layer_rows.append(pd.DataFrame({
            "sample": np.repeat(sample, n_layers), "method": m.name,
            "layer": np.tile(np.arange(1, n_layers + 1), n),
            "attribution": scores.reshape(-1), "effect": effects.reshape(-1),
        }))
        sample_rows.append(pd.DataFrame({
            "sample": sample, "label": got.labels, "pred": got.preds, "confidence": got.confidence, "method": m.name,
            "spearman": scored.spearman, "deletion_at_1": deletion[:, 0], "top1_hit": scored.top1_hit,
        }))
        summary_rows.append({
            "checkpoint": ckpt["path"] or "<in-memory>", "head": model.head.name, "dataset": data_name,
            "method": m.name, "ablation": options.ablation, "scope": options.scope, **scored.summary,
        })
    return EvaluationResult(
        layers=pd.concat(layer_rows, ignore_index=True) if layer_rows else pd.DataFrame(),
        samples=pd.concat(sample_rows, ignore_index=True) if sample_rows else pd.DataFrame(),
        summary=pd.DataFrame(summary_rows),
        manifest=_manifest(model, data_name, options, ckpt, methods, notes, n, got.ig_delta),
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


def _manifest(model, data_name, options, ckpt, methods, notes, n, ig_delta) -> dict[str, Any]:
    ig = None
    if ig_delta is not None:
        delta = np.abs(ig_delta)
        ig = {"mean_abs_completeness_delta": float(delta.mean()), "max_abs_completeness_delta": float(delta.max()),
              "note": "head scope: IG over the head's cached inputs measures the direct effect of each layer."}
    return {
        "versions": _versions(),
        "checkpoint": ckpt,
        "model": _model_record(model),
        "head": model.head.name,
        "dataset": data_name,
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
