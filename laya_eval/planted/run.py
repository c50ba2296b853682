"""``laya_eval.meta``: every planted family and seed through the evaluation engine, scored against the truth.

For each family (``catalog.PLANTED_FAMILY_SPECS``) and seed, :func:`~laya_eval.planted.families.build_planted`
builds a model on the digits training split; :func:`laya_eval.engine.evaluation.evaluate` evaluates it
on the test split under every ablation (head scope), with the three reference attributions of
``catalog.PLANTED_REFERENCES`` scored as extra methods beside the registered ones. The tables:

``meta.csv``
    One row per (family, ablation, method): recovery of the planted relevance (AUROC, rank correlation) and the
    metrics (faithfulness, Deletion@1, Deletion@k, AOPC), each a mean over seeds with its 95% interval. Method
    ``lolo_effect`` is the ablation's own leave-one-layer-out effect used as the scores: whether the removal
    itself sees the planted relevance.
``metrics.csv``
    One row per (family, ablation, metric): does the metric put the planted ranking above the inverted one and
    the layer-index one (:func:`~laya_eval.planted.scoring.metric_verdicts`)?
``seeds.csv``, ``models.csv``
    The per-seed values behind both, and each planted model (relevance, weights, roles, accuracy).

plus ``meta.<format>`` (the figure) and ``manifest.json``, written as one folder replaced whole.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from laya_eval.catalog import ABLATION_SPECS, PLANTED_FAMILY_SPECS, IG_STEPS, PLANTED_REFERENCES, MethodSpec
from laya_eval.checks import SEED_MAX, check_int, check_positive_int, fail
from laya_eval.data import load_dataset
from laya_eval.engine.evaluation import evaluate
from laya_eval.engine.plugins import load_installed_plugins
from laya_eval.options import check_declared, declared
from laya_eval.engine.methods import AttributionMethod
from laya_eval.engine.plan import EvalOptions
from laya_eval.errors import ConfigError
from laya_eval.planted.families import MIN_LAYERS, PlantedModel, build_planted
from laya_eval.planted.scoring import metric_verdicts, over_seeds, seed_rows

__all__ = ["MetaOptions", "MetaResult", "meta", "reference_methods"]

#: The largest seed a run may use (the seed range, laya_eval.checks.SEED_MAX).
FIRST_SEED_MAX = SEED_MAX
#: Most layers a planted model may have (the exact null of faithfulness is enumerated up to this size).
MAX_LAYERS = 10


@declared
class MetaOptions:
    """Options of ``laya-eval meta``.

    Attributes
    ----------
    families : tuple of str
        Planted families (default: all).
    ablations : tuple of str
        Head-scope ablations (default: those with one fill for every sample).
    methods : tuple of str or None
        Registered methods to score (default: all).
    seeds : int
        Planted models per family: seeds ``first_seed .. first_seed + seeds - 1``.
    first_seed : int
    n_layers : int
        L of every planted model.
    limit : int or None
        Evaluate only the first N test samples.
    batch_size, n_steps : int
        As for :class:`~laya_eval.engine.plan.EvalOptions`.
    bootstrap : int
        Resamples of the intervals over seeds.
    fmt : {"png", "svg", "pdf"}
        The figure's format.
    """

    families: tuple[str, ...]
    ablations: tuple[str, ...]
    methods: tuple[str, ...] | None
    seeds: int
    first_seed: int
    n_layers: int
    limit: int | None
    batch_size: int
    n_steps: int = IG_STEPS
    bootstrap: int
    fmt: str

    def __post_init__(self) -> None:
        load_installed_plugins()
        check_declared(self)
        outside = [a for a in self.ablations if "head" not in ABLATION_SPECS[a].scopes]
        if outside:
            heads = [a for a, s in ABLATION_SPECS.items() if "head" in s.scopes]
            raise fail("MetaOptions.ablations", f"head-scope ablations among {{{', '.join(heads)}}}", outside[0])
        # every seed of the run stays within the CLI's (and numpy's legacy) seed range
        check_int("MetaOptions.first_seed", self.first_seed, low=0, high=FIRST_SEED_MAX - self.seeds + 1)
        check_positive_int("MetaOptions.n_steps", self.n_steps)
        check_int("MetaOptions.n_layers", self.n_layers, low=MIN_LAYERS, high=MAX_LAYERS)


@dataclass
class MetaResult:
    """The tables of :func:`meta` (see the module docstring) and the manifest."""

    summary: pd.DataFrame
    metrics: pd.DataFrame
    seeds: pd.DataFrame
    models: pd.DataFrame
    manifest: dict[str, Any] = field(default_factory=dict)


def _fixed(values: torch.Tensor):
    def scores(tr, model, *, target, context):
        return values.to(tr.terms).expand(tr.n_samples, -1)

    return scores


def reference_methods(relevance: np.ndarray) -> tuple[AttributionMethod, ...]:
    """The reference attributions of ``catalog.PLANTED_REFERENCES`` for a planted relevance (L,), as engine methods."""
    r = torch.as_tensor(np.asarray(relevance, dtype=np.float64))
    values = {"planted": r, "inverted": -r, "layer_index": torch.arange(1, r.numel() + 1, dtype=torch.float64)}
    return tuple(
        AttributionMethod(MethodSpec(name, PLANTED_REFERENCES[name], baseline=True), _fixed(values[name]))
        for name in PLANTED_REFERENCES
    )


def _model_row(pm: PlantedModel, result) -> dict[str, Any]:
    samples = result.samples.drop_duplicates("sample")
    return {
        "family": pm.family,
        "seed": pm.seed,
        "relevance": " ".join(f"{v:g}" for v in pm.plan.relevance),
        "weights": " ".join(f"{v:.4g}" for v in pm.plan.weights),
        "roles": " ".join(pm.plan.roles),
        "kinds": " ".join(pm.plan.kinds),
        "n": len(samples),
        "accuracy": float((samples["label"] == samples["pred"]).mean()),
        "mean_confidence": float(samples["confidence"].mean()),
    }


def _evaluate(pm: PlantedModel, test, options: MetaOptions) -> dict:
    eval_options = EvalOptions(
        methods=options.methods,
        ablation=options.ablations,
        batch_size=options.batch_size,
        seed=pm.seed,
        bootstrap=0,
        n_steps=options.n_steps,
        limit=options.limit,
    )
    # meta reads the per-method tables only: no paired tests between the methods.
    return evaluate(
        pm.model, test, options=eval_options, extra_methods=reference_methods(pm.relevance), paired_tests=False
    )


def meta(
    out_dir: str | os.PathLike | None = None,
    options: MetaOptions | None = None,
    *,
    data_dir: str | os.PathLike | None = None,
    progress: Any = None,
) -> MetaResult:
    """Score every method, ablation and metric on models whose layer relevance is planted.

    Parameters
    ----------
    out_dir : path, optional
        Where to write the result folder (replaced whole; checked before any work).
    options : MetaOptions
    data_dir : path, optional
        Where to look for the dataset files (digits ships with scikit-learn: nothing is downloaded).
    progress : tqdm-like, optional
        Its ``total`` is set to the number of planted models and ``update(1)`` called after each.

    Returns
    -------
    MetaResult

    Examples
    --------
    >>> result = meta("meta-out", MetaOptions(seeds=3))  # doctest: +SKIP
    >>> result.metrics[["family", "ablation", "metric", "verdict"]]  # doctest: +SKIP
    """
    from laya_eval.output.files import check_output_folder

    options = options or MetaOptions()
    if not isinstance(options, MetaOptions):
        raise ConfigError(f"options must be a MetaOptions; got {type(options).__name__}.")
    if out_dir is not None:
        check_output_folder(out_dir)
    train = load_dataset("digits", "train", data_dir=data_dir)
    test = load_dataset("digits", "test", data_dir=data_dir)
    if options.limit is not None and options.limit > len(test):
        raise ConfigError(f"limit {options.limit} is larger than the {len(test)} samples of 'digits' (test).")
    seeds = range(options.first_seed, options.first_seed + options.seeds)
    if progress is not None:
        progress.total = len(options.families) * len(seeds)
        progress.refresh()
    rows, models = [], []
    for family in options.families:
        for seed in seeds:
            pm = build_planted(family, seed, train, n_layers=options.n_layers)
            results = _evaluate(pm, test, options)
            rows.extend(seed_rows(family, seed, pm.relevance, results))
            models.append(_model_row(pm, next(iter(results.values()))))
            if progress is not None:
                progress.update(1)
    runs = pd.DataFrame(rows)
    result = MetaResult(
        summary=over_seeds(runs, n_resamples=options.bootstrap, seed=options.first_seed),
        metrics=metric_verdicts(runs, n_resamples=options.bootstrap, seed=options.first_seed),
        seeds=runs,
        models=pd.DataFrame(models),
        manifest=_manifest(options),
    )
    if out_dir is not None:
        write_meta(result, out_dir, fmt=options.fmt)
    return result


def _manifest(options: MetaOptions) -> dict[str, Any]:
    from laya_eval.output.origin import provenance
    from laya_eval.planted import families

    return {
        **provenance(),
        "kind": "meta",
        "options": asdict(options),
        "data": "digits (train: adapters, test: evaluation)",
        "scope": "head",
        "families": {n: s.description for n, s in PLANTED_FAMILY_SPECS.items() if n in options.families},
        "references": dict(PLANTED_REFERENCES),
        "construction": {
            "layer_width": families.LAYER_WIDTH,
            "logit_scale": families.LOGIT_SCALE,
            "noise_frequency": families.NOISE_FREQUENCY,
            "unread_score": families.UNREAD_SCORE,
            "shift_gain": families.SHIFT_GAIN,
            "ridge": families.RIDGE,
        },
        "intervals": "95% percentile bootstrap over seeds of the per-seed values; none with fewer than two "
        "defined seeds (empty in the CSV, n/a in words)",
        "auroc": "share of (relevant, irrelevant) layer pairs ordered correctly, ties 1/2, per sample, averaged",
        "deletion_at_k": "Deletion@k with k = the number of planted-relevant layers (column k)",
    }


def write_meta(result: MetaResult, out_dir: str | os.PathLike, *, fmt: str = "png") -> list[Path]:
    """Write ``meta.csv``, ``metrics.csv``, ``seeds.csv``, ``models.csv``, ``meta.<fmt>`` and ``manifest.json`` as
    the whole content of ``out_dir``."""
    from laya_eval.figures import figure_bytes
    from laya_eval.figures.planted import planted_figure
    from laya_eval.output.files import sha256_bytes, write_result_folder

    csv = {"index": False, "float_format": "%.6g", "lineterminator": "\n"}
    files = {
        name: table.to_csv(**csv).encode()
        for name, table in (
            ("meta.csv", result.summary),
            ("metrics.csv", result.metrics),
            ("seeds.csv", result.seeds),
            ("models.csv", result.models),
        )
    }
    files[f"meta.{fmt}"] = figure_bytes(planted_figure(result.summary, result.metrics), fmt)
    manifest = {**result.manifest, "files": {name: sha256_bytes(data) for name, data in files.items()}}
    files["manifest.json"] = (json.dumps(manifest, indent=2, sort_keys=True, default=str) + "\n").encode()
    return write_result_folder(out_dir, files)
