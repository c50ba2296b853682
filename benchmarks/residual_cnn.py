"""A 16-block residual CNN for Fashion-MNIST, trained end to end on the CPU, for the residual-stream benchmark.

``python benchmarks/residual_cnn.py --out WEIGHTS.pt`` trains it (seeded; ``--epochs``, ``--threads``) on the
first ``--train-limit`` (20,000) images of the Fashion-MNIST training split that ``laya_eval.data`` reads, prints
the test accuracy and writes the weights.
``py:benchmarks/residual_cnn.py:residual_cnn`` then returns the trained network (the weights file named by
``LAYA_RESIDUAL_CNN_WEIGHTS``) for ``laya-eval fit-head --layers "blocks.*" --pool avg``.

The stem (3x3 convolution, stride 2, 32 channels, BatchNorm, ReLU; 3x3 stride 2 again) brings a 28x28 image to
32 channels at 7x7; each of the 16 blocks adds ``conv3x3 -> BatchNorm -> ReLU -> conv3x3 -> BatchNorm`` of its
input to its input (``h_i = h_{i-1} + f_i(h_{i-1})``, every block keeps its shape, so ``skip`` and the update
ablations apply to each); a linear readout reads the global average of the last block.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from torch import nn

WIDTH, BLOCKS, NUM_CLASSES = 32, 16, 10


class Residual(nn.Module):
    """``x + f(x)``: the block's update is ``f(x)``."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.f = nn.Sequential(
            nn.Conv2d(width, width, 3, padding=1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(),
            nn.Conv2d(width, width, 3, padding=1, bias=False),
            nn.BatchNorm2d(width),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.f(x)


class ResidualCNN(nn.Module):
    """Stem + 16 shape-keeping residual blocks (``blocks.0`` ... ``blocks.15``) + a linear readout."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(1, WIDTH, 3, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(WIDTH),
            nn.ReLU(),
            nn.Conv2d(WIDTH, WIDTH, 3, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(WIDTH),
            nn.ReLU(),
        )
        self.blocks = nn.Sequential(*(Residual(WIDTH) for _ in range(BLOCKS)))
        self.out = nn.Linear(WIDTH, NUM_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.blocks(self.stem(x)).mean((2, 3)))


def residual_cnn() -> nn.Module:
    """The trained network, from the weights file ``LAYA_RESIDUAL_CNN_WEIGHTS`` (eval mode)."""
    path = os.environ.get("LAYA_RESIDUAL_CNN_WEIGHTS")
    if not path:
        raise RuntimeError("set LAYA_RESIDUAL_CNN_WEIGHTS to the file `python benchmarks/residual_cnn.py` wrote")
    net = ResidualCNN()
    net.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    return net.eval()


def _accuracy(net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    net.eval()
    with torch.no_grad():
        pred = torch.cat([net(x[i : i + 500]).argmax(1) for i in range(0, len(x), 500)])
    return float((pred == y).float().mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="where the weights are written")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--train-limit", type=int, default=20000, help="the first N training images")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from laya_eval.data import load_splits

    _, (train, _, test) = load_splits("fashion-mnist", data_dir=args.data_dir)
    torch.manual_seed(0)
    net = ResidualCNN()
    opt = torch.optim.Adam(net.parameters(), lr=2e-3)
    x, y = train.x[: args.train_limit], train.y[: args.train_limit]
    start = time.perf_counter()
    for epoch in range(args.epochs):
        net.train()
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(epoch))
        for i in range(0, len(x), 128):
            idx = order[i : i + 128]
            loss = nn.functional.cross_entropy(net(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        print(f"epoch {epoch + 1}: test accuracy {_accuracy(net, test.x, test.y):.4f}", flush=True)
    print(f"trained in {time.perf_counter() - start:.0f} s; {sum(p.numel() for p in net.parameters())} parameters")
    torch.save(net.state_dict(), args.out)


if __name__ == "__main__":
    main()
