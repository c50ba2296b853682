"""The memory budget of network-scope work: how many rows one backbone call may carry.

At network scope every removal re-runs the backbone with a block's output replaced, and Integrated
Gradients runs ``n_steps`` scaled copies of each block's output through every later block, with the graph
kept for the backward pass. Both are cut into row chunks so that their working set stays within
``EvalOptions.max_memory_mb`` (``--max-memory``), whatever the depth, the width inside the blocks, the steps or the
batch size. What a row holds is measured on the model, once per batch, by one backbone pass over one input with
gradients (:func:`row_cost`): the tensors autograd saves for it (the maps inside every block: an inverted-residual
block's expanded maps, attention scores, normalisation inputs) and every block's full output and input, as
``replace`` sees them, before any pooling a backbone applies to its hidden states. From them (:class:`RowCost`):

- a replacement pass without gradients holds, per row, every block's output (captured until the head pools it)
  and the maps inside the block that runs (at most what autograd saves for that block);
- a row with gradients (an IG row: one input at one step; a row of the network gradients) holds the whole graph,
  every block's output, and the gradients of the block being differentiated (as large as its saved maps);
- where network-scope work starts at a block, the batch keeps every block's output and input for all its rows
  while the chunks run (:attr:`RowCost.kept` per row): the chunk functions take those bytes off the budget
  (``held``).

The measurement runs in float32 (a backbone run in a lower precision holds less); the budget covers this working
set, not the model's weights, the batch's pooled trace or the Python runtime. A run whose :data:`MIN_ROWS` rows
cannot fit is refused before any work (:func:`check_network_budget`). Gradient methods read every block's output and
its gradient for the whole batch, so where any network-scope work takes gradients the plan cuts batches to
:func:`gradient_batch_rows` rows, each holding its kept states and one gradient row. Every call still sees at least
:data:`MIN_ROWS` rows (or the whole batch); other row counts per call round differently in float32, so a smaller
budget can move network-scope results by rounding (checked to 1e-6 in the tests), and the budget is part of the
resume key at network scope.
"""

from __future__ import annotations

import contextlib
import itertools
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import torch
from torch import Tensor

from laya_eval.errors import ConfigError
from laya_eval.models.backbones.base import BlockInputReplacement
from laya_eval.models.layered import MIN_BATCH_ROWS

if TYPE_CHECKING:
    from laya_eval.models.layered import LayeredModel

__all__ = [
    "MIN_ROWS",
    "RowCost",
    "check_network_budget",
    "gradient_batch_rows",
    "held_bytes",
    "ig_rows",
    "model_storages",
    "replacement_rows",
    "row_bytes",
    "row_chunks",
    "row_cost",
    "saved_storages",
    "storage_bytes",
]

#: Chunks hold multiples of this many rows (or the whole batch): the engine's batches are padded to multiples of
#: it (:data:`~laya_eval.models.layered.MIN_BATCH_ROWS`), so a chunk never ends in a partial row tile.
MIN_ROWS = MIN_BATCH_ROWS


@dataclass(frozen=True)
class RowCost:
    """Bytes one input holds in network-scope work, measured by :func:`row_cost`.

    Attributes
    ----------
    outputs : int
        Every block's full output.
    kept : int
        Every block's output and input (distinct tensors): what a batch keeps per row to start at a block.
    block : int
        The most autograd saves inside one block (its intermediate maps; the first block's count includes the stem).
    graph : int
        What autograd saves through every block: the graph of a pass with gradients.
    """

    outputs: int
    kept: int
    block: int
    graph: int

    @property
    def forward(self) -> int:
        """A row of a replacement pass without gradients: every block's output and one block's inner maps."""
        return self.outputs + self.block

    @property
    def backward(self) -> int:
        """A row with gradients: the graph, every block's output, one block's gradients."""
        return self.graph + self.outputs + self.block


#: Per model, the :class:`RowCost` of a tensor input by its row's shape, dtype and device (measured once).
_COSTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def row_cost(model: "LayeredModel", inputs: Any) -> RowCost:
    """What one input as large as any of ``inputs`` holds in network-scope work: one backbone pass over it with
    gradients (a tensor input requires grad; otherwise the first block's output becomes a leaf), counting the
    distinct storages autograd saves (the model's parameters and buffers left out) block by block and the blocks'
    outputs and inputs. For tensor inputs the pass runs once per model and row shape (every batch of a run asks
    again); tokenized text is measured each time (its cost follows its tokens)."""
    row = _widest_row(inputs)
    if not isinstance(row, Tensor):
        return _measured_cost(model, row)
    key = (tuple(row.shape), row.dtype, str(row.device), any(p.requires_grad for p in model.parameters()))
    known = _COSTS.setdefault(model, {})
    if key not in known:
        known[key] = _measured_cost(model, row)
    return known[key]


def _measured_cost(model: "LayeredModel", row: Any) -> RowCost:
    if isinstance(row, Tensor) and row.is_floating_point():
        row = row.detach().clone().requires_grad_(True)
    own = model_storages(model)
    ends: list[int] = []
    held: dict[int, Any] = {}
    out_bytes = 0

    def mark(block_input: Tensor | None, t: Tensor) -> Tensor:
        nonlocal out_bytes
        if not t.requires_grad:
            t = t.detach().requires_grad_(True)
        ends.append(storage_bytes(saved))
        out_bytes += t.numel() * t.element_size()
        for s in (block_input, t):
            if isinstance(s, Tensor):
                _count(s, held, own)
        return t

    replace = {i: BlockInputReplacement(mark) for i in range(model.n_layers)}
    with torch.enable_grad(), saved_storages(own) as saved:
        model.hidden_states(row, replace)
    inner = [b - a for a, b in zip([0, *ends], ends)]
    return RowCost(outputs=out_bytes, kept=storage_bytes(held), block=max(inner), graph=storage_bytes(saved))


def model_storages(module: torch.nn.Module) -> set[int]:
    """The storage addresses of ``module``'s parameters and buffers (left out of what a row holds)."""
    return {t.untyped_storage().data_ptr() for t in itertools.chain(module.parameters(), module.buffers())}


@contextlib.contextmanager
def saved_storages(own: set[int]) -> Iterator[dict[int, Any]]:
    """Inside the block, every storage autograd saves for the backward pass, once (address -> storage, held so that
    no freed address passes for one seen before), the storages ``own`` left out; :func:`storage_bytes` adds them
    up."""
    seen: dict[int, Any] = {}

    def pack(t: Tensor) -> Tensor:
        _count(t, seen, own)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        yield seen


def held_bytes(*groups: Sequence[Tensor | None] | None) -> int:
    """Bytes of the distinct storages of the tensors in ``groups`` (a trace's kept block outputs and inputs, the
    block outputs a gradient call gathers): what a batch holds while its chunks run."""
    seen: dict[int, Any] = {}
    for group in groups:
        for t in group or ():
            if isinstance(t, Tensor):
                _count(t, seen, set())
    return storage_bytes(seen)


def _count(t: Tensor, seen: dict[int, Any], own: set[int]) -> None:
    """Add ``t``'s storage to ``seen`` (pointer -> storage, held so that no later tensor reuses the address) unless it
    is the model's own or already there."""
    try:
        storage = t.untyped_storage()
    except (RuntimeError, NotImplementedError):  # a tensor without storage (sparse, nested) holds no dense bytes
        return
    if storage.data_ptr() not in own:
        seen.setdefault(storage.data_ptr(), storage)


def storage_bytes(seen: dict[int, Any]) -> int:
    """Bytes of the storages in ``seen`` (:func:`saved_storages`, :func:`held_bytes`)."""
    return sum(storage.nbytes() for storage in seen.values())


def _widest_row(inputs: Any) -> Any:
    """One input that is as large as any of ``inputs`` once batched: the first row of a tensor or of tokenized
    tensors (already padded to one length), the longest of a list of texts (its batch pads to it)."""
    if isinstance(inputs, Mapping):
        return {k: v[:1] for k, v in inputs.items()}
    if isinstance(inputs, (list, tuple)) and inputs and all(isinstance(t, str) for t in inputs):
        return [max(inputs, key=len)]
    return inputs[:1]


def row_bytes(hidden: Sequence[Tensor]) -> int:
    """Bytes of one row's block outputs (the hidden states of one input)."""
    return sum(int(h[:1].numel()) * h.element_size() for h in hidden)


def replacement_rows(cost: RowCost, max_memory_mb: int, *, held: int = 0) -> int:
    """Rows of one replacement pass (no gradients) within the budget less ``held`` bytes (the batch's kept states):
    a multiple of :data:`MIN_ROWS`, at least one tile."""
    return _whole_tiles(((max_memory_mb << 20) - held) // max(1, cost.forward))


def ig_rows(cost: RowCost, max_memory_mb: int, *, held: int = 0) -> int:
    """Rows (inputs x steps) of one network-scope call with gradients within the budget less ``held`` bytes: a
    multiple of :data:`MIN_ROWS`, at least one tile."""
    return _whole_tiles(((max_memory_mb << 20) - held) // max(1, cost.backward))


def gradient_batch_rows(cost: RowCost, max_memory_mb: int) -> int:
    """Rows of a batch whose methods take gradients through the backbone: each holds its kept states and one row of
    a gradient call, so that a gradient call over the whole batch fits beside them."""
    return _whole_tiles((max_memory_mb << 20) // max(1, cost.kept + cost.backward))


def _whole_tiles(rows: int) -> int:
    """``rows`` rounded down to a multiple of :data:`MIN_ROWS` (at least ``MIN_ROWS``): the engine's batches are
    padded to multiples of it, so every chunk of a batch is too, and no chunk ends in a partial row tile."""
    return max(MIN_ROWS, rows // MIN_ROWS * MIN_ROWS)


def row_chunks(n: int, rows: int | None) -> list[slice]:
    """Consecutive slices of ``range(n)`` of ``rows`` rows each; a tail shorter than :data:`MIN_ROWS` joins the
    chunk before it, so no call sees fewer rows than the batch guarantees."""
    rows = n if rows is None else _whole_tiles(int(rows))
    starts = list(range(0, n, rows)) or [0]
    if len(starts) > 1 and n - starts[-1] < MIN_ROWS:
        starts.pop()
    return [slice(lo, hi) for lo, hi in zip(starts, [*starts[1:], n])]


def check_network_budget(cost: RowCost, max_memory_mb: int, *, gradients: bool) -> None:
    """Refuse, in one line, a budget that cannot hold :data:`MIN_ROWS` rows of network-scope work beside their
    kept states."""
    per_row = cost.kept + (cost.backward if gradients else cost.forward)
    need = -(-MIN_ROWS * per_row // (1 << 20))
    if need > max_memory_mb:
        work = "gradients through the backbone" if gradients else "block replacements"
        raise ConfigError(
            f"--max-memory {max_memory_mb} MB cannot hold network-scope {work} for this model: "
            f"{MIN_ROWS} rows need about {need} MB; raise --max-memory or use --scope head."
        )
