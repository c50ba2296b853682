"""EfficientNet-Lite0 over 64x64x3 images with a LAYA head over its 16 MBConv blocks, for the network-scope memory
benchmark (``py:benchmarks/efficientnet_lite0.py:efficientnet_lite0_laya``).

The network is built from the published block table of EfficientNet-B0 (Tan & Le, "EfficientNet: Rethinking
Model Scaling for Convolutional Neural Networks", ICML 2019, table 1; ``_DEFAULT_BLOCKS_ARGS`` of
``efficientnet_builder.py`` in github.com/tensorflow/tpu, models/official/efficientnet) with the Lite changes of
``lite/efficientnet_lite_builder.py`` there (width and depth 1.0 for Lite0, no squeeze-and-excitation, ReLU6,
stem and head kept at 32 and 1280 channels):

- stem: 3x3 convolution, stride 2, 32 channels -> BatchNorm -> ReLU6;
- MBConv stages ``(expansion, kernel, stride, channels, repeats)``: (1, 3, 1, 16, 1), (6, 3, 2, 24, 2),
  (6, 5, 2, 40, 2), (6, 3, 2, 80, 3), (6, 5, 1, 112, 3), (6, 5, 2, 192, 4), (6, 3, 1, 320, 1): 16 blocks, the
  stride on a stage's first block; a block is 1x1 expansion convolution (channels x expansion, skipped at
  expansion 1) -> BatchNorm -> ReLU6 -> depthwise kxk convolution -> BatchNorm -> ReLU6 -> 1x1 projection
  convolution -> BatchNorm, plus its input where stride is 1 and the channels do not change;
- head: 1x1 convolution to 1280 channels -> BatchNorm -> ReLU6 -> average pool -> linear readout.

On 64x64 inputs the block outputs run from 16 channels at 32x32 to 320 at 2x2, and the expanded maps inside a
block up to 1,152 channels (the 192-channel stage). The 16 MBConv blocks (``blocks.0`` ... ``blocks.15``) are
the layers; the LAYA head (d* = 96, tau = 1.5, scorer hidden 192, 10 classes) reads the global-average-pooled
output of every block (``ModuleBackbone(pool="avg")``). Weights are random and seeded, so every call returns the
same network; BatchNorm runs with its initial running statistics (eval mode).
"""

from __future__ import annotations

import torch
from torch import nn

#: (expansion, kernel, stride, output channels, repeats) of the seven MBConv stages.
STAGES = (
    (1, 3, 1, 16, 1),
    (6, 3, 2, 24, 2),
    (6, 5, 2, 40, 2),
    (6, 3, 2, 80, 3),
    (6, 5, 1, 112, 3),
    (6, 5, 2, 192, 4),
    (6, 3, 1, 320, 1),
)
STEM_CHANNELS = 32
HEAD_CHANNELS = 1280
NUM_CLASSES = 10


def _conv_bn(c_in: int, c_out: int, kernel: int, stride: int = 1, groups: int = 1, act: bool = True) -> list[nn.Module]:
    conv = nn.Conv2d(c_in, c_out, kernel, stride=stride, padding=kernel // 2, groups=groups, bias=False)
    return [conv, nn.BatchNorm2d(c_out), *([nn.ReLU6()] if act else [])]


class MBConv(nn.Module):
    """Inverted residual block without squeeze-and-excitation (EfficientNet-Lite)."""

    def __init__(self, c_in: int, c_out: int, expansion: int, kernel: int, stride: int) -> None:
        super().__init__()
        mid = c_in * expansion
        layers = _conv_bn(c_in, mid, 1) if expansion != 1 else []
        layers += _conv_bn(mid, mid, kernel, stride, groups=mid)  # depthwise
        layers += _conv_bn(mid, c_out, 1, act=False)  # projection, linear
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and c_in == c_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.body(x)
        return out + x if self.residual else out


def block_table() -> list[tuple[int, int, int, int, int]]:
    """``(c_in, c_out, expansion, kernel, stride)`` of the 16 blocks, in order."""
    rows, c_in = [], STEM_CHANNELS
    for expansion, kernel, stride, c_out, repeats in STAGES:
        for j in range(repeats):
            rows.append((c_in, c_out, expansion, kernel, stride if j == 0 else 1))
            c_in = c_out
    return rows


class EfficientNetLite0(nn.Module):
    """Stem + 16 MBConv blocks (``blocks.0`` ... ``blocks.15``) + 1x1 head convolution + linear readout."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(*_conv_bn(3, STEM_CHANNELS, 3, stride=2))
        self.blocks = nn.Sequential(*(MBConv(*row) for row in block_table()))
        self.head = nn.Sequential(*_conv_bn(STAGES[-1][3], HEAD_CHANNELS, 1))
        self.out = nn.Linear(HEAD_CHANNELS, NUM_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.head(self.blocks(self.stem(x))).mean((2, 3)))


def layer_names() -> list[str]:
    return [f"blocks.{i}" for i in range(len(block_table()))]


def efficientnet_lite0_laya():
    """The LayeredModel: EfficientNet-Lite0's 16 MBConv blocks and a seeded random LAYA head."""
    from laya_eval import LayeredModel, ModelInfo, ModuleBackbone
    from laya_eval.models.heads import LayaHead

    with torch.random.fork_rng():
        torch.manual_seed(0)
        cnn = EfficientNetLite0().eval()
        dims = [c_out for _, c_out, *_ in block_table()]
        backbone = ModuleBackbone(cnn, layer_names(), layer_dims=dims, pool="avg")
        head = LayaHead(dims, NUM_CLASSES, d_star=96, tau=1.5, scorer_hidden=192)
    info = ModelInfo(
        num_classes=NUM_CLASSES, class_names=tuple(str(i) for i in range(NUM_CLASSES)), input_shape=(3, 64, 64)
    )
    return LayeredModel(backbone, head, info).eval()
