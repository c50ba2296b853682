"""The states the noise ablations draw, as ``--save-draws`` writes them (``noise_draws.npz``).

They are drawn again after the main pass by the ablation's own sample fill from the same statistics, seed and
sample indices, so they are the states the effects were computed with (the draws depend on nothing else:
docs/concepts/ablations.md#draws).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from laya_eval.engine.removals import batch_fill

__all__ = ["noise_draws"]


def noise_draws(
    ablation: str, statistics: dict[str, list[Tensor]], sample: np.ndarray, *, seed: int, draws: int
) -> dict[str, np.ndarray]:
    """``{"sample": (N,), "layer_1": (N, K, *state), ..., "layer_L": ...}``: the state that draw ``k`` of
    ``ablation`` put in place of layer ``i`` for each evaluated sample (pooled (d_i,) at head scope; the block
    output, or for ``noise-update`` the update added to the block's input, at network scope), in the dtype the
    run used (float32 unless ``--dtype`` says otherwise).

    Parameters
    ----------
    ablation : str
        An ablation drawn per sample without donors (``AblationSpec.draws_noise``).
    statistics : dict of str to list of Tensor
        The run's dataset statistics (their means).
    sample : ndarray of int, (N,)
        The evaluated samples' indices.
    """
    fills = batch_fill(ablation, statistics, torch.as_tensor(sample, dtype=torch.int64), seed=seed, draws=draws)
    arrays = {"sample": np.asarray(sample, dtype=np.int64)}
    for i in range(len(fills.draws[0])):
        arrays[f"layer_{i + 1}"] = np.stack([d[i].detach().cpu().numpy() for d in fills.draws], 1)
    return arrays
