"""Heads retrained on a subset of the layers (cached features, the reference protocol): the honest
"smaller model" accuracy."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np
import torch

from laya_eval.loading.feature_cache import Features
from laya_eval.models.heads import LayerHead
from laya_eval.training.trainer import TrainOptions, fresh_head, train_head

__all__ = ["RefitCache"]


def _subset(features: Features, kept: Sequence[int]) -> Features:
    return Features(hidden=[features.hidden[i] for i in kept], y=features.y)


class RefitCache:
    """Test-set correctness of heads retrained on kept layers, one training per (layers kept, seed).

    Parameters
    ----------
    like : LayerHead
        The model's head: kind and hyper-parameters of every refit head.
    train, val, test : Features
    options : TrainOptions
        The protocol; its ``seed`` is replaced by the seed asked for.
    on_train : callable, optional
        Called with ``(layers kept, seed)`` after each head is trained (progress bars).
    """

    def __init__(
        self,
        like: LayerHead,
        train: Features,
        val: Features,
        test: Features,
        options: TrainOptions,
        on_train: Callable[[tuple[int, ...], int], None] | None = None,
    ):
        self.like, self.train, self.val, self.test, self.options = like, train, val, test, options
        self.on_train = on_train
        self._done: dict[tuple[tuple[int, ...], int], tuple[np.ndarray, np.ndarray]] = {}

    def __len__(self) -> int:
        """Heads trained so far."""
        return len(self._done)

    def head(self, kept: Sequence[int], seed: int) -> LayerHead:
        """Train a head on the layers ``kept`` (0-based) with ``seed``; not cached."""
        kept = tuple(int(i) for i in kept)
        dims = [self.like.layer_dims[i] for i in kept]
        head = fresh_head(self.like, dims, seed)
        train_head(head, _subset(self.train, kept), _subset(self.val, kept), replace(self.options, seed=seed))
        return head.eval()  # on the device it was trained on

    def predict(self, kept: Sequence[int], seed: int) -> tuple[np.ndarray, np.ndarray]:
        """The refit head's test predictions and their probabilities, each (N,); the whole test split in one
        call, as ``fit-head`` scores it."""
        key = (tuple(sorted(int(i) for i in kept)), int(seed))
        if key not in self._done:
            head = self.head(key[0], key[1])
            device = next(head.parameters()).device
            with torch.no_grad():
                logits = head([self.test.hidden[i].to(device) for i in key[0]])
            pred = logits.argmax(-1)
            conf = torch.softmax(logits.double(), -1).gather(1, pred[:, None]).squeeze(1)
            self._done[key] = (pred.cpu().numpy(), conf.cpu().numpy())
            if self.on_train is not None:
                self.on_train(*key)
        return self._done[key]

    def correct(self, kept: Sequence[int], seed: int) -> np.ndarray:
        """Per test sample, whether the refit head is right, (N,) bool."""
        return self.predict(kept, seed)[0] == self.test.y.numpy()
