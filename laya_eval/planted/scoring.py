"""Scoring against planted relevance: how well attributions recover it, and whether metrics see it.

Recovery of the planted relevance ``r`` (L,) by a score vector ``a`` (one per sample):

- **AUROC** (:func:`planted_auroc`): the share of (relevant, irrelevant) layer pairs, relevant meaning
  ``r > 0``, that ``a`` orders correctly, ties counting one half (the Mann-Whitney form of the ROC AUC).
  1 = every relevant layer above every irrelevant one, 0.5 = chance, 0 = inverted.
- **rank correlation** (:func:`planted_rank_correlation`): Spearman's rho between ``a`` and ``r`` (average
  ranks), so the order among relevant layers counts where ``r`` is graded; undefined where ``a`` is constant.

A metric (faithfulness, Deletion@1, Deletion@k with k the number of relevant layers, AOPC) *tells a
planted-faithful attribution from planted-unfaithful ones* when it scores the attribution ranking by ``r``
above both the one ranking by ``-r`` and the one ranking by layer index, on every seed's model, beyond
seed-to-seed variation (:func:`metric_verdicts`). Intervals over seeds are 95% percentile bootstraps of the
per-seed values (:func:`laya_eval.stats.metrics.bootstrap_mean`); with fewer than
:data:`~laya_eval.catalog.MIN_INTERVAL_SAMPLES` defined seeds there is none ("n/a"), and a verdict that needs it
is ``undetermined``, never ``fails``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from laya_eval.catalog import MIN_INTERVAL_SAMPLES
from laya_eval.stats.metrics import bootstrap_mean, spearman_per_sample

__all__ = [
    "EFFECT_ROW",
    "METRIC_COLUMNS",
    "REFERENCES",
    "RECOVERY_COLUMNS",
    "metric_verdicts",
    "over_seeds",
    "planted_auroc",
    "planted_rank_correlation",
    "seed_rows",
]

#: The rows of the reference attributions, in order: the faithful one first.
REFERENCES = ("planted", "inverted", "layer_index")
#: The pseudo-method whose scores are the ablation's own leave-one-layer-out effects.
EFFECT_ROW = "lolo_effect"
RECOVERY_COLUMNS = ("auroc", "rank_correlation")
METRIC_COLUMNS = ("faithfulness", "deletion_at_1", "deletion_at_k", "aopc")


def planted_auroc(scores: np.ndarray, relevance: np.ndarray) -> np.ndarray:
    """Per-sample AUROC of ``scores`` (N, L) for the layers with ``relevance > 0``; (N,), NaN when every layer is
    relevant or none is."""
    scores = np.asarray(scores, dtype=np.float64)
    relevant = np.asarray(relevance) > 0
    if relevant.all() or not relevant.any():
        return np.full(scores.shape[0], np.nan)
    pos, neg = scores[:, relevant][:, :, None], scores[:, ~relevant][:, None, :]
    return ((pos > neg) + 0.5 * (pos == neg)).mean(axis=(1, 2))


def planted_rank_correlation(scores: np.ndarray, relevance: np.ndarray) -> np.ndarray:
    """Per-sample Spearman rho between ``scores`` (N, L) and the planted relevance (L,); NaN where undefined."""
    scores = np.asarray(scores, dtype=np.float64)
    return spearman_per_sample(scores, np.broadcast_to(np.asarray(relevance, dtype=np.float64), scores.shape))


def _mean_defined(values: np.ndarray) -> tuple[float, int]:
    defined = values[~np.isnan(values)]
    return (float(defined.mean()) if defined.size else float("nan")), int(values.size - defined.size)


def _recovery(scores: np.ndarray, relevance: np.ndarray) -> dict[str, float]:
    auroc, n_auroc = _mean_defined(planted_auroc(scores, relevance))
    rho, n_rho = _mean_defined(planted_rank_correlation(scores, relevance))
    return {
        "auroc": auroc,
        "auroc_n_undefined": n_auroc,
        "rank_correlation": rho,
        "rank_correlation_n_undefined": n_rho,
    }


def seed_rows(family: str, seed: int, relevance: np.ndarray, results: Mapping) -> list[dict]:
    """One row per (ablation, method) of one planted model: recovery and metrics.

    Parameters
    ----------
    relevance : ndarray, (L,)
    results : mapping of str to EvaluationResult
        The engine's results per ablation, the reference attributions among the methods.
    """
    relevance = np.asarray(relevance, dtype=np.float64)
    n_layers, k = relevance.size, int((relevance > 0).sum())
    rows = []
    for ablation, result in results.items():
        layers, summary = result.layers, result.summary.set_index("method")
        effects = None
        for method in summary.index:
            part = layers[layers["method"] == method]
            scores = part["attribution"].to_numpy().reshape(-1, n_layers)
            effects = part["effect"].to_numpy().reshape(-1, n_layers)
            s = summary.loc[method]
            rows.append(
                {
                    "family": family,
                    "seed": seed,
                    "ablation": ablation,
                    "method": method,
                    "kind": "reference" if method in REFERENCES else "method",
                    "n": int(s["n"]),
                    **_recovery(scores, relevance),
                    "k": k,
                    "faithfulness": float(s["faithfulness"]),
                    "faithfulness_n_undefined": int(s["n_undefined"]),
                    "deletion_at_1": float(s["deletion_at_1"]),
                    "deletion_at_k": float(s["deletion_at_1" if k == 1 else f"deletion_at_{k}"]),
                    "aopc": float(s["aopc"]),
                }
            )
        if effects is not None:
            rows.append(
                {
                    "family": family,
                    "seed": seed,
                    "ablation": ablation,
                    "method": EFFECT_ROW,
                    "kind": "effect",
                    "n": effects.shape[0],
                    **_recovery(effects, relevance),
                    "k": k,
                }
            )
    return rows


def _interval(values: np.ndarray, *, n_resamples: int, seed: Sequence[int]) -> dict:
    values = np.asarray(values, dtype=np.float64)
    n_defined = int((~np.isnan(values)).sum())
    if n_defined == 0:
        nan = float("nan")
        return {"mean": nan, "ci_low": nan, "ci_high": nan, "n_seeds": 0, "note": "no defined seeds"}
    iv = bootstrap_mean(values, n_resamples=n_resamples, seed=list(seed))
    return {"mean": iv.mean, "ci_low": iv.low, "ci_high": iv.high, "n_seeds": n_defined, "note": iv.note}


def over_seeds(runs: pd.DataFrame, *, n_resamples: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Each (family, ablation, method) over seeds: mean and 95% interval of every recovery and metric column.

    Columns: family, ablation, method, kind, n_seeds, then ``X``, ``X_ci_low``, ``X_ci_high`` for X in
    auroc, rank_correlation, faithfulness, deletion_at_1, deletion_at_k, aopc, and k.
    """
    rows = []
    keys = ["family", "ablation", "method"]
    for g, ((family, ablation, method), part) in enumerate(runs.groupby(keys, sort=False)):
        row = {
            "family": family,
            "ablation": ablation,
            "method": method,
            "kind": part["kind"].iloc[0],
            "n_seeds": int(part["seed"].nunique()),
            "k": int(part["k"].iloc[0]),
        }
        for c, column in enumerate((*RECOVERY_COLUMNS, *METRIC_COLUMNS)):
            values = part[column].to_numpy(dtype=np.float64) if column in part else np.full(len(part), np.nan)
            iv = _interval(values, n_resamples=n_resamples, seed=[seed, g, c])
            row.update({column: iv["mean"], f"{column}_ci_low": iv["ci_low"], f"{column}_ci_high": iv["ci_high"]})
        rows.append(row)
    return pd.DataFrame(rows)


def _missing_reason(other: str, iv: dict, n_seeds: int, n_index_faithful: int) -> str:
    """Why the margin against ``other`` has no interval, in words (for an ``undetermined`` verdict)."""
    if n_seeds == 1:
        return "one seed"
    if iv["n_seeds"] < MIN_INTERVAL_SAMPLES:
        if other == "layer_index" and n_index_faithful:
            # the seeds where the layer-index ranking is itself faithful left the margin
            left = f"{n_index_faithful} of {n_seeds} seeds dropped: layer index faithful"
        elif iv["n_seeds"] < n_seeds:
            left = f"{iv['n_seeds']} of {n_seeds} seeds defined"
        else:
            left = f"{n_seeds} seeds"
        return f"{left}; an interval needs {MIN_INTERVAL_SAMPLES}"
    return f"no interval vs {other}: {iv['note']}"


def _verdict(margins: dict[str, dict], planted_defined: int, n_seeds: int, n_index_faithful: int) -> str:
    if planted_defined == 0:
        return "undefined"
    # A margin undefined on every seed cannot be told from 0: the metric does not separate there.
    beaten = [ref for ref, iv in margins.items() if iv["n_seeds"] == 0 or iv["ci_low"] <= 0]
    if beaten:
        return "fails vs " + " and ".join(beaten)
    missing = [(ref, iv) for ref, iv in margins.items() if iv["ci_low"] != iv["ci_low"]]
    if missing:
        # No interval is no evidence either way: neither "separates" nor "fails".
        reasons = dict.fromkeys(_missing_reason(ref, iv, n_seeds, n_index_faithful) for ref, iv in missing)
        return f"undetermined ({'; '.join(reasons)})"
    return "separates"


def metric_verdicts(runs: pd.DataFrame, *, n_resamples: int = 1000, seed: int = 0) -> pd.DataFrame:
    """For each (family, ablation, metric): the reference attributions' values and whether the metric puts the
    planted ranking above both unfaithful ones.

    ``margin_vs_X`` is, per seed, metric(planted) - metric(X) (all four metrics: higher is better), averaged over
    seeds with its 95% interval. The layer-index margin leaves out the seeds whose planted layers the layer-index
    ranking itself puts first (its AUROC is 1: it is faithful on that model); ``n_seeds_vs_layer_index`` counts the
    others. Verdict: ``separates`` when both intervals lie above 0; ``fails vs X`` when the interval against X
    reaches 0 or below (or the margin is undefined on every seed); ``undetermined (...)`` when no interval fails
    but one is missing, saying why: fewer than ``MIN_INTERVAL_SAMPLES`` seeds for a margin (``one seed``;
    ``3 seeds; an interval needs 5``; ``2 of 5 seeds dropped: layer index faithful; ...``: the seeds where ranking
    by layer index is faithful left that margin; ``4 of 5 seeds defined; ...``: the metric is undefined on the
    others), or the interval's own note (too few resamples, an interval that excludes its estimate); ``undefined``
    when the metric is undefined for the planted ranking on every seed (faithfulness with all effects tied).
    ``share_seeds_separated``: seeds on which the planted ranking scores strictly above both (above the inverted
    one only, where the layer-index ranking is faithful).
    """
    refs = runs[runs["kind"] == "reference"]
    rows = []
    for g, ((family, ablation), part) in enumerate(refs.groupby(["family", "ablation"], sort=False)):
        wide = {m: part[part["method"] == m].set_index("seed") for m in REFERENCES}
        seeds = wide["planted"].index
        for c, metric in enumerate(METRIC_COLUMNS):
            values = {m: wide[m][metric].reindex(seeds).to_numpy(dtype=np.float64) for m in REFERENCES}
            row = {
                "family": family,
                "ablation": ablation,
                "metric": metric,
                "k": int(part["k"].iloc[0]),
                "n_seeds": len(seeds),
            }
            for m in REFERENCES:
                row[m] = _interval(values[m], n_resamples=0, seed=[seed])["mean"]
            # Where ranking by layer index happens to rank every relevant layer first, it is faithful on that
            # model: no metric should separate it from the planted ranking there.
            index_faithful = wide["layer_index"]["auroc"].reindex(seeds).to_numpy(dtype=np.float64) >= 1.0
            row["n_seeds_vs_layer_index"] = int((~index_faithful).sum())
            margins = {}
            for r, other in enumerate(REFERENCES[1:]):
                margin = values["planted"] - values[other]
                if other == "layer_index":
                    margin = np.where(index_faithful, np.nan, margin)
                iv = _interval(margin, n_resamples=n_resamples, seed=[seed, g, c, r])
                margins[other] = iv
                row.update(
                    {
                        f"margin_vs_{other}": iv["mean"],
                        f"margin_vs_{other}_ci_low": iv["ci_low"],
                        f"margin_vs_{other}_ci_high": iv["ci_high"],
                    }
                )
            with np.errstate(invalid="ignore"):
                wins = (values["planted"] > values["inverted"]) & (
                    (values["planted"] > values["layer_index"]) | index_faithful
                )
            row["share_seeds_separated"] = float(wins.mean()) if len(seeds) else float("nan")
            row["verdict"] = _verdict(
                margins, int((~np.isnan(values["planted"])).sum()), len(seeds), int(index_faithful.sum())
            )
            rows.append(row)
    return pd.DataFrame(rows)
