"""Backbones: map an input batch to the hidden states ``[h_1 … h_L]`` a head aggregates.

Every backbone is an :class:`torch.nn.Module` subclass of :class:`Backbone` with

- ``layer_dims`` (feature size per hidden state; channels for spatial maps),
- ``layer_names`` (human-readable labels),
- ``stored_by_reference`` (True when the weights are frozen, pretrained and must
  not be written into checkpoints),
- ``forward(x, replace=None) -> list of Tensor``,
- optionally ``starts_at_block`` and ``forward_from(i, output, x, replace=None)``: the states from layer ``i`` on
  when block ``i``'s full output is ``output``, running only the blocks after it, and
- ``config()``, a JSON-serialisable ``{"name", "kwargs"}`` that rebuilds the
  backbone through :func:`make_backbone`.

``replace`` maps a 0-based layer index ``i`` to a function applied to the *full*
output of block ``i`` inside the network; later blocks see the replaced output and
``h_i`` is read from it. This is the "network scope" ablation (total effect).

Example
-------
>>> import torch
>>> backbone = make_backbone("mlp", in_features=16, widths=[8, 4])
>>> [tuple(h.shape) for h in backbone(torch.randn(2, 4, 4))]
[(2, 8), (2, 4)]
>>> hidden = backbone(torch.randn(2, 16), replace={0: torch.zeros_like})
>>> bool((hidden[0] == 0).all())
True
"""

from __future__ import annotations

import inspect
from typing import Any

from laya_eval.models.backbones.base import Backbone
from laya_eval.models.backbones.blocks import CNNBackbone, MLPBackbone, ViTBackbone
from laya_eval.models.backbones.hf import HFBackbone
from laya_eval.models.backbones.modules import ModuleBackbone
from laya_eval.catalog import BACKBONE_NAMES
from laya_eval.errors import ConfigError
from laya_eval.checks import check_choice

__all__ = [
    "BACKBONES",
    "Backbone",
    "CNNBackbone",
    "HFBackbone",
    "MLPBackbone",
    "ModuleBackbone",
    "ViTBackbone",
    "make_backbone",
]


# --------------------------------------------------------------------------- registry
BACKBONES: dict[str, type[Backbone]] = {
    "cnn": CNNBackbone,
    "hf": HFBackbone,
    "mlp": MLPBackbone,
    "modules": ModuleBackbone,
    "vit": ViTBackbone,
}
if set(BACKBONES) - {"modules"} != set(BACKBONE_NAMES):  # the catalog owns the CLI's choices
    raise ImportError(f"backbones {sorted(BACKBONES)} do not match the catalog's {sorted(BACKBONE_NAMES)}")


def make_backbone(name: str, **kwargs: Any) -> Backbone:
    """Build a backbone by registry name, e.g. ``make_backbone(**backbone.config())``'s parts.

    Raises
    ------
    ConfigError
        Unknown name or invalid options.
    """
    check_choice("backbone", name, sorted(BACKBONES))
    cls = BACKBONES[name]
    try:
        inspect.signature(cls).bind(**kwargs)
    except TypeError as err:
        options = ", ".join(inspect.signature(cls).parameters)
        raise ConfigError(f"invalid options for backbone {name!r}: {err}; valid options are {{{options}}}.") from None
    return cls(**kwargs)
