"""Reading ``laya-eval faithfulness`` result folders (or in-memory results) as :class:`Run` objects."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import pandas as pd

from laya_eval.catalog import in_registry_order
from laya_eval.errors import ResultsError
from laya_eval.output.files import verify_result_folder

if TYPE_CHECKING:
    from laya_eval.reporting.mixer_sections import MixerRun
    from laya_eval.reporting.sanity_verdicts import SanityRun

__all__ = ["COMPARISON_COLUMNS", "ReportInputs", "Run", "load_inputs", "load_run", "load_runs", "run_from_result"]

_REQUIRED = {
    "summary": [
        "head",
        "dataset",
        "method",
        "ablation",
        "scope",
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
    ],
    "samples": ["sample", "method", "spearman"],
    "layers": ["sample", "method", "layer", "attribution", "effect"],
}
# comparisons.csv (paired tests between methods, written by newer `faithfulness` runs) is optional.
COMPARISON_COLUMNS = [
    "metric",
    "method_a",
    "method_b",
    "n",
    "mean_difference",
    "ci_low",
    "ci_high",
    "wilcoxon_statistic",
    "p_value",
    "p_holm",
    "rank_biserial",
]


@dataclass(frozen=True)
class Run:
    """One evaluation: its three tables, manifest and display label (the checkpoint's file name)."""

    label: str
    summary: pd.DataFrame
    samples: pd.DataFrame
    layers: pd.DataFrame
    manifest: dict[str, Any] = field(default_factory=dict)
    folder: Path | None = None
    comparisons: pd.DataFrame | None = None
    unverified: str | None = None

    @property
    def methods(self) -> list[str]:
        """Methods evaluated, registry order first."""
        return in_registry_order(self.summary["method"])

    @property
    def meta(self) -> dict[str, Any]:
        """What a figure title names: label, head, dataset, split, n, ablation, scope (and the layer names)."""
        row = self.summary.iloc[0]
        return {
            "label": self.label,
            "head": row["head"],
            "dataset": row["dataset"],
            "split": self.manifest.get("split"),
            "n": int(row["n"]),
            "ablation": row["ablation"],
            "scope": row["scope"],
            "layer_names": self.manifest.get("layer_names"),
        }


#: What identifies a sample besides its index: a classifier's label and prediction, or a text window's document,
#: offset, tokens and loss (``faithfulness --target next-token``).
SAMPLE_KINDS = (("label", "pred"), ("document", "offset", "tokens", "loss"))


def _read(folder: Path, name: str, required: Sequence[str]) -> pd.DataFrame:
    from laya_eval.output.tables import find_table, read_table

    path = find_table(folder / name)
    table = read_table(path)
    missing = [c for c in required if c not in table.columns]
    if name == "samples" and not missing and not any(set(k) <= set(table.columns) for k in SAMPLE_KINDS):
        missing = [c for c in SAMPLE_KINDS[0] if c not in table.columns]
    if missing:
        raise ResultsError(f"{path}: missing column(s) {', '.join(missing)}; is it from `laya-eval faithfulness`?")
    return table


def _has_table(folder: Path, name: str) -> bool:
    return (folder / f"{name}.csv").is_file() or (folder / f"{name}.parquet").is_file()


def load_run(folder: str | os.PathLike, *, strict: bool = False) -> Run:
    """Read one ``laya-eval faithfulness`` output folder.

    ``layers`` and ``samples`` may be CSV or Parquet (``--table-format parquet``);
    ``comparisons.csv`` (paired tests between methods) is read when present. Every table is checked
    (:mod:`laya_eval.reporting.validate`). A folder without a manifest, or whose manifest does not list a file
    read, is unverified: :attr:`Run.unverified` says why, and ``strict`` refuses it.

    Raises
    ------
    ResultsError
        The folder does not exist, lacks summary / samples / layers tables,
        or a file is not what ``faithfulness`` writes.
    """
    from laya_eval.reporting.sanity_verdicts import is_sanity_folder

    folder = Path(folder)
    if not folder.is_dir():
        raise ResultsError(
            f"result folder '{folder}' does not exist (expected the --out folder of `laya-eval faithfulness`)."
        )
    if is_sanity_folder(folder):
        raise ResultsError(
            f"'{folder}' is a `laya-eval sanity` folder, not a faithfulness result folder: read it "
            "with load_sanity or load_inputs (`laya-eval report` takes both)."
        )
    missing = [f"{name}.csv" for name in _REQUIRED if not _has_table(folder, name)]
    if missing:
        raise ResultsError(
            f"result folder '{folder}' has no {', '.join(missing)}: expected the output of "
            "`laya-eval faithfulness` (layers.csv, samples.csv, summary.csv, manifest.json)."
        )
    from laya_eval.output.tables import find_table
    from laya_eval.reporting.validate import check_run_tables, manifest_warning

    tables = {name: _read(folder, name, cols) for name, cols in _REQUIRED.items()}
    if tables["summary"].empty:
        raise ResultsError(f"{folder / 'summary.csv'} has no rows.")
    comparisons = (
        _read(folder, "comparisons.csv", COMPARISON_COLUMNS) if (folder / "comparisons.csv").is_file() else None
    )
    manifest: dict[str, Any] = {}
    if (folder / "manifest.json").is_file():
        # Every file must be the one the run wrote (its sha256 is in the manifest): no mixing of two runs.
        manifest = verify_result_folder(folder)
    names = {name: find_table(folder / name).name for name in _REQUIRED}
    read = [*names.values(), *(["comparisons.csv"] if comparisons is not None else [])]
    unverified = manifest_warning(folder, manifest if (folder / "manifest.json").is_file() else None, read)
    if unverified and strict:
        raise ResultsError(f"{unverified} Refused with --strict.")
    tables, comparisons = check_run_tables(folder, tables, comparisons, manifest, names)
    ckpt = str(tables["summary"]["checkpoint"].iloc[0]) if "checkpoint" in tables["summary"] else folder.name
    return Run(
        label=Path(ckpt).name,
        summary=tables["summary"],
        samples=tables["samples"],
        layers=tables["layers"],
        manifest=manifest,
        folder=folder,
        comparisons=comparisons,
        unverified=unverified,
    )


def run_from_result(result, label: str | None = None) -> Run:
    """A :class:`Run` from an in-memory :class:`~laya_eval.engine.evaluation.EvaluationResult`."""
    path = (result.manifest.get("checkpoint") or {}).get("path")
    return Run(
        label=label or (Path(path).name if path else "<in-memory>"),
        summary=result.summary,
        samples=result.samples,
        layers=result.layers,
        manifest=result.manifest,
        comparisons=getattr(result, "comparisons", None),
    )


def _unique_labels(runs: Sequence[Run]) -> list[Run]:
    counts = pd.Series([r.label for r in runs]).value_counts()
    out = []
    for k, run in enumerate(runs):
        if counts[run.label] > 1:
            suffix = run.folder.name if run.folder is not None else str(k + 1)
            run = dataclasses.replace(run, label=f"{run.label} [{suffix}]")
        out.append(run)
    if len({r.label for r in out}) < len(out):
        out = [dataclasses.replace(r, label=f"{r.label} #{k + 1}") for k, r in enumerate(out)]
    return out


def _expand(folder: Path) -> list[Path]:
    """A folder without summary.csv stands for the result folders below it, at any depth: a folder of
    ``faithfulness --ablation a,b,...`` (one subfolder per ablation) or a ``laya-eval sweep`` folder
    (``cells/{cell}/eval/[{ablation}/]``). Hidden folders (partial results) are skipped."""
    if folder.is_dir() and not (folder / "summary.csv").exists():
        found = sorted(
            p.parent
            for p in folder.rglob("summary.csv")
            if not any(part.startswith(".") for part in p.relative_to(folder).parts)
        )
        if found:
            return found
    return [folder]


def load_runs(folders: Sequence[str | os.PathLike], *, strict: bool = False) -> list[Run]:
    """Read several result folders; labels are made unique (the folder name is added to duplicates).

    A folder without ``summary.csv`` stands for the result folders below it (the output of
    ``laya-eval faithfulness --ablation gate,mean,...``, or a ``laya-eval sweep`` folder).
    """
    if not folders:
        raise ResultsError("give at least one result folder of `laya-eval faithfulness`.")
    return _unique_labels([load_run(f, strict=strict) for folder in folders for f in _expand(Path(folder))])


@dataclass(frozen=True)
class ReportInputs:
    """What ``laya-eval report`` was given: faithfulness runs and ``laya-eval sanity`` folders."""

    runs: list[Run]
    sanity: list[SanityRun]
    mixers: list[MixerRun] = field(default_factory=list)

    @property
    def warnings(self) -> list[str]:
        """One line per unverified result folder."""
        return [r.unverified for r in self.runs if r.unverified]


def _is_result(item: Any) -> bool:
    """An in-memory evaluation (:class:`~laya_eval.engine.results.EvaluationResult`): its tables and manifest."""
    return all(hasattr(item, name) for name in ("summary", "samples", "layers", "manifest"))


def load_inputs(folders: Sequence[Any], *, strict: bool = False) -> ReportInputs:
    """Read faithfulness result folders and ``laya-eval sanity`` folders, each recognised by its files, and take
    in-memory evaluations as runs (:func:`run_from_result`).

    A folder holding any of the sanity files (randomisation.csv, ..., sanity.json) and no summary.csv is a
    sanity folder; one holding map.csv and sources.csv (no layers.csv) a ``laya-eval mixers`` folder; every other
    folder is read as by :func:`load_runs`. Any of the lists may be empty, not all.
    """
    from laya_eval.reporting.mixer_sections import is_mixer_folder, load_mixer_run
    from laya_eval.reporting.sanity_verdicts import is_sanity_folder, load_sanity, unique_sanity_labels

    if not folders:
        raise ResultsError(
            "give at least one result folder of `laya-eval faithfulness`, `laya-eval sanity` or `laya-eval mixers`."
        )
    for item in folders:
        if not isinstance(item, (str, os.PathLike)) and not _is_result(item):
            raise ResultsError(
                f"a report reads result folders (paths) and evaluation results; got {type(item).__name__}."
            )
    paths = [f for f in folders if isinstance(f, (str, os.PathLike))]
    sanity = [Path(f) for f in paths if is_sanity_folder(f)]
    mixers = [Path(f) for f in paths if is_mixer_folder(f)]
    runs = []
    for item in folders:
        if not isinstance(item, (str, os.PathLike)):
            runs.append(run_from_result(item))
        elif Path(item) not in sanity and Path(item) not in mixers:
            runs += [load_run(f, strict=strict) for f in _expand(Path(item))]
    runs = _unique_labels(runs)
    mixer_runs, seen = [], {}
    for f in mixers:
        run = load_mixer_run(f)
        seen[run.label] = seen.get(run.label, 0) + 1
        if seen[run.label] > 1:
            run = dataclasses.replace(run, label=f"{run.label} #{seen[run.label]}")
        mixer_runs.append(run)
    return ReportInputs(runs=runs, sanity=unique_sanity_labels([load_sanity(f) for f in sanity]), mixers=mixer_runs)
