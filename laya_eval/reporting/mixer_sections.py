"""The "Depth mixers" section of a report, from folders written by ``laya-eval mixers``.

A mixers folder is recognised by its files (``map.csv`` and ``sources.csv``, no ``layers.csv``). Its
``map.csv`` (mixer x source: mean mass, mean effect) and ``summary.csv`` (mixer x method: faithfulness with
its interval) are checked like the other tables a report reads — each problem is one :class:`ResultsError`
line naming the file and the column — and the section shows, per folder, the mixer x source map of mass and
effect side by side (figure and table) and one sentence per mixer: does mass predict the effect of removing a
source? The verdict reads the 95% interval of the faithfulness of ``mass``: above 0, it does; below 0, mass
ranks the sources against their effects; holding 0, it does not; no interval, the audit cannot say.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from laya_eval.errors import ResultsError
from laya_eval.reporting.render import _ci, _num, _slug
from laya_eval.reporting.validate import _numbers, _text, check_mixer_ranges

__all__ = ["MIXERS_TITLE", "MixerRun", "is_mixer_folder", "load_mixer_run", "mixer_blocks", "mixer_verdicts"]

MIXERS_TITLE = "Depth mixers"
MAP_COLUMNS = ("mixer", "source", "n", "mean_mass", "mean_effect", "mean_abs_effect")
SUMMARY_COLUMNS = (
    "mixer",
    "method",
    "removal",
    "n",
    "n_undefined",
    "faithfulness",
    "faithfulness_ci_low",
    "faithfulness_ci_high",
)
_MAP_NUMBERS = {"source": True, "n": True, "mean_mass": False, "mean_effect": False, "mean_abs_effect": False}
_SUMMARY_NUMBERS = {
    "n": True,
    "n_undefined": True,
    "faithfulness": False,
    "faithfulness_ci_low": False,
    "faithfulness_ci_high": False,
}


@dataclass(frozen=True)
class MixerRun:
    """One ``laya-eval mixers`` folder as a report reads it: the checked ``map`` and ``summary`` tables."""

    label: str
    map: pd.DataFrame
    summary: pd.DataFrame
    manifest: dict[str, Any] = field(default_factory=dict)
    folder: Path | None = None


def is_mixer_folder(folder: str | os.PathLike) -> bool:
    """True for a folder holding ``map.csv`` and ``sources.csv`` and no ``layers.csv``."""
    folder = Path(folder)
    return (
        folder.is_dir()
        and (folder / "map.csv").is_file()
        and (folder / "sources.csv").is_file()
        and not (folder / "layers.csv").exists()
    )


def _read(path: Path, required: Sequence[str], numbers: dict[str, bool], text: Sequence[str]) -> pd.DataFrame:
    from laya_eval.output.tables import read_table

    table = read_table(path)
    missing = [c for c in required if c not in table.columns]
    if missing:
        raise ResultsError(f"{path}: missing column(s) {', '.join(missing)}; is it from `laya-eval mixers`?")
    if table.empty:
        raise ResultsError(f"{path} has no rows.")
    for column in text:
        _text(table, column, str(path))
    for column, integer in numbers.items():
        _numbers(table, column, str(path), integer=integer)
        table[column] = pd.to_numeric(table[column]).astype(np.int64 if integer else np.float64)
    check_mixer_ranges(table, str(path))
    return table


def load_mixer_run(folder: str | os.PathLike) -> MixerRun:
    """Read and check one ``laya-eval mixers`` folder (its manifest's checksums verified).

    Raises
    ------
    ResultsError
        A file is missing or differs from the one the audit wrote, a column is missing or holds what it should
        not (the file and the column are named), or map and summary name different mixers.
    """
    from laya_eval.output.files import verify_result_folder

    folder = Path(folder)
    missing = [n for n in ("map.csv", "summary.csv", "manifest.json") if not (folder / n).is_file()]
    if missing:
        raise ResultsError(
            f"mixers folder '{folder}' has no {', '.join(missing)}: expected the output of `laya-eval mixers`."
        )
    manifest = verify_result_folder(folder)
    table = _read(folder / "map.csv", MAP_COLUMNS, _MAP_NUMBERS, ("mixer",))
    if not np.isfinite(table[["mean_effect", "mean_abs_effect"]].to_numpy()).all():
        bad = ~np.isfinite(table["mean_effect"].to_numpy())
        column = "mean_effect" if bad.any() else "mean_abs_effect"
        raise ResultsError(f"{folder / 'map.csv'}: column '{column}' must be finite numbers.")
    summary = _read(folder / "summary.csv", SUMMARY_COLUMNS, _SUMMARY_NUMBERS, ("mixer", "method", "removal"))
    if set(summary["mixer"]) != set(table["mixer"]):
        raise ResultsError(
            f"{folder / 'map.csv'}: column 'mixer' names {sorted(set(table['mixer']))}, summary.csv "
            f"{sorted(set(summary['mixer']))}; the two files come from different audits."
        )
    model = manifest.get("model") if isinstance(manifest.get("model"), dict) else {}
    label = Path(str(model.get("path") or model.get("spec") or folder.name)).name
    return MixerRun(
        label=f"{label} ({summary['removal'].iloc[0]})", map=table, summary=summary, manifest=manifest, folder=folder
    )


def mixer_verdicts(run: MixerRun) -> pd.DataFrame:
    """Per mixer: the faithfulness of ``mass`` with its interval and the verdict (see the module docstring)."""
    rows = []
    for mixer in dict.fromkeys(run.map["mixer"]):
        part = run.summary[(run.summary["mixer"] == mixer) & (run.summary["method"] == "mass")]
        n_sources = int((run.map["mixer"] == mixer).sum())
        if part.empty:
            rows.append(
                {
                    "run": run.label,
                    "mixer": mixer,
                    "n_sources": n_sources,
                    "faithfulness": np.nan,
                    "ci_low": np.nan,
                    "ci_high": np.nan,
                    "verdict": "not audited (mass not among the methods)",
                }
            )
            continue
        r = part.iloc[0]
        low, high = float(r["faithfulness_ci_low"]), float(r["faithfulness_ci_high"])
        if np.isnan(low) or np.isnan(high):
            verdict = "cannot say (no interval)"
        elif low > 0:
            verdict = "mass predicts effect"
        elif high < 0:
            verdict = "mass ranks sources against their effects"
        else:
            verdict = "mass does not predict effect"
        rows.append(
            {
                "run": run.label,
                "mixer": mixer,
                "n_sources": n_sources,
                "faithfulness": float(r["faithfulness"]),
                "ci_low": low,
                "ci_high": high,
                "verdict": verdict,
            }
        )
    return pd.DataFrame(rows)


def _sentence(row) -> str:
    what = {
        "mass predicts effect": "the interval lies above 0",
        "mass ranks sources against their effects": "the interval lies below 0",
        "mass does not predict effect": "the interval holds 0",
    }.get(row.verdict, "")
    return (
        f"{row.mixer} ({row.n_sources} sources): {row.verdict} — faithfulness of mass {_num(row.faithfulness)} "
        f"{_ci(row.ci_low, row.ci_high)}" + (f"; {what}." if what else ".")
    )


def mixer_blocks(runs: Sequence[MixerRun], verdicts: pd.DataFrame, figure: Callable[[str, str], tuple]) -> list[tuple]:
    """The section: the rule, then per folder the map figure, one sentence per mixer and the map table."""
    if not runs:
        return []
    blocks: list[tuple] = [
        ("h2", MIXERS_TITLE),
        (
            "p",
            "From laya-eval mixers folders. Mass is a depth mixer's weight over its sources; the effect of a source "
            "is the drop of the predicted class's probability at the output when that source is removed from "
            "the mixer (the removal is named with each folder). Does mass predict effect? Faithfulness of mass = "
            "mean Spearman ρ between mass and effect over the inputs, with its 95% bootstrap interval: above 0, "
            "mass predicts effect; holding 0, it does not; below 0, it ranks the sources against their effects.",
        ),
    ]
    for run in runs:
        part = verdicts[verdicts["run"] == run.label]
        blocks += [
            ("details", f"mixers: {run.label}", len(runs) == 1),
            figure(f"mixers_{_slug(run.label)}", f"Mean mass and mean effect per mixer and source, {run.label}."),
            *[("p", _sentence(r)) for r in part.itertuples(index=False)],
            (
                "table",
                ["mixer", "source", "n", "mean mass", "mean effect", "mean |effect|"],
                [
                    [r.mixer, str(r.source), str(r.n), _num(r.mean_mass), _num(r.mean_effect), _num(r.mean_abs_effect)]
                    for r in run.map.itertuples(index=False)
                ],
            ),
            ("end_details",),
        ]
    return blocks
