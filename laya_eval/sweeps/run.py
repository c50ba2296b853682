"""``sweep``: run a grid of trainings and evaluations from one config, resumable cell by cell.

Examples
--------
>>> result = sweep("benchmarks/reproduce-quick.toml", "runs/sweep")   # doctest: +SKIP
>>> result.tables["sweep_summary"][["head", "method", "faithfulness_mean"]]   # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from laya_eval.errors import ConfigError
from laya_eval.sweeps.aggregate import aggregate, write_aggregate
from laya_eval.sweeps.cells import finished, load_splits, run_cell
from laya_eval.sweeps.config import Cell, load_config

__all__ = ["SweepResult", "sweep"]

CELLS = "cells"


@dataclass
class SweepResult:
    """What :func:`sweep` did.

    Attributes
    ----------
    out_dir : Path
    computed, reused : list of str
        Names of the cells computed now and of those found finished (``resume``).
    tables : dict of str to DataFrame
        ``runs``, ``sweep``, ``sweep_summary``, ``layer_weights`` (see :mod:`laya_eval.sweeps.aggregate`).
    """

    out_dir: Path
    computed: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)


def _check_out(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise ConfigError(f"sweep folder '{out}' exists and is not a folder.")
    if out.is_dir():
        foreign = [
            p.name
            for p in out.iterdir()
            if not p.name.startswith(".")
            and p.name not in {CELLS, "runs.csv", "sweep.csv", "sweep_summary.csv", "layer_weights.csv"}
        ]
        if foreign:
            raise ConfigError(
                f"sweep folder '{out}' holds files that are not a sweep's ({foreign[0]!r}); "
                "choose an empty or new folder, or an earlier sweep's."
            )
    try:
        (out / CELLS).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot write the sweep folder '{out}': {exc.strerror or exc}.") from None


def sweep(
    config: str | os.PathLike | Mapping[str, Any],
    out_dir: str | os.PathLike,
    *,
    resume: bool = True,
    progress: Callable[[Cell, str], None] | None = None,
    cache_dir: str | os.PathLike | None = None,
    trust_code: bool = False,
) -> SweepResult:
    """Train (or fit) and evaluate every cell of the config's grid; write the aggregate tables.

    Parameters
    ----------
    config : path to a TOML file, or dict
        See :mod:`laya_eval.sweeps.config`; checked whole before any work.
    out_dir : path
        ``cells/{cell}/`` per cell (checkpoint, ``eval/`` result folder, ``cell.json``) and the aggregate CSVs.
    resume : bool
        Keep every finished cell whose key (config, package version, data content) matches and whose files verify;
        ``False`` recomputes every cell.
    progress : callable, optional
        ``progress(cell, status)`` with status ``"reused"``, ``"start"`` or ``"done"``.
    cache_dir : path, optional
        The feature cache of frozen backbones (overrides the config's ``cache_dir``).
    trust_code : bool
        Allow the config's backbone entries to run Python code (``py:`` specs; a checkpoint's ``py:`` reference
        where the entry also says ``trust_code = true``). Without it such a config is refused before anything is
        imported: a config is data, and a key in it cannot grant trust to itself.

    Returns
    -------
    SweepResult
    """
    cfg = load_config(config, trust_code=trust_code)
    out = Path(out_dir)
    _check_out(out)
    cache = cache_dir if cache_dir is not None else cfg.raw.get("cache_dir")
    result = SweepResult(out_dir=out)
    loaded: dict = {}
    for cell in cfg.cells:  # a missing or unreadable dataset fails here, before any cell is trained
        load_splits(cell.dataset, cell.config["data"], loaded)
    records, folders = [], []
    for cell in cfg.cells:
        folder = out / CELLS / cell.name
        splits, data = load_splits(cell.dataset, cell.config["data"], loaded)
        record = finished(cell, folder, data) if resume else None
        if record is not None:
            result.reused.append(cell.name)
            status = "reused"
        else:
            if progress is not None:
                progress(cell, "start")
            record = run_cell(cell, folder, splits, data, cache_dir=cache)
            result.computed.append(cell.name)
            status = "done"
        if progress is not None:
            progress(cell, status)
        records.append(record)
        folders.append(folder)
    result.tables = aggregate(records, folders)
    write_aggregate(result.tables, out)
    return result
