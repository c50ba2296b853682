"""Building a fresh model: a registered or given backbone with a head that fits a dataset."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from laya_eval.data import Dataset
from laya_eval.errors import DataError
from laya_eval.models.heads import make_head
from laya_eval.models.layered import LayeredModel, ModelInfo

__all__ = ["build_model"]


def build_model(
    backbone: str | torch.nn.Module,
    head: str,
    data: Dataset,
    *,
    backbone_kwargs: dict[str, Any] | None = None,
    head_kwargs: dict[str, Any] | None = None,
    seed: int = 0,
) -> LayeredModel:
    """A fresh model whose backbone input fits ``data`` and whose head fits its classes.

    Parameters
    ----------
    backbone : str or Backbone
        Backbone registry name (``mlp``, ``cnn``, ``vit``, ``hf``), or an existing
        backbone (e.g. taken from a checkpoint to train a new head on it).
    head : str
        Head registry name (``lastlayer``, ``concat``, ``scalarmix``, ``laya``).
    data : Dataset
        Any split of the training data; it fixes the input shape and classes.
    seed : int
        Seeds the initial weights.
    """
    from laya_eval.models.backbones import make_backbone

    kwargs = dict(backbone_kwargs or {})
    shape = data.input_shape
    if isinstance(backbone, torch.nn.Module):
        torch.manual_seed(seed)
        hd = make_head(head, backbone.layer_dims, len(data.class_names), **(head_kwargs or {}))
        model = LayeredModel(backbone, hd, _info_for(data))
        model.pretrained_backbone = True  # TrainOptions(freeze_backbone=None) keeps it frozen
        return model
    if backbone == "mlp" and shape is not None:
        kwargs.setdefault("in_features", int(np.prod(shape)))
    elif backbone in ("cnn", "vit") and shape is not None:
        if len(shape) != 3:
            raise DataError(
                f"the {backbone} backbone needs image inputs (channels, height, width); "
                f"dataset '{data.name}' has samples of shape {tuple(shape)}."
            )
        kwargs.setdefault("in_channels", int(shape[0]))
        if backbone == "vit":
            kwargs.setdefault("image_size", int(shape[-1]))
    if shape is None and backbone != "hf":
        raise DataError(f"dataset '{data.name}' holds text; only the 'hf' backbone reads text.")
    torch.manual_seed(seed)
    bb = make_backbone(backbone, **kwargs)
    hd = make_head(head, bb.layer_dims, len(data.class_names), **(head_kwargs or {}))
    return LayeredModel(bb, hd, _info_for(data))


def _info_for(data: Dataset) -> ModelInfo:
    shape = data.input_shape
    return ModelInfo(
        num_classes=len(data.class_names),
        class_names=tuple(data.class_names),
        input_shape=None if shape is None else tuple(int(s) for s in shape),
        dataset=data.name,
        preprocessing=dict(data.preprocessing),
    )
