"""Writing the sanity checks' tables, metadata and figure into one folder."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

__all__ = ["SANITY_FILES", "write_sanity"]

SANITY_FILES = ("randomisation.csv", "data_randomisation.csv", "layer_roar.csv", "roar_agreement.csv",
                "sanity.json")


def _write_text(path: Path, text: str) -> Path:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


def write_sanity(result, out_dir: str | os.PathLike, *, meta: Mapping[str, Any], fmt: str = "png") -> list[Path]:
    """Write :data:`SANITY_FILES` and ``sanity.<fmt>`` (similarity per step and method) into ``out_dir``.

    Parameters
    ----------
    result : SanityResult
    meta : mapping
        Written to ``sanity.json`` (checkpoint, dataset, options, wall time, ...) and used for the figure's
        subtitle.

    Returns
    -------
    list of Path
        The files written, CSVs first. Each file is written to a temporary name and renamed, so an
        interrupted run leaves no half-written file.
    """
    from laya_eval.figures import check_format, save_figure
    from laya_eval.figures.sanity import randomisation_figure

    check_format(fmt)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    csv = {"index": False, "float_format": "%.8g", "lineterminator": "\n"}
    tables = (result.randomisation, result.data_randomisation, result.layer_roar, result.roar_agreement)
    written = [_write_text(out / name, table.to_csv(**csv)) for name, table in zip(SANITY_FILES, tables)]
    written.append(_write_text(out / "sanity.json", json.dumps(dict(meta), indent=2, sort_keys=True, default=str)
                               + "\n"))
    fig = randomisation_figure(pd.concat([result.randomisation, result.data_randomisation]), meta=meta)
    written.append(save_figure(fig, out / f"sanity.{fmt}", fmt=fmt))
    return written
