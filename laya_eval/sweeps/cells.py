"""One sweep cell: train or fit the head, write the checkpoint, evaluate into the cell's result folder.

A cell folder holds ``{cell}.pt``, ``eval/`` (the standard result folder of :func:`laya_eval.evaluate`)
and, written last, ``cell.json``: the cell key, the test metrics, the mean layer weights, the sha256 of
every file, and laya-eval's version and code (``code``: :func:`~laya_eval.output.origin.code_origin`, a record
only; the key holds the code's sha256 on its own). A cell is finished exactly when ``cell.json`` has the
expected key and every file verifies.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from laya_eval.data import Dataset, load_dataset
from laya_eval.errors import LayaEvalError
from laya_eval.models.layered import LayeredModel
from laya_eval.output.files import (
    atomic_write_text,
    data_content_sha256,
    file_sha256,
    json_sha256,
    verify_result_folder,
)
from laya_eval.output.origin import code_origin, package_source_sha256
from laya_eval.sweeps.config import Cell, evaluation_options, training_options
from laya_eval.version import __version__

__all__ = ["CELL_FILE", "cell_key", "data_digests", "finished", "load_splits", "mean_layer_weights", "run_cell"]

CELL_FILE = "cell.json"
_SPLITS = ("train", "val", "test")


def data_digests(splits: dict[str, Dataset]) -> dict[str, str]:
    """The sha256 of each split's content (as the feature cache keys it)."""
    return {name: data_content_sha256(data.x, data.y) for name, data in splits.items()}


def cell_key(cell: Cell, data: dict[str, str]) -> str:
    """Everything that decides the cell's results: its config, laya-eval's code (the sha256 of its source files,
    :func:`~laya_eval.output.origin.package_source_sha256`, so changed code recomputes every cell), the content of
    its data splits (``data``: :func:`data_digests`) and, for a checkpoint given by path, the checkpoint's sha256."""
    parts: dict[str, Any] = {"cell": cell.config, "code": package_source_sha256(), "data": data}
    model = cell.backbone.get("model")
    if model and Path(model).is_file():
        parts["model_sha256"] = file_sha256(model)
    return json_sha256(parts)


def _eval_folders(folder: Path) -> list[Path]:
    ev = folder / "eval"
    if (ev / "manifest.json").is_file():
        return [ev]
    return sorted(p for p in ev.iterdir() if p.is_dir() and not p.name.startswith(".")) if ev.is_dir() else []


def finished(cell: Cell, folder: Path, data: dict[str, str]) -> dict[str, Any] | None:
    """The cell record when ``folder`` holds this cell's complete, verified result; else None."""
    try:
        record = json.loads((folder / CELL_FILE).read_text())
        if record.get("key") != cell_key(cell, data):
            return None
        for rel, digest in record["files"].items():
            if file_sha256(folder / rel) != digest:
                return None
        evals = _eval_folders(folder)
        if len(evals) != len(record["ablations"]) or not evals:
            return None
        for ev in evals:
            verify_result_folder(ev)
    except (OSError, ValueError, KeyError, TypeError, LayaEvalError):
        return None
    return record


def mean_layer_weights(
    model: LayeredModel, data: Dataset, batch_size: int = 512, hidden: list[torch.Tensor] | None = None
) -> torch.Tensor | None:
    """Mean LAYA α / ScalarMix weight per layer over ``data``, (L,), or None for heads without weights.

    ``hidden``: the split's head inputs when they are already at hand (the feature cache of a frozen backbone),
    so that the backbone does not run again.
    """
    total = None
    with torch.no_grad():
        for start in range(0, len(data), batch_size):
            if hidden is not None:
                states = [h[start : start + batch_size] for h in hidden]
            else:
                states = model.hidden_states(data.subset(slice(start, start + batch_size)).x)
            w = model.head.layer_weights(states)
            if w is None:
                return None
            total = w.sum(0) if total is None else total + w.sum(0)
    return total / len(data)


def load_splits(dataset: str, data: dict[str, Any], loaded: dict) -> tuple[dict[str, Dataset], dict[str, str]]:
    """train / val / test of ``dataset``, each cut to its ``{split}_limit`` first rows (loaded once per sweep),
    and their content digests."""
    out = {}
    for split in _SPLITS:
        key = (dataset, split)
        if key not in loaded:
            loaded[key] = load_dataset(
                dataset, split, data_dir=data.get("data_dir"), download=bool(data.get("download", False))
            )
        part, limit = loaded[key], data.get(f"{split}_limit")
        out[split] = part if limit is None or limit >= len(part) else part.subset(slice(0, limit))
    digest_key = (dataset, tuple(data.get(f"{s}_limit") for s in _SPLITS))
    if digest_key not in loaded:
        loaded[digest_key] = data_digests(out)
    return out, loaded[digest_key]


def _fit(cell: Cell, splits: dict[str, Dataset], cache_dir: Any):
    from laya_eval.training.head_fit import fit_head, train

    cfg = cell.config
    options = training_options(cfg["training"], cell.seed)
    b = cell.backbone
    if b["kind"] == "built-in":
        return train(
            b["name"], cell.head, splits, backbone_kwargs=b["kwargs"], head_kwargs=cfg["head_kwargs"], options=options
        )
    return fit_head(
        b["model"],
        splits,
        head=cell.head,
        head_kwargs=cfg["head_kwargs"],
        layers=b.get("layers"),
        pool=b.get("pool"),
        options=options,
        trust_code=bool(b.get("trust_code", False)),
        allow_unverified=bool(b.get("allow_unverified", False)),
        download=bool(cfg["data"].get("download", False)),
        cache_dir=cache_dir,
    )


def run_cell(
    cell: Cell, folder: Path, splits: dict[str, Dataset], data: dict[str, str], *, cache_dir: Any = None
) -> dict[str, Any]:
    """Compute the cell from scratch into ``folder`` (replaced) and return its record."""
    from laya_eval.engine.evaluation import evaluate
    from laya_eval.loading.checkpoints import save_checkpoint

    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    start = time.perf_counter()
    result = _fit(cell, splits, cache_dir)
    train_s = time.perf_counter() - start
    ckpt = save_checkpoint(result.model, folder / f"{cell.name}.pt")
    options = evaluation_options(cell.config["evaluation"], len(splits["test"]))
    evaluate(result.model, splits["test"], options=options, out=folder / "eval")
    cached = result.features.get("test")
    weights = mean_layer_weights(result.model, splits["test"], hidden=None if cached is None else cached.hidden)
    names = list(result.model.layer_names)
    tr = result.training
    record = {
        "key": cell_key(cell, data),
        "data_sha256": data,
        "cell": cell.name,
        "config": cell.config,
        "version": __version__,
        "code": dict(code_origin()),
        "ablations": list(options.ablations),
        "metrics": {
            "accuracy": result.metrics["test_accuracy"],
            "macro_f1": result.metrics["test_macro_f1"],
            "n_test": result.metrics["n_test"],
            "epochs_run": tr.epochs_run,
            "best_epoch": tr.best_epoch,
            "best_val_accuracy": tr.best_val_accuracy,
        },
        "layer_weights": None
        if weights is None
        else [
            {"layer": i, "layer_name": n, "mean_weight": w} for i, (n, w) in enumerate(zip(names, weights.tolist()), 1)
        ],
        "checkpoint": ckpt.name,
        "files": {ckpt.name: file_sha256(ckpt)},
        "timings": {"train_s": round(train_s, 1), "eval_s": round(time.perf_counter() - start - train_s, 1)},
    }
    atomic_write_text(folder / CELL_FILE, json.dumps(record, indent=2, sort_keys=True, default=str) + "\n")
    return record
