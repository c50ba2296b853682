"""Edits of a faithfulness result folder, each followed by re-hashing the manifest (so it verifies).

Each mutation is ``(name, function(folder, rng))``; the function edits the files in place. The manifest's
``files`` digests are then recomputed by :func:`rehash`, as a careless or hostile edit would do, so only
the checks of what ``report`` reads stand between the edit and the report.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd

CELL_VALUES = ("abc", "", "nan", "inf", "-1", "1.5", "1e999", "True", "<b>x</b>", "0x10", " ", "[1, 2]")
TABLES = ("summary.csv", "samples.csv", "layers.csv", "comparisons.csv")
LAYER_NAMES = ("block1", {"a": 1}, [1, 2, 3], ["a"], ["a", "b", "c", "d", "e"], None, [None, "b", "c"], 7)


def rehash(folder: Path) -> None:
    """Recompute the sha256 of every file the manifest lists (an edited folder that still verifies)."""
    path = folder / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["files"] = {
        rel: hashlib.sha256((folder / rel).read_bytes()).hexdigest()
        for rel in manifest["files"]
        if (folder / rel).is_file()
    }
    path.write_text(json.dumps(manifest, indent=2))


def _read(folder: Path, name: str) -> pd.DataFrame:
    return pd.read_csv(folder / name, dtype=str, keep_default_na=False)


def _write(folder: Path, name: str, table: pd.DataFrame) -> None:
    table.to_csv(folder / name, index=False)


def set_cell(name: str, value: str):
    def edit(folder: Path, rng: np.random.Generator) -> None:
        table = _read(folder, name)
        if table.empty:
            return
        column = table.columns[rng.integers(table.shape[1])]
        table.loc[table.index[rng.integers(len(table))], column] = value
        _write(folder, name, table)

    return edit


def drop_column(name: str):
    def edit(folder: Path, rng: np.random.Generator) -> None:
        table = _read(folder, name)
        _write(folder, name, table.drop(columns=table.columns[rng.integers(table.shape[1])]))

    return edit


def drop_rows(name: str):
    def edit(folder: Path, rng: np.random.Generator) -> None:
        table = _read(folder, name)
        keep = rng.random(len(table)) > 0.3
        _write(folder, name, table[keep])

    return edit


def duplicate_row(name: str):
    def edit(folder: Path, rng: np.random.Generator) -> None:
        table = _read(folder, name)
        if len(table):
            _write(folder, name, pd.concat([table, table.iloc[[rng.integers(len(table))]]]))

    return edit


def shuffle_column(name: str):
    def edit(folder: Path, rng: np.random.Generator) -> None:
        table = _read(folder, name)
        column = table.columns[rng.integers(table.shape[1])]
        table[column] = rng.permutation(table[column].to_numpy())
        _write(folder, name, table)

    return edit


def layer_names(value):
    def edit(folder: Path, rng: np.random.Generator) -> None:
        path = folder / "manifest.json"
        manifest = json.loads(path.read_text())
        manifest["layer_names"] = value
        path.write_text(json.dumps(manifest))

    return edit


def mutations() -> list[tuple[str, object]]:
    out = []
    for name in TABLES:
        out += [(f"{name}: cell {v!r}", set_cell(name, v)) for v in CELL_VALUES]
        out += [
            (f"{name}: drop a column", drop_column(name)),
            (f"{name}: drop rows", drop_rows(name)),
            (f"{name}: duplicate a row", duplicate_row(name)),
            (f"{name}: shuffle a column", shuffle_column(name)),
        ]
    out += [(f"manifest: layer_names {v!r}", layer_names(v)) for v in LAYER_NAMES]
    return out
