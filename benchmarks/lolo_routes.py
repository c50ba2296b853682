"""Leave-one-layer-out (LOLO) effects the way users compute them without laya-eval.

Two comparator routes, written only against the public model API
(``model.hidden_states(x)`` and ``model.head(hidden, keep, renormalize)``) and
independently of :mod:`laya_eval.engine.removals`, so that they serve both as speed
baselines (``benchmarks/bench_speed.py``) and as oracles
(``tests/test_lolo_routes.py``):

- :func:`rerun_effects`: one full forward of the whole model (backbone and head)
  per removed layer, batched over inputs, with the removal applied. This is what
  Captum's ``LayerFeatureAblation`` / ``FeatureAblation`` do: a full forward per
  ablation (plus one on the intact input).
- :func:`per_sample_effects`: a Python loop over samples that re-runs the model
  once per layer, one sample at a time, reading each probability back as a
  Python float (how per-sample metric toolkits do it).

Removal semantics (docs/architecture.md, "Heads and removal"; head scope): ``gate`` / ``gate-renorm`` drop
layer ``i``'s term through the head's keep gate (renormalising the remaining
layer weights for ``gate-renorm``); ``zero`` / ``mean`` hand the head zeros /
the dataset mean of ``pool(h_i)`` in place of ``h_i``. The heads pool spatial
maps before anything else, so a pooled replacement is exact.

The effect is ``p_c(x) - p_c(x with layer i removed)``, ``c`` the class
predicted on the intact input.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch
from torch import Tensor

__all__ = ["batches", "per_sample_effects", "rerun_effects"]


def batches(x: Any, batch_size: int):
    """Consecutive slices of a tensor or a list of texts."""
    for start in range(0, len(x), batch_size):
        yield x[start : start + batch_size]


def _removed_logits(model, hidden: list[Tensor], i: int, ablation: str, fill: Sequence[Tensor] | None) -> Tensor:
    """Head logits with layer ``i`` removed, from freshly computed hidden states."""
    n_layers = len(hidden)
    if ablation in ("gate", "gate-renorm"):
        keep = torch.ones(n_layers, device=hidden[0].device)
        keep[i] = 0.0
        return model.head(hidden, keep, renormalize=ablation == "gate-renorm")
    if ablation not in ("zero", "mean"):
        raise ValueError(f"ablation must be one of gate, gate-renorm, zero, mean; got {ablation!r}.")
    batch, width = hidden[i].shape[0], hidden[i].shape[1]
    if ablation == "zero":
        value = torch.zeros(width, dtype=hidden[i].dtype, device=hidden[i].device)
    else:
        value = fill[i].to(hidden[i])
    replaced = list(hidden)
    replaced[i] = value.expand(batch, width)
    return model.head(replaced)


@torch.no_grad()
def rerun_effects(
    model, x: Any, *, ablation: str = "gate", fill: Sequence[Tensor] | None = None, batch_size: int = 256
) -> Tensor:
    """LOLO effects from ``L + 1`` full forwards per batch (intact, then one per removed layer).

    Parameters
    ----------
    model : LayeredModel
    x : Tensor (N, ...) or list of str
    ablation : {"gate", "gate-renorm", "zero", "mean"}
    fill : list of Tensor, each (d_i,)
        For ``mean``: the mean pooled hidden state of each layer.
    batch_size : int

    Returns
    -------
    Tensor, (N, L)
    """
    out = []
    for xb in batches(x, batch_size):
        probs = torch.softmax(model(xb), -1)
        pred = probs.argmax(-1, keepdim=True)
        p_intact = probs.gather(1, pred)[:, 0]
        effects = []
        for i in range(model.n_layers):
            hidden = model.hidden_states(xb)  # the whole backbone again: a full forward per ablation
            p_removed = torch.softmax(_removed_logits(model, hidden, i, ablation, fill), -1).gather(1, pred)[:, 0]
            effects.append(p_intact - p_removed)
        out.append(torch.stack(effects, 1).cpu())
    return torch.cat(out)


@torch.no_grad()
def per_sample_effects(model, x: Any, *, ablation: str = "gate", fill: Sequence[Tensor] | None = None) -> Tensor:
    """LOLO effects from a loop over samples, ``L + 1`` forwards of one sample each.

    Parameters and return value as :func:`rerun_effects`.
    """
    n_layers = model.n_layers
    rows = []
    for b in range(len(x)):
        xb = x[b : b + 1]
        probs = torch.softmax(model(xb), -1)[0]
        c = int(probs.argmax())
        p_intact = float(probs[c])
        row = []
        for i in range(n_layers):
            hidden = model.hidden_states(xb)
            p_removed = float(torch.softmax(_removed_logits(model, hidden, i, ablation, fill), -1)[0, c])
            row.append(p_intact - p_removed)
        rows.append(row)
    return torch.from_numpy(np.asarray(rows, dtype=np.float64).reshape(len(x), n_layers))
