"""Cached pooled hidden states of a frozen backbone, and a backbone that replays them.

The heads only ever see pooled hidden states ``h_1 … h_L`` (docs/architecture.md, "Heads and removal"), so a
frozen encoder (MiniLM, a pretrained ViT) is run once over the data; its pooled
states are concatenated into one tensor (N, sum d_i) and the heads are trained
and evaluated on a :class:`FeaturesBackbone` that slices that tensor back into
the L states. Head-scope results are identical; :func:`check_same_results`
verifies it against the real encoder on a few samples. Checkpoints are written
with the real backbone (:func:`with_backbone`), so a frozen Hugging Face encoder
is stored by reference, not copied.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch
from torch import Tensor

from laya_eval.models.backbones import Backbone
from laya_eval.data import Dataset
from laya_eval.errors import ConfigError
from laya_eval.engine.evaluation import EvalOptions, evaluate
from laya_eval.models.heads import LayerHead
from laya_eval.models.layered import LayeredModel, ModelInfo
from laya_eval.training.trainer import encode

__all__ = [
    "FeaturesBackbone",
    "cached_text_features",
    "check_same_results",
    "features_dataset",
    "features_model",
    "image_features",
    "with_backbone",
]


class FeaturesBackbone(Backbone):
    """Replays cached pooled hidden states: input (B, sum d_i) -> ``[h_1 … h_L]``, each (B, d_i).

    It has no weights and exists only inside this benchmark; it supports the
    head scope only (the network scope would have to re-run the real encoder).
    """

    name = "features"

    def __init__(self, layer_dims: Sequence[int], layer_names: Sequence[str]) -> None:
        super().__init__()
        self.layer_dims = [int(d) for d in layer_dims]
        self.layer_names = list(layer_names)

    def forward(self, x: Tensor, replace: Mapping[int, Any] | None = None) -> list[Tensor]:
        """Split ``x`` (B, sum d_i) into the L pooled hidden states."""
        if replace:
            raise ConfigError("cached features support the head scope only; use the real backbone for --scope network.")
        if x.ndim != 2 or x.shape[1] != sum(self.layer_dims):
            raise ConfigError(f"cached features must be (B, {sum(self.layer_dims)}); got {tuple(x.shape)}.")
        return list(torch.split(x, self.layer_dims, dim=1))

    def config(self) -> dict[str, Any]:
        raise ConfigError("a features backbone is never saved; save the model with its real backbone (with_backbone).")


def features_dataset(data: Dataset, features: Tensor, note: str) -> Dataset:
    """``data`` with its inputs replaced by cached features (N, sum d_i); labels and names kept."""
    if len(features) != len(data):
        raise ConfigError(f"{len(features)} feature rows for {len(data)} samples of '{data.name}'.")
    preprocessing = {**data.preprocessing, "cached_features": note}
    return Dataset(features, data.y, data.class_names, data.name, data.split, preprocessing)


def features_model(head: LayerHead, layer_names: Sequence[str], data: Dataset) -> LayeredModel:
    """A model whose backbone replays features of ``data`` (a :func:`features_dataset`)."""
    backbone = FeaturesBackbone(head.layer_dims, layer_names)
    info = ModelInfo(num_classes=head.num_classes, class_names=tuple(data.class_names),
                     input_shape=tuple(data.input_shape), dataset=data.name, preprocessing=dict(data.preprocessing))
    return LayeredModel(backbone, head, info)


def with_backbone(model: LayeredModel, backbone: Backbone, real_data: Dataset) -> LayeredModel:
    """The same head (shared, not copied) on the real backbone, with the real data's input record."""
    info = ModelInfo(
        num_classes=model.info.num_classes, class_names=model.info.class_names,
        input_shape=real_data.input_shape, dataset=real_data.name, preprocessing=dict(real_data.preprocessing),
        training=dict(model.info.training), metrics=dict(model.info.metrics),
    )
    return LayeredModel(backbone, model.head, info).eval()


# ---------------------------------------------------------------------------- text


def _text_cache_key(backbone: Backbone, data: Dataset) -> str:
    import transformers

    digest = hashlib.sha256()
    digest.update(json.dumps({"backbone": backbone.config(), "transformers": transformers.__version__,
                              "torch": torch.__version__}, sort_keys=True).encode())
    for text in data.x:
        digest.update(text.encode("utf-8") + b"\x1f")
    digest.update(data.y.numpy().tobytes())
    return digest.hexdigest()


@torch.no_grad()
def _encode_by_length(backbone: Backbone, texts: Sequence[str], batch_size: int) -> Tensor:
    """Pooled states of ``texts`` (N, sum d_i), encoded in batches of similar length (less padding)."""
    lengths = [len(ids) for ids in backbone.tokenizer(list(texts), truncation=True,
                                                      max_length=backbone.max_length)["input_ids"]]
    order = np.argsort(lengths, kind="stable")
    parts = []
    for start in range(0, len(texts), batch_size):
        rows = order[start:start + batch_size]
        parts.append(torch.cat(backbone([texts[i] for i in rows]), dim=1).cpu())
    features = torch.empty(len(texts), sum(backbone.layer_dims))
    features[torch.from_numpy(order.copy())] = torch.cat(parts)
    return features


def cached_text_features(backbone: Backbone, data: Dataset, cache_dir: str | os.PathLike, *,
                         batch_size: int = 64) -> tuple[Tensor, bool]:
    """Pooled hidden states of a text split, computed once and cached on disk.

    The cache file is named after a SHA-256 of the texts, labels, backbone
    config and library versions, so a changed input never reuses a stale cache.

    Returns
    -------
    features : Tensor, (N, sum d_i)
    hit : bool
        Whether the cache was used.
    """
    key = _text_cache_key(backbone, data)
    path = Path(cache_dir) / f"{data.name}-{data.split}-{len(data)}-{key[:16]}.pt"
    if path.is_file():
        payload = torch.load(path, map_location="cpu", weights_only=True)
        if payload.get("key") == key and tuple(payload["features"].shape) == (len(data), sum(backbone.layer_dims)):
            return payload["features"], True
    features = _encode_by_length(backbone, data.x, batch_size)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    torch.save({"key": key, "features": features, "layer_dims": list(backbone.layer_dims),
                "layer_names": list(backbone.layer_names)}, tmp)
    os.replace(tmp, path)
    return features, False


def image_features(model: LayeredModel, data: Dataset) -> Tensor:
    """Pooled hidden states of an image split through a frozen backbone, (N, sum d_i)."""
    return torch.cat(encode(model, data), dim=1)


# ---------------------------------------------------------------------------- check


def check_same_results(real: LayeredModel, real_data: Dataset, cached: LayeredModel, cached_data: Dataset,
                       *, ablations: Sequence[str], n_steps: int = 50, atol: float = 1e-5) -> float:
    """Evaluate through the real backbone and through the cached features; raise if they differ.

    Compares every per-layer attribution and effect and every predicted class
    on the given samples (keep them few: the real backbone runs once per ablation).

    Returns
    -------
    float
        The largest absolute difference seen.
    """
    worst = 0.0
    for ablation in ablations:
        options = EvalOptions(ablation=ablation, bootstrap=0, n_steps=n_steps)
        a = evaluate(real, real_data, options=options)
        b = evaluate(cached, cached_data, options=options)
        if not a.samples["pred"].equals(b.samples["pred"]):
            raise RuntimeError(f"{ablation}: predictions through the real backbone and the cached features differ.")
        for column in ("attribution", "effect"):
            x, y = a.layers[column].to_numpy(), b.layers[column].to_numpy()
            diff = float(np.max(np.abs(x - y))) if len(x) else 0.0
            worst = max(worst, diff)
            if not np.allclose(x, y, atol=atol, rtol=0):
                raise RuntimeError(f"{ablation}: {column} through the real backbone and the cached features "
                                   f"differ by up to {diff:.3g} (> {atol}).")
    return worst
