"""The report's tables, each computed from the runs' per-run CSVs."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from laya_eval.report.runs import Run, _ordered

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


def _runs_table(runs: Sequence[Run]) -> pd.DataFrame:
    rows = []
    for r in runs:
        ckpt = r.manifest.get("checkpoint") or {}
        rows.append({**r.meta, "run": r.label, "checkpoint": ckpt.get("path") or r.summary["checkpoint"].iloc[0],
                     "sha256": ckpt.get("sha256") or "", "seed": r.manifest.get("seed"),
                     "folder": "" if r.folder is None else str(r.folder)})
    cols = ["run", "checkpoint", "head", "dataset", "split", "n", "ablation", "scope", "seed", "sha256", "folder"]
    return pd.DataFrame(rows)[cols]


def _faithfulness_table(runs: Sequence[Run]) -> pd.DataFrame:
    cols = ["head", "dataset", "ablation", "scope", "method", "n", "n_undefined", "faithfulness",
            "faithfulness_ci_low", "faithfulness_ci_high", "deletion_at_1", "deletion_at_1_ci_low",
            "deletion_at_1_ci_high", "top1_hit_rate", "aopc"]
    parts = []
    for r in runs:
        part = r.summary.set_index("method", drop=False).loc[r.methods, cols].reset_index(drop=True)
        parts.append(part.assign(run=r.label))
    return pd.concat(parts, ignore_index=True)[["run", *cols]]


def _across_runs_table(faith: pd.DataFrame) -> pd.DataFrame:
    """Mean ± std (ddof=1) across runs that share head, dataset, ablation and scope; groups of 2+ runs only."""
    keys = ["head", "dataset", "ablation", "scope", "method"]
    grouped = faith.groupby(keys, sort=False)
    out = grouped.agg(n_runs=("run", "size"), faithfulness_mean=("faithfulness", "mean"),
                      faithfulness_std=("faithfulness", "std"), deletion_at_1_mean=("deletion_at_1", "mean"),
                      deletion_at_1_std=("deletion_at_1", "std")).reset_index()
    return out[out["n_runs"] >= 2].reset_index(drop=True)


def _deletion_table(runs: Sequence[Run]) -> pd.DataFrame:
    parts = []
    for r in runs:
        ks = sorted(int(c.rsplit("_", 1)[1]) for c in r.summary.columns if re.fullmatch(r"deletion_at_\d+", c))
        s = r.summary.set_index("method").loc[r.methods]
        for m in r.methods:
            parts.append(pd.DataFrame({"run": r.label, "method": m, "k": ks,
                                       "deletion": [float(s.loc[m, f"deletion_at_{k}"]) for k in ks]}))
    return pd.concat(parts, ignore_index=True)


def _spearman_table(runs: Sequence[Run]) -> pd.DataFrame:
    rows = []
    for r in runs:
        for m in r.methods:
            rho = r.samples.loc[r.samples["method"] == m, "spearman"].to_numpy(dtype=np.float64)
            defined = rho[~np.isnan(rho)]
            one = defined >= 1 - RHO_ONE_TOL
            rows.append({"run": r.label, "method": m, "n": rho.size, "n_rho_one": int(one.sum()),
                         "n_rho_high": int(((defined >= 0.5) & ~one).sum()),
                         "n_rho_low": int(((defined >= 0) & (defined < 0.5)).sum()),
                         "n_rho_negative": int((defined < 0).sum()), "n_undefined": int(rho.size - defined.size),
                         "share_rho_one": float(one.sum() / rho.size) if rho.size else float("nan"),
                         "median_rho": float(np.median(defined)) if defined.size else float("nan")})
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
    from laya_eval.metrics import spearman_per_sample

    methods = list(methods) if methods is not None else _ordered(layers["method"])
    wide = layers.pivot_table(index="sample", columns=["method", "layer"], values="attribution", aggfunc="first")
    scores = {m: wide[m].sort_index(axis=1).to_numpy(dtype=np.float64) for m in methods}
    rows = []
    for a in methods:
        for b in methods:
            rho = spearman_per_sample(scores[a], scores[b])
            ok = ~np.isnan(rho)
            mean = float(rho[ok].mean()) if ok.any() else float("nan")
            rows.append({"method_a": a, "method_b": b, "mean_spearman": mean, "n_defined": int(ok.sum()),
                         "n_undefined": int((~ok).sum())})
    return pd.DataFrame(rows)


def report_tables(runs: Sequence[Run]) -> ReportTables:
    """All tables of a report, computed from the runs' per-run tables."""
    faith = _faithfulness_table(runs)
    agreement = pd.concat([agreement_matrix(r.layers, r.methods).assign(run=r.label) for r in runs], ignore_index=True)
    agreement = agreement[["run", "method_a", "method_b", "mean_spearman", "n_defined", "n_undefined"]]
    return ReportTables(runs=_runs_table(runs), faithfulness=faith, across_runs=_across_runs_table(faith),
                        deletion_curves=_deletion_table(runs), spearman_distribution=_spearman_table(runs),
                        agreement=agreement)

