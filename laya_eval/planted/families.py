"""Models whose layer relevance is known by construction, on real inputs.

Every planted model is a :class:`~laya_eval.models.layered.LayeredModel`: a :class:`PlantedBackbone` over
standardised inputs and a LAYA head whose parts are set by hand, not trained:

- each layer is a *view* (``tanh`` of a seeded random projection of the input: informative), *noise*
  (``sin`` of a projection scaled by :data:`NOISE_FREQUENCY`: a pseudo-random function of the input) or a
  *copy* (an identity block: the previous layer's state, exactly);
- each adapter ``g_i`` is the ridge readout of layer ``i`` onto one-hot labels, fitted in closed form on the
  training split (float64), a *shift* (every class row the same: the term adds one number to every logit,
  which no softmax probability sees), a copy of another layer's adapter, or its negation;
- the scorer's weights are 0 and its output bias is ``log(w)``, so ``alpha = w`` on every input (``tau = 1``);
  a layer with planted weight 0 gets a bias of :data:`UNREAD_SCORE`, whose softmax weight is exactly 0 in
  float32 and float64;
- the classifier is :data:`LOGIT_SCALE` times the identity (``d* = C``), bias 0.

So ``logits(x) = LOGIT_SCALE * sum_i w_i g_i(h_i(x))``, and what each family plants (``catalog.PLANTED_FAMILY_SPECS``)
can be checked by direct computation (``tests/test_planted.py``).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from laya_eval.catalog import PLANTED_FAMILY_SPECS
from laya_eval.data import Dataset
from laya_eval.errors import ConfigError
from laya_eval.models.backbones.base import Backbone, Replacement, _apply_replacement, _check_replace
from laya_eval.models.heads import LayaHead
from laya_eval.models.layered import LayeredModel, ModelInfo
from laya_eval.checks import check_choice

__all__ = [
    "LAYER_WIDTH",
    "LOGIT_SCALE",
    "MIN_LAYERS",
    "NOISE_FREQUENCY",
    "UNREAD_SCORE",
    "PlantedBackbone",
    "PlantedModel",
    "build_planted",
    "layer_plan",
]

#: Features of every planted layer.
LAYER_WIDTH = 32
#: The classifier is this times the identity: ridge scores (about 0..1) become logits of a confident model.
LOGIT_SCALE = 8.0
#: Frequency of a noise layer's sine: its phase wraps hundreds of times over the data, a pseudo-random value.
NOISE_FREQUENCY = 1000.0
#: Scorer output of an unread layer: exp(-1e4) is 0 in float32 and float64, so its weight is exactly 0.
UNREAD_SCORE = -1.0e4
#: Size of a shift adapter's term relative to the informative terms: a large logit term with no effect.
SHIFT_GAIN = 3.0
#: Ridge penalty of the adapters (on standardised tanh features).
RIDGE = 1.0
#: The fewest layers every family can plant in (the cancelling pair, a read and an unread layer).
MIN_LAYERS = 4


@dataclass(frozen=True)
class LayerPlan:
    """What a family plants in each layer.

    Attributes
    ----------
    kinds : tuple of str
        ``view``, ``noise`` or ``copy`` per layer.
    adapters : tuple
        ``"ridge"``, ``"shift"``, ``("same", j)`` or ``("negated", j)`` per layer.
    weights : ndarray, (L,)
        The planted layer weights ``alpha`` (summing to 1; 0 = unread).
    relevance : ndarray, (L,)
        The planted relevance r (0 = irrelevant).
    roles : tuple of str
        A word per layer for the tables (``read``, ``unread``, ``noise``, ``copy``, ``cancelling``).
    """

    kinds: tuple[str, ...]
    adapters: tuple[Any, ...]
    weights: np.ndarray
    relevance: np.ndarray
    roles: tuple[str, ...]


def _normalised(w: np.ndarray) -> np.ndarray:
    return w / w.sum()


def _subset(rng: np.random.Generator, n: int) -> LayerPlan:
    read = np.zeros(n, dtype=bool)
    read[rng.choice(n, size=n // 2, replace=False)] = True
    return LayerPlan(
        ("view",) * n,
        ("ridge",) * n,
        _normalised(read.astype(float)),
        read.astype(float),
        tuple("read" if r else "unread" for r in read),
    )


def _graded(rng: np.random.Generator, n: int) -> LayerPlan:
    order = rng.permutation(n)
    strength = np.zeros(n)
    strength[order[: n - 2]] = 2.0 ** rng.permutation(n - 2)
    return LayerPlan(
        ("view",) * n,
        ("ridge",) * n,
        _normalised(strength),
        strength,
        tuple("read" if s else "unread" for s in strength),
    )


def _noise(rng: np.random.Generator, n: int) -> LayerPlan:
    noise = np.zeros(n, dtype=bool)
    noise[rng.choice(n, size=n // 2, replace=False)] = True
    return LayerPlan(
        tuple("noise" if z else "view" for z in noise),
        tuple("shift" if z else "ridge" for z in noise),
        np.full(n, 1.0 / n),
        (~noise).astype(float),
        tuple("noise" if z else "read" for z in noise),
    )


def _redundant(rng: np.random.Generator, n: int) -> LayerPlan:
    k = n // 2
    first = int(rng.integers(0, n - k + 1))
    copies = np.zeros(n, dtype=bool)
    copies[first : first + k] = True
    kinds = tuple("copy" if copies[i] and i > first else "view" for i in range(n))
    adapters = tuple(("same", first) if copies[i] and i > first else "ridge" for i in range(n))
    return LayerPlan(
        kinds,
        adapters,
        _normalised(copies.astype(float)),
        copies.astype(float),
        tuple("copy" if c else "unread" for c in copies),
    )


def _cancel(rng: np.random.Generator, n: int) -> LayerPlan:
    a = int(rng.integers(0, n - 1))
    others = [i for i in range(n) if i not in (a, a + 1)]
    read = set(rng.choice(others, size=max(1, len(others) // 2), replace=False).tolist())
    kinds = tuple("copy" if i == a + 1 else "view" for i in range(n))
    adapters = tuple(("negated", a) if i == a + 1 else "ridge" for i in range(n))
    used = np.array([i in read or i in (a, a + 1) for i in range(n)], dtype=float)
    relevance = np.array([float(i in read) for i in range(n)])
    roles = tuple("cancelling" if i in (a, a + 1) else "read" if i in read else "unread" for i in range(n))
    return LayerPlan(kinds, adapters, _normalised(used), relevance, roles)


_PLANS = {"subset": _subset, "graded": _graded, "noise": _noise, "redundant": _redundant, "cancel": _cancel}
if set(_PLANS) != set(PLANTED_FAMILY_SPECS):  # the catalog owns the names; this module builds them
    raise ImportError(f"planted families {sorted(_PLANS)} do not match the catalog {sorted(PLANTED_FAMILY_SPECS)}")


def layer_plan(family: str, seed: int, n_layers: int) -> LayerPlan:
    """What ``family`` plants in ``n_layers`` layers for ``seed`` (the draw depends on family, seed and L only)."""
    check_choice("family", family, _PLANS)
    if n_layers < MIN_LAYERS:
        raise ConfigError(f"planted models need at least {MIN_LAYERS} layers; got {n_layers}.")
    rng = np.random.default_rng([int(seed), zlib.crc32(family.encode()), int(n_layers)])
    return _PLANS[family](rng, int(n_layers))


class PlantedBackbone(Backbone):
    """Layers of planted kinds over standardised inputs (see the module docstring).

    Parameters
    ----------
    kinds : sequence of str
        ``view``, ``noise`` or ``copy`` per layer (a copy is never the first layer).
    center, scale : Tensor, (F,)
        Input standardisation ``(x - center) / scale``.
    projections : Tensor, (L, LAYER_WIDTH, F)
    offsets : Tensor, (L, LAYER_WIDTH)
    """

    name = "planted"

    def __init__(self, kinds, center: Tensor, scale: Tensor, projections: Tensor, offsets: Tensor) -> None:
        super().__init__()
        if kinds[0] == "copy":
            raise ConfigError("the first planted layer cannot be a copy: it has no previous layer.")
        self.kinds = tuple(kinds)
        self.layer_dims = [LAYER_WIDTH] * len(self.kinds)
        self.layer_names = [f"{k} {i + 1}" for i, k in enumerate(self.kinds)]
        self.register_buffer("center", center)
        self.register_buffer("scale", scale)
        self.register_buffer("projections", projections)
        self.register_buffer("offsets", offsets)

    def forward(self, x: Tensor, replace: Mapping[int, Replacement] | None = None) -> list[Tensor]:
        """Hidden states ``[h_1 ... h_L]``, each (B, LAYER_WIDTH); ``replace[i]`` acts on block ``i``'s output and
        the copies after it see the result."""
        replace = _check_replace(replace, self.n_layers)
        z = (x.flatten(1) - self.center) / self.scale
        hidden: list[Tensor] = []
        for i, kind in enumerate(self.kinds):
            if kind == "copy":
                out = hidden[-1]
            else:
                pre = z @ self.projections[i].T / z.shape[1] ** 0.5
                out = (
                    torch.tanh(pre + self.offsets[i])
                    if kind == "view"
                    else torch.sin(NOISE_FREQUENCY * pre + self.offsets[i])
                )
            if i in replace:
                out = _apply_replacement(i, replace[i], out)
            hidden.append(out)
        return hidden

    def config(self) -> dict[str, Any]:
        raise ConfigError("a planted backbone is built in code (laya_eval.planted) and is not saved as a checkpoint.")


@dataclass(frozen=True)
class PlantedModel:
    """A planted model and what it plants.

    Attributes
    ----------
    family : str
    seed : int
    model : LayeredModel
    plan : LayerPlan
    """

    family: str
    seed: int
    model: LayeredModel
    plan: LayerPlan

    @property
    def relevance(self) -> np.ndarray:
        """The planted relevance r, (L,)."""
        return self.plan.relevance


def _ridge(features: np.ndarray, labels: np.ndarray, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Ridge readout ``features -> one-hot labels`` with an unpenalised intercept: weight (C, d), bias (C,)."""
    mean = features.mean(0)
    centred = features - mean
    target = np.eye(n_classes)[labels]
    gram = centred.T @ centred + RIDGE * np.eye(features.shape[1])
    weight = np.linalg.solve(gram, centred.T @ (target - target.mean(0))).T
    return weight, target.mean(0) - weight @ mean


def _adapter(
    spec,
    i: int,
    feats: list[np.ndarray],
    labels: np.ndarray,
    n_classes: int,
    done: dict[int, tuple[np.ndarray, np.ndarray]],
    rng: np.random.Generator,
):
    if spec == "ridge":
        return _ridge(feats[i], labels, n_classes)
    if spec == "shift":
        u = rng.standard_normal(feats[i].shape[1]) * SHIFT_GAIN / feats[i].std(0).clip(1e-6).sum() ** 0.5
        return np.tile(u, (n_classes, 1)), np.zeros(n_classes)
    kind, j = spec
    weight, bias = done[j]
    return (weight, bias) if kind == "same" else (-weight, -bias)


def build_planted(family: str, seed: int, train: Dataset, *, n_layers: int = 6) -> PlantedModel:
    """The planted model of ``family`` for ``seed``, its adapters fitted on ``train`` (digits-like inputs).

    Parameters
    ----------
    family : str
        Among ``catalog.PLANTED_FAMILY_SPECS``.
    seed : int
        Draws which layers are planted where, the projections and the shift directions.
    train : Dataset
        Tensor inputs and labels; the ridge adapters and the input standardisation are fitted on it.
    n_layers : int
        L, at least :data:`MIN_LAYERS`.
    """
    plan = layer_plan(family, seed, n_layers)
    if not isinstance(train.x, Tensor):
        raise ConfigError("planted models need tensor inputs (images or vectors), not text.")
    rng = np.random.default_rng([int(seed), zlib.crc32(family.encode()), int(n_layers), 1])
    x = train.x.flatten(1).double()
    n_features, n_classes = x.shape[1], len(train.class_names)
    center, scale = x.mean(0), x.std(0)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))  # constant pixels (digits' borders)
    projections = torch.from_numpy(rng.standard_normal((n_layers, LAYER_WIDTH, n_features)))
    offsets = torch.from_numpy(rng.uniform(-0.5, 0.5, (n_layers, LAYER_WIDTH)) * np.pi)
    backbone = PlantedBackbone(plan.kinds, center.float(), scale.float(), projections.float(), offsets.float())
    with torch.no_grad():
        feats = [h.double().numpy() for h in backbone(train.x.float())]
    labels = train.y.numpy()
    head = LayaHead(backbone.layer_dims, n_classes, d_star=n_classes, tau=1.0, scorer_hidden=1)
    done: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    with torch.no_grad():
        for i, spec in enumerate(plan.adapters):
            done[i] = _adapter(spec, i, feats, labels, n_classes, done, rng)
            head.adapters[i].weight.copy_(torch.from_numpy(done[i][0]))
            head.adapters[i].bias.copy_(torch.from_numpy(done[i][1]))
        for p in head.scorer.parameters():
            p.zero_()
        read = plan.weights > 0
        head.scorer[2].bias.copy_(
            torch.from_numpy(np.where(read, np.log(np.where(read, plan.weights, 1.0)), UNREAD_SCORE))
        )
        head.classifier.weight.copy_(LOGIT_SCALE * torch.eye(n_classes))
        head.classifier.bias.zero_()
    info = ModelInfo(
        num_classes=n_classes,
        class_names=tuple(train.class_names),
        input_shape=train.input_shape,
        dataset=train.name,
        training={"planted": family, "seed": int(seed)},
    )
    return PlantedModel(family, int(seed), LayeredModel(backbone, head, info).eval(), plan)
