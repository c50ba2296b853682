"""What an evaluation produces: per-method metrics, the three tables, the manifest, the files.

:func:`score_method` turns one method's attributions, effects and deletion curve into
per-sample and summary metrics; :func:`build_result` assembles the tables of one
ablation from merged :class:`~laya_eval.engine.records.Records`; :func:`result_files` gives the bytes of a run
(one subfolder per ablation when there are several), which :mod:`laya_eval.engine.outcome` writes as one set.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from laya_eval.catalog import ABLATION_SPECS
from laya_eval.output.files import sha256_bytes
from laya_eval.stats.metrics import (
    METRICS,
    bootstrap_mean,
    rank_layers,
    recall_at_k,
    spearman_per_sample,
    top1_hit,
)
from laya_eval.models.layered import LayeredModel
from laya_eval.engine.distributed import serial_map
from laya_eval.engine.ig_baselines import baseline_description
from laya_eval.engine.plan import EvalOptions, Plan, comparison_reference, plugin_sources, resolved_ig_baseline
from laya_eval.engine.records import Records, method_diagnostic, method_scores
from laya_eval.stats import (
    COMPARISON_COLUMNS,
    EFFECT_FLOOR,
    ModelState,
    TiedEffects,
    compare_methods,
    faithfulness_p_value,
    model_state,
    tie_effects,
    typical_largest_effect,
    verdict,
)
from laya_eval.output.tables import npz_bytes, table_bytes

__all__ = [
    "SUMMARY_COLUMNS",
    "EvaluationResult",
    "MethodScore",
    "build_result",
    "donor_table",
    "mean_faithfulness",
    "result_files",
    "sample_faithfulness",
    "score_method",
]

SUMMARY_COLUMNS = [
    "checkpoint",
    "head",
    "dataset",
    "method",
    "ablation",
    "scope",
    "verdict",
    "n",
    "n_undefined",
    "n_effect_ties",
    "share_negligible_effects",
    "faithfulness",
    "faithfulness_ci_low",
    "faithfulness_ci_high",
    "faithfulness_ci_note",
    "faithfulness_p_value",
    "deletion_at_1",
    "deletion_at_1_ci_low",
    "deletion_at_1_ci_high",
    "deletion_at_1_ci_note",
    "top1_hit_rate",
    "recall_at_1",
    "recall_at_3",
    "aopc",
]
#: The k of the recall@k columns (stats.metrics.recall_at_k).
RECALL_KS = (1, 3)


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
    comparisons : DataFrame
        Paired tests of each method against the run's reference, one Holm family per metric (``comparisons.csv``, see :func:`laya_eval.stats.compare_methods`).
    warnings : list of str
        A model at chance or predicting one class, effects too tied or negligible to rank, or a collapsed head.
    donors : DataFrame, optional
        For an ablation that draws donors (``resample``): one row per (sample, draw) with the donor's global
        index (``donors.csv``).
    noise_draws : dict of str to ndarray, optional
        With ``save_draws``, for an ablation drawn per sample without donors (``noise``): the drawn states
        (``noise_draws.npz``, :func:`laya_eval.engine.saved_draws.noise_draws`).
    model_state : ModelState, optional
        The model's accuracy on the evaluated samples beside the chance levels (:func:`laya_eval.stats.model_state`).
    verdict : str
        ``ok`` or the rules that hold (:func:`laya_eval.stats.verdict`), also the ``verdict`` column of ``summary``.
    """

    layers: pd.DataFrame
    samples: pd.DataFrame
    summary: pd.DataFrame
    manifest: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    comparisons: pd.DataFrame = field(default_factory=pd.DataFrame)
    warnings: list[str] = field(default_factory=list)
    donors: pd.DataFrame | None = None
    noise_draws: dict[str, np.ndarray] | None = None
    model_state: ModelState | None = None
    verdict: str = "ok"


@dataclass
class MethodScore:
    """Per-sample and summary metrics of one method.

    Attributes
    ----------
    spearman : ndarray, (N,)
        NaN where undefined.
    top1_hit : ndarray of bool, (N,)
    summary : dict
        ``n, n_undefined, faithfulness(+_ci_low/_ci_high/_ci_note), deletion_at_1(+ci), top1_hit_rate, aopc,
        deletion_at_2..L`` in the column order of ``summary.csv``.
    """

    spearman: np.ndarray
    top1_hit: np.ndarray
    summary: dict[str, Any]


def sample_faithfulness(scores: np.ndarray, ties: TiedEffects) -> np.ndarray:
    """Per-sample faithfulness, (N,): Spearman rho between a sample's layer scores and its tie-aware effects.

    NaN where rho is undefined (constant scores or effects). The one definition every command that
    reports faithfulness uses.
    """
    return spearman_per_sample(scores, ties.effects)


def mean_faithfulness(scores: np.ndarray, effects: np.ndarray, *, ties: TiedEffects | None = None) -> float:
    """Faithfulness as the summary table reports it: the mean of the defined per-sample rho (NaN if none).

    ``ties`` as :func:`score_method` (computed from ``effects`` with the default tolerance when not given).
    """
    ties = ties if ties is not None else tie_effects(effects)
    return bootstrap_mean(sample_faithfulness(scores, ties), n_resamples=0).mean


def score_method(
    scores: np.ndarray,
    effects: np.ndarray,
    deletion: np.ndarray,
    *,
    bootstrap: int,
    seed: Sequence[int],
    ties: TiedEffects | None = None,
) -> MethodScore:
    """Faithfulness, Deletion@k, top-1 hits and AOPC of one method.

    Parameters
    ----------
    scores, effects : ndarray, (N, L)
        Attributions and leave-one-layer-out effects.
    deletion : ndarray, (N, L)
        Effect of removing the k top-ranked layers, k = 1..L.
    bootstrap : int
        Resamples for the 95% intervals (below ``MIN_BOOTSTRAP_RESAMPLES``, or with fewer than ``MIN_INTERVAL_SAMPLES``
        defined samples, the interval columns are NaN and ``*_ci_note`` says why).
    seed : sequence of int
        Seeds the bootstrap; faithfulness and Deletion@1 draw from ``[*seed, 0]`` and ``[*seed, 1]``.
    ties : TiedEffects, optional
        ``laya_eval.stats.tie_effects(effects)`` (computed here when not given): effects closer than its
        tolerance are ranked as tied, for Spearman rho and the top-1 hit.
    """
    ties = ties if ties is not None else tie_effects(effects)
    ranked = ties.effects
    rho = sample_faithfulness(scores, ties)
    hit = top1_hit(scores, ranked)
    faith = bootstrap_mean(rho, n_resamples=bootstrap, seed=[*seed, 0])
    d1 = bootstrap_mean(deletion[:, 0], n_resamples=bootstrap, seed=[*seed, 1])
    summary = {
        "n": int(effects.shape[0]),
        "n_undefined": faith.n_undefined,
        "n_effect_ties": ties.n_effect_ties,
        "share_negligible_effects": ties.share_negligible_effects,
        "faithfulness": faith.mean,
        "faithfulness_ci_low": faith.low,
        "faithfulness_ci_high": faith.high,
        "faithfulness_ci_note": faith.note,
        "faithfulness_p_value": faithfulness_p_value(rho, ranked, seed=int(seed[0])),
        "deletion_at_1": d1.mean,
        "deletion_at_1_ci_low": d1.low,
        "deletion_at_1_ci_high": d1.high,
        "deletion_at_1_ci_note": d1.note,
        "top1_hit_rate": float(hit.mean()),
        **{f"recall_at_{k}": _mean_or_nan(recall_at_k(scores, ranked, k)) for k in RECALL_KS},
        "aopc": float(deletion.mean()),
    }
    summary.update({f"deletion_at_{j}": float(deletion[:, j - 1].mean()) for j in range(2, deletion.shape[1] + 1)})
    return MethodScore(spearman=rho, top1_hit=hit, summary=summary)


def _mean_or_nan(values: np.ndarray) -> float:
    """The mean of ``values``; NaN when they are undefined (NaN)."""
    return float("nan") if values.size == 0 or np.isnan(values).any() else float(values.mean())


def build_result(
    records: Records,
    plan: Plan,
    ablation: str,
    *,
    world_size: int = 1,
    map_items: Callable[[Callable, Sequence], list] | None = None,
    paired_tests: bool = True,
) -> EvaluationResult:
    """The tables and manifest of one ablation from merged per-sample records (``comparisons`` empty unless
    ``paired_tests``).

    ``map_items(fn, items)`` returns ``[fn(x) for x in items]`` (the default); under torchrun
    :meth:`~laya_eval.engine.distributed.World.map` shares the methods' scores and the paired comparisons over
    the ranks. Each is seeded on its own, so the tables do not depend on how they are shared."""
    map_items = map_items or serial_map
    # Each folder's options are those of a run of its ablation alone: it holds noise draws only if it draws noise.
    saves_draws = plan.options.save_draws and ABLATION_SPECS[ablation].draws_noise
    options = dataclasses.replace(plan.options, ablation=ablation, save_draws=saves_draws)
    model, n_layers = plan.model, plan.model.n_layers
    effects, n = records.effects[ablation], len(records)
    ties = tie_effects(effects, rtol=options.tie_rtol)
    sample = records.sample
    state = model_state(records.label, records.pred, model.info.num_classes)
    largest = typical_largest_effect(effects)
    judged = verdict(state, largest)

    inputs = [(method_scores(records, m.name, ablation), records.deletion[ablation][m.name]) for m in plan.methods]

    def score(k: int) -> MethodScore:
        scores, deletion = inputs[k]
        return score_method(scores, effects, deletion, bootstrap=options.bootstrap, seed=[options.seed, k], ties=ties)

    every_score = map_items(score, range(len(plan.methods)))
    layer_rows, sample_rows, summary_rows = [], [], []
    for k, m in enumerate(plan.methods):
        (scores, deletion), scored = inputs[k], every_score[k]
        layer_rows.append(
            pd.DataFrame(
                {
                    "sample": np.repeat(sample, n_layers),
                    "method": m.name,
                    "layer": np.tile(np.arange(1, n_layers + 1), n),
                    "attribution": scores.reshape(-1),
                    "effect": effects.reshape(-1),
                }
            )
        )
        sample_rows.append(
            pd.DataFrame(
                {
                    "sample": sample,
                    "label": records.label,
                    "pred": records.pred,
                    "confidence": records.confidence,
                    "method": m.name,
                    "spearman": scored.spearman,
                    "deletion_at_1": deletion[:, 0],
                    "top1_hit": scored.top1_hit,
                    "n_tied_effects": ties.n_tied_effects,
                }
            )
        )
        summary_rows.append(
            {
                "checkpoint": plan.checkpoint.get("path") or plan.checkpoint.get("spec") or "<in-memory>",
                "head": model.head.name,
                "dataset": plan.data.name,
                "method": m.name,
                "ablation": ablation,
                "scope": options.scope,
                "verdict": judged,
                **scored.summary,
            }
        )
    samples = pd.concat(sample_rows, ignore_index=True) if sample_rows else pd.DataFrame()
    comparisons = (
        compare_methods(
            samples,
            n_resamples=options.bootstrap,
            seed=options.seed,
            reference=comparison_reference(options.reference, [m.name for m in plan.methods]),
            map_rows=map_items,
        )
        if paired_tests and len(plan.methods) > 1
        else pd.DataFrame(columns=COMPARISON_COLUMNS)
    )
    warnings = _warnings(records, plan, ties, ablation, state, largest)
    return EvaluationResult(
        layers=pd.concat(layer_rows, ignore_index=True) if layer_rows else pd.DataFrame(),
        samples=samples,
        summary=pd.DataFrame(summary_rows),
        manifest={
            **_manifest(records, plan, options, world_size),
            "warnings": warnings,
            "ties": {"rtol": ties.rtol, "rule": TIE_RULE},
            "model_state": state.record(),
            "verdict": {
                "value": judged,
                "typical_largest_effect": largest,
                "effect_floor": EFFECT_FLOOR,
                "rule": VERDICT_RULE,
            },
        },
        notes=list(plan.notes),
        comparisons=comparisons,
        warnings=warnings,
        donors=_donor_table(records, ablation),
        model_state=state,
        verdict=judged,
    )


def _donor_table(records: Records, ablation: str) -> pd.DataFrame | None:
    donors = records.donors.get(ablation)
    return None if donors is None else donor_table(records.sample, donors)


def donor_table(sample: np.ndarray, donors: np.ndarray) -> pd.DataFrame:
    """``donors.csv``: one row per (sample, draw) with its donor's index, from the samples (N,) and donors (N, K)."""
    n, k = donors.shape
    return pd.DataFrame(
        {
            "sample": np.repeat(sample, k),
            "draw": np.tile(np.arange(k), n),
            "donor": donors.reshape(-1).astype(np.int64),
        }
    )


TIE_RULE = (
    "two effects of a sample closer than rtol x the sample's largest |effect| are tied (single linkage on "
    "the sorted effects; a tied group takes its mean, ranks are average ranks); an effect below that "
    "tolerance is negligible"
)


VERDICT_RULE = (
    "ok, or the rules that hold joined by ';': model-at-chance (accuracy on these samples not above the larger of "
    "1/n_classes and the majority label's share by a one-sided exact binomial test at 0.05), one-class (>= 95% of "
    f"predictions one class), negligible-effects (median over samples of the largest |effect| below {EFFECT_FLOOR:g})"
)


def _warnings(
    records: Records, plan: Plan, ties: TiedEffects, ablation: str, state: ModelState, largest: float
) -> list[str]:
    """Plain-language warnings: a model at chance or predicting one class, effects negligible or too close to
    rank, or a head whose methods all rank alike."""
    out = state.notes()
    if largest < EFFECT_FLOOR:
        out.append(
            f"the effects are negligible in absolute terms: on a typical sample the largest layer effect is "
            f"{largest:.2g} (below {EFFECT_FLOOR:g} of a probability), so the ranking rests on changes too small "
            "to matter."
        )
    n = max(len(records), 1)
    if ties.n_effect_ties / n > 0.5:
        out.append(
            f"{ties.n_effect_ties / n:.0%} of samples have tied effects (within {ties.rtol:g} of their largest "
            "effect): faithfulness there rests on ranks the effects cannot tell apart."
        )
    if ties.share_negligible_effects > 0.5:
        out.append(
            f"{ties.share_negligible_effects:.0%} of the layer effects are negligible (below the tie "
            "tolerance): removing most layers changes nothing measurable."
        )
    real = [m.name for m in plan.methods if not m.spec.baseline]
    if len(real) > 1 and len(records):
        top = np.stack([rank_layers(method_scores(records, m, ablation))[:, 0] for m in real])  # (methods, N)
        agree = (top == top[0]).all(0)
        layer, count = np.unique(top[0][agree], return_counts=True)
        share = count.max() / len(records) if count.size else 0.0
        if share >= 0.99:
            out.append(
                f"every real method ({', '.join(real)}) ranks layer {int(layer[count.argmax()]) + 1} first on "
                f"{share:.0%} of samples: the head has probably collapsed onto that layer, and faithfulness "
                "cannot tell these methods apart."
            )
    return out


def _model_record(model: LayeredModel) -> dict[str, Any]:
    """What the checkpoint says about how the model was trained and how well it did (history left out)."""
    training = {k: v for k, v in model.info.training.items() if k != "history"}
    return {"training": training, "metrics": dict(model.info.metrics)}


def _diagnostics(records: Records, plan: Plan, ablation: str) -> dict[str, Any]:
    out = {}
    for m in plan.methods:
        values = method_diagnostic(records, m.name, ablation)
        if values is not None and values.size:
            delta = np.abs(values)
            out[m.name] = {"mean_abs": float(delta.mean()), "max_abs": float(delta.max()), "note": m.diagnostic_note}
    return out


def _manifest(records: Records, plan: Plan, options: EvalOptions, world_size: int) -> dict[str, Any]:
    from laya_eval.output.origin import provenance

    model = plan.model
    return {
        **provenance(options.device),
        "checkpoint": plan.checkpoint,
        "model": _model_record(model),
        "head": model.head.name,
        "dataset": plan.data.name,
        "split": options.split,
        "split_rule": plan.data.preprocessing.get("split_rule"),
        "n_samples": len(records),
        "n_layers": model.n_layers,
        "layer_names": model.layer_names,
        "class_names": list(plan.data.class_names or model.info.class_names or ()),
        "seed": options.seed,
        "options": asdict(options),
        "result_key": plan.result_key(),
        "world_size": world_size,
        "methods": {m.name: m.description for m in plan.methods},
        # a method that estimates an ablation's effect (attribution patching) estimates this folder's ablation
        "estimates": {m.name: options.ablation for m in plan.methods if "removal" in m.needs},
        "skipped": list(plan.notes),
        "effect": (
            "p_t(x) - p_t(x with the layer removed), t = the target class (see 'target'; by default the "
            "class predicted on the intact input); "
            f"ablation {options.ablation!r}, scope {options.scope!r}."
        ),
        "metrics": {name: asdict(info) for name, info in METRICS.items()},
        "diagnostics": _diagnostics(records, plan, options.ablation),
        "target": {
            "option": options.target,
            "meaning": "the class whose logit the attributions explain and whose probability the effects "
            "measure: pred = the class predicted on the intact input, label = the true label, "
            "an integer = that class for every input",
        },
        "integrated_gradients": {
            "n_steps": options.n_steps,
            "method": "gausslegendre",
            "baseline": resolved_ig_baseline(options),
            "baseline_state": baseline_description(resolved_ig_baseline(options), options.ablation),
            "internal_batch_size": options.internal_batch_size,
        },
        "plugins": plugin_sources(plan),
        "network_route": _network_route(plan),
        "feature_cache": None
        if plan.features is None
        else {"path": str(plan.features.path), "reused": plan.features.reused},
    }


def _network_route(plan: Plan) -> str | None:
    """How network-scope removals ran: from their first removed block, or from the input (and why)."""
    if plan.options.scope != "network":
        return None
    if plan.starts_at_block:
        return "start at block: each removal reuses the plain pass's states up to its first removed block"
    return f"from the input: {plan.start_refusal}; every removal re-runs the backbone from the input"


def result_files(
    results: Mapping[str, EvaluationResult],
    *,
    operators: Any = None,
    run_id: str | None = None,
    table_format: str = "csv",
) -> dict[str, bytes]:
    """Every file of a run as ``{relative path: bytes}``: one ablation in the folder itself, several in
    one subfolder each (``gate/layers.csv``, ...) and ``operators.csv`` beside them
    (:func:`laya_eval.engine.operators.operator_sensitivity`). Each manifest records the run id and the sha256 of
    its folder's files, so a folder mixing two runs is recognised. ``table_format="parquet"`` writes the two
    large tables, layers and samples, as Parquet (same columns and dtypes). An ablation that draws donors adds
    ``donors.csv``. ``operators``: the operator sensitivity of several ablations when already computed (else it is
    computed here)."""
    big = "." + table_format
    base = (f"layers{big}", f"samples{big}", "summary.csv", "comparisons.csv")
    tables, folder_files = {}, {}
    for name, result in results.items():
        prefix = f"{name}/" if len(results) > 1 else ""
        frames = [result.layers, result.samples, result.summary, result.comparisons]
        names = list(base)
        if result.donors is not None:
            names.append("donors.csv")
            frames.append(result.donors)
        for f, df in zip(names, frames):
            tables[prefix + f] = table_bytes(df, table_format if f.endswith(big) else "csv")
        if result.noise_draws is not None:
            names.append("noise_draws.npz")
            tables[prefix + "noise_draws.npz"] = npz_bytes(result.noise_draws)
        folder_files[name] = names
    run_level = {}
    if len(results) > 1:
        if operators is None:
            from laya_eval.engine.operators import operator_sensitivity

            seed = next(iter(results.values())).manifest.get("seed", 0)
            operators = operator_sensitivity({a: r.summary for a, r in results.items()}, seed=seed)
        sensitivity = operators
        run_level["operators.csv"] = table_bytes(sensitivity.table, "csv")
        tables.update(run_level)
    # The run id is a digest of everything the run wrote: the same run gives the same id (same bytes out).
    run_id = run_id or sha256_bytes("".join(f"{k}:{sha256_bytes(v)}" for k, v in tables.items()).encode())[:16]
    files: dict[str, bytes] = {}
    for name, result in results.items():
        prefix = f"{name}/" if len(results) > 1 else ""
        part = {f: tables[prefix + f] for f in folder_files[name]}
        manifest = {**result.manifest, "run_id": run_id, "files": {f: sha256_bytes(b) for f, b in part.items()}}
        if run_level:  # beside the subfolders: "../operators.csv"
            manifest["run_files"] = {f"../{f}": sha256_bytes(b) for f, b in run_level.items()}
        part["manifest.json"] = (json.dumps(manifest, indent=2, sort_keys=True, default=str) + "\n").encode()
        files.update({prefix + f: b for f, b in part.items()})
    files.update(run_level)
    return files
