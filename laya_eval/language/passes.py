"""The passes of a next-token evaluation: windows batched, the intact pass with gradients, losses under removals.

Every pass pads its windows on the right to one length for the whole evaluated set (the longest window), so a
window's numbers do not depend on which windows share its batch. Windows are batched so that a batch's kept states
(every block's input, output and gradient) fit in a sixteenth of ``max_memory_mb``; rows go through the model in
chunks sized by the rest of the budget on a row's float32 logits and block activations (:func:`row_chunk`).
"""

from __future__ import annotations

import ctypes
import sys
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch import Tensor

from laya_eval.engine.memory_budget import model_storages, saved_storages, storage_bytes
from laya_eval.language.decoder import SKIP, CausalLM, Fill, padded_batch, run_windows, window_losses
from laya_eval.language.text import TextWindows

__all__ = [
    "FILL_STATISTICS",
    "WindowBatch",
    "ablation_fill",
    "batch_rows",
    "batches",
    "deletion_scales",
    "losses_under",
    "removal_scales",
    "row_chunk",
    "saved_bytes",
    "shared_losses",
    "update_statistics",
]

#: The removals of a block a next-token evaluation runs, and the statistic each fill needs (``noise`` also reads the
#: square mean of the same quantity; the drawn ones are built by :mod:`laya_eval.language.draws`).
FILL_STATISTICS = {
    "skip": None,
    "zero": None,
    "mean": "output",
    "mean-update": "update",
    "resample": None,
    "noise": "output",
    "resample-update": None,
    "noise-update": "update",
}


@dataclass(frozen=True)
class WindowBatch:
    """Windows ``start..stop`` of the evaluated set, right-padded: ``ids``, ``mask`` (B, T), ``sample_ids`` (B,)."""

    ids: Tensor
    mask: Tensor
    sample_ids: Tensor


def _row_bytes(lm: CausalLM, length: int) -> tuple[int, int]:
    """Bytes of one window's float32 logits (length x vocabulary) and of its block states (length x width, every
    block)."""
    vocab = int(lm.model.get_output_embeddings().weight.shape[0])
    width = int(lm.parts.embeddings.weight.shape[1])
    return 4 * length * vocab, 4 * length * width * lm.n_layers


#: Per model, the bytes autograd keeps for one window, by window length (measured once: :func:`saved_bytes`).
_SAVED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def saved_bytes(lm: CausalLM, length: int) -> int:
    """Bytes autograd keeps for one window of ``length`` tokens from the model's forward pass and its loss until
    the backward pass: every block's activations (attention, the MLP's expansion, norms), the logits and the loss's
    log-probabilities. Measured, not estimated: one window runs once with saved-tensor hooks
    (:func:`laya_eval.engine.memory_budget.saved_storages`; the model's weights, frozen on loading, not counted).
    Kept per model and length."""
    known = _SAVED.setdefault(lm.model, {})
    if length not in known:
        ids = torch.zeros((1, length), dtype=torch.long, device=lm.parts.embeddings.weight.device)
        with torch.enable_grad(), saved_storages(model_storages(lm.model)) as saved:
            run = run_windows(lm, ids, torch.ones_like(ids), keep=True)
            window_losses(run.logits, ids, torch.ones_like(ids))
        known[length] = storage_bytes(saved)
    return known[length]


#: The most bytes of float32 logits one model call makes (rows are fewer where the budget allows more): larger
#: tensors are mapped from the kernel afresh at every call (page faults), smaller ones reuse the process's heap.
CALL_LOGITS_BYTES = 32 << 20


def release_free_memory() -> None:
    """Give the C heap's free pages back to the system between batches (glibc's ``malloc_trim``; nothing where
    there is no glibc): the fragments each batch leaves in the heap then do not add up, and the peak resident
    memory does not grow with the number of batches."""
    global _LIBC
    if _LIBC is None:
        try:
            _LIBC = ctypes.CDLL("libc.so.6") if sys.platform.startswith("linux") else False
        except OSError:
            _LIBC = False
    if _LIBC and hasattr(_LIBC, "malloc_trim"):
        _LIBC.malloc_trim(0)


_LIBC: Any = None


def row_chunk(lm: CausalLM, length: int, max_memory_mb: int, *, gradients: bool = False) -> int:
    """Rows per model call within half of ``max_memory_mb`` (the other half for the kept states and what the
    process holds besides). With ``gradients``, a row costs twice what autograd keeps for it (:func:`saved_bytes`:
    the graph, then as much again in gradients during the backward pass); without, two copies of its float32 logits
    and twice one block's share of that graph (the activations alive inside the block being run)."""
    logits, _ = _row_bytes(lm, length)
    saved = saved_bytes(lm, length)
    per_row = 2 * saved if gradients else 2 * logits + 2 * saved // max(1, lm.n_layers)
    return max(1, min((max_memory_mb << 20) // (2 * per_row), CALL_LOGITS_BYTES // logits))


def batch_rows(lm: CausalLM, length: int, max_memory_mb: int, batch_size: int, copies: int = 3) -> int:
    """Windows per batch: ``batch_size``, or fewer where the batch's kept states (``copies`` float32 copies of every
    block's state: its input, output and gradient, and one draw's fill for a drawn ablation) would take more than a
    sixteenth of ``max_memory_mb``."""
    _, states = _row_bytes(lm, length)
    return max(1, min(batch_size, (max_memory_mb << 20) // (16 * copies * states)))


def batches(
    data: TextWindows, rows: int, device: torch.device, shard: tuple[int, int] | None = None
) -> list[WindowBatch]:
    """The evaluated windows (``shard``: windows ``start .. stop`` only, keeping their indices) in batches of
    ``rows``, all padded to the longest window of ``data``."""
    length = max(w.size for w in data.ids)
    first, stop = shard if shard is not None else (0, len(data))
    out = []
    for start in range(first, stop, rows):
        end = min(start + rows, stop)
        ids, mask = padded_batch(data.ids[start:end], length, device)
        out.append(WindowBatch(ids, mask, torch.arange(start, end, device=device)))
    return out


def losses_under(lm: CausalLM, batch: WindowBatch, scale: Tensor, fill: Fill, rows: int) -> Tensor:
    """Mean next-token loss of every window under every row of ``scale``.

    Parameters
    ----------
    scale : Tensor, (B, R, L)
        Per window, R block scalings (1 keeps a block, 0 replaces it by ``fill``).

    Returns
    -------
    Tensor of float64, (B, R)
    """
    b, r, n_layers = scale.shape
    ids = batch.ids.repeat_interleave(r, 0)
    mask = batch.mask.repeat_interleave(r, 0)
    flat = scale.reshape(b * r, n_layers)
    window = torch.arange(b, device=ids.device).repeat_interleave(r)
    out = []
    with torch.no_grad():
        for s in range(0, b * r, rows):
            part = fill.rows(window[s : s + rows])
            run = run_windows(lm, ids[s : s + rows], mask[s : s + rows], scale=flat[s : s + rows], fill=part)
            out.append(window_losses(run.logits, ids[s : s + rows], mask[s : s + rows]))
    return torch.cat(out).reshape(b, r)


def shared_losses(
    lm: CausalLM,
    batch: WindowBatch,
    scales: Sequence[Tensor],
    fill: Fill,
    rows: int,
    kept: Sequence[Tensor] | None = None,
) -> list[Tensor]:
    """:func:`losses_under` for several sets of removals at once, each distinct (window, removal) run once: a
    leave-one-out removal is every ranking's first deletion step, removing every block is every ranking's last,
    and rankings that agree share all their steps.

    Parameters
    ----------
    scales : sequence of Tensor, each (B, R_j, L)
    kept : list of Tensor, optional
        Every block's output in the batch's intact pass, each (B, T, d): a removal then starts at its first removed
        block (the blocks before it are not run again, nor the removed block itself where its whole output is
        replaced), so leave-one-out costs L(L-1)/2 block evaluations after the intact pass.

    Returns
    -------
    list of Tensor of float64, each (B, R_j)
    """
    b, n_layers = batch.ids.shape[0], scales[0].shape[-1]
    window = np.concatenate([np.repeat(np.arange(b), s.shape[1]) for s in scales])
    keep = np.concatenate([s.reshape(-1, n_layers).cpu().numpy() for s in scales])
    key = np.concatenate([window[:, None].astype(np.float64), keep.astype(np.float64)], 1)
    distinct, where = np.unique(key, axis=0, return_inverse=True)
    device = batch.ids.device
    index = torch.tensor(distinct[:, 0].astype(np.int64), device=device)
    scale = torch.tensor(distinct[:, 1:], dtype=scales[0].dtype, device=device)
    # rows grouped by their first removed block (L where none is removed)
    removed = scale < 1
    first = torch.where(removed.any(1), removed.long().argmax(1), torch.full_like(index, n_layers))
    if kept is None:
        first = torch.zeros_like(first)
    losses = torch.empty(len(distinct), dtype=torch.float64, device=device)
    with torch.no_grad():
        for f in torch.unique(first).tolist():
            group = (first == f).nonzero().squeeze(1)
            for s in range(0, len(group), rows):
                part = group[s : s + rows]
                ids, mask = batch.ids[index[part]], batch.mask[index[part]]
                start = None if kept is None else (f, [h[index[part]] for h in kept[:f]])
                whole = f < n_layers and bool((scale[part, f] == 0).all())  # block f then needs no run
                part_fill = fill.rows(index[part])
                run = run_windows(lm, ids, mask, scale=scale[part], fill=part_fill, start=start, first_removed=whole)
                losses[part] = window_losses(run.logits, ids, mask)
    losses = losses[torch.tensor(where.reshape(-1), device=device)]
    parts, start = [], 0
    for s in scales:
        size = b * s.shape[1]
        parts.append(losses[start : start + size].reshape(b, s.shape[1]))
        start += size
    return parts


def update_statistics(
    lm: CausalLM, parts: Sequence[WindowBatch], rows: int, add_up: Callable[[list[Tensor]], list[Tensor]] = list
) -> dict[str, list[Tensor]]:
    """Per block, the float64 mean over the real tokens of the evaluated windows of its output (``output``), of
    its update, output minus input (``update``), and of their squares (``output_square``, ``update_square``),
    each rounded once to float32, (d,). Runs ``rows`` windows at a time with every block's input and output kept
    (size ``rows`` as for a pass with gradients, :func:`row_chunk`)."""
    sums: dict[str, list[Tensor]] = {"output": [], "update": [], "output_square": [], "update_square": []}
    count = 0.0
    with torch.no_grad():
        for batch in parts:
            for s in range(0, batch.ids.shape[0], rows):
                ids, mask = batch.ids[s : s + rows], batch.mask[s : s + rows]
                run = run_windows(lm, ids, mask, keep=True)
                real = mask.double()[..., None]
                count += float(real.sum())
                for i, (x, h) in enumerate(zip(run.inputs, run.outputs)):
                    update = h.double() - x.double()
                    got = {"output": h.double(), "update": update}
                    got.update({"output_square": got["output"] ** 2, "update_square": update**2})
                    for key, value in got.items():
                        total = (value * real).sum((0, 1))
                        if len(sums[key]) <= i:
                            sums[key].append(total)
                        else:
                            sums[key][i] += total
    # under several processes, every rank's float64 sums and count added up (``add_up``) before the division
    keys = list(sums)
    summed = add_up([torch.tensor(count, dtype=torch.float64), *(v for k in keys for v in sums[k])])
    count, flat = float(summed[0]), summed[1:]
    n = len(sums[keys[0]])
    return {k: [(v / count).float() for v in flat[j * n : (j + 1) * n]] for j, k in enumerate(keys)}


def ablation_fill(ablation: str, statistics: dict[str, list[Tensor]] | None) -> Fill:
    """The fill of a removed block under ``ablation`` (``skip``, ``zero``, ``mean``, ``mean-update``: the same for
    every window; the drawn ones are :func:`laya_eval.language.draws.drawn_fill`)."""
    if ablation == "skip":
        return SKIP
    if ablation == "zero":
        return Fill(0.0)
    if ablation == "mean":
        return Fill(0.0, statistics["output"])
    return Fill(1.0, statistics["update"])


def removal_scales(n_windows: int, n_layers: int, device: torch.device) -> Tensor:
    """(B, L, L): row i removes block i alone."""
    eye = torch.eye(n_layers, device=device)
    return (1 - eye)[None].expand(n_windows, n_layers, n_layers).contiguous()


def deletion_scales(order: np.ndarray, device: torch.device) -> Tensor:
    """(B, L, L) from per-window orders (B, L) (most important first): row k - 1 removes the k first blocks."""
    b, n_layers = order.shape
    ranks = np.empty_like(order)
    ranks[np.arange(b)[:, None], order] = np.arange(n_layers)[None]
    keep = (ranks[:, None, :] > np.arange(n_layers)[None, :, None]).astype(np.float32)
    return torch.tensor(keep, device=device)
