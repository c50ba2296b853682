"""Do the stored weights fit the model a config declares? Checked on PyTorch's ``meta`` device.

The model is built from the (already schema-checked) config on ``meta``, which allocates nothing,
and every stored tensor's name and shape is compared with it before a real module exists.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from laya_eval.errors import CheckpointError, LayaEvalError
from laya_eval.loading.schema import describe
from laya_eval.models.backbones import make_backbone
from laya_eval.models.heads import make_head
from laya_eval.models.layered import LayeredModel

__all__ = ["check_state_shapes", "meta_model"]


def meta_model(cfg: dict, backbone: torch.nn.Module | None = None) -> torch.nn.Module:
    """The model a config declares, on the meta device (shapes without memory)."""
    try:
        with torch.device("meta"):
            if backbone is None:
                backbone = make_backbone(cfg["backbone"]["name"], **cfg["backbone"].get("kwargs", {}))
            head = make_head(
                cfg["head"]["name"], backbone.layer_dims, cfg["num_classes"], **cfg["head"].get("kwargs", {})
            )
    except LayaEvalError as exc:
        raise CheckpointError(f"cannot rebuild the model from its config: {exc}") from None
    return LayeredModel(backbone, head)


def check_state_shapes(
    cfg: dict, state: Mapping[str, torch.Tensor], source: str, backbone: torch.nn.Module | None = None
) -> torch.nn.Module:
    """Check that ``state`` holds exactly the weights ``cfg`` declares; return the model on ``meta``.

    With ``backbone`` given (a backbone stored by reference, already built), only the
    head's weights are compared and no ``backbone.*`` key may be stored.

    Raises
    ------
    CheckpointError
        A missing, unexpected or differently shaped tensor.
    """
    try:
        model = meta_model(cfg, backbone)
    except CheckpointError as exc:
        raise CheckpointError(f"{source}: {exc}") from None
    expected = {
        k: tuple(v.shape) for k, v in model.state_dict().items() if backbone is None or not k.startswith("backbone.")
    }
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    if missing or unexpected:
        raise CheckpointError(
            f"{source}: weights do not fit the config (missing {describe(missing[:3])}, "
            f"unexpected {describe(unexpected[:3])})."
        )
    for key, shape in expected.items():
        if tuple(state[key].shape) != shape:
            raise CheckpointError(
                f"{source}: weights do not fit the config: state_dict[{describe(key)}]: "
                f"expected shape {shape} (from the config); got {tuple(state[key].shape)}."
            )
    return model
