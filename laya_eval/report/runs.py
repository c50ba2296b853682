"""Reading ``laya-eval faithfulness`` result folders (or in-memory results) as :class:`Run` objects."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from laya_eval.errors import ResultsError
from laya_eval.figures import METHOD_LABELS

__all__ = ["Run", "load_run", "load_runs", "run_from_result"]

_REQUIRED = {
    "summary.csv": ["head", "dataset", "method", "ablation", "scope", "n", "n_undefined", "faithfulness",
                    "faithfulness_ci_low", "faithfulness_ci_high", "deletion_at_1", "deletion_at_1_ci_low",
                    "deletion_at_1_ci_high", "top1_hit_rate", "aopc"],
    "samples.csv": ["sample", "label", "pred", "method", "spearman"],
    "layers.csv": ["sample", "method", "layer", "attribution", "effect"],
}


@dataclass(frozen=True)
class Run:
    """One evaluation: its three tables, manifest and display label (the checkpoint's file name)."""

    label: str
    summary: pd.DataFrame
    samples: pd.DataFrame
    layers: pd.DataFrame
    manifest: dict[str, Any] = field(default_factory=dict)
    folder: Path | None = None

    @property
    def methods(self) -> list[str]:
        """Methods evaluated, registry order first."""
        return _ordered(self.summary["method"])

    @property
    def meta(self) -> dict[str, Any]:
        """What a figure title names: label, head, dataset, split, n, ablation, scope."""
        row = self.summary.iloc[0]
        return {"label": self.label, "head": row["head"], "dataset": row["dataset"],
                "split": self.manifest.get("split"), "n": int(row["n"]), "ablation": row["ablation"],
                "scope": row["scope"]}


def _ordered(methods) -> list[str]:
    present = list(dict.fromkeys(methods))
    return [m for m in METHOD_LABELS if m in present] + [m for m in present if m not in METHOD_LABELS]


def _read_csv(path: Path) -> pd.DataFrame:
    try:
        table = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ResultsError(f"{path}: not a readable CSV ({exc}).") from None
    missing = [c for c in _REQUIRED[path.name] if c not in table.columns]
    if missing:
        raise ResultsError(f"{path}: missing column(s) {', '.join(missing)}; is it from `laya-eval faithfulness`?")
    return table


def load_run(folder: str | os.PathLike) -> Run:
    """Read one ``laya-eval faithfulness`` output folder.

    Raises
    ------
    ResultsError
        The folder does not exist, lacks summary.csv / samples.csv / layers.csv,
        or a file is not what ``faithfulness`` writes.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ResultsError(f"result folder '{folder}' does not exist "
                        "(expected the --out folder of `laya-eval faithfulness`).")
    missing = [name for name in _REQUIRED if not (folder / name).is_file()]
    if missing:
        raise ResultsError(f"result folder '{folder}' has no {', '.join(missing)}: expected the output of "
                        "`laya-eval faithfulness` (layers.csv, samples.csv, summary.csv, manifest.json).")
    tables = {name: _read_csv(folder / name) for name in _REQUIRED}
    if tables["summary.csv"].empty:
        raise ResultsError(f"{folder / 'summary.csv'} has no rows.")
    manifest: dict[str, Any] = {}
    if (folder / "manifest.json").is_file():
        try:
            manifest = json.loads((folder / "manifest.json").read_text())
        except json.JSONDecodeError as exc:
            raise ResultsError(f"{folder / 'manifest.json'}: not valid JSON ({exc}).") from None
    ckpt = str(tables["summary.csv"]["checkpoint"].iloc[0]) if "checkpoint" in tables["summary.csv"] else folder.name
    return Run(label=Path(ckpt).name, summary=tables["summary.csv"], samples=tables["samples.csv"],
               layers=tables["layers.csv"], manifest=manifest, folder=folder)


def run_from_result(result, label: str | None = None) -> Run:
    """A :class:`Run` from an in-memory :class:`~laya_eval.evaluate.EvaluationResult`."""
    path = (result.manifest.get("checkpoint") or {}).get("path")
    return Run(label=label or (Path(path).name if path else "<in-memory>"), summary=result.summary,
               samples=result.samples, layers=result.layers, manifest=result.manifest)


def _unique_labels(runs: Sequence[Run]) -> list[Run]:
    counts = pd.Series([r.label for r in runs]).value_counts()
    out = []
    for k, run in enumerate(runs):
        if counts[run.label] > 1:
            suffix = run.folder.name if run.folder is not None else str(k + 1)
            run = Run(f"{run.label} [{suffix}]", run.summary, run.samples, run.layers, run.manifest, run.folder)
        out.append(run)
    if len({r.label for r in out}) < len(out):
        out = [Run(f"{r.label} #{k + 1}", r.summary, r.samples, r.layers, r.manifest, r.folder)
               for k, r in enumerate(out)]
    return out


def _expand(folder: Path) -> list[Path]:
    """A folder of ``faithfulness --ablation a,b,...`` holds one result folder per ablation: take them all."""
    if folder.is_dir() and not (folder / "summary.csv").exists():
        subfolders = sorted(p for p in folder.iterdir() if p.is_dir() and (p / "summary.csv").is_file())
        if subfolders:
            return subfolders
    return [folder]


def load_runs(folders: Sequence[str | os.PathLike]) -> list[Run]:
    """Read several result folders; labels are made unique (the folder name is added to duplicates).

    A folder without ``summary.csv`` whose subfolders are result folders (the output of
    ``laya-eval faithfulness --ablation gate,mean,...``) stands for those subfolders.
    """
    if not folders:
        raise ResultsError("give at least one result folder of `laya-eval faithfulness`.")
    return _unique_labels([load_run(f) for folder in folders for f in _expand(Path(folder))])

