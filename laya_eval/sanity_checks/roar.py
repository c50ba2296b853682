"""Layer-ROAR (remove and retrain at layer level); heads are retrained with :func:`laya_eval.training.trainer.train_head`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pandas as pd
import torch

from laya_eval.checks import offset_seed
from laya_eval.errors import ConfigError
from laya_eval.models.heads import LayerHead
from laya_eval.stats.metrics import bootstrap_mean, spearman_per_sample
from laya_eval.models.layered import LayeredModel
from laya_eval.sanity_checks.cached import Features, feature_batch, head_device
from laya_eval.sanity_checks.options import (
    LAYER_ROAR_COLUMNS,
    ROAR_AGREEMENT_COLUMNS,
    SanityOptions,
)
from laya_eval.training.trainer import TrainOptions, fresh_head, train_head

__all__ = ["accuracy", "layer_roar", "retrained_head", "roar_agreement"]


def retrained_head(
    head: LayerHead, layer_dims: Sequence[int], train: Features, val: Features, options: TrainOptions
) -> LayerHead:
    """A fresh head of ``head``'s kind over ``layer_dims`` trained on cached features with the reference
    protocol: :func:`laya_eval.training.trainer.fresh_head` seeded with ``options.seed``, then
    :func:`laya_eval.training.trainer.train_head` (the head ``fit-head --seed options.seed`` trains)."""
    fresh = fresh_head(head, layer_dims, options.seed)
    train_head(fresh, train, val, options)
    return fresh.eval()  # on the device it was trained on (options.device)


@torch.no_grad()
def predictions(head: LayerHead, features: Features, batch_size: int = 4096) -> np.ndarray:
    """The class ``head`` predicts for each of ``features``, (N,) int64; the batches go to the head's device."""
    head.eval()
    device = head_device(head)
    parts = [
        head(feature_batch(features, s, batch_size, device)).argmax(-1).cpu().numpy()
        for s in range(0, len(features), batch_size)
    ]
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)


def accuracy(head: LayerHead, features: Features, batch_size: int = 4096) -> float:
    """Share of ``features`` whose label ``head`` predicts; the batches go to the head's device."""
    correct = int((predictions(head, features, batch_size) == features.y.numpy()).sum())
    return correct / max(1, len(features))


def _without(features: Features, layer: int) -> Features:
    return replace(features, hidden=[h for i, h in enumerate(features.hidden) if i != layer])


def layer_roar(
    model: LayeredModel, train: Features, val: Features, test: Features, options: SanityOptions | None = None
) -> pd.DataFrame:
    """Remove and retrain at layer level: test accuracy of heads retrained without each layer.

    For each seed ``options.train.seed + r`` (r < ``options.roar_seeds``) a full head and one head per
    removed layer (same kind and hyper-parameters, ``L - 1`` inputs) are trained from scratch on the cached
    features; ``accuracy_drop`` is the full head's test accuracy minus the reduced head's.

    Returns
    -------
    DataFrame
        Columns :data:`LAYER_ROAR_COLUMNS`; ``layer`` 1-based as in ``layers.csv``.
    """
    options = options or SanityOptions()
    dims = model.head.layer_dims
    if len(dims) < 2:
        raise ConfigError(f"layer-ROAR needs at least 2 layers to remove one; the head has {len(dims)}.")
    rows = []
    for r in range(options.roar_seeds):
        train_options = replace(options.train, seed=offset_seed(options.train.seed, r))
        full = retrained_head(model.head, dims, train, val, train_options)
        full_acc = accuracy(full, test)
        for layer in range(len(dims)):
            reduced_dims = [d for i, d in enumerate(dims) if i != layer]
            head = retrained_head(model.head, reduced_dims, _without(train, layer), _without(val, layer), train_options)
            acc = accuracy(head, _without(test, layer))
            rows.append(
                {"layer": layer + 1, "seed": train_options.seed, "accuracy": acc, "accuracy_drop": full_acc - acc}
            )
    return pd.DataFrame(rows, columns=LAYER_ROAR_COLUMNS)


def roar_agreement(
    scores: dict[str, np.ndarray], roar: pd.DataFrame, *, n_resamples: int = 1000, seed: int = 0
) -> pd.DataFrame:
    """Spearman rho between each method's dataset-level layer ranking and the layer-ROAR accuracy drops.

    The dataset-level score of a layer is the method's mean attribution over the evaluated samples. rho is
    computed per ROAR seed (against that seed's drops) and averaged over seeds; the interval is a percentile
    bootstrap over seeds (fewer than ``MIN_INTERVAL_SAMPLES`` seeds, or too few resamples, give none: ``ci_note``
    says why).

    Parameters
    ----------
    scores : dict of str to ndarray, each (N, L)
    roar : DataFrame
        :func:`layer_roar`'s table.

    Returns
    -------
    DataFrame
        Columns :data:`ROAR_AGREEMENT_COLUMNS`, one row per method.
    """
    drops = roar.pivot(index="seed", columns="layer", values="accuracy_drop").sort_index(axis=1).to_numpy()
    rows = []
    for name, s in scores.items():
        level = np.asarray(s, np.float64).mean(0)
        rho = spearman_per_sample(np.broadcast_to(level, drops.shape), drops)
        iv = bootstrap_mean(rho, n_resamples=n_resamples, seed=seed)
        rows.append({"method": name, "spearman": iv.mean, "ci_low": iv.low, "ci_high": iv.high, "ci_note": iv.note})
    return pd.DataFrame(rows, columns=ROAR_AGREEMENT_COLUMNS)
