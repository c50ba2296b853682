"""``prune --target next-token``: remove a causal LM's blocks one at a time in each score's order (ShortGPT).

Scores are computed on the validation windows and averaged per block (a method's dataset-level ranking); the
blocks are removed least important first, each removal a ``skip`` (the block's update dropped, the stream passed
on), and after k = 0 … L-1 removals the held-out perplexity is measured on the test windows:
``exp(token-weighted mean next-token loss)``. Bounds: the ``oracle`` removes, at every step, the block whose
removal raises the validation loss least (greedy by measured loss); ``random`` is the mean, per window, of
``n_random`` seeded random orders. The area under each window's loss-against-k curve (trapezoid on the fraction
of removable blocks removed, in nats: lower is better) gets a bootstrap interval over test windows, and every
pair of rankings a paired interval of the difference (:mod:`laya_eval.pruning.auc`).
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from laya_eval.catalog import IG_STEPS, MAX_MEMORY_MB, NEXT_TOKEN_METHODS
from laya_eval.errors import ConfigError
from laya_eval.language.decoder import SKIP, CausalLM, load_causal_lm, run_windows
from laya_eval.language.evaluation import check_methods_and_text, intact_pass, load_text_windows
from laya_eval.language.methods import NEXT_TOKEN_REGISTRY
from laya_eval.language.passes import batch_rows, batches, row_chunk, shared_losses
from laya_eval.language.text import TextWindows
from laya_eval.models.devices import resolve_device
from laya_eval.pruning.auc import pruning_comparisons, pruning_summary
from laya_eval.pruning.options import PruneOptions

__all__ = ["NEXT_TOKEN_PRUNING_COLUMNS", "NextTokenPruning", "prune_next_token"]

#: The memory budget of a next-token pruning run (windows per batch and rows per model call; see
#: :func:`laya_eval.language.passes.row_chunk`): the evaluation's default ``--max-memory``.
PRUNE_MEMORY_MB = MAX_MEMORY_MB

NEXT_TOKEN_PRUNING_COLUMNS = ["method", "ranking", "ablation", "k_removed", "layers_kept", "loss", "perplexity"]
ORDER_RULE = "dataset ranking: the method's mean score per block over the validation windows, removed lowest first"


@dataclass
class NextTokenPruning:
    """What :func:`prune_next_token` returns.

    Attributes
    ----------
    table : DataFrame
        ``pruning.csv``: one row per (ranking, k) with the held-out mean loss and perplexity (columns
        :data:`NEXT_TOKEN_PRUNING_COLUMNS`).
    orders : dict of str to list of int
        Each ranking's removal order (blocks 1-based, first removed first; ``random``: the first seeded order).
    summary, comparisons : DataFrame
        Area under the loss curves with intervals, and paired differences (``pruning_summary.csv``,
        ``pruning_comparisons.csv``).
    manifest : dict
    files : list of Path
    """

    table: pd.DataFrame
    orders: dict[str, list[int]]
    summary: pd.DataFrame
    comparisons: pd.DataFrame
    manifest: dict[str, Any]
    files: list[Path] = field(default_factory=list)


def _weights(data: TextWindows) -> np.ndarray:
    return np.array([w.size - 1 for w in data.ids], np.float64)


def _prefix_scales(order: np.ndarray, n_windows: int, device) -> torch.Tensor:
    """(B, L, L): row k keeps every block but the first k of ``order``."""
    n_layers = order.size
    keep = np.ones((n_layers, n_layers), np.float32)
    for k in range(1, n_layers):
        keep[k:, order[k - 1]] = 0
    return torch.tensor(keep, device=device)[None].expand(n_windows, n_layers, n_layers).contiguous()


def _kept(lm: CausalLM, batch, rows: int) -> list[torch.Tensor]:
    """Every block's output in the batch's intact pass (no gradients), ``rows`` windows at a time."""
    outs = []
    with torch.no_grad():
        for s in range(0, batch.ids.shape[0], rows):
            outs.append(run_windows(lm, batch.ids[s : s + rows], batch.mask[s : s + rows], keep=True).outputs)
    return [torch.cat([o[i] for o in outs]) for i in range(lm.n_layers)]


def _curves(lm: CausalLM, parts, orders: list[np.ndarray], rows: int, keep_rows: int) -> list[np.ndarray]:
    """Per order, (N, L) per-window loss after k = 0 … L-1 removals in it. Every batch runs its intact pass once
    and each removal from its first removed block (the rows that orders share run once)."""
    device = parts[0].ids.device
    out: list[list[np.ndarray]] = [[] for _ in orders]
    for b in parts:
        scales = [_prefix_scales(o, b.ids.shape[0], device) for o in orders]
        for acc, losses in zip(out, shared_losses(lm, b, scales, SKIP, rows, kept=_kept(lm, b, keep_rows))):
            acc.append(losses.cpu().numpy())
    return [np.concatenate(a) for a in out]


def _greedy_order(lm: CausalLM, parts, weights: np.ndarray, rows: int, keep_rows: int) -> np.ndarray:
    """The oracle: at every step the block whose removal (with those removed so far) raises the token-weighted
    validation loss least (ties: the lowest block). The validation windows' intact block outputs are kept across
    the steps (each removal then starts at its first removed block) where they fit in three sixteenths of the
    budget (the share of a batch's kept states); otherwise the removals run from the input."""
    n_layers, removed = lm.n_layers, []
    device = parts[0].ids.device
    states = sum(b.ids.numel() for b in parts) * lm.parts.embeddings.weight.shape[1] * 4 * n_layers
    kept = [_kept(lm, b, keep_rows) for b in parts] if 16 * states <= 3 * (PRUNE_MEMORY_MB << 20) else None
    for _ in range(n_layers - 1):
        left = [i for i in range(n_layers) if i not in removed]
        keep = np.ones((len(left), n_layers), np.float32)
        keep[:, removed] = 0
        keep[np.arange(len(left)), left] = 0
        scale = torch.tensor(keep, device=device)[None]
        losses = []
        for j, b in enumerate(parts):
            start = None if kept is None else kept[j]
            (got,) = shared_losses(lm, b, [scale.expand(b.ids.shape[0], -1, -1)], SKIP, rows, kept=start)
            losses.append(got.cpu().numpy())
        losses = np.concatenate(losses)
        removed.append(left[int(np.argmin(weights @ losses))])
    return np.array(removed + [i for i in range(n_layers) if i not in removed])


def _dataset_scores(lm: CausalLM, parts, methods, options: PruneOptions, grad_rows: int) -> dict[str, np.ndarray]:
    scores: dict[str, list[np.ndarray]] = {m: [] for m in methods}
    for batch in parts:
        intact, _ = intact_pass(
            lm,
            batch,
            grad_rows,
            seed=options.seed,
            n_steps=IG_STEPS,
            fill=SKIP,
            gradients=any(NEXT_TOKEN_REGISTRY[m].gradients for m in methods),
        )
        for m in methods:
            with torch.no_grad():
                scores[m].append(NEXT_TOKEN_REGISTRY[m].fn(intact).double().cpu().numpy())
    return {m: np.concatenate(v).mean(0) for m, v in scores.items()}


def _rows(name: str, curves: np.ndarray, order: np.ndarray | None, weights: np.ndarray) -> list[dict[str, Any]]:
    out = []
    n_layers = curves.shape[1]
    for k in range(n_layers):
        loss = float(weights @ curves[:, k] / weights.sum())
        kept = "" if order is None else ",".join(str(i + 1) for i in sorted(order[k:].tolist()))
        row = {"method": name, "ranking": "dataset", "ablation": "skip", "k_removed": k, "layers_kept": kept}
        out.append({**row, "loss": loss, "perplexity": math.exp(loss)})
    return out


def prune_next_token(
    model: str,
    data: str,
    *,
    options: PruneOptions | None = None,
    limit: int | None = None,
    out: str | os.PathLike | None = None,
    data_dir: str | os.PathLike | None = None,
    device: str = "cpu",
    download: bool = False,
    fmt: str | None = None,
    style: str = "default",
) -> NextTokenPruning:
    """Held-out perplexity of a causal LM after removing k blocks in each score's order, the oracle and random.

    Parameters
    ----------
    model : str
        ``hf:DIR``, a causal LM with its LM head and tokenizer.
    data : str
        ``text:FILE`` or ``text:rotten-tomatoes``: scores and the oracle on the validation windows, perplexity on
        the test windows (``limit``: the first windows of each).
    options : PruneOptions
        ``target="next-token"``; ``methods`` (default: every next-token method but random), ``n_random``,
        ``seed``, ``batch_size``, ``bootstrap``, ``context``.
    out : path, optional
        Folder for pruning.csv, pruning_summary.csv, pruning_comparisons.csv, the figure and manifest.json.
    """
    from laya_eval.output.files import check_output_folder, write_result_folder

    options = options or PruneOptions(target="next-token")
    if options.target != "next-token":
        raise ConfigError(f"PruneOptions.target must be 'next-token' here; got {options.target!r}.")
    methods = list(check_methods_and_text([m for m in (options.methods or NEXT_TOKEN_METHODS) if m != "random"], data))
    if out is not None:
        check_output_folder(out)
    torch.manual_seed(options.seed)
    lm = load_causal_lm(model, download=download, device=resolve_device(device))
    val, test = (
        load_text_windows(lm, data, split=s, context=options.context, data_dir=data_dir).take(limit)
        for s in ("val", "test")
    )
    length = max(max(w.size for w in val.ids), max(w.size for w in test.ids))
    rows = row_chunk(lm, length, PRUNE_MEMORY_MB)
    size = batch_rows(lm, length, PRUNE_MEMORY_MB, options.batch_size)
    val_parts, test_parts = (batches(val, size, lm.model.device), batches(test, size, lm.model.device))
    weights = _weights(test)
    keep_rows = row_chunk(lm, length, PRUNE_MEMORY_MB, gradients=True)  # calls that keep every block's states
    scores = _dataset_scores(lm, val_parts, methods, options, keep_rows)
    orders = {m: np.argsort(s, kind="stable") for m, s in scores.items()}
    orders["oracle"] = _greedy_order(lm, val_parts, _weights(val), rows, keep_rows)
    randoms = [np.random.default_rng([options.seed, r]).permutation(lm.n_layers) for r in range(options.n_random)]
    got = _curves(lm, test_parts, [*orders.values(), *randoms], rows, keep_rows)
    curves = dict(zip(orders, got))
    if randoms:
        curves["random"] = np.mean(got[len(orders) :], 0)
    table = pd.DataFrame(
        [r for name, c in curves.items() for r in _rows(name, c, orders.get(name), weights)],
        columns=NEXT_TOKEN_PRUNING_COLUMNS,
    )
    keyed = {(name, "dataset", "skip", "loss"): c for name, c in curves.items()}
    summary = pruning_summary(keyed, n_resamples=options.bootstrap, seed=options.seed)
    comparisons = pruning_comparisons(keyed, n_resamples=options.bootstrap, seed=options.seed)
    from laya_eval.output.origin import provenance

    manifest = {
        **provenance(device),
        "checkpoint": lm.identity,
        "dataset": data,
        "data": {"val": val.preprocessing, "test": test.preprocessing},
        "n_test": len(test),
        "n_val": len(val),
        "n_layers": lm.n_layers,
        "options": dataclasses.asdict(options),
        "limit": limit,
        "ablation": "skip: the removed block's update is dropped (its output is its input)",
        "order_rule": ORDER_RULE,
        "oracle": "greedy on the validation windows: each step removes the block whose removal raises the "
        "token-weighted validation loss least",
        "random": f"mean per window of {options.n_random} orders numpy.random.default_rng([seed, r]).permutation(L)",
        "perplexity": "exp of the token-weighted mean next-token loss over the test windows",
        "auc": "per-window trapezoid area of the loss (nats) against the fraction of removable blocks removed; "
        "lower is better; bootstrap over test windows",
        "orders": {name: [int(i) + 1 for i in o] for name, o in orders.items()},
    }
    result = NextTokenPruning(table, manifest["orders"], summary, comparisons, manifest)
    if out is not None:
        result.files = write_result_folder(out, _files(result, lm.spec, fmt, style))
    return result


def _files(result: NextTokenPruning, label: str, fmt: str | None, style: str) -> dict[str, bytes]:
    import json

    from laya_eval.figures import figure_files
    from laya_eval.figures.pruning import perplexity_figure
    from laya_eval.output.files import sha256_bytes
    from laya_eval.output.tables import table_bytes

    meta = {"label": label, "dataset": result.manifest["dataset"], "n_test": result.manifest["n_test"]}
    files = {
        "pruning.csv": table_bytes(result.table, "csv"),
        "pruning_summary.csv": table_bytes(result.summary, "csv"),
        "pruning_comparisons.csv": table_bytes(result.comparisons, "csv"),
    }
    files.update(
        figure_files({"pruning": perplexity_figure(result.table, meta=meta, style=style)}, fmt=fmt, style=style)
    )
    manifest = {"kind": "prune", **result.manifest, "files": {n: sha256_bytes(b) for n, b in files.items()}}
    files["manifest.json"] = (json.dumps(manifest, indent=2, sort_keys=True, default=str) + "\n").encode()
    return files
