"""Plain-torch backbones built from a list of blocks: the MLP, the CNN and the small ViT."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from laya_eval.models.backbones.base import _BlockBackbone, _positive_ints
from laya_eval.checks import check_number, check_positive_int
from laya_eval.errors import ConfigError, DataError

DEFAULT_LAYER_NORM_EPS = 1e-5  # torch.nn.LayerNorm's


# --------------------------------------------------------------------------- mlp
class MLPBackbone(_BlockBackbone):
    """Fashion-MNIST reference MLP: blocks Linear -> LayerNorm -> GELU.

    Parameters
    ----------
    in_features : int
        Features per sample; any input (B, ...) is flattened to (B, in_features).
    widths : sequence of int
        Width of each block; ``h_i`` is block ``i``'s GELU output, (B, widths[i]).
    layer_norm_eps : float
        The LayerNorm's epsilon: torch's default 1e-5; Keras' ``LayerNormalization`` defaults to 1e-3,
        which a model imported from Keras keeps (it is written to the config only when not the default).
    """

    name = "mlp"

    def __init__(
        self,
        in_features: int = 784,
        widths: Sequence[int] = (512, 256, 128),
        layer_norm_eps: float = DEFAULT_LAYER_NORM_EPS,
    ) -> None:
        super().__init__()
        self.in_features = check_positive_int("in_features", in_features)
        widths = _positive_ints("widths", widths)
        check_number("layer_norm_eps", layer_norm_eps, low=0, low_open=True, high=1)
        self.layer_norm_eps = float(layer_norm_eps)
        sizes = [self.in_features, *widths]
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(d_in, d_out), nn.LayerNorm(d_out, eps=self.layer_norm_eps), nn.GELU())
            for d_in, d_out in zip(sizes[:-1], sizes[1:])
        )
        self.layer_dims = widths
        self.layer_names = [f"fc{i + 1}" for i in range(len(widths))]

    def _embed(self, x: Tensor) -> Tensor:
        if x.ndim < 1 or x[0].numel() != self.in_features:
            raise DataError(
                f"the mlp backbone expects inputs (B, ...) with {self.in_features} features per "
                f"sample; got shape {tuple(x.shape)}."
            )
        return x.reshape(x.shape[0], self.in_features)

    def config(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"in_features": self.in_features, "widths": list(self.layer_dims)}
        if self.layer_norm_eps != DEFAULT_LAYER_NORM_EPS:  # earlier configs (and their hashes) stay as they were
            kwargs["layer_norm_eps"] = self.layer_norm_eps
        return {"name": self.name, "kwargs": kwargs}


# --------------------------------------------------------------------------- cnn
class CNNBackbone(_BlockBackbone):
    """Small CNN for 32x32 images: blocks Conv3x3 -> BatchNorm -> ReLU (-> MaxPool 2x2).

    Every block after the first ends with a 2x2 max-pool, so with the default
    channels a (B, 3, 32, 32) batch gives maps (B, 32, 32, 32), (B, 64, 16, 16),
    (B, 128, 8, 8) and (B, 256, 4, 4). ``h_i`` is the spatial map itself; heads
    pool it (global average) so Grad-CAM-style methods can see the maps.

    Parameters
    ----------
    in_channels : int
        Image channels.
    channels : sequence of int
        Output channels of each block.
    """

    name = "cnn"

    def __init__(self, in_channels: int = 3, channels: Sequence[int] = (32, 64, 128, 256)) -> None:
        super().__init__()
        self.in_channels = check_positive_int("in_channels", in_channels)
        channels = _positive_ints("channels", channels)
        sizes = [self.in_channels, *channels]
        blocks = []
        for i, (c_in, c_out) in enumerate(zip(sizes[:-1], sizes[1:])):
            layers: list[nn.Module] = [
                nn.Conv2d(c_in, c_out, kernel_size=3, padding=1, bias=False),
                nn.BatchNorm2d(c_out),
                nn.ReLU(),
            ]
            if i > 0:
                layers.append(nn.MaxPool2d(2))
            blocks.append(nn.Sequential(*layers))
        self.blocks = nn.ModuleList(blocks)
        self.layer_dims = channels
        self.layer_names = [f"conv{i + 1}" for i in range(len(channels))]

    def _embed(self, x: Tensor) -> Tensor:
        if x.ndim != 4 or x.shape[1] != self.in_channels:
            raise DataError(
                f"the cnn backbone expects images (B, {self.in_channels}, H, W); got shape {tuple(x.shape)}."
            )
        return x

    def config(self) -> dict[str, Any]:
        return {"name": self.name, "kwargs": {"in_channels": self.in_channels, "channels": list(self.layer_dims)}}


# --------------------------------------------------------------------------- vit
class _ViTBlock(nn.Module):
    """Pre-norm transformer block: ``x + attn(norm1(x))``, then ``x + mlp(norm2(x))``."""

    def __init__(self, dim: int, heads: int, mlp_ratio: float) -> None:
        super().__init__()
        hidden = int(dim * mlp_ratio)
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))

    def forward(self, x: Tensor) -> Tensor:
        """x : (B, T, D) -> (B, T, D)."""
        y = self.norm1(x)
        x = x + self.attn(y, y, y, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class ViTBackbone(_BlockBackbone):
    """A small patch ViT in plain torch (patch embedding, CLS token, learned positions).

    Block outputs are token sequences (B, 1 + P, D) with P = (image_size / patch_size)^2;
    ``h_i`` is the CLS token of block ``i``'s output, (B, D). ``replace`` functions
    act on the full token sequence.

    Parameters
    ----------
    image_size, patch_size, in_channels : int
        Input images are (B, in_channels, image_size, image_size).
    dim, depth, heads : int
        Token width, number of blocks, attention heads (``heads`` divides ``dim``).
    mlp_ratio : float
        MLP hidden width as a multiple of ``dim``.
    """

    name = "vit"

    def __init__(
        self,
        image_size: int = 32,
        patch_size: int = 16,
        in_channels: int = 3,
        dim: int = 192,
        depth: int = 6,
        heads: int = 3,
        mlp_ratio: float = 4.0,
    ) -> None:
        super().__init__()
        self.image_size = check_positive_int("image_size", image_size)
        self.patch_size = check_positive_int("patch_size", patch_size)
        self.in_channels = check_positive_int("in_channels", in_channels)
        dim, depth, heads = (check_positive_int(k, v) for k, v in (("dim", dim), ("depth", depth), ("heads", heads)))
        if image_size % patch_size:
            raise ConfigError(f"image_size must be a multiple of patch_size={patch_size}; got {image_size}.")
        if dim % heads:
            raise ConfigError(f"dim must be divisible by heads={heads}; got dim={dim}.")
        check_number("mlp_ratio", mlp_ratio, low=0, low_open=True)
        self.heads, self.mlp_ratio = heads, float(mlp_ratio)
        n_tokens = 1 + (image_size // patch_size) ** 2
        self.patch_embed = nn.Conv2d(in_channels, dim, kernel_size=patch_size, stride=patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, n_tokens, dim))
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        self.blocks = nn.ModuleList(_ViTBlock(dim, heads, self.mlp_ratio) for _ in range(depth))
        self.layer_dims = [dim] * depth
        self.layer_names = [f"block{i + 1}" for i in range(depth)]

    def _embed(self, x: Tensor) -> Tensor:
        """Images (B, C, S, S) -> tokens (B, 1 + P, D)."""
        expected = (self.in_channels, self.image_size, self.image_size)
        if x.ndim != 4 or tuple(x.shape[1:]) != expected:
            raise DataError(
                f"the vit backbone expects images (B, {', '.join(map(str, expected))}); got shape {tuple(x.shape)}."
            )
        patches = self.patch_embed(x).flatten(2).transpose(1, 2)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        return torch.cat([cls, patches], dim=1) + self.pos_embed

    def _readout(self, output: Tensor) -> Tensor:
        return output[:, 0]

    def config(self) -> dict[str, Any]:
        kwargs = {
            "image_size": self.image_size,
            "patch_size": self.patch_size,
            "in_channels": self.in_channels,
            "dim": self.layer_dims[0],
            "depth": self.n_layers,
            "heads": self.heads,
            "mlp_ratio": self.mlp_ratio,
        }
        return {"name": self.name, "kwargs": kwargs}
