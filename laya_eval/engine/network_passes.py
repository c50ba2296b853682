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
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable, Sequence

import torch
from torch import Tensor

from laya_eval.engine.memory_budget import row_chunks
from laya_eval.errors import ConfigError
from laya_eval.models.backbones.base import BlockInputReplacement
from laya_eval.models.layered import LayeredModel
from laya_eval.models.trace import Trace

__all__ = ["network_replacement_logits", "take_rows", "update_replacer"]


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
    input alone). A removal set a sample meets more than once runs once."""
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
