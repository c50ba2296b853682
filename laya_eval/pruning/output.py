"""Writing a pruning run: tables, figures and a manifest, as one result folder (replaced whole)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

__all__ = ["PRUNE_FILES", "write_prune"]

PRUNE_FILES = ("pruning.csv", "pruning_summary.csv", "pruning_comparisons.csv", "early_exit.csv", "latency.csv")


def _csv(table: pd.DataFrame) -> bytes:
    return table.to_csv(index=False, float_format="%.8g", lineterminator="\n").encode()


def write_prune(result, out_dir: str | os.PathLike, *, meta: Mapping[str, Any], fmt: str = "png") -> list[Path]:
    """Write the tables, ``pruning.<fmt>``, ``early_exit.<fmt>`` and ``manifest.json`` into ``out_dir``.

    The folder is written whole into a temporary folder and swapped in (:func:`laya_eval.output.files.write_result_folder`):
    an interrupted run leaves the previous result untouched. Tables that were not computed (no early exit, no
    timing) are not written.

    Returns
    -------
    list of Path
    """
    from laya_eval.figures import check_format, figure_bytes
    from laya_eval.figures.pruning import early_exit_figure, pruning_figure
    from laya_eval.output.files import sha256_bytes, write_result_folder

    check_format(fmt)
    tables = dict(zip(PRUNE_FILES, (result.pruning, result.summary, result.comparisons, result.early_exit,
                                    result.latency)))
    files = {name: _csv(t) for name, t in tables.items() if t is not None}
    all_meta = {**dict(meta), **result.meta}
    files[f"pruning.{fmt}"] = figure_bytes(pruning_figure(result.pruning, meta=all_meta), fmt)
    if result.early_exit is not None:
        files[f"early_exit.{fmt}"] = figure_bytes(early_exit_figure(result.early_exit, meta=all_meta), fmt)
    manifest = {"kind": "prune", **all_meta, "files": {n: sha256_bytes(b) for n, b in files.items()}}
    files["manifest.json"] = (json.dumps(manifest, indent=2, sort_keys=True, default=str) + "\n").encode()
    return write_result_folder(out_dir, files)
