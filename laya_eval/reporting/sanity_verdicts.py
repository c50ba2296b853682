"""``laya-eval sanity`` output folders in a report: reading them and the verdict per method.

A sanity folder holds :data:`laya_eval.catalog.SANITY_FILES` (randomisation.csv, data_randomisation.csv,
layer_roar.csv, roar_agreement.csv, sanity.json) and a figure; it is recognised by those files.

Verdict rules (:func:`sanity_table`), per method:

- **Randomisation** (cascading, after the last step, all parameter groups re-initialised; and data, the
  head retrained on shuffled labels): *pass* when the upper bound of the 95% interval of the similarity to
  the original attributions is below :data:`SIMILARITY_MAX` (0.5) -- the attributions changed when what
  they explain was destroyed; *fail* otherwise; *n/a* when the similarity is undefined (attributions
  constant across samples, e.g. ``static``). Without an interval (``--bootstrap 0``) the estimate is used.
- **Layer-ROAR**: *agrees* when the lower bound of the 95% interval of the Spearman correlation between
  the method's dataset-level layer ranking and the accuracy drops is above 0; *disagrees* otherwise;
  *uninformative* for every method when no layer's mean accuracy drop reaches :data:`ROAR_MIN_DROP` (0.01):
  drops that small do not rank the layers.
- **Overall**: *passes* when every defined randomisation check passes, *fails* when one fails, *not
  testable* when neither is defined; ``random`` is the chance reference (redrawn at every step). ROAR is
  reported beside, not in the overall verdict: it measures agreement, not dependence on the model.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from laya_eval.errors import ResultsError
from laya_eval.output.files import MAX_MANIFEST_BYTES, verify_result_folder
from laya_eval.output.reading import UnsafeFile, read_regular_file
from laya_eval.reporting.validate import check_sanity_tables

__all__ = [
    "ROAR_MIN_DROP",
    "SANITY_COLUMNS",
    "SIMILARITY_MAX",
    "SanityRun",
    "is_sanity_folder",
    "load_sanity",
    "max_roar_drop",
    "randomisation_verdict",
    "roar_verdict",
    "sanity_runs_table",
    "sanity_table",
    "unique_sanity_labels",
]

SIMILARITY_MAX = 0.5
ROAR_MIN_DROP = 0.01
SANITY_COLUMNS = [
    "sanity_run",
    "method",
    "cascading_params",
    "cascading_similarity",
    "cascading_ci_low",
    "cascading_ci_high",
    "cascading_ci_note",
    "cascading_verdict",
    "data_similarity",
    "data_ci_low",
    "data_ci_high",
    "data_ci_note",
    "data_verdict",
    "roar_spearman",
    "roar_ci_low",
    "roar_ci_high",
    "roar_ci_note",
    "roar_verdict",
    "verdict",
]
_RUN_COLUMNS = [
    "sanity_run",
    "checkpoint",
    "sha256",
    "head",
    "dataset",
    "split",
    "n",
    "similarity",
    "roar_seeds",
    "bootstrap",
    "wall_time_s",
    "original_accuracy",
    "shuffled_label_accuracy",
    "max_roar_drop",
    "folder",
]


@dataclass(frozen=True)
class SanityRun:
    """One ``laya-eval sanity`` folder: its four tables, ``sanity.json`` and ``manifest.json`` (empty when the
    folder has none or it is unreadable: the report reads only its provenance)."""

    label: str
    randomisation: pd.DataFrame
    data_randomisation: pd.DataFrame
    layer_roar: pd.DataFrame
    roar_agreement: pd.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)
    folder: Path | None = None
    manifest: dict[str, Any] = field(default_factory=dict)


def _files() -> tuple[str, ...]:
    from laya_eval.catalog import SANITY_FILES  # not from laya_eval.sanity_checks: that package loads torch

    return SANITY_FILES


def is_sanity_folder(folder: str | os.PathLike) -> bool:
    """True for a folder holding any of the files ``laya-eval sanity`` writes and no ``summary.csv``."""
    folder = Path(folder)
    return (
        folder.is_dir()
        and not (folder / "summary.csv").exists()
        and any((folder / name).is_file() for name in _files())
    )


def _read_csv(path: Path, required: Sequence[str]) -> pd.DataFrame:
    from laya_eval.output.tables import read_table

    table = read_table(path)
    missing = [c for c in required if c not in table.columns]
    if missing:
        raise ResultsError(f"{path}: missing column(s) {', '.join(missing)}; is it from `laya-eval sanity`?")
    return table


def load_sanity(folder: str | os.PathLike) -> SanityRun:
    """Read one ``laya-eval sanity`` output folder.

    Raises
    ------
    ResultsError
        A file is missing, a table lacks its columns or holds a value of the wrong kind (one line naming the file
        and the column: :func:`laya_eval.reporting.validate.check_sanity_tables`, ranges included), a file is not
        the one its ``manifest.json`` lists (sha256), the manifest is unreadable, or ``sanity.json`` is not a JSON
        object.
    """
    from laya_eval.catalog import LAYER_ROAR_COLUMNS, RANDOMISATION_COLUMNS, ROAR_AGREEMENT_COLUMNS

    folder = Path(folder)
    missing = [name for name in _files() if not (folder / name).is_file()]
    if missing:
        raise ResultsError(
            f"sanity folder '{folder}' has no {', '.join(missing)}: expected the output of "
            f"`laya-eval sanity` ({', '.join(_files())})."
        )
    # Every file must be the one the run wrote (the manifest lists their sha256), as for a faithfulness folder.
    manifest = verify_result_folder(folder) if os.path.lexists(folder / "manifest.json") else {}
    required = (RANDOMISATION_COLUMNS, RANDOMISATION_COLUMNS, LAYER_ROAR_COLUMNS, ROAR_AGREEMENT_COLUMNS)
    tables = [_read_csv(folder / name, cols) for name, cols in zip(_files()[:4], required)]
    checked = check_sanity_tables(folder, dict(zip(_files()[:4], tables)))
    tables = [checked[name] for name in _files()[:4]]
    try:
        meta = json.loads(read_regular_file(folder / "sanity.json", MAX_MANIFEST_BYTES, follow_symlinks=True))
    except (UnsafeFile, ValueError, RecursionError) as exc:
        raise ResultsError(f"'{folder / 'sanity.json'}' is unreadable ({type(exc).__name__}).") from None
    if not isinstance(meta, dict):
        raise ResultsError(f"'{folder / 'sanity.json'}' is not a JSON object.")
    label = Path(str(meta["label"])).name if meta.get("label") else folder.name
    return SanityRun(label, *tables, meta=meta, folder=folder, manifest=manifest)


def unique_sanity_labels(runs: Sequence[SanityRun]) -> list[SanityRun]:
    """Labels made unique: the folder name (else a counter) is added to duplicates."""
    seen = pd.Series([r.label for r in runs]).value_counts()
    out = [
        dataclasses.replace(r, label=f"{r.label} [{r.folder.name if r.folder else k + 1}]") if seen[r.label] > 1 else r
        for k, r in enumerate(runs)
    ]
    if len({r.label for r in out}) < len(out):
        out = [dataclasses.replace(r, label=f"{r.label} #{k + 1}") for k, r in enumerate(out)]
    return out


def randomisation_verdict(similarity: float, ci_high: float) -> str:
    """``pass`` / ``fail`` / ``n/a`` for one randomisation check (see the module docstring)."""
    if pd.isna(similarity):
        return "n/a"
    upper = similarity if pd.isna(ci_high) else ci_high
    return "pass" if upper < SIMILARITY_MAX else "fail"


def roar_verdict(spearman: float, ci_low: float, *, informative: bool) -> str:
    """``agrees`` / ``disagrees`` / ``uninformative`` / ``n/a`` for layer-ROAR (see the module docstring)."""
    if not informative:
        return "uninformative"
    if pd.isna(spearman):
        return "n/a"
    return "agrees" if (spearman if pd.isna(ci_low) else ci_low) > 0 else "disagrees"


def _overall(method: str, checks: Sequence[str]) -> str:
    if method == "random":
        return "chance reference"
    defined = [c for c in checks if c != "n/a"]
    if not defined:
        return "not testable"
    return "fails" if "fail" in defined else "passes"


def _last_step(table: pd.DataFrame) -> pd.DataFrame:
    if table.empty:
        return table.set_index("method")
    return table[table["step"] == table["step"].max()].drop_duplicates("method").set_index("method")


def max_roar_drop(layer_roar: pd.DataFrame) -> float:
    """The largest mean (over seeds) test-accuracy drop of any layer; NaN without rows."""
    if layer_roar.empty:
        return float("nan")
    return float(layer_roar.groupby("layer")["accuracy_drop"].mean().max())


def _note(row: Any, column: str) -> str:
    """Why an interval is missing, as the sanity run wrote it ("" where it exists or the run wrote no note)."""
    value = None if row is None else row.get(column)
    return value if isinstance(value, str) else ""


def _method_row(run: SanityRun, method: str, cascading, data, roar, informative: bool) -> dict[str, Any]:
    nan = float("nan")
    c = cascading.loc[method] if method in cascading.index else None
    d = data.loc[method] if method in data.index else None
    r = roar.loc[method] if method in roar.index else None
    row = {"sanity_run": run.label, "method": method, "cascading_params": None if c is None else c["params"]}
    for prefix, src in (("cascading", c), ("data", d)):
        sim, low, high = (
            (nan, nan, nan) if src is None else (src["similarity"], src["similarity_ci_low"], src["similarity_ci_high"])
        )
        row.update(
            {
                f"{prefix}_similarity": sim,
                f"{prefix}_ci_low": low,
                f"{prefix}_ci_high": high,
                f"{prefix}_ci_note": _note(src, "similarity_ci_note"),
                f"{prefix}_verdict": randomisation_verdict(sim, high),
            }
        )
    rho, low, high = (nan, nan, nan) if r is None else (r["spearman"], r["ci_low"], r["ci_high"])
    row.update(
        {
            "roar_spearman": rho,
            "roar_ci_low": low,
            "roar_ci_high": high,
            "roar_ci_note": _note(r, "ci_note"),
            "roar_verdict": roar_verdict(rho, low, informative=informative),
        }
    )
    row["verdict"] = _overall(method, [row["cascading_verdict"], row["data_verdict"]])
    return row


def sanity_table(runs: Sequence[SanityRun]) -> pd.DataFrame:
    """One row per (sanity run, method): the similarities after the last steps, ROAR, and the verdicts.

    Returns
    -------
    DataFrame
        Columns :data:`SANITY_COLUMNS`; methods in registry order.
    """
    from laya_eval.catalog import in_registry_order

    rows = []
    for run in runs:
        cascading, data = _last_step(run.randomisation), _last_step(run.data_randomisation)
        roar = run.roar_agreement.drop_duplicates("method").set_index("method")
        drop = max_roar_drop(run.layer_roar)
        informative = bool(not np.isnan(drop) and drop >= ROAR_MIN_DROP)
        methods = in_registry_order(
            pd.concat([run.randomisation["method"], run.data_randomisation["method"], run.roar_agreement["method"]])
        )
        rows += [_method_row(run, m, cascading, data, roar, informative) for m in methods]
    return pd.DataFrame(rows, columns=SANITY_COLUMNS)


def _accuracy(table: pd.DataFrame, step: int) -> float:
    if "accuracy" not in table.columns or not (table["step"] == step).any():
        return float("nan")
    return float(table.loc[table["step"] == step, "accuracy"].iloc[0])


def sanity_runs_table(runs: Sequence[SanityRun]) -> pd.DataFrame:
    """One row per sanity run: what was checked (from ``sanity.json``) and the accuracies behind the checks."""
    rows = []
    for run in runs:
        m = run.meta
        rows.append(
            {
                "sanity_run": run.label,
                "checkpoint": m.get("label"),
                "sha256": m.get("checkpoint_sha256"),
                "head": m.get("head"),
                "dataset": m.get("dataset"),
                "split": m.get("split"),
                "n": m.get("n"),
                "similarity": m.get("similarity"),
                "roar_seeds": m.get("roar_seeds"),
                "bootstrap": m.get("bootstrap"),
                "wall_time_s": m.get("wall_time_s"),
                "original_accuracy": _accuracy(run.data_randomisation, 0),
                "shuffled_label_accuracy": _accuracy(run.data_randomisation, 1),
                "max_roar_drop": max_roar_drop(run.layer_roar),
                "folder": "" if run.folder is None else str(run.folder),
            }
        )
    return pd.DataFrame(rows, columns=_RUN_COLUMNS)
