"""Network-scope replacement passes: each distinct removal of each sample runs through the backbone once.

A network-scope removal re-runs the backbone from the input with the outputs of the removed blocks replaced.
The leave-one-layer-out removals and the deletion curves of the methods ask for many of the same removal sets:
deletion at k = 1 removes one layer, as a leave-one-out removal does; at k = L every method removes every layer;
methods that agree on their top layers share more. :func:`network_replacement_logits` makes the sets unique per
sample and runs each (sample, set) once. The rows are gathered into calls of the row count a pass without the
sharing uses (the batch, or its first chunk within ``--max-memory``), the last call filled up with copies of its
own rows, so that every call has the shape of an unshared one.

With ``on_update`` the replacement acts on a block's update ``h_i - h_{i-1}``: block ``i``'s output becomes its input
plus the value (its input alone for no value: ``skip``), where the input is what block ``i`` received in that pass,
so removing blocks ``i`` and ``i + 1`` together gives ``h_{i+1} = h_i = h_{i-1}``.

Start at block: where the trace kept each block's output and input (``Trace.block_outputs``, a backbone that
``starts_at_block``), a removal whose first removed block is ``i`` reuses the plain pass: its states up to ``i`` are
the trace's, block ``i``'s replaced output is computed from the kept output (and input, for an update) without
running block ``i``, and only the blocks after it run (:meth:`Backbone.forward_from`). Leave-one-layer-out then
costs ``L(L-1)/2`` block evaluations per input instead of ``L^2``. Rows are gathered per first removed block.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable, Sequence

import torch
from torch import Tensor

from laya_eval.engine.memory_budget import row_chunks
from laya_eval.errors import ConfigError
from laya_eval.models.backbones.base import BlockInputReplacement
from laya_eval.models.layered import LayeredModel, padded_rows
from laya_eval.models.trace import Trace

__all__ = ["continued_logits", "network_replacement_logits", "starts_at_block", "take_rows", "update_replacer"]

#: ``replacer_for(i, rows, drop)``: the replacement of block ``i`` for the batch rows ``rows`` (R,), applied where
#: ``drop`` (R,) is true.
ReplacerFor = Callable[[int, Tensor, Tensor], Any]


def starts_at_block(tr: Trace, model: LayeredModel) -> bool:
    """Whether network-scope removals of ``tr`` start at their first removed block (the trace kept its block
    states and the backbone can continue from one)."""
    return tr.block_outputs is not None and bool(getattr(model.backbone, "starts_at_block", False))


def _input_rows(inputs: Any, index: Tensor) -> Any:
    """Rows ``index`` of the inputs; a list of texts as the list of those texts (a text encoder that starts at a
    block reads only their attention mask)."""
    rows = take_rows(inputs, index)
    if rows is None and isinstance(inputs, (list, tuple)):
        return [inputs[int(r)] for r in index]
    return rows


def continued_logits(
    tr: Trace, model: LayeredModel, index: Tensor, dropped: Tensor, replacer_for: ReplacerFor, size: int
) -> Tensor:
    """Logits (R, C) of the batch rows ``index`` (R,) with the layers ``dropped`` (R, L) removed, each row started
    at its first removed block from the trace's kept states; at most ``size`` rows per backbone call, a call's
    rows padded with copies of its own to a multiple of :data:`~laya_eval.models.layered.MIN_BATCH_ROWS`."""
    n_rows, n_layers = dropped.shape
    first = torch.where(dropped.any(1), dropped.long().argmax(1), torch.full_like(index, n_layers))
    out: Tensor | None = None
    for f in torch.unique(first).tolist():
        chosen = (first == f).nonzero().squeeze(1)
        for lo in range(0, len(chosen), size):
            part = chosen[lo : lo + size]
            real = len(part)
            part = part[torch.arange(min(padded_rows(real), max(size, real)), device=part.device) % real]
            rows, drop = index[part], dropped[part]
            hidden = [h[rows.to(h.device)] for h in tr.hidden[:f]]
            if f < n_layers:
                fn = replacer_for(f, rows, drop[:, f])
                kept = tr.block_outputs[f][rows.to(tr.block_outputs[f].device)]
                if isinstance(fn, BlockInputReplacement):
                    block_input = tr.block_inputs[f] if tr.block_inputs is not None else None
                    state = fn.fn(None if block_input is None else block_input[rows.to(block_input.device)], kept)
                else:
                    state = fn(kept)
                later = {i: replacer_for(i, rows, drop[:, i]) for i in range(f + 1, n_layers) if bool(drop[:, i].any())}
                hidden += model.backbone.forward_from(f, state, _input_rows(tr.inputs, rows), later)
            logits = model.head(hidden)[:real]
            if out is None:
                out = logits.new_empty((n_rows, *logits.shape[1:]))
            out[chosen[lo : lo + size].to(out.device)] = logits
    return out  # type: ignore[return-value]


def take_rows(inputs: Any, index: Tensor) -> Any | None:
    """Rows ``index`` of a batch's inputs: a tensor or a mapping of tensors (tokenized, padded to one length);
    ``None`` for other inputs (a list of texts pads to its longest text, so its rows change with the company)."""
    if isinstance(inputs, Tensor):
        return inputs[index.to(inputs.device)]
    if isinstance(inputs, Mapping) and all(isinstance(v, Tensor) for v in inputs.values()):
        return {k: v[index.to(v.device)] for k, v in inputs.items()}
    return None


def network_replacement_logits(
    tr: Trace,
    model: LayeredModel,
    masks: Tensor,
    values: Sequence[Tensor | None] | None,
    max_rows: int | None = None,
    *,
    on_update: bool = False,
) -> Tensor:
    """Network-scope logits (B, K, C) after each removal in ``masks`` (B, K, L): block ``i``'s full output is
    replaced by ``values[i]`` (broadcast to it; ``None`` or no ``values``: zeros) inside the backbone for the
    samples that drop it, and every later block is recomputed; at most ``max_rows`` inputs per backbone pass.
    With ``on_update`` the block's output becomes its input plus ``values[i]`` (the update replaced; no value: the
    input alone). A removal set a sample meets more than once runs once; where the trace kept its block states, it
    starts at its first removed block."""
    if starts_at_block(tr, model):
        return _started_logits(tr, model, masks, values, max_rows, on_update)
    if take_rows(tr.inputs, torch.zeros(1, dtype=torch.long, device=masks.device)) is None:
        # rows cannot be gathered: one pass per removal
        return _per_removal_logits(tr, model, masks, values, max_rows, on_update)
    n, k, n_layers = masks.shape
    drop = (masks == 0).reshape(n * k, n_layers)
    sample = torch.arange(n, device=masks.device).repeat_interleave(k)
    unique, inverse = torch.unique(torch.cat([sample[:, None], drop.long()], 1), dim=0, return_inverse=True)
    first = row_chunks(n, max_rows)[0]
    size = first.stop - first.start
    out = []
    for lo in range(0, unique.shape[0], size):
        part = unique[lo : lo + size]
        real = part.shape[0]
        if real < size:
            part = torch.cat([part, part[torch.arange(size - real, device=part.device) % real]])
        dropped = part[:, 1:].bool()
        replace = {
            i: _replacer(dropped[:, i], None if values is None else values[i], on_update)
            for i in range(n_layers)
            if bool(dropped[:, i].any())
        }
        out.append(model.head(model.hidden_states(take_rows(tr.inputs, part[:, 0]), replace))[:real])
    return torch.cat(out)[inverse].reshape(n, k, -1)


def _started_logits(
    tr: Trace,
    model: LayeredModel,
    masks: Tensor,
    values: Sequence[Tensor | None] | None,
    max_rows: int | None,
    on_update: bool,
) -> Tensor:
    """:func:`network_replacement_logits` from the first removed block: each distinct (sample, removal set) once."""
    n, k, n_layers = masks.shape
    drop = (masks == 0).reshape(n * k, n_layers)
    sample = torch.arange(n, device=masks.device).repeat_interleave(k)
    unique, inverse = torch.unique(torch.cat([sample[:, None], drop.long()], 1), dim=0, return_inverse=True)
    first = row_chunks(n, max_rows)[0]

    def replacer_for(i: int, rows: Tensor, dropped: Tensor) -> Any:
        return _replacer(dropped, None if values is None else values[i], on_update)

    logits = continued_logits(tr, model, unique[:, 0], unique[:, 1:].bool(), replacer_for, first.stop - first.start)
    return logits[inverse].reshape(n, k, -1)


def _per_removal_logits(
    tr: Trace,
    model: LayeredModel,
    masks: Tensor,
    values: Sequence[Tensor | None] | None,
    max_rows: int | None,
    on_update: bool = False,
) -> Tensor:
    out = []
    for k in range(masks.shape[1]):
        parts = []
        for sl in row_chunks(tr.n_samples, max_rows):  # row chunks within the memory budget
            replace = {}
            for i in range(masks.shape[2]):
                drop = masks[sl, k, i] == 0
                if bool(drop.any()):
                    replace[i] = _replacer(drop, None if values is None else values[i], on_update)
            parts.append(model.head(model.hidden_states(tr.inputs[sl], replace)))
        out.append(torch.cat(parts))
    return torch.stack(out, 1)


def _replacer(drop: Tensor, value: Tensor | None, on_update: bool = False) -> Callable[[Tensor], Tensor]:
    if on_update:
        return update_replacer(drop, value)

    def apply(t: Tensor) -> Tensor:
        v = torch.zeros_like(t) if value is None else value.to(t).expand_as(t)
        shape = (-1,) + (1,) * (t.dim() - 1)
        return torch.where(drop.to(t.device).view(shape), v, t)

    return apply


def update_replacer(drop: Tensor, value: Tensor | None) -> BlockInputReplacement:
    """Block output := block input + ``value`` (broadcast; ``None``: the input alone) for the rows ``drop`` (B,)."""

    def apply(block_input: Tensor | None, t: Tensor) -> Tensor:
        if block_input is None or block_input.shape != t.shape or not block_input.is_floating_point():
            got = "no tensor" if block_input is None else f"{tuple(block_input.shape)} ({block_input.dtype})"
            raise ConfigError(
                f"replacing a block's update needs a block whose input has its output's shape {tuple(t.shape)}; "
                f"got {got}."
            )
        base = block_input.to(t)
        v = base if value is None else base + value.to(t).expand_as(t)
        shape = (-1,) + (1,) * (t.dim() - 1)
        return torch.where(drop.to(t.device).view(shape), v, t)

    return BlockInputReplacement(apply)
