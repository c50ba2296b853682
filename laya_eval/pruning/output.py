"""Writing a pruning run: tables, figures and a manifest, as one result folder (replaced whole)."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

__all__ = ["PRUNE_FILES", "PruneRun", "prune_figures", "prune_to_folder", "write_prune"]

PRUNE_FILES = ("pruning.csv", "pruning_summary.csv", "pruning_comparisons.csv", "early_exit.csv", "latency.csv")


def _csv(table: pd.DataFrame) -> bytes:
    return table.to_csv(index=False, float_format="%.8g", lineterminator="\n").encode()


def write_prune(result, out_dir: str | os.PathLike, *, meta: Mapping[str, Any], fmt: str | None = None,
                style: str = "default") -> list[Path]:
    """Write the tables, ``pruning.<fmt>``, ``early_exit.<fmt>`` and ``manifest.json`` into ``out_dir``.

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

    tables = dict(zip(PRUNE_FILES, (result.pruning, result.summary, result.comparisons, result.early_exit,
                                    result.latency)))
    files = {name: _csv(t) for name, t in tables.items() if t is not None}
    all_meta = {**dict(meta), **result.meta}
    files.update(figure_files(prune_figures(result, meta=all_meta, style=style), fmt=fmt, style=style))
    manifest = {"kind": "prune", **provenance(), **all_meta, "files": {n: sha256_bytes(b) for n, b in files.items()}}
    files["manifest.json"] = (json.dumps(manifest, indent=2, sort_keys=True, default=str) + "\n").encode()
    return write_result_folder(out_dir, files)


@dataclass
class PruneRun:
    """What :func:`prune_to_folder` did: the pruning result, the metadata written and the files."""

    result: Any
    meta: dict[str, Any]
    wall_time_s: float
    files: list[Path] = field(default_factory=list)


def prune_to_folder(model: str | os.PathLike, out_dir: str | os.PathLike, options=None, *, data: str | None = None,
                    data_dir: str | os.PathLike | None = None, limit: int | None = None,
                    cache_dir: str | os.PathLike | None = None, device: str = "cpu", trust_code: bool = False,
                    download: bool = False, fmt: str | None = None, style: str = "default",
                    on_start: Callable[[str], None] | None = None,
                    on_head: Callable[..., None] | None = None, allow_unverified: bool = False) -> PruneRun:
    """``laya-eval prune`` as one call: load ``model`` (a checkpoint, ``hf:`` or ``py:`` spec), run
    :func:`~laya_eval.pruning.run.prune` on its dataset (or ``data``; ``limit`` cuts the test split) and write
    the folder (:func:`write_prune`).

    ``out_dir``, ``fmt`` and ``style`` (as for :func:`write_prune`) are checked before any work; ``on_start``
    receives one line saying what is about to run, ``on_head(kept, seed)`` is called after every retrained head.
    ``trust_code``, ``download`` and ``allow_unverified`` are :func:`laya_eval.loading.specs.load_model`'s.
    """
    from laya_eval.data import load_splits
    from laya_eval.figures import check_format, check_style
    from laya_eval.loading.specs import load_model
    from laya_eval.models.devices import resolve_device
    from laya_eval.output.files import check_output_folder
    from laya_eval.pruning.options import PruneOptions
    from laya_eval.pruning.run import prune

    options = options or PruneOptions()
    check_output_folder(out_dir)
    check_style(style)
    if fmt is not None:
        check_format(fmt)
    loaded = load_model(model, trust_code=trust_code, download=download, map_location=resolve_device(device),
                        allow_unverified=allow_unverified)
    net = loaded.model
    name, splits = load_splits(data or net.info.dataset, data_dir=data_dir, download=download, test_limit=limit)
    start = time.perf_counter()
    if on_start is not None:
        on_start(f"{model}: {net.head.name} head, {name}, L = {net.n_layers}; encoding "
                 f"{sum(len(s) for s in splits)} samples once, then head-only work")
    result = prune(net, *splits, options, on_head=on_head, cache_dir=cache_dir)
    wall = time.perf_counter() - start
    meta = {"label": str(model), "checkpoint": loaded.provenance, "dataset": name, "split": "test",
            "ablations": list(options.ablations), "seeds": options.seeds, "train": dataclasses.asdict(options.train),
            "n_random": options.n_random, "n_random_refit": options.n_random_refit, "seed": options.seed,
            "bootstrap": options.bootstrap, "target": options.target}
    return PruneRun(result=result, meta=meta, wall_time_s=wall, files=write_prune(result, out_dir, meta=meta, fmt=fmt,
                                                                                style=style))


def prune_figures(result, *, meta: Mapping[str, Any], style: str = "default") -> dict[str, Any]:
    """``pruning`` (accuracy against layers removed) and, with an early-exit table, ``early_exit``."""
    from laya_eval.figures.pruning import early_exit_figure, pruning_figure

    figs = {"pruning": pruning_figure(result.pruning, meta=meta, style=style)}
    if result.early_exit is not None:
        figs["early_exit"] = early_exit_figure(result.early_exit, meta=meta, style=style)
    return figs
