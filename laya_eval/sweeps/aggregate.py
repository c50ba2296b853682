"""The sweep's tables across cells and seeds, read from the cell folders.

- ``runs.csv``: one row per cell (test accuracy, macro-F1, epochs, checkpoint);
- ``sweep.csv``: one row per cell × ablation × method (faithfulness, Deletion@1 with their intervals, top-1
  hit rate, AOPC, and the cell's test accuracy);
- ``sweep_summary.csv``: mean and sample standard deviation (ddof = 1) across seeds of ``sweep.csv``, per
  dataset × backbone × head × ablation × method; a single seed leaves the std empty;
- ``layer_weights.csv``: the mean layer weight (LAYA α, ScalarMix softmax(w)) per cell and layer.

CSV with 8 significant digits, as every result table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from laya_eval.output.files import atomic_write_text
from laya_eval.output.tables import table_bytes
from laya_eval.reporting.runs import load_run

__all__ = ["RUN_COLUMNS", "SWEEP_COLUMNS", "aggregate", "write_aggregate"]

CELL_KEYS = ["cell", "dataset", "backbone", "head", "seed"]
RUN_COLUMNS = [
    *CELL_KEYS,
    "accuracy",
    "macro_f1",
    "n_test",
    "epochs_run",
    "best_epoch",
    "best_val_accuracy",
    "checkpoint",
]
_SUMMARY = [
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
SWEEP_COLUMNS = [*CELL_KEYS, "eval_dataset", *_SUMMARY, "accuracy", "macro_f1"]
WEIGHT_COLUMNS = [*CELL_KEYS, "layer", "layer_name", "mean_weight"]
_GROUP = ["dataset", "backbone", "head", "ablation", "scope", "method"]
_VALUES = ["faithfulness", "deletion_at_1", "top1_hit_rate", "aopc", "accuracy", "macro_f1"]


def aggregate(records: Sequence[dict[str, Any]], folders: Sequence[Path]) -> dict[str, pd.DataFrame]:
    """The four tables from the finished cells' records (``cell.json``) and folders, in grid order."""
    runs, rows, weights = [], [], []
    for record, folder in zip(records, folders):
        cfg = record["config"]
        keys = {
            "cell": record["cell"],
            "dataset": cfg["dataset"],
            "backbone": cfg["backbone"]["label"],
            "head": cfg["head"],
            "seed": cfg["seed"],
        }
        m = record["metrics"]
        runs.append({**keys, **m, "checkpoint": record["checkpoint"]})
        for ablation in record["ablations"]:
            ev = folder / "eval" / (ablation if len(record["ablations"]) > 1 else "")
            summary = load_run(ev).summary
            for row in summary.to_dict("records"):
                rows.append(
                    {
                        **keys,
                        "eval_dataset": row["dataset"],
                        **{k: row[k] for k in _SUMMARY},
                        "accuracy": m["accuracy"],
                        "macro_f1": m["macro_f1"],
                    }
                )
        weights += [{**keys, **w} for w in record["layer_weights"] or []]
    sweep = pd.DataFrame(rows, columns=SWEEP_COLUMNS)
    spec: dict[str, Any] = {"n_seeds": ("seed", "nunique")}
    for v in _VALUES:
        spec[f"{v}_mean"], spec[f"{v}_std"] = (v, "mean"), (v, "std")
    summary = sweep.groupby(_GROUP, sort=False).agg(**spec).reset_index() if len(sweep) else pd.DataFrame()
    return {
        "runs": pd.DataFrame(runs, columns=RUN_COLUMNS),
        "sweep": sweep,
        "sweep_summary": summary,
        "layer_weights": pd.DataFrame(weights, columns=WEIGHT_COLUMNS),
    }


def write_aggregate(tables: dict[str, pd.DataFrame], out_dir: Path) -> list[Path]:
    """Each table as ``{name}.csv`` in ``out_dir``, written atomically."""
    return [atomic_write_text(out_dir / f"{name}.csv", table_bytes(df, "csv").decode()) for name, df in tables.items()]
