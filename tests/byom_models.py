"""User code for the bring-your-own-model tests (imported through ``py:`` specs).

Nothing here belongs to laya-eval: it stands for a researcher's own module.
"""

from __future__ import annotations

import os

import torch
from torch import nn

CALLS = {"small_cnn": 0, "forward": 0}


class SmallCNN(nn.Module):
    """A small CNN over 8x8 digit images given as 64-vectors; BatchNorm so frozen statistics can be checked."""

    def __init__(self) -> None:
        super().__init__()
        self.block1 = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.block2 = nn.Sequential(nn.Conv2d(8, 12, 3, padding=1), nn.BatchNorm2d(12), nn.ReLU())
        self.block3 = nn.Sequential(nn.Conv2d(12, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU())
        self.out = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        CALLS["forward"] += 1
        h = self.block3(self.block2(self.block1(x.reshape(-1, 1, 8, 8))))
        return self.out(h.mean((2, 3)))


def small_cnn() -> SmallCNN:
    """The same network on every call: seeded weights (a real factory would load its own)."""
    CALLS["small_cnn"] += 1
    with torch.random.fork_rng():
        torch.manual_seed(0)
        net = SmallCNN()
        for m in net.modules():  # non-trivial BatchNorm statistics
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 1.5)
    return net.eval()


def unseeded_cnn() -> SmallCNN:
    """A broken factory: other random weights on every call."""
    return SmallCNN().eval()


# --------------------------------------------------------------------------- "my own LAYA code"
class MyLayerAttention(nn.Module):
    """Someone else's LAYA implementation (own names, own parameter order)."""

    def __init__(self, dims: list[int], n_classes: int, d: int = 16, hidden: int = 24, tau: float = 1.5) -> None:
        super().__init__()
        self.proj = nn.ModuleList(nn.Linear(k, d) for k in dims)
        self.score_mlp = nn.Sequential(nn.Linear(len(dims) * d, hidden), nn.GELU(), nn.Linear(hidden, len(dims)))
        self.out = nn.Linear(d, n_classes)
        self.tau = tau

    def forward(self, hidden: list[torch.Tensor]) -> torch.Tensor:
        z = torch.stack([p(h) for p, h in zip(self.proj, hidden)], 1)
        alpha = torch.softmax(self.score_mlp(z.flatten(1)) / self.tau, -1)
        return self.out((alpha.unsqueeze(-1) * z).sum(1))


def my_laya_model():
    """A LayeredModel from the weights of :class:`MyLayerAttention` saved at ``$MY_LAYA_WEIGHTS``."""
    from laya_eval import LayeredModel, ModelInfo, ModuleBackbone, import_head_state_dict

    backbone = ModuleBackbone(small_cnn(), ["block1", "block2", "block3"], layer_dims=[8, 12, 16], pool="avg")
    state = torch.load(os.environ["MY_LAYA_WEIGHTS"], weights_only=True)
    mine = MyLayerAttention(backbone.layer_dims, 10)
    mine.load_state_dict(state)
    head = import_head_state_dict(
        "laya", state, backbone.layer_dims, 10, d_star=16, scorer_hidden=24, tau=1.5, reference=mine.eval()
    )
    info = ModelInfo(num_classes=10, class_names=tuple("0123456789"), input_shape=(64,), dataset="digits")
    return LayeredModel(backbone, head, info)
