"""The one encode path: a model's pooled hidden states over a dataset, computed once.

``train`` (frozen backbone), ``fit_head``, ``sanity`` and ``prune`` all encode through
:func:`encode_features`. A frozen backbone stored by reference (``hf:``, ``py:``, a ``fit-head`` model) goes
through the on-disk feature cache (:mod:`laya_eval.loading.feature_cache`), so a split that one of them encoded
is read back by the others (and by ``faithfulness`` and ``profile`` at head scope) instead of encoded again;
any other backbone is encoded in memory (:func:`encode`).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import torch
from torch import Tensor

from laya_eval.data import Dataset
from laya_eval.loading.feature_cache import FEATURE_BATCH_ROWS, Features, backbone_features, caches_features
from laya_eval.models.heads import pool_hidden
from laya_eval.models.layered import LayeredModel

__all__ = [
    "FEATURE_BATCH_ROWS",
    "Features",
    "backbone_features",
    "batch_inputs",
    "batch_slices",
    "encode",
    "encode_features",
]


def batch_slices(n: int, batch_size: int) -> list[slice]:
    """The consecutive slices, each of ``batch_size`` rows but the last, that cover ``range(n)`` in order."""
    return [slice(i, min(i + batch_size, n)) for i in range(0, n, batch_size)]


def batch_inputs(x: Any, index: Any, device: torch.device) -> Any:
    """Rows ``index`` of a dataset's inputs: a tensor moved to ``device``, or a list of texts."""
    if isinstance(x, Tensor):
        return x[index].to(device)
    if isinstance(index, slice):
        return list(x[index])
    return [x[int(i)] for i in index]


@torch.no_grad()
def encode(model: LayeredModel, data: Dataset, *, batch_size: int = 256, pooled: bool = True) -> list[Tensor]:
    """Run the backbone once over ``data`` in memory: the hidden states, on the CPU.

    Parameters
    ----------
    pooled : bool
        Global-average-pool spatial maps to (N, C_i), as the heads do, so the
        cache stays small.

    Returns
    -------
    list of Tensor, each (N, d_i)
    """
    device = next(model.parameters()).device
    model.eval()
    chunks: list[list[Tensor]] = [[] for _ in range(model.n_layers)]
    for sl in batch_slices(len(data), batch_size):
        hidden = model.hidden_states(batch_inputs(data.x, sl, device))
        for store, h in zip(chunks, hidden):
            store.append((pool_hidden(h) if pooled else h).cpu())
    return [torch.cat(c) for c in chunks]


def encode_features(
    model: LayeredModel,
    data: Dataset,
    *,
    batch_size: int = 256,
    cache_dir: str | os.PathLike | None = None,
    cache: bool = True,
) -> Features:
    """``model``'s pooled hidden states over ``data`` and its labels: the only backbone pass of a head step.

    Parameters
    ----------
    model : LayeredModel
        Encoded on the device its parameters are on.
    data : Dataset
    batch_size : int
        Rows per backbone call in memory; through the cache always
        :data:`~laya_eval.loading.feature_cache.FEATURE_BATCH_ROWS`, so every command shares one entry.
    cache_dir : path, optional
        The feature cache (default :func:`laya_eval.loading.feature_cache.cache_root`); read and filled
        only for a backbone stored by reference.
    cache : bool
        False encodes in memory even then (a backbone whose weights were changed in place, as the
        randomisation checks do).

    Returns
    -------
    Features
        ``hidden``: list of (N, d_i) on the CPU, pooled as the heads pool them; ``y``: (N,) labels.
    """
    if cache and caches_features(model.backbone):
        device = str(next(model.parameters()).device)
        cached = backbone_features(
            model.backbone, data, device=device, batch_size=FEATURE_BATCH_ROWS, cache_dir=cache_dir
        )
        return dataclasses.replace(cached, y=data.y.clone())
    return Features(hidden=encode(model, data, batch_size=batch_size), y=data.y.clone())
