"""Layer-ROAR (remove and retrain at layer level) and the head trainer on cached features."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pandas as pd
import torch
from torch import nn

from laya_eval.errors import ConfigError
from laya_eval.heads import LayerHead, make_head
from laya_eval.metrics import bootstrap_mean, spearman_per_sample
from laya_eval.model import LayeredModel
from laya_eval.sanity.cached import Features
from laya_eval.sanity.options import (
    LAYER_ROAR_COLUMNS,
    ROAR_AGREEMENT_COLUMNS,
    SanityOptions,
)
from laya_eval.train import TrainOptions

__all__ = ["accuracy", "fit_head", "fresh_head", "layer_roar", "roar_agreement"]

def fresh_head(head: LayerHead, layer_dims: Sequence[int], seed: int) -> LayerHead:
    config = head.config()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return make_head(config["name"], layer_dims, head.num_classes, **config["kwargs"])


def fit_head(head: LayerHead, train: Features, val: Features, options: TrainOptions) -> LayerHead:
    """Train ``head`` on cached features with the reference protocol (Adam, early stopping on validation
    accuracy, best weights restored). Private stand-in for the public ``fit-head`` trainer."""
    gen = torch.Generator().manual_seed(options.seed)
    optimizer = torch.optim.Adam(head.parameters(), lr=options.lr)
    best_acc, best_epoch, best_state = -1.0, 0, copy.deepcopy(head.state_dict())
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(options.seed)
        for epoch in range(1, options.epochs + 1):
            head.train()
            order = torch.randperm(len(train), generator=gen)
            for start in range(0, len(order), options.batch_size):
                idx = order[start:start + options.batch_size]
                loss = nn.functional.cross_entropy(head([h[idx] for h in train.hidden]), train.labels[idx])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
            acc = accuracy(head, val)
            if acc > best_acc:
                best_acc, best_epoch, best_state = acc, epoch, copy.deepcopy(head.state_dict())
            elif epoch - best_epoch >= options.patience:
                break
    head.load_state_dict(best_state)
    return head.eval()


@torch.no_grad()
def accuracy(head: LayerHead, features: Features, batch_size: int = 4096) -> float:
    head.eval()
    correct = sum(int((head([h[s:s + batch_size] for h in features.hidden]).argmax(-1)
                       == features.labels[s:s + batch_size]).sum()) for s in range(0, len(features), batch_size))
    return correct / max(1, len(features))


def _without(features: Features, layer: int) -> Features:
    return replace(features, hidden=[h for i, h in enumerate(features.hidden) if i != layer])


def layer_roar(model: LayeredModel, train: Features, val: Features, test: Features,
               options: SanityOptions | None = None) -> pd.DataFrame:
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
        train_options = replace(options.train, seed=options.train.seed + r)
        full = fit_head(fresh_head(model.head, dims, train_options.seed), train, val, train_options)
        full_acc = accuracy(full, test)
        for layer in range(len(dims)):
            reduced_dims = [d for i, d in enumerate(dims) if i != layer]
            head = fit_head(fresh_head(model.head, reduced_dims, train_options.seed), _without(train, layer),
                             _without(val, layer), train_options)
            acc = accuracy(head, _without(test, layer))
            rows.append({"layer": layer + 1, "seed": train_options.seed, "accuracy": acc,
                         "accuracy_drop": full_acc - acc})
    return pd.DataFrame(rows, columns=LAYER_ROAR_COLUMNS)


def roar_agreement(scores: dict[str, np.ndarray], roar: pd.DataFrame, *, n_resamples: int = 1000,
                   seed: int = 0) -> pd.DataFrame:
    """Spearman rho between each method's dataset-level layer ranking and the layer-ROAR accuracy drops.

    The dataset-level score of a layer is the method's mean attribution over the evaluated samples. rho is
    computed per ROAR seed (against that seed's drops) and averaged over seeds; the interval is a percentile
    bootstrap over seeds (a single seed gives a zero-width interval).

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
        rows.append({"method": name, "spearman": iv.mean, "ci_low": iv.low, "ci_high": iv.high})
    return pd.DataFrame(rows, columns=ROAR_AGREEMENT_COLUMNS)
