"""Training the depth-mixer classifiers as backbones of ``laya-eval train`` (``--backbone denseformer|attnres``).

Images (``(N, C, H, W)`` tensors) go to a :class:`~laya_eval.mixers.reference.PatchDepthClassifier`, texts to a
:class:`~laya_eval.mixers.reference.TokenDepthClassifier` whose word vocabulary is built from the training split
(:mod:`~laya_eval.mixers.vocabulary`) and stored in the model file's config. The protocol is ``train``'s:
mini-batches in a seeded order, early stopping on validation accuracy with ``patience``, the best weights
restored, test accuracy and macro-F1 stored in the file's ``info``; the optimiser is AdamW at a constant
learning rate (weight decay 0.01 on all but the depth weights, which should move freely). With the same seed,
the same thread count and the same machine the same file comes out.
"""

from __future__ import annotations

import copy
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import torch
from torch import Tensor, nn

from laya_eval.checks import check_choice, check_positive_int
from laya_eval.data import Dataset, load_dataset
from laya_eval.errors import ConfigError, DataError
from laya_eval.mixers.reference import KINDS, DepthClassifier, PatchDepthClassifier, TokenDepthClassifier, accuracy
from laya_eval.mixers.vocabulary import build_vocabulary
from laya_eval.training.trainer import TrainOptions, TrainResult, classification_metrics

__all__ = ["MixerFit", "train_mixer_model"]

_IMAGE_KEYS = {"patch", "dim", "depth", "heads", "mlp_ratio"}
_TOKEN_KEYS = {"max_len", "dim", "depth", "heads", "mlp_ratio"}
_VOCABULARY_KEYS = {"vocabulary_size": 20_000, "min_count": 2}
_DEFAULT_PATCH = {28: 7, 32: 8}


@dataclass
class MixerFit:
    """A trained depth-mixer classifier, its test metrics and its training record."""

    model: DepthClassifier
    metrics: dict[str, Any]
    training: TrainResult

    @property
    def info(self) -> dict[str, Any]:
        """What the model file's ``info`` stores (no wall time: the same training writes the same bytes)."""
        t = self.training
        return {
            **self.metrics,
            "epochs_run": t.epochs_run,
            "best_epoch": t.best_epoch,
            "best_val_accuracy": t.best_val_accuracy,
        }


def _splits(data: str | Mapping[str, Dataset], data_dir, download, limit: int | None) -> dict[str, Dataset]:
    if isinstance(data, str):
        splits = {s: load_dataset(data, s, data_dir=data_dir, download=download) for s in ("train", "val", "test")}
    else:
        missing = [s for s in ("train", "val", "test") if s not in data]
        if missing:
            raise ConfigError(f"data must hold the splits train, val and test; missing {', '.join(missing)}.")
        splits = {s: data[s] for s in ("train", "val", "test")}
    if limit is not None:
        check_positive_int("limit", limit)
        splits = {s: d.subset(slice(0, limit)) for s, d in splits.items()}
    return splits


def _build(kind: str, train: Dataset, config: Mapping[str, Any]) -> DepthClassifier:
    """The model for ``train``'s inputs (a checked config; unknown keys named)."""
    n_classes = max(2, len(train.class_names))
    if isinstance(train.x, Tensor):
        if train.x.dim() != 4:
            raise DataError(
                f"--backbone {kind} takes images (N, C, H, W) or texts; '{train.name}' holds inputs of "
                f"shape {tuple(train.x.shape[1:])}."
            )
        _refuse_unknown(config, _IMAGE_KEYS, kind)
        size = int(train.x.shape[-1])
        defaults = {"patch": _DEFAULT_PATCH.get(size, 4 if size % 4 == 0 else 1)}
        return PatchDepthClassifier(
            kind, image_size=size, channels=int(train.x.shape[1]), n_classes=n_classes, **{**defaults, **config}
        )
    _refuse_unknown(config, _TOKEN_KEYS | set(_VOCABULARY_KEYS), kind)
    words = {k: config.get(k, v) for k, v in _VOCABULARY_KEYS.items()}
    vocabulary = build_vocabulary(train.x, max_size=words["vocabulary_size"], min_count=words["min_count"])
    model_config = {k: v for k, v in config.items() if k not in _VOCABULARY_KEYS}
    return TokenDepthClassifier(kind, vocabulary=vocabulary, n_classes=n_classes, **model_config)


def _refuse_unknown(config: Mapping[str, Any], known: set[str], kind: str) -> None:
    unknown = sorted(set(config) - known)
    if unknown:
        raise ConfigError(
            f"--backbone-arg {unknown[0]!r} is not an option of --backbone {kind} for these inputs; "
            f"expected among {{{', '.join(sorted(known))}}}."
        )


def _inputs(model: DepthClassifier, data: Dataset) -> Tensor:
    return model.encode_texts(data.x) if isinstance(model, TokenDepthClassifier) else data.x


def _optimiser(model: nn.Module, lr: float) -> torch.optim.Optimizer:
    depth = [p for n, p in model.named_parameters() if n.startswith("mixers.")]
    rest = [p for n, p in model.named_parameters() if not n.startswith("mixers.")]
    return torch.optim.AdamW([{"params": rest, "weight_decay": 0.01}, {"params": depth, "weight_decay": 0.0}], lr=lr)


def train_mixer_model(
    kind: str,
    data: str | Mapping[str, Dataset],
    *,
    config: Mapping[str, Any] | None = None,
    options: TrainOptions = TrainOptions(),
    data_dir: str | os.PathLike | None = None,
    download: bool = False,
    on_epoch: Callable[[dict[str, float]], None] | None = None,
    limit: int | None = None,
) -> MixerFit:
    """Build and train a depth-mixer classifier of ``kind`` on ``data`` (a name or ``{"train", "val", "test"}``).

    ``config`` holds model options (``dim``, ``depth``, ``heads``, ``mlp_ratio``; ``patch`` for images;
    ``max_len``, ``vocabulary_size``, ``min_count`` for texts). Returns the model with the best validation
    accuracy, its test accuracy and macro-F1 (``metrics``) and the per-epoch record (``training``). ``limit``
    keeps only the first ``limit`` rows of each split (a quick trial).
    """
    check_choice("backbone", kind, KINDS)
    if options.device != "cpu":
        raise ConfigError(f"--backbone {kind} trains on the CPU; got --device {options.device!r}.")
    splits = _splits(data, data_dir, download, limit)
    torch.manual_seed(options.seed)
    model = _build(kind, splits["train"], dict(config or {}))
    x = {s: _inputs(model, d) for s, d in splits.items()}
    y = {s: d.y for s, d in splits.items()}
    opt, gen = _optimiser(model, options.lr), torch.Generator().manual_seed(options.seed)
    best, best_acc, best_epoch, history, start = copy.deepcopy(model.state_dict()), -1.0, 0, [], time.perf_counter()
    for epoch in range(1, options.epochs + 1):
        model.train()
        order, total = torch.randperm(len(y["train"]), generator=gen), 0.0
        for i in range(0, len(order), options.batch_size):
            idx = order[i : i + options.batch_size]
            loss = nn.functional.cross_entropy(model(x["train"][idx]), y["train"][idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(idx)
        val = accuracy(model, x["val"], y["val"])
        history.append({"epoch": epoch, "train_loss": total / len(order), "val_accuracy": val})
        if on_epoch is not None:
            on_epoch(history[-1])
        if val > best_acc:
            best, best_acc, best_epoch = copy.deepcopy(model.state_dict()), val, epoch
        elif epoch - best_epoch >= options.patience:
            break
    model.load_state_dict(best)
    model.eval()
    with torch.no_grad():
        pred = torch.cat([model(x["test"][i : i + 512]).argmax(-1) for i in range(0, len(y["test"]), 512)])
    scores = classification_metrics(y["test"], pred)
    metrics = {
        "dataset": splits["train"].name,
        "test_accuracy": scores["accuracy"],
        "test_macro_f1": scores["macro_f1"],
        "n_test": len(y["test"]),
        "n_train": len(y["train"]),
        "n_val": len(y["val"]),
        "split_rule": splits["train"].preprocessing.get("split_rule"),
        "seed": options.seed,
        "epochs": options.epochs,
        "batch_size": options.batch_size,
        "lr": options.lr,
        "patience": options.patience,
    }
    training = TrainResult(
        epochs_run=len(history),
        best_epoch=best_epoch,
        best_val_accuracy=best_acc,
        wall_time_s=time.perf_counter() - start,
        history=history,
    )
    return MixerFit(model=model, metrics=metrics, training=training)
