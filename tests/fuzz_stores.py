"""A seeded fault injector over the stores laya-eval reads back: feature-cache entries and partial chunks.

Shared by ``tests/test_fuzz_stores.py`` (a few hundred faults per run) and
``benchmarks/fuzz_stores.py`` (thousands, plus checkpoint mutants from ``tests/fuzzing.py``).
A valid entry (or chunk) is written once; every case copies it, applies one seeded fault
(a flipped byte, truncation, appended or zeroed bytes, a deleted file, a FIFO, a symlink, a
folder in a file's place, an array rewritten with another dtype or shape and its meta.json
made consistent, meta.json edited) and reads it through the library in-process.

Outcomes: ``exit0`` (the result equals a fresh computation: the fault was caught and the work
redone, or the fault changed nothing), ``exit2`` (a one-line :class:`LayaEvalError`), ``wrong``
(a result that differs from a fresh computation: a damaged entry was trusted), ``traceback``
(any other exception) and ``hang`` (past the per-case time limit).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from tests.fuzzing import CaseTimeout, time_limit

__all__ = ["StoreReport", "fuzz_stores"]


def _encode(x: torch.Tensor) -> list[torch.Tensor]:
    w = torch.linspace(-1, 1, 8 * 4).reshape(8, 4)
    return [x @ w, torch.tanh(x @ w), torch.relu(x @ w[:, :2])]


def _data():
    from laya_eval.data.dataset import Dataset

    g = torch.Generator().manual_seed(0)
    return Dataset(
        x=torch.randn(37, 8, generator=g),
        y=torch.arange(37) % 4,
        class_names=("a", "b", "c", "d"),
        name="fuzz",
        split="train",
    )


def _records():
    from laya_eval.engine.records import Records

    rows = np.arange(20, 30)
    return Records(
        sample=rows.astype(np.int64),
        label=rows % 3,
        pred=(rows + 1) % 3,
        confidence=rows / 50.0,
        scores={"laya": np.outer(rows, np.arange(4)) / 9.0, "random": np.sin(np.outer(rows, np.ones(4)))},
        effects={"gate": np.outer(rows, np.ones(4)) / 3.0},
        deletion={"gate": {"laya": np.cos(np.outer(rows, np.arange(4)))}},
        diagnostics={"laya:check": rows / 7.0},
    )


# --------------------------------------------------------------------------- faults
def _bytes_fault(rng: random.Random, path: Path) -> str:
    raw = bytearray(path.read_bytes())
    what = rng.choice(["flip", "flip", "truncate", "append", "zero", "empty"])
    if what == "flip" and raw:
        i = rng.randrange(len(raw))
        raw[i] ^= 1 << rng.randrange(8)
    elif what == "truncate" and raw:
        raw = raw[: rng.randrange(len(raw))]
    elif what == "append":
        raw += bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
    elif what == "zero" and raw:
        i = rng.randrange(len(raw))
        raw[i : i + rng.randint(1, 32)] = bytes(min(32, len(raw) - i))
    else:
        raw = bytearray()
    path.write_bytes(bytes(raw))
    return what


def _kind_fault(rng: random.Random, path: Path, others: list[Path]) -> str:
    what = rng.choice(["fifo", "symlink", "folder", "delete", "dangling"])
    path.unlink()
    if what == "fifo":
        os.mkfifo(path)
    elif what == "symlink":
        path.symlink_to(rng.choice(others))
    elif what == "folder":
        path.mkdir()
    elif what == "dangling":
        path.symlink_to(path.with_name("nowhere"))
    return what


def _array_fault(rng: random.Random, folder: Path) -> str:
    """Rewrite one array with another dtype or shape and make meta.json's checksum agree (only the shape and
    dtype checks hold), or roll its rows in place (same shape and dtype; the checksum must catch it)."""
    from laya_eval.output.files import file_sha256

    name = rng.choice(sorted(p.name for p in folder.glob("*.npy")))
    array = np.load(folder / name)
    what = rng.choice(["float64", "float16", "int32", "short", "long", "wide", "roll"])
    array = {
        "float64": lambda a: a.astype(np.float64),
        "float16": lambda a: a.astype(np.float16),
        "int32": lambda a: a.astype(np.int32),
        "short": lambda a: a[:-1],
        "long": lambda a: np.concatenate([a, a[:1]]),
        "wide": lambda a: np.stack([a, a], -1),
        "roll": lambda a: np.roll(a, 1, axis=0),
    }[what](array)
    np.save(folder / name, array)
    if what == "roll":  # the values moved, the record did not: a stale file the checksum must catch
        return f"{name}:{what}"
    meta = json.loads((folder / "meta.json").read_text())
    meta["arrays"][name]["sha256"] = file_sha256(folder / name)
    if rng.random() < 0.5:  # and sometimes the recorded shape and dtype too
        meta["arrays"][name].update(dtype=array.dtype.str, shape=list(array.shape))
    (folder / "meta.json").write_text(json.dumps(meta))
    return f"{name}:{what}"


def _meta_fault(rng: random.Random, folder: Path) -> str:
    meta = json.loads((folder / "meta.json").read_text())
    pool = [None, -1, 0, 10**12, "x", [], {}, [1, 2], 1.5, True]
    target = rng.choice(["layer_dims", "arrays", "key", "n_layers", "array-record"])
    if target == "array-record":
        record = meta["arrays"][rng.choice(sorted(meta["arrays"]))]
        record[rng.choice(["dtype", "shape", "sha256"])] = rng.choice(pool)
    else:
        meta[target] = rng.choice(pool)
    (folder / "meta.json").write_text(json.dumps(meta))
    return f"meta:{target}"


# --------------------------------------------------------------------------- running
@dataclass
class StoreReport:
    """Counts per (store, outcome) and the first failures."""

    counts: Counter = field(default_factory=Counter)
    by_store: Counter = field(default_factory=Counter)
    failures: list = field(default_factory=list)

    def add(self, store: str, outcome: str, detail: str) -> None:
        self.counts[outcome] += 1
        self.by_store[(store, outcome)] += 1
        if outcome not in ("exit0", "exit2") and len(self.failures) < 20:
            self.failures.append((store, outcome, detail))


def _outcome(call, check, timeout: float) -> tuple[str, str]:
    from laya_eval.errors import LayaEvalError

    try:
        with time_limit(timeout), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = call()
    except LayaEvalError:
        return "exit2", ""
    except CaseTimeout:
        return "hang", ""
    except Exception as exc:  # noqa: BLE001 - counting escaping exceptions is the point
        return "traceback", f"{type(exc).__name__}: {str(exc)[:160]}"
    return ("exit0", "") if check(got) else ("wrong", "a result that differs from a fresh computation")


def _cache_case(rng: random.Random, template: Path, work: Path, data, key, fresh, timeout: float) -> tuple[str, str]:
    from laya_eval.loading.feature_cache import extract_features

    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(template, work / template.name, symlinks=True)
    folder = work / template.name
    files = sorted(folder.iterdir())
    kind = rng.random()
    if kind < 0.45:
        target = rng.choice(files)
        what = f"{target.name}:{_bytes_fault(rng, target)}"
    elif kind < 0.65:
        target = rng.choice(files)
        what = f"{target.name}:{_kind_fault(rng, target, [f for f in files if f != target])}"
    elif kind < 0.85:
        what = _array_fault(rng, folder)
    else:
        what = _meta_fault(rng, folder)

    def same(feats) -> bool:
        return (
            all(torch.equal(a, b) for a, b in zip(feats.hidden, fresh))
            and len(feats.hidden) == len(fresh)
            and torch.equal(feats.y, data.y)
        )

    outcome, detail = _outcome(
        lambda: extract_features(_encode, data, key, cache_dir=work, batch_size=9), same, timeout
    )
    return outcome, f"{what}: {detail}"


def _chunk_case(rng: random.Random, template: Path, work: Path, timeout: float) -> tuple[str, str]:
    from laya_eval.engine.partial import PartialStore

    shutil.rmtree(work, ignore_errors=True)
    (work / ".partial").mkdir(parents=True)
    path = work / ".partial" / template.name
    shutil.copy(template, path)
    (work / ".partial" / "other.npz").write_bytes(template.read_bytes())
    what = _bytes_fault(rng, path) if rng.random() < 0.75 else _kind_fault(rng, path, [path.with_name("other.npz")])
    want = _records().to_arrays()

    def load():
        return PartialStore(work, "fuzz-key", resume=True, n_layers=4).load_chunk(20, 30)

    def same(records) -> bool:  # None: the chunk is recomputed; records: they must be the written ones
        if records is None:
            return True
        got = records.to_arrays()
        return set(got) == set(want) and all(np.array_equal(got[k], want[k]) for k in want)

    outcome, detail = _outcome(load, same, timeout)
    return outcome, f"{what}: {detail}"


def fuzz_stores(n_cache: int, n_chunks: int, seed: int, folder: Path, timeout: float = 10.0) -> StoreReport:
    """Run ``n_cache`` faults over a feature-cache entry and ``n_chunks`` over a partial chunk."""
    from laya_eval.engine.partial import PartialStore
    from laya_eval.loading.feature_cache import extract_features, feature_key

    rng, report, data = random.Random(seed), StoreReport(), _data()
    key = feature_key({"name": "fuzz-encoder"}, data)
    with torch.no_grad():
        fresh = [h.float() for h in _encode(data.x)]
    template = extract_features(_encode, data, key, cache_dir=folder / "template", batch_size=9).path
    for i in range(n_cache):
        outcome, detail = _cache_case(rng, template, folder / "cache-case", data, key, fresh, timeout)
        report.add("cache", outcome, f"#{i} {detail}")
    PartialStore(folder / "chunk-template", "fuzz-key", resume=False, n_layers=4).save_chunk(20, 30, _records())
    chunk = next((folder / "chunk-template" / ".partial").glob("chunk-*.npz"))
    for i in range(n_chunks):
        outcome, detail = _chunk_case(rng, chunk, folder / "chunk-case", timeout)
        report.add("chunk", outcome, f"#{i} {detail}")
    return report
