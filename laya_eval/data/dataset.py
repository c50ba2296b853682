"""The :class:`Dataset` record every loader returns: one preprocessed split of a dataset."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from laya_eval.errors import DataError


@dataclass(frozen=True, eq=False)
class Dataset:
    """One split of a dataset, already preprocessed.

    Parameters
    ----------
    x : Tensor (N, *input_shape), float32, or list of str (N,)
        Inputs; texts stay raw strings for the tokenizer of the model.
    y : Tensor (N,), int64
        Class indices into ``class_names``.
    class_names : tuple of str
    name : str
        Registry name, e.g. ``"fashion-mnist"`` or ``"npz:/abs/path.npz"``.
    split : {"train", "val", "test"}
    preprocessing : dict
        JSON-serialisable record of what was applied (scaling, normalisation, split rule,
        source file), written to run manifests.
    """

    x: torch.Tensor | list[str]
    y: torch.Tensor
    class_names: tuple[str, ...]
    name: str
    split: str
    preprocessing: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.y, torch.Tensor) or self.y.dtype != torch.int64 or self.y.ndim != 1:
            raise DataError(f"dataset {self.name!r}: y must be an int64 tensor of shape (N,)")
        if len(self.x) != len(self.y):
            raise DataError(f"dataset {self.name!r}: x has {len(self.x)} rows but y has {len(self.y)}")

    def __len__(self) -> int:
        return int(self.y.shape[0])

    @property
    def input_shape(self) -> tuple[int, ...] | None:
        """Shape of one sample, e.g. ``(1, 28, 28)``; ``None`` for text."""
        return tuple(self.x.shape[1:]) if isinstance(self.x, torch.Tensor) else None

    def subset(self, index: slice | torch.Tensor | Sequence[int]) -> Dataset:
        """Rows selected by a slice, a 1-D integer tensor / list of ints, or a boolean mask.

        Works for tensors and texts alike; everything else is kept.
        """
        if isinstance(index, slice):
            return dataclasses.replace(self, x=self.x[index], y=self.y[index])
        rows = torch.as_tensor(index)
        if rows.numel() == 0:
            rows = rows.long()
        if rows.dtype == torch.bool:
            if rows.shape != self.y.shape:
                raise ValueError(f"a boolean mask must have shape ({len(self)},); got {tuple(rows.shape)}")
            rows = rows.nonzero().flatten()
        if rows.is_floating_point() or rows.is_complex() or rows.ndim != 1:
            raise TypeError(
                "index must be a slice, a 1-D integer tensor, a list of ints or a "
                f"boolean mask; got {rows.dtype} of shape {tuple(rows.shape)}"
            )
        rows = rows.long()
        y = self.y[rows]  # raises IndexError on out-of-range rows before x is touched
        x = self.x[rows] if isinstance(self.x, torch.Tensor) else [self.x[i] for i in rows.tolist()]
        return dataclasses.replace(self, x=x, y=y)
