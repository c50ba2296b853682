"""Outputs of ``reproduce.py``: the per-run CSVs and their aggregates, comparison.md, and the machine record."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

import pandas as pd
import torch

from reproduce_tables import (
    accuracy_summary,
    claims,
    faithfulness_summary,
    late_layer_shares,
    layer_weight_summary,
    markdown_report,
)

__all__ = ["FAITH_COLUMNS", "RUN_COLUMNS", "WEIGHT_COLUMNS", "machine", "write_outputs"]

RUN_COLUMNS = [
    "setting",
    "dataset",
    "backbone",
    "head",
    "seed",
    "accuracy",
    "macro_f1",
    "n_test",
    "epochs_run",
    "best_epoch",
    "best_val_accuracy",
    "checkpoint",
]
FAITH_COLUMNS = [
    "setting",
    "dataset",
    "backbone",
    "head",
    "seed",
    "ablation",
    "scope",
    "method",
    "n",
    "n_undefined",
    "faithfulness",
    "faithfulness_ci_low",
    "faithfulness_ci_high",
    "deletion_at_1",
    "deletion_at_1_ci_low",
    "deletion_at_1_ci_high",
    "top1_hit_rate",
    "aopc",
]
WEIGHT_COLUMNS = ["setting", "dataset", "head", "seed", "layer", "layer_name", "mean_weight"]
TIMING_COLUMNS = ["setting", "head", "seed", "train_s", "eval_s"]


def write_outputs(out_dir: Path, tables: dict[str, pd.DataFrame], info: dict, preamble: str) -> None:
    """Per-run CSVs, their aggregates, claims.csv, comparison.md and run_info.json, each written atomically.

    ``tables``: ``runs``, ``faith``, ``weights`` and ``timings`` rows (columns as ``RUN_COLUMNS``, ...).
    """
    from laya_eval.output.files import atomic_write_text

    runs, faith, weights = tables["runs"], tables["faith"], tables["weights"]
    files = {
        "runs.csv": runs,
        "faithfulness.csv": faith,
        "layer_weights.csv": weights,
        "timings.csv": tables["timings"].reindex(columns=TIMING_COLUMNS),
    }
    if not runs.empty:
        files |= {
            "accuracy_summary.csv": accuracy_summary(runs),
            "faithfulness_summary.csv": faithfulness_summary(faith),
            "layer_weight_summary.csv": layer_weight_summary(weights),
            "late_layers.csv": late_layer_shares(weights),
            "claims.csv": claims(runs, faith, weights),
        }
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, table in files.items():
        atomic_write_text(out_dir / name, table.to_csv(index=False, float_format="%.8g", lineterminator="\n"))
    if not runs.empty:
        atomic_write_text(out_dir / "comparison.md", markdown_report(runs, faith, weights, preamble=preamble))
    atomic_write_text(out_dir / "run_info.json", json.dumps(info, indent=2, sort_keys=True, default=str) + "\n")


def _proc_field(path: str, key: str, default: str) -> str:
    file = Path(path)
    if not file.exists():
        return default
    return next(
        (line.split(":", 1)[1].strip() for line in file.read_text().splitlines() if line.startswith(key)), default
    )


def machine() -> dict:
    """nproc, CPU model, RAM, versions and the load average (the machine may be shared)."""
    mem_kib = int(_proc_field("/proc/meminfo", "MemTotal", "0 kB").split()[0])
    return {
        "nproc": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu_model": _proc_field("/proc/cpuinfo", "model name", platform.processor()),
        "ram_gib": round(mem_kib / 2**20, 1),
        "torch_threads": torch.get_num_threads(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "loadavg": os.getloadavg() if hasattr(os, "getloadavg") else None,
    }
