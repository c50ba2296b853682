"""The memory budget of network-scope work: how many rows one backbone call may carry.

At network scope every removal re-runs the backbone with a block's output replaced, and Integrated
Gradients runs ``n_steps`` scaled copies of each block's output through every later block, with the graph
kept for the backward pass. Both are cut into row chunks so that their working set stays within
``EvalOptions.max_memory_mb`` (``--max-memory``), whatever the depth, the steps or the batch size:

- a replacement pass without gradients holds about :data:`FORWARD_FACTOR` x the block outputs of a row;
- an IG row (one input at one step) holds about :data:`GRAD_FACTOR` x the block outputs of a row (the
  saved activations of every layer inside the blocks plus their gradients). On the 16-block depthwise CNN of
  ``benchmarks/bench_network_depth.py`` (BatchNorm, depthwise and pointwise convolutions) the tensors autograd
  saves alone are 6.7x the block outputs of a row; with 8x a run at ``--max-memory 1024`` peaked at 2.2 GB, with
  10x at 1.8 GB.

The block outputs of a row are measured on the full output of every block of the batch's first input
(:func:`one_row_block_outputs`: maps and token sequences as ``replace`` sees them, before any pooling a
backbone applies to its hidden states, in the backbone's own precision). The factors are estimates for
convolutional and transformer blocks (convolution, normalisation, activation: a few saved tensors the size
of the block output each); the budget covers this working set, not the model's weights, the batch's own
trace or the Python runtime. A run whose single row cannot fit is refused before any work
(:func:`check_network_budget`). Gradient methods read every block's output and its gradient for the whole batch,
so where any network-scope work takes gradients the plan cuts batches to :func:`ig_rows` rows. Every call still
sees at least :data:`MIN_ROWS` rows (or the whole batch); other row counts per call round differently in
float32, so a smaller budget can move network-scope results by rounding (checked to 1e-6 in the tests), and the
budget is part of the resume key at network scope.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Sequence

import torch
from torch import Tensor

from laya_eval.errors import ConfigError
from laya_eval.models.layered import MIN_BATCH_ROWS

if TYPE_CHECKING:
    from laya_eval.models.layered import LayeredModel

__all__ = [
    "FORWARD_FACTOR",
    "GRAD_FACTOR",
    "MIN_ROWS",
    "check_network_budget",
    "ig_rows",
    "one_row_block_outputs",
    "replacement_rows",
    "row_bytes",
    "row_chunks",
]

FORWARD_FACTOR = 3
GRAD_FACTOR = 10
#: Chunks hold multiples of this many rows (or the whole batch): the engine's batches are padded to multiples of
#: it (:data:`~laya_eval.models.layered.MIN_BATCH_ROWS`), so a chunk never ends in a partial row tile.
MIN_ROWS = MIN_BATCH_ROWS


def one_row_block_outputs(model: "LayeredModel", inputs: Any) -> list[Tensor]:
    """Every block's full output for one input as large as any of ``inputs`` (what network-scope work holds per
    row), from a backbone pass over that one input.

    A backbone may pool its hidden states (``ModuleBackbone(pool="avg")``, a text encoder's CLS token); the
    budget is about the unpooled outputs that replacement passes and gradients carry through later blocks.
    """
    with torch.no_grad():
        _, outputs = model.block_outputs(_widest_row(inputs))
    return outputs


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


def replacement_rows(hidden: Sequence[Tensor], max_memory_mb: int) -> int:
    """Rows of one replacement pass (no gradients) within the budget: a multiple of :data:`MIN_ROWS`, at least one."""
    return _whole_tiles((max_memory_mb << 20) // max(1, FORWARD_FACTOR * row_bytes(hidden)))


def ig_rows(hidden: Sequence[Tensor], max_memory_mb: int) -> int:
    """Rows (inputs x steps) of one network-scope IG call within the budget: a multiple of :data:`MIN_ROWS`, at
    least one."""
    return _whole_tiles((max_memory_mb << 20) // max(1, GRAD_FACTOR * row_bytes(hidden)))


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


def check_network_budget(hidden: Sequence[Tensor], max_memory_mb: int, *, gradients: bool) -> None:
    """Refuse, in one line, a budget that cannot hold :data:`MIN_ROWS` rows of network-scope work."""
    factor = GRAD_FACTOR if gradients else FORWARD_FACTOR
    need = -(-MIN_ROWS * factor * row_bytes(hidden) // (1 << 20))
    if need > max_memory_mb:
        work = "gradients through the backbone" if gradients else "block replacements"
        raise ConfigError(
            f"--max-memory {max_memory_mb} MB cannot hold network-scope {work} for this model: "
            f"{MIN_ROWS} rows need about {need} MB; raise --max-memory or use --scope head."
        )
