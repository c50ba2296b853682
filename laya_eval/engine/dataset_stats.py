"""Dataset statistics: reducible sums and counts that methods and ablations declare they need.

A statistic is computed in one pass over the evaluated data before the main pass
(``"stat:<name>"`` in a :mod:`laya_eval.catalog` entry's ``needs``). Each batch
contributes per-layer ``(sum, count)`` pairs in float64; pairs from batches, chunks,
resumed runs and processes add up (:meth:`DatasetStatistics.merged`), and the mean is
rounded to float32 once at the end, so the value does not depend on how the data
were split into batches or shards (float64 sums of float32 values agree to ~1e-16,
far below float32's resolution).

``hidden_mean``
    The mean of each hidden state: pooled (d_i,) at head scope; at network scope the
    mean of each block's full output, per position for images and fixed-length token
    sequences, over the non-padding tokens for padded text (a (D,) vector shared by
    every position, so batches padded to different lengths combine correctly).
``hidden_square_mean``
    The mean of the square of each hidden state, shaped and reduced as ``hidden_mean``; with it the
    per-feature variance is ``E[h^2] - E[h]^2``.
``update_mean``, ``update_square_mean``
    The mean and the mean square of each block's update ``h_i - h_{i-1}`` (its full output minus its input, in the
    plain pass), reduced as ``hidden_mean`` at network scope (their own pass over the batch records the blocks'
    inputs): the fills of ``mean-update`` and ``noise-update``.
``mean_layer_weights``
    The mean of the head's layer weights (LAYA alpha(x), ScalarMix softmax(w)), (L,).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import Tensor

from laya_eval.models.heads import pool_hidden
from laya_eval.models.layered import LayeredModel
from laya_eval.models.trace import Trace

__all__ = ["STATISTICS", "BlockOutputs", "DatasetStatistics", "StatisticSpec", "batch_statistics"]

Pairs = list[tuple[Tensor, Tensor]]


@dataclass(frozen=True)
class StatisticSpec:
    """A dataset statistic: ``fn(trace, model, scope, block_outputs) -> [(sum, count) per layer]`` for one batch;
    ``block_inputs``: at network scope it reads each block's input too (:class:`BlockOutputs` carries it)."""

    name: str
    description: str
    fn: Callable[[Trace, LayeredModel, str, list[Tensor] | None], Pairs]
    block_inputs: bool = False


def _rows(tr: Trace) -> Tensor:
    """1.0 for the batch's real samples, 0.0 for padding rows (sample id -1), float64 on the batch's device."""
    if tr.sample_ids is None:
        return tr.logits.new_ones(tr.n_samples, dtype=torch.float64)
    return (tr.sample_ids >= 0).to(torch.float64)


def _row_sum(values: Tensor, rows: Tensor) -> Tensor:
    """Sum over dim 0 of the real rows only, in float64."""
    return (values.double() * rows.view(-1, *([1] * (values.dim() - 1)))).sum(0)


def _hidden_sums(tr: Trace, model: LayeredModel, scope: str, outputs: list[Tensor] | None, power: int = 1) -> Pairs:
    rows = _rows(tr)
    if scope == "head":
        return [(_row_sum(pool_hidden(h).double() ** power, rows), rows.sum()) for h in tr.hidden]
    if outputs is None:  # callers that traced without recording the block outputs
        _, outputs = model.block_outputs(tr.inputs)
    token_mask = getattr(model.backbone, "token_mask", None)
    mask = token_mask(tr.inputs) if callable(token_mask) else None
    pairs = []
    for out in outputs:
        if mask is not None and out.dim() == 3 and out.shape[:2] == mask.shape:
            m = mask.to(torch.float64) * rows[:, None]
            pairs.append(((out.double() ** power * m[..., None]).sum((0, 1)), m.sum()))
        else:
            pairs.append((_row_sum(out.double() ** power, rows), rows.sum()))
    return pairs


def _hidden_square_sums(tr: Trace, model: LayeredModel, scope: str, outputs: list[Tensor] | None) -> Pairs:
    return _hidden_sums(tr, model, scope, outputs, power=2)


class BlockOutputs(list):
    """The blocks' full outputs of one pass, with each block's input of the same pass (``inputs``; ``None`` where a
    block is not called with one tensor): what the network-scope statistics read instead of running the backbone
    again."""

    def __init__(self, outputs, inputs) -> None:
        super().__init__(outputs)
        self.inputs = list(inputs)


def _update_sums(tr: Trace, model: LayeredModel, scope: str, outputs: list[Tensor] | None, power: int = 1) -> Pairs:
    if scope != "network":
        raise ValueError("a block's update is a network-scope statistic (the block's output minus its input).")
    if isinstance(outputs, BlockOutputs):
        inputs = outputs.inputs
    else:  # callers that traced without recording the blocks
        _, inputs, outputs = model.block_inputs_and_outputs(tr.inputs)
    updates = []
    for i, (block_input, out) in enumerate(zip(inputs, outputs)):
        if block_input is None or block_input.shape != out.shape:
            raise ValueError(f"block {i + 1}'s input does not have its output's shape: it has no update.")
        updates.append(out.double() - block_input.double())
    return _hidden_sums(tr, model, scope, updates, power)


def _update_square_sums(tr: Trace, model: LayeredModel, scope: str, outputs: list[Tensor] | None) -> Pairs:
    return _update_sums(tr, model, scope, outputs, power=2)


def _weight_sums(tr: Trace, model: LayeredModel, scope: str, outputs: list[Tensor] | None) -> Pairs:
    w = tr.layer_weights
    if w is None:
        raise ValueError("mean_layer_weights needs a head with layer weights.")
    rows = _rows(tr)
    return [(_row_sum(w, rows), rows.sum())]


STATISTICS: dict[str, StatisticSpec] = {
    s.name: s
    for s in (
        StatisticSpec("hidden_mean", "Mean of each hidden state (the `mean` ablation's fill).", _hidden_sums),
        StatisticSpec(
            "hidden_square_mean",
            "Mean of the square of each hidden state, feature by feature (with "
            "hidden_mean, the `noise` ablation's per-feature scale).",
            _hidden_square_sums,
        ),
        StatisticSpec(
            "update_mean",
            "Mean of each block's update (output minus input; the `mean-update` ablation's fill).",
            _update_sums,
            block_inputs=True,
        ),
        StatisticSpec(
            "update_square_mean",
            "Mean of the square of each block's update (with update_mean, the `noise-update` ablation's scale).",
            _update_square_sums,
            block_inputs=True,
        ),
        StatisticSpec("mean_layer_weights", "Mean layer weights over the evaluated set (`static`).", _weight_sums),
    )
}


@dataclass
class DatasetStatistics:
    """Per-statistic, per-layer ``(sum, count)`` in float64; add with :meth:`merged`, read with :meth:`means`."""

    sums: dict[str, Pairs] = field(default_factory=dict)

    def merged(self, other: DatasetStatistics) -> DatasetStatistics:
        """The statistics of both parts together (exact up to float64 rounding)."""
        out = dict(self.sums)
        for name, pairs in other.sums.items():
            mine = out.get(name)
            out[name] = pairs if mine is None else [(a + c, b + d) for (a, b), (c, d) in zip(mine, pairs)]
        return DatasetStatistics(out)

    def means(self, dtype: torch.dtype = torch.float32) -> dict[str, list[Tensor]]:
        """``{name: [mean per layer]}``, each rounded once to ``dtype``."""
        return {name: [(s / c).to(dtype) for s, c in pairs] for name, pairs in self.sums.items()}

    def to_cpu(self) -> DatasetStatistics:
        """A copy with every tensor on the CPU (for saving and gathering)."""
        return DatasetStatistics({n: [(s.cpu(), c.cpu()) for s, c in p] for n, p in self.sums.items()})


def batch_statistics(
    names: tuple[str, ...], tr: Trace, model: LayeredModel, scope: str, block_outputs: list[Tensor] | None = None
) -> DatasetStatistics:
    """The contribution of one batch to each named statistic.

    ``block_outputs`` are the blocks' full outputs from the pass that made ``tr`` (network scope), so the
    backbone need not run again.
    """
    return DatasetStatistics({name: STATISTICS[name].fn(tr, model, scope, block_outputs) for name in names})
