"""The report's tables, each computed from the runs' per-run CSVs."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from laya_eval.catalog import in_registry_order
from laya_eval.reporting.runs import Run
from laya_eval.reporting.seeds import ACROSS_KEYS, seed_tables

__all__ = ["RHO_ONE_TOL", "ReportTables", "agreement_matrix", "report_tables"]

RHO_ONE_TOL = 1e-9


@dataclass
class ReportTables:
    """Every table of a report (each is also written as ``<name>.csv``)."""

    runs: pd.DataFrame
    faithfulness: pd.DataFrame
    across_runs: pd.DataFrame
    deletion_curves: pd.DataFrame
    spearman_distribution: pd.DataFrame
    agreement: pd.DataFrame
    comparisons: pd.DataFrame
    across_seeds: pd.DataFrame
    seed_ranks: pd.DataFrame
    seed_comparisons: pd.DataFrame
    significance: pd.DataFrame


def _runs_table(runs: Sequence[Run]) -> pd.DataFrame:
    rows = []
    for r in runs:
        ckpt = r.manifest.get("checkpoint") or {}
        state = r.manifest.get("model_state") if isinstance(r.manifest.get("model_state"), dict) else {}
        verdict = r.manifest.get("verdict") if isinstance(r.manifest.get("verdict"), dict) else {}
        rows.append(
            {
                **r.meta,
                "run": r.label,
                "checkpoint": ckpt.get("path") or r.summary["checkpoint"].iloc[0],
                "sha256": ckpt.get("sha256") or "",
                "seed": r.manifest.get("seed"),
                # folders written before the verdict: the model's state is not recorded, never guessed
                "accuracy": state.get("accuracy", float("nan")),
                "chance": state.get("chance", float("nan")),
                "verdict": verdict.get("value") or "not recorded",
                "folder": "" if r.folder is None else str(r.folder),
            }
        )
    cols = [
        "run",
        "checkpoint",
        "head",
        "dataset",
        "split",
        "n",
        "ablation",
        "scope",
        "seed",
        "sha256",
        "accuracy",
        "chance",
        "verdict",
        "folder",
    ]
    return pd.DataFrame(rows)[cols]


def _faithfulness_table(runs: Sequence[Run]) -> pd.DataFrame:
    cols = [
        "head",
        "dataset",
        "ablation",
        "scope",
        "method",
        "n",
        "n_undefined",
        "faithfulness",
        "faithfulness_ci_low",
        "faithfulness_ci_high",
        "faithfulness_ci_note",
        "deletion_at_1",
        "deletion_at_1_ci_low",
        "deletion_at_1_ci_high",
        "deletion_at_1_ci_note",
        "top1_hit_rate",
        "aopc",
    ]
    parts = []
    for r in runs:
        # Folders written before interval notes have no *_ci_note columns: their cells read "no interval recorded".
        part = r.summary.set_index("method", drop=False).loc[r.methods].reindex(columns=cols).reset_index(drop=True)
        parts.append(part.assign(run=r.label))
    return pd.concat(parts, ignore_index=True)[["run", *cols]]


def _interval(values: np.ndarray, low: float, high: float) -> tuple[float, float, str]:
    """95% interval of a group: the run's own bootstrap interval for one run, else Student's t over runs."""
    from scipy.stats import t as student_t

    if values.size == 1:
        return float(low), float(high), "bootstrap"
    half = float(student_t.ppf(0.975, values.size - 1) * values.std(ddof=1) / np.sqrt(values.size))
    return float(values.mean() - half), float(values.mean() + half), "t over runs"


def _across_runs_table(faith: pd.DataFrame) -> pd.DataFrame:
    """One row per (head, dataset, ablation, scope, method): mean, std (ddof=1) and a 95% interval over runs.

    A group of one run keeps that run's value and its bootstrap interval (std NaN); a group of
    several runs (seeds) gets Student's t interval of the mean over runs (``interval`` says which).
    """
    rows = []
    for keys, group in faith.groupby(ACROSS_KEYS, sort=False):
        row = dict(zip(ACROSS_KEYS, keys), n_runs=len(group))
        for metric in ("faithfulness", "deletion_at_1"):
            values = group[metric].to_numpy(dtype=np.float64)
            values = values[~np.isnan(values)]
            if values.size == 0:
                row.update(
                    {
                        f"{metric}_mean": np.nan,
                        f"{metric}_std": np.nan,
                        f"{metric}_ci_low": np.nan,
                        f"{metric}_ci_high": np.nan,
                        f"{metric}_ci_note": "undefined estimate",
                    }
                )
                continue
            low, high, kind = _interval(values, group[f"{metric}_ci_low"].iloc[0], group[f"{metric}_ci_high"].iloc[0])
            note = group[f"{metric}_ci_note"].iloc[0] if values.size == 1 else ""
            row.update(
                {
                    f"{metric}_mean": float(values.mean()),
                    f"{metric}_std": float(values.std(ddof=1)) if values.size > 1 else np.nan,
                    f"{metric}_ci_low": low,
                    f"{metric}_ci_high": high,
                    f"{metric}_ci_note": note if isinstance(note, str) else "",
                }
            )
            row["interval"] = kind
        rows.append(row)
    cols = [
        *ACROSS_KEYS,
        "n_runs",
        "interval",
        *[
            f"{m}_{s}"
            for m in ("faithfulness", "deletion_at_1")
            for s in ("mean", "std", "ci_low", "ci_high", "ci_note")
        ],
    ]
    return pd.DataFrame(rows).reindex(columns=cols)


def _comparisons_table(runs: Sequence[Run]) -> pd.DataFrame:
    """The runs' paired tests (comparisons.csv), a ``run`` column first; no rows when no run has them."""
    from laya_eval.reporting.runs import COMPARISON_COLUMNS

    columns = ["run", *COMPARISON_COLUMNS, *FAMILY_COLUMNS]
    parts = [with_family(r.comparisons).assign(run=r.label) for r in runs if r.comparisons is not None]
    if not parts:
        return pd.DataFrame(columns=columns)
    return pd.concat(parts, ignore_index=True)[columns]


#: Columns of comparisons.csv that name each test's Holm family and decision (docs/concepts/statistics.md).
FAMILY_COLUMNS = ["reference", "family_size", "significant", "test_note"]


def with_family(comparisons: pd.DataFrame) -> pd.DataFrame:
    """``comparisons`` with :data:`FAMILY_COLUMNS`; a table written before they existed was Holm-adjusted over all
    of its rows (both metrics, every pair): ``reference`` ``all``, ``family_size`` its number of defined p-values."""
    from laya_eval.stats import ALPHA, interval_test_note

    if all(c in comparisons.columns for c in FAMILY_COLUMNS):
        return comparisons
    out = comparisons.copy()
    p_holm = out["p_holm"].to_numpy(dtype=float)
    size = int(out["p_value"].notna().sum())
    out["reference"], out["family_size"] = "all", size
    out["significant"] = pd.array([None if pd.isna(p) else bool(p < ALPHA) for p in p_holm], dtype="boolean")
    out["test_note"] = [
        interval_test_note(float(lo), float(hi), float(p), size)
        for lo, hi, p in zip(out["ci_low"], out["ci_high"], p_holm)
    ]
    return out


def _deletion_table(runs: Sequence[Run]) -> pd.DataFrame:
    parts = []
    for r in runs:
        ks = sorted(int(c.rsplit("_", 1)[1]) for c in r.summary.columns if re.fullmatch(r"deletion_at_\d+", c))
        s = r.summary.set_index("method").loc[r.methods]
        for m in r.methods:
            parts.append(
                pd.DataFrame(
                    {
                        "run": r.label,
                        "method": m,
                        "k": ks,
                        "deletion": [float(s.loc[m, f"deletion_at_{k}"]) for k in ks],
                    }
                )
            )
    return pd.concat(parts, ignore_index=True)


def _spearman_table(runs: Sequence[Run]) -> pd.DataFrame:
    rows = []
    for r in runs:
        for m in r.methods:
            rho = r.samples.loc[r.samples["method"] == m, "spearman"].to_numpy(dtype=np.float64)
            defined = rho[~np.isnan(rho)]
            one = defined >= 1 - RHO_ONE_TOL
            rows.append(
                {
                    "run": r.label,
                    "method": m,
                    "n": rho.size,
                    "n_rho_one": int(one.sum()),
                    "n_rho_high": int(((defined >= 0.5) & ~one).sum()),
                    "n_rho_low": int(((defined >= 0) & (defined < 0.5)).sum()),
                    "n_rho_negative": int((defined < 0).sum()),
                    "n_undefined": int(rho.size - defined.size),
                    "share_rho_one": float(one.sum() / rho.size) if rho.size else float("nan"),
                    "median_rho": float(np.median(defined)) if defined.size else float("nan"),
                }
            )
    return pd.DataFrame(rows)


def agreement_matrix(layers: pd.DataFrame, methods: Sequence[str] | None = None) -> pd.DataFrame:
    """Mean over samples of Spearman ρ between two methods' layer scores, for every pair.

    Parameters
    ----------
    layers : DataFrame
        ``sample, method, layer, attribution`` (layers.csv).
    methods : sequence of str, optional
        Row / column order; all methods present by default.

    Returns
    -------
    DataFrame
        Long form: ``method_a, method_b, mean_spearman, n_defined, n_undefined``. A sample
        where either vector is constant across layers is undefined and excluded; the mean
        is NaN when no sample is defined.
    """
    from laya_eval.stats.metrics import spearman_per_sample

    methods = list(methods) if methods is not None else in_registry_order(layers["method"])
    wide = layers.pivot_table(index="sample", columns=["method", "layer"], values="attribution", aggfunc="first")
    scores = {m: wide[m].sort_index(axis=1).to_numpy(dtype=np.float64) for m in methods}
    rows = []
    for a in methods:
        for b in methods:
            rho = spearman_per_sample(scores[a], scores[b])
            ok = ~np.isnan(rho)
            mean = float(rho[ok].mean()) if ok.any() else float("nan")
            rows.append(
                {
                    "method_a": a,
                    "method_b": b,
                    "mean_spearman": mean,
                    "n_defined": int(ok.sum()),
                    "n_undefined": int((~ok).sum()),
                }
            )
    return pd.DataFrame(rows)


def report_tables(runs: Sequence[Run]) -> ReportTables:
    """All tables of a report, computed from the runs' per-run tables.

    Runs that share head, dataset, ablation and scope (seeds of one head) also get the across-seeds
    tables (:func:`laya_eval.reporting.seeds.seed_tables`); every run with paired tests and every seed group
    gets its significance matrix (:func:`laya_eval.reporting.significance.significance_table`).
    """
    from laya_eval.reporting.significance import significance_table

    faith = _faithfulness_table(runs)
    agreement = pd.concat([agreement_matrix(r.layers, r.methods).assign(run=r.label) for r in runs], ignore_index=True)
    agreement = agreement[["run", "method_a", "method_b", "mean_spearman", "n_defined", "n_undefined"]]
    comparisons = _comparisons_table(runs)
    across_seeds, ranks, seed_pairs = seed_tables(faith)
    return ReportTables(
        runs=_runs_table(runs),
        faithfulness=faith,
        across_runs=_across_runs_table(faith),
        deletion_curves=_deletion_table(runs),
        spearman_distribution=_spearman_table(runs),
        agreement=agreement,
        comparisons=comparisons,
        across_seeds=across_seeds,
        seed_ranks=ranks,
        seed_comparisons=seed_pairs,
        significance=significance_table(comparisons, seed_pairs),
    )
