"""Outputs of ``reproduce.py``: per-run rows, their CSVs and aggregates, and the machine record."""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

import pandas as pd
import torch

from reproduce_tables import (
    accuracy_summary, claims, faithfulness_summary, late_layer_shares, layer_weight_summary, markdown_report,
)

__all__ = ["FAITH_COLUMNS", "RUN_COLUMNS", "WEIGHT_COLUMNS", "Recorder", "machine"]

RUN_COLUMNS = ["setting", "dataset", "backbone", "head", "seed", "accuracy", "macro_f1", "n_test", "epochs_run",
               "best_epoch", "best_val_accuracy", "checkpoint"]
FAITH_COLUMNS = ["setting", "dataset", "backbone", "head", "seed", "ablation", "scope", "method", "n", "n_undefined",
                 "faithfulness", "faithfulness_ci_low", "faithfulness_ci_high", "deletion_at_1",
                 "deletion_at_1_ci_low", "deletion_at_1_ci_high", "top1_hit_rate", "aopc"]
WEIGHT_COLUMNS = ["setting", "dataset", "head", "seed", "layer", "layer_name", "mean_weight"]
TIMING_COLUMNS = ["setting", "head", "seed", "train_s", "eval_s"]
# what one invocation records (run_info.json lists one entry per invocation; --resume adds one)
SESSION_KEYS = ("command", "machine_start", "machine_end", "settings", "seeds", "wall_s", "elapsed_s", "note")


class Recorder:
    """Per-run rows and the run record; :meth:`write` rewrites every file atomically.

    Parameters
    ----------
    out_dir : Path
    preamble : str
        Markdown placed above the tables of ``comparison.md``.
    session : dict
        This invocation's record (command, machine, wall times), kept in ``run_info.json``.
    """

    def __init__(self, out_dir: Path, preamble: str, session: dict) -> None:
        self.out_dir, self.preamble, self.session = out_dir, preamble, session
        self.runs, self.faith, self.weights, self.timings = [], [], [], []
        self.info: dict = {"verification": [], "notes": [], "sessions": [session]}
        self._start = time.perf_counter()

    def load(self) -> None:
        """Take over the rows and record of an earlier, interrupted run in ``out_dir`` (``--resume``)."""
        for name, attr in (("runs.csv", "runs"), ("faithfulness.csv", "faith"), ("layer_weights.csv", "weights"),
                           ("timings.csv", "timings")):
            if (self.out_dir / name).is_file():
                setattr(self, attr, pd.read_csv(self.out_dir / name).to_dict("records"))
        path = self.out_dir / "run_info.json"
        if path.is_file():
            earlier = json.loads(path.read_text())
            sessions = earlier.get("sessions") or [{k: earlier[k] for k in SESSION_KEYS if k in earlier}]
            self.info["sessions"] = [*sessions, self.session]
            self.info["verification"] = earlier.get("verification", [])
            self.info["notes"] = earlier.get("notes", [])
            self.info.update({k: v for k, v in earlier.items() if k not in self.info and k not in SESSION_KEYS})

    def done(self, setting: str, head: str, seed: int) -> bool:
        """Whether (setting, head, seed) is already recorded."""
        return any(r["setting"] == setting and r["head"] == head and int(r["seed"]) == seed for r in self.runs)

    def tables(self) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
        """The per-run tables: runs, faithfulness, layer weights."""
        runs = pd.DataFrame(self.runs, columns=RUN_COLUMNS)
        faith = pd.DataFrame(self.faith, columns=FAITH_COLUMNS)
        weights = pd.DataFrame(self.weights, columns=WEIGHT_COLUMNS)
        return runs, faith, weights

    def write(self) -> None:
        """Per-run CSVs, their aggregates, claims.csv, comparison.md and run_info.json."""
        self.session["elapsed_s"] = round(time.perf_counter() - self._start, 1)
        runs, faith, weights = self.tables()
        files = {"runs.csv": runs, "faithfulness.csv": faith, "layer_weights.csv": weights,
                 "timings.csv": pd.DataFrame(self.timings, columns=TIMING_COLUMNS)}
        if not runs.empty:
            files |= {"accuracy_summary.csv": accuracy_summary(runs),
                      "faithfulness_summary.csv": faithfulness_summary(faith),
                      "layer_weight_summary.csv": layer_weight_summary(weights),
                      "late_layers.csv": late_layer_shares(weights), "claims.csv": claims(runs, faith, weights)}
        self.out_dir.mkdir(parents=True, exist_ok=True)
        for name, table in files.items():
            _write_text(self.out_dir / name, table.to_csv(index=False, float_format="%.8g", lineterminator="\n"))
        if not runs.empty:
            _write_text(self.out_dir / "comparison.md", markdown_report(runs, faith, weights, preamble=self.preamble))
        _write_text(self.out_dir / "run_info.json", json.dumps(self.info, indent=2, sort_keys=True, default=str) + "\n")


def _write_text(path: Path, text: str) -> None:
    """Write under a temporary name, then rename: an interrupted run never leaves a half file."""
    from laya_eval.output.files import atomic_write_text

    atomic_write_text(path, text)


def _proc_field(path: str, key: str, default: str) -> str:
    file = Path(path)
    if not file.exists():
        return default
    return next((line.split(":", 1)[1].strip() for line in file.read_text().splitlines() if line.startswith(key)),
                default)


def machine() -> dict:
    """nproc, CPU model, RAM, versions and the load average (the machine may be shared)."""
    mem_kib = int(_proc_field("/proc/meminfo", "MemTotal", "0 kB").split()[0])
    return {"nproc": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
            "cpu_model": _proc_field("/proc/cpuinfo", "model name", platform.processor()),
            "ram_gib": round(mem_kib / 2**20, 1), "torch_threads": torch.get_num_threads(),
            "platform": platform.platform(), "python": platform.python_version(), "torch": torch.__version__,
            "loadavg": os.getloadavg() if hasattr(os, "getloadavg") else None}
