"""A pruning run's folder: tables, figures and a manifest, replaced whole; :func:`laya_eval.pruning.run.prune`
(``laya_eval.prune``) writes it when given ``out``."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

__all__ = ["PRUNE_FILES", "prune_figures"]

PRUNE_FILES = ("pruning.csv", "pruning_summary.csv", "pruning_comparisons.csv", "early_exit.csv", "latency.csv")


def _csv(table: pd.DataFrame) -> bytes:
    return table.to_csv(index=False, float_format="%.8g", lineterminator="\n").encode()


def _write_prune(result, out_dir: str | os.PathLike, *, fmt: str | None = None, style: str = "default") -> list[Path]:
    """Write the tables, ``pruning.<fmt>``, ``early_exit.<fmt>`` and ``manifest.json`` (``result.meta`` and the
    sha256 of every file) into ``out_dir``.

    The folder is written whole into a temporary folder and swapped in (:func:`laya_eval.output.files.write_result_folder`):
    an interrupted run leaves the previous result untouched. Tables that were not computed (no early exit, no
    timing) are not written. ``fmt`` defaults to png, or pdf in paper style; in paper style the figures carry no
    titles and each caption is written beside its figure as ``NAME.caption.txt``.

    Returns
    -------
    list of Path
    """
    from laya_eval.figures import figure_files
    from laya_eval.output.files import sha256_bytes, write_result_folder
    from laya_eval.output.origin import provenance

    tables = dict(
        zip(PRUNE_FILES, (result.pruning, result.summary, result.comparisons, result.early_exit, result.latency))
    )
    files = {name: _csv(t) for name, t in tables.items() if t is not None}
    files.update(figure_files(prune_figures(result, meta=result.meta, style=style), fmt=fmt, style=style))
    manifest = {"kind": "prune", **provenance(), **result.meta, "files": {n: sha256_bytes(b) for n, b in files.items()}}
    files["manifest.json"] = (json.dumps(manifest, indent=2, sort_keys=True, default=str) + "\n").encode()
    return write_result_folder(out_dir, files)


def prune_figures(result, *, meta: Mapping[str, Any], style: str = "default") -> dict[str, Any]:
    """``pruning`` (accuracy against layers removed) and, with an early-exit table, ``early_exit``."""
    from laya_eval.figures.pruning import early_exit_figure, pruning_figure

    figs = {"pruning": pruning_figure(result.pruning, meta=meta, style=style)}
    if result.early_exit is not None:
        figs["early_exit"] = early_exit_figure(result.early_exit, meta=meta, style=style)
    return figs
