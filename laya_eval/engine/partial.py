"""Resumable runs: per-chunk records and the dataset statistics kept under ``OUT/.partial/``.

Every chunk (a fixed range of sample indices, independent of the batch size and the
number of processes) is written as one ``.npz`` file, atomically, as soon as it is
done, together with the *run key* (:meth:`laya_eval.engine.plan.Plan.key`: a hash of
everything that changes a record: the model's identity, the data's name, split, size and
content sha256, the methods, the ablations, the scope, the seed, the IG options, the
device type and precision) and a sha256 over its own arrays. ``--resume`` refuses a folder
whose partial files came from other options or other data, and refuses a folder holding a
finished result made with other options (its manifest's ``result_key``). A chunk is used
only after it passes every check: a regular file of at most :func:`max_chunk_bytes`, an
uncompressed archive, the checksum, the rows (one per sample of its range, ids in order),
dtypes and shapes. A damaged chunk (a flipped byte, a truncated or unreadable archive, a
FIFO or a folder in its place) or a foreign one (rows of another range) is recomputed with
one :class:`~laya_eval.errors.RecomputedWarning`. A finished run's result folder replaces
``OUT`` whole, so its partial files go with the old folder. Files are read with
``allow_pickle=False``.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import warnings
import zipfile
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch

from laya_eval.engine.dataset_stats import DatasetStatistics
from laya_eval.errors import ConfigError, RecomputedWarning
from laya_eval.output.files import atomic_write_bytes, json_sha256
from laya_eval.output.reading import UnsafeFile, read_regular_file
from laya_eval.engine.records import Records

__all__ = [
    "MAX_PARTIAL_ARRAYS",
    "PARTIAL_FOLDER",
    "PartialStore",
    "arrays_sha256",
    "chunk_grid",
    "max_chunk_bytes",
    "run_key",
]

PARTIAL_FOLDER = ".partial"
#: Arrays one partial file may hold (per-method scores, effects, deletion curves and diagnostics).
MAX_PARTIAL_ARRAYS = 4096
_MANIFEST_BYTES = 64 << 20
_INT_COLUMNS = ("sample", "label", "pred")


def run_key(fields: dict[str, Any]) -> str:
    """A hex digest of the JSON of ``fields`` (sorted keys)."""
    return json_sha256(fields)


def chunk_grid(start: int, stop: int, size: int) -> Iterator[tuple[int, int]]:
    """The global grid of ``size`` samples cut to ``[start, stop)``: the same chunks for any sharding."""
    lo = start
    while lo < stop:
        hi = min((lo // size + 1) * size, stop)
        yield lo, hi
        lo = hi


def max_chunk_bytes(rows: int, n_layers: int) -> int:
    """The largest partial file read for ``rows`` samples of ``n_layers`` layers: every array float64,
    at most :data:`MAX_PARTIAL_ARRAYS` of them, plus 1 MiB of archive overhead."""
    return (rows * max(n_layers, 1) * 8 + 512) * MAX_PARTIAL_ARRAYS + (1 << 20)


def arrays_sha256(arrays: dict[str, np.ndarray]) -> str:
    """Hex SHA-256 over the names, dtypes, shapes and bytes of ``arrays`` in sorted name order."""
    digest = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        digest.update(f"{name}\0{a.dtype.str}\0{a.shape}\0".encode())
        digest.update(a.tobytes())
    return digest.hexdigest()


class _Damaged(Exception):
    """A partial file that is not used (the message says why)."""


class PartialStore:
    """The partial files of one run under ``out_dir/.partial``.

    Parameters
    ----------
    out_dir : path
    key : str
        :func:`run_key` of the run.
    resume : bool
        Reuse matching files; without it, existing partial files are ignored and overwritten.
    result_key : str, optional
        The key of the finished result this run writes; with ``resume``, a finished result in
        ``out_dir`` whose manifest records another one is refused.
    n_layers : int, optional
        Layers per record row, checked on every chunk (any when None).
    """

    def __init__(
        self,
        out_dir: str | os.PathLike,
        key: str,
        *,
        resume: bool,
        result_key: str | None = None,
        n_layers: int | None = None,
    ) -> None:
        self.out_dir = Path(out_dir)
        self.folder = self.out_dir / PARTIAL_FOLDER
        self.key = key
        self.resume = resume
        self.n_layers = n_layers
        if resume:
            if result_key is not None:
                self._check_finished(result_key)
            self._check_key()

    # ------------------------------------------------------------------ refusals before any work
    def _check_finished(self, result_key: str) -> None:
        manifests = [self.out_dir / "manifest.json", *sorted(self.out_dir.glob("*/manifest.json"))]
        for path in (p for p in manifests if os.path.lexists(p)):
            try:
                recorded = json.loads(read_regular_file(path, _MANIFEST_BYTES)).get("result_key")
            except (UnsafeFile, ValueError, RecursionError, AttributeError):
                recorded = None
            if recorded != result_key:
                raise ConfigError(
                    f"--resume: '{self.out_dir}' holds a finished result made with other options (or another model "
                    "or data), see its manifest.json; rerun without --resume to replace it, or with its options."
                )

    def _check_key(self) -> None:
        if not self.folder.is_dir() or self.folder.is_symlink():
            return
        for path in sorted(self.folder.glob("*.npz")):
            try:
                got = self._read(path, None).get("key")
            except _Damaged:
                continue  # recomputed (with a warning) when its turn comes
            if got is not None and str(got) != self.key:
                raise ConfigError(
                    f"--resume: the partial results in '{self.folder}' were made by a run with other options, "
                    "another checkpoint or other data; rerun with the same options, or without --resume to start over."
                )

    # ------------------------------------------------------------------ reading and writing
    def _read(self, path: Path, max_bytes: int | None) -> dict[str, np.ndarray]:
        """Every array of a partial file, after the file, archive and checksum checks (:class:`_Damaged`)."""
        limit = max_bytes if max_bytes is not None else max_chunk_bytes(CHUNK_ROWS_BOUND, self.n_layers or 1)
        try:
            raw = read_regular_file(path, limit)
        except UnsafeFile as err:
            raise _Damaged(str(err)) from None
        try:
            with zipfile.ZipFile(io.BytesIO(raw)) as archive:
                infos = archive.infolist()
            if len(infos) > MAX_PARTIAL_ARRAYS + 2 or any(
                i.compress_type != zipfile.ZIP_STORED or i.file_size > len(raw) for i in infos
            ):
                raise _Damaged("an archive np.savez does not write (compressed or oversized members)")
            with np.load(io.BytesIO(raw), allow_pickle=False) as npz:
                arrays = {k: npz[k] for k in npz.files}
        except _Damaged:
            raise
        except Exception as err:  # noqa: BLE001 - zip and npy parsing fail on damaged bytes in many ways
            raise _Damaged(f"not a readable archive ({type(err).__name__})") from None
        if "key" not in arrays or "checksum" not in arrays:
            raise _Damaged("no run key or checksum")
        checksum = str(arrays.pop("checksum"))
        if arrays_sha256(arrays) != checksum:
            raise _Damaged("its arrays do not match its sha256 checksum (damaged bytes)")
        return arrays

    def _write(self, name: str, arrays: dict[str, np.ndarray]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / name
        if path.is_symlink() or (os.path.lexists(path) and not path.is_file()):
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
        stamped = {"key": np.array(self.key), **arrays}
        buffer = io.BytesIO()
        np.savez(buffer, checksum=np.array(arrays_sha256(stamped)), **stamped)
        atomic_write_bytes(path, buffer.getvalue())

    def _load(self, name: str, max_bytes: int, check: Any = None) -> dict[str, np.ndarray] | None:
        """The arrays of ``name`` when resuming and every check passes; None (with a warning if the file was
        there but failed a check) otherwise."""
        if not self.resume:
            return None
        path = self.folder / name
        if not os.path.lexists(path):
            return None
        try:
            arrays = self._read(path, max_bytes)
            if str(arrays.pop("key")) != self.key:
                raise _Damaged("made by a run with other options")
            if check is not None:
                check(arrays)
        except _Damaged as err:
            warnings.warn(
                f"the partial result '{path}' is not used ({err}); recomputing it.", RecomputedWarning, stacklevel=3
            )
            return None
        return arrays

    @staticmethod
    def _chunk_name(start: int, stop: int) -> str:
        return f"chunk-{start:010d}-{stop:010d}.npz"

    def _check_rows(self, start: int, stop: int) -> Any:
        def check(arrays: dict[str, np.ndarray]) -> None:
            rows = stop - start
            missing = [c for c in (*_INT_COLUMNS, "confidence") if c not in arrays]
            if missing:
                raise _Damaged(f"lacks {missing}")
            if not np.array_equal(arrays["sample"], np.arange(start, stop)):
                raise _Damaged(f"its rows are not the samples {start}-{stop - 1} in order")
            for name, a in arrays.items():
                kind = name.partition("/")[0]
                want = np.int64 if name in _INT_COLUMNS else np.float64
                two_d = kind in ("scores", "effects", "deletion")
                layers_ok = not two_d or (a.ndim == 2 and (self.n_layers is None or a.shape[1] == self.n_layers))
                if kind not in ("scores", "effects", "deletion", "diagnostics") and name not in (
                    *_INT_COLUMNS,
                    "confidence",
                ):
                    raise _Damaged(f"holds an unknown array {name[:80]!r}")
                if a.dtype != want or a.shape[:1] != (rows,) or a.ndim != (2 if two_d else 1) or not layers_ok:
                    raise _Damaged(f"{name[:80]}: {a.dtype} {a.shape}, expected {np.dtype(want)} with {rows} rows")

        return check

    def load_chunk(self, start: int, stop: int) -> Records | None:
        """The records of samples ``[start, stop)`` from an earlier attempt, if any (and intact)."""
        limit = max_chunk_bytes(stop - start, self.n_layers or 1)
        arrays = self._load(self._chunk_name(start, stop), limit, self._check_rows(start, stop))
        return None if arrays is None else Records.from_arrays(arrays)

    def save_chunk(self, start: int, stop: int, records: Records) -> None:
        """Keep the records of samples ``[start, stop)``."""
        self._write(self._chunk_name(start, stop), records.to_arrays())

    def load_statistics(self) -> DatasetStatistics | None:
        """The reduced dataset statistics of an earlier attempt, if any (and intact)."""
        limit = (self.n_layers or 1) * MAX_STATISTIC_WIDTH * 8 * 8 + (1 << 20)  # a few statistics, sum + count each
        arrays = self._load("statistics.npz", limit)
        if arrays is None:
            return None
        try:
            sums: dict[str, list] = {}
            for key in sorted(arrays, key=lambda k: (k.rsplit("/", 2)[0], int(k.rsplit("/", 2)[1]))):
                name, layer, part = key.rsplit("/", 2)
                pairs = sums.setdefault(name, [])
                if part == "sum":
                    pairs.append((torch.from_numpy(arrays[key]), torch.from_numpy(arrays[f"{name}/{layer}/count"])))
        except (ValueError, KeyError, IndexError, TypeError):
            warnings.warn(
                f"the partial result '{self.folder / 'statistics.npz'}' is not used (unknown arrays); recomputing it.",
                RecomputedWarning,
                stacklevel=2,
            )
            return None
        return DatasetStatistics(sums)

    def save_statistics(self, stats: DatasetStatistics) -> None:
        """Keep the reduced dataset statistics."""
        arrays = {}
        for name, pairs in stats.to_cpu().sums.items():
            for i, (s, c) in enumerate(pairs):
                arrays[f"{name}/{i}/sum"], arrays[f"{name}/{i}/count"] = s.numpy(), c.numpy()
        self._write("statistics.npz", arrays)


#: Rows assumed when a partial file is read only for its key (the largest chunk laya-eval writes).
CHUNK_ROWS_BOUND = 1 << 16
#: Values per layer a dataset statistic may hold (a block's full output at network scope: tokens x width).
MAX_STATISTIC_WIDTH = 1 << 20
