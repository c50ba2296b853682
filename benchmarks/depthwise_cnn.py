"""A 16-block depthwise-separable CNN over 64x64x3 images with a LAYA head over its blocks, for the network-scope
benchmark (``py:benchmarks/depthwise_cnn.py:depthwise_cnn_laya``).

Each block is MobileNet-v1-style: depthwise 3x3 convolution -> BatchNorm -> ReLU -> pointwise 1x1
convolution -> BatchNorm -> ReLU. A stem (3x3 convolution, 32 channels) comes first; blocks 1, 5, 9 and 13
halve the resolution, so the block outputs are 64 channels at 32x32 (blocks 1-4), 128 at 16x16, 256 at 8x8
and 512 at 4x4 (blocks 13-16). The LAYA head (d* = 96, tau = 1.5, scorer hidden 192) reads the
global-average-pooled output of every block (``ModuleBackbone(pool="avg")``). Weights are random and seeded,
so every call returns the same network; BatchNorm runs with its initial running statistics (eval mode).
"""

from __future__ import annotations

import torch
from torch import nn

STAGES = ((64, 32), (128, 16), (256, 8), (512, 4))  # (channels, output resolution) of 4 blocks each
BLOCKS_PER_STAGE = 4
NUM_CLASSES = 10


def _block(c_in: int, c_out: int, stride: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(c_in, c_in, 3, stride=stride, padding=1, groups=c_in, bias=False),  # depthwise
        nn.BatchNorm2d(c_in),
        nn.ReLU(),
        nn.Conv2d(c_in, c_out, 1, bias=False),  # pointwise
        nn.BatchNorm2d(c_out),
        nn.ReLU(),
    )


class DepthwiseCNN(nn.Module):
    """Stem + 16 depthwise-separable blocks (``blocks.0`` ... ``blocks.15``) + a linear readout."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU())
        blocks, c_in = [], 32
        for c_out, _ in STAGES:
            for j in range(BLOCKS_PER_STAGE):
                blocks.append(_block(c_in, c_out, 2 if j == 0 else 1))
                c_in = c_out
        self.blocks = nn.Sequential(*blocks)
        self.out = nn.Linear(c_in, NUM_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.blocks(self.stem(x)).mean((2, 3)))


def layer_names() -> list[str]:
    return [f"blocks.{i}" for i in range(len(STAGES) * BLOCKS_PER_STAGE)]


def depthwise_cnn_laya():
    """The LayeredModel: the CNN's 16 blocks and a seeded random LAYA head."""
    from laya_eval import LayeredModel, ModelInfo, ModuleBackbone
    from laya_eval.models.heads import LayaHead

    with torch.random.fork_rng():
        torch.manual_seed(0)
        cnn = DepthwiseCNN().eval()
        dims = [c for c, _ in STAGES for _ in range(BLOCKS_PER_STAGE)]
        backbone = ModuleBackbone(cnn, layer_names(), layer_dims=dims, pool="avg")
        head = LayaHead(dims, NUM_CLASSES, d_star=96, tau=1.5, scorer_hidden=192)
    info = ModelInfo(
        num_classes=NUM_CLASSES, class_names=tuple(str(i) for i in range(NUM_CLASSES)), input_shape=(3, 64, 64)
    )
    return LayeredModel(backbone, head, info).eval()
