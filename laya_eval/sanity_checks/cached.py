"""Attributions and effects computed from cached head inputs: no backbone pass."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from laya_eval.catalog import EVAL_BATCH_SIZE
from laya_eval.engine.methods import MethodContext, applicable, resolve_methods
from laya_eval.engine.dataset_stats import DatasetStatistics, batch_statistics
from laya_eval.loading.feature_cache import Features
from laya_eval.models.heads import LayerHead
from laya_eval.models.layered import LayeredModel
from laya_eval.engine.plan import explained_classes
from laya_eval.engine.removals import check_ablation, check_fixed_ablation, leave_one_out_masks, removal_effects
from laya_eval.models.trace import trace_from_hidden

__all__ = ["Features", "attribute_features", "feature_batch", "head_device", "head_model"]


def head_model(model: LayeredModel, head: LayerHead) -> LayeredModel:
    """``head`` on ``model``'s backbone; the sanity checks never call the backbone."""
    return LayeredModel(model.backbone, head, model.info).eval()


def attribute_features(
    model: LayeredModel,
    features: Features,
    methods: Sequence[str],
    *,
    ablation: str = "gate",
    seed: int = 0,
    batch_size: int = EVAL_BATCH_SIZE,
    target: str | int = "pred",
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Head-scope attributions and leave-one-layer-out effects from cached features (no backbone pass).

    Parameters
    ----------
    model : LayeredModel
        Its head is used; its backbone is not run.
    features : Features
    methods : sequence of str
        Methods that do not apply to the head are skipped (absent from the result).
    ablation : {"gate", "gate-renorm", "zero", "mean"}
    seed : int
        Seeds ``random``.
    target : "pred", "label" or int
        The class the attributions explain and whose probability the effects measure (as ``--target``): the
        prediction of ``model``'s head, the label in ``features.y``, or a fixed class index.

    Returns
    -------
    scores : dict of str to ndarray, each (N, L)
    effects : ndarray, (N, L)
        Computed in float64.
    """
    check_ablation(ablation, "head")
    check_fixed_ablation(ablation, "a head-only check on cached features")
    chosen = [m for m in resolve_methods(list(methods)) if applicable(m, model) is None]
    head64 = head_model(model, copy.deepcopy(model.head).double())
    fill = [h.double().mean(0).to(head_device(model.head)) for h in features.hidden] if ablation == "mean" else None
    context = MethodContext(scope="head", seed=seed, statistics=_statistics(model, features, chosen, batch_size))
    scores: dict[str, list[Tensor]] = {m.name: [] for m in chosen}
    effects = []
    device = head_device(model.head)
    for start in range(0, len(features), batch_size):
        hidden = feature_batch(features, start, batch_size, device)
        ids = torch.arange(start, start + len(hidden[0]), device=device)
        tr = trace_from_hidden(model.head, hidden, sample_ids=ids)
        explained = explained_classes(target, tr.pred, features.y[start : start + len(ids)])
        for m in chosen:
            scores[m.name].append(m.fn(tr, model, target=explained, context=context).detach().float().cpu())
        # The effects are those of the class the attributions explain, even where float64 would break a
        # near-tie of the logits the other way.
        tr64 = dataclasses.replace(trace_from_hidden(head64.head, [h.double() for h in hidden]), pred=tr.pred)
        effects.append(
            removal_effects(
                tr64,
                head64,
                leave_one_out_masks(tr.n_layers, device=device).double(),
                ablation=ablation,
                fill=fill,
                target=None if target == "pred" else explained,
            ).cpu()
        )
    out = {m.name: torch.cat(scores[m.name]).numpy().astype(np.float64) for m in chosen}
    return out, torch.cat(effects).numpy()


def head_device(head: LayerHead) -> torch.device:
    """Where ``head``'s parameters are (the CPU for a head without any)."""
    return next((p.device for p in head.parameters()), torch.device("cpu"))


def feature_batch(features: Features, start: int, size: int, device: torch.device) -> list[Tensor]:
    """Rows ``[start, start + size)`` of every cached layer, on ``device`` (the cache lives on the CPU)."""
    return [h[start : start + size].to(device) for h in features.hidden]


@torch.no_grad()
def _statistics(model: LayeredModel, features: Features, methods: Sequence, batch_size: int) -> dict[str, list[Tensor]]:
    """The dataset statistics the methods declare (``stat:<name>``) over the cached features, as the engine gives them."""
    names = tuple(dict.fromkeys(n.split(":", 1)[1] for m in methods for n in m.needs if n.startswith("stat:")))
    if not names:
        return {}
    total = DatasetStatistics()
    device = head_device(model.head)
    for start in range(0, len(features), batch_size):
        hidden = feature_batch(features, start, batch_size, device)
        total = total.merged(batch_statistics(names, trace_from_hidden(model.head, hidden), model, "head"))
    return total.means()
