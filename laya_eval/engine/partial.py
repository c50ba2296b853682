"""Resumable runs: per-chunk records and the dataset statistics kept under ``OUT/.partial/``.

Every chunk (a fixed range of sample indices, independent of the batch size and the
number of processes) is written as one ``.npz`` file, atomically, as soon as it is
done, together with the *run key*: a hash of everything that changes the numbers (the
checkpoint's sha256, the data, the methods, the ablations, the scope, the seed, the IG
options, the device type and precision). ``--resume`` reuses the chunks whose key
matches and refuses a folder whose partial files came from other options. A finished
run's result folder replaces ``OUT`` whole, so its partial files go with the old folder.
Files are read with ``allow_pickle=False``.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from laya_eval.engine.dataset_stats import DatasetStatistics
from laya_eval.errors import ConfigError
from laya_eval.output.files import atomic_write_bytes, json_sha256
from laya_eval.engine.records import Records

__all__ = ["PARTIAL_FOLDER", "PartialStore", "run_key"]

PARTIAL_FOLDER = ".partial"


def run_key(fields: dict[str, Any]) -> str:
    """A hex digest of the JSON of ``fields`` (sorted keys)."""
    return json_sha256(fields)


class PartialStore:
    """The partial files of one run under ``out_dir/.partial``.

    Parameters
    ----------
    out_dir : path
    key : str
        :func:`run_key` of the run.
    resume : bool
        Reuse matching files; without it, existing partial files are ignored and overwritten.
    """

    def __init__(self, out_dir: str | os.PathLike, key: str, *, resume: bool) -> None:
        self.folder = Path(out_dir) / PARTIAL_FOLDER
        self.key = key
        self.resume = resume
        if resume:
            self._check_key()

    def _check_key(self) -> None:
        for path in sorted(self.folder.glob("*.npz")):
            got = self._read(path).get("key")
            if got is not None and str(got) != self.key:
                raise ConfigError(
                    f"--resume: the partial results in '{self.folder}' were made by a run with other options or "
                    "another checkpoint; rerun with the same options, or without --resume to start over."
                )

    def _read(self, path: Path) -> dict[str, np.ndarray]:
        try:
            with np.load(path, allow_pickle=False) as npz:
                return {k: npz[k] for k in npz.files}
        except (OSError, ValueError, EOFError, KeyError):
            return {}  # a damaged partial file is recomputed, never trusted

    def _write(self, name: str, arrays: dict[str, np.ndarray]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        buffer = io.BytesIO()
        np.savez(buffer, key=np.array(self.key), **arrays)
        atomic_write_bytes(self.folder / name, buffer.getvalue())

    def _load(self, name: str) -> dict[str, np.ndarray] | None:
        if not self.resume:
            return None
        path = self.folder / name
        if not path.exists():
            return None
        arrays = self._read(path)
        if str(arrays.pop("key", "")) != self.key:
            return None
        return arrays

    @staticmethod
    def _chunk_name(start: int, stop: int) -> str:
        return f"chunk-{start:010d}-{stop:010d}.npz"

    def load_chunk(self, start: int, stop: int) -> Records | None:
        """The records of samples ``[start, stop)`` from an earlier attempt, if any."""
        arrays = self._load(self._chunk_name(start, stop))
        return None if arrays is None else Records.from_arrays(arrays)

    def save_chunk(self, start: int, stop: int, records: Records) -> None:
        """Keep the records of samples ``[start, stop)``."""
        self._write(self._chunk_name(start, stop), records.to_arrays())

    def load_statistics(self) -> DatasetStatistics | None:
        """The reduced dataset statistics of an earlier attempt, if any."""
        arrays = self._load("statistics.npz")
        if arrays is None:
            return None
        sums: dict[str, list] = {}
        for key in sorted(arrays, key=lambda k: (k.rsplit("/", 2)[0], int(k.rsplit("/", 2)[1]))):
            name, layer, part = key.rsplit("/", 2)
            pairs = sums.setdefault(name, [])
            if part == "sum":
                pairs.append((torch.from_numpy(arrays[key]), torch.from_numpy(arrays[f"{name}/{layer}/count"])))
        return DatasetStatistics(sums)

    def save_statistics(self, stats: DatasetStatistics) -> None:
        """Keep the reduced dataset statistics."""
        arrays = {}
        for name, pairs in stats.to_cpu().sums.items():
            for i, (s, c) in enumerate(pairs):
                arrays[f"{name}/{i}/sum"], arrays[f"{name}/{i}/count"] = s.numpy(), c.numpy()
        self._write("statistics.npz", arrays)
