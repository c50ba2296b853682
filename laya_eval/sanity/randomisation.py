"""Cascading parameter randomisation and data randomisation of the head."""

from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np
import pandas as pd
import torch
from torch import nn

from laya_eval.errors import ConfigError
from laya_eval.heads import (
    ConcatHead,
    LastLayerHead,
    LayaHead,
    LayerHead,
    ScalarMixHead,
)
from laya_eval.model import LayeredModel
from laya_eval.sanity.cached import (
    Features,
    attribute_features,
    attribution_similarity,
    faithfulness,
    head_model,
)
from laya_eval.sanity.options import RANDOMISATION_COLUMNS, SanityOptions, method_names
from laya_eval.sanity.roar import accuracy, retrained_head

__all__ = ["cascading_randomisation", "data_randomisation", "head_parameter_groups"]

def head_parameter_groups(head: LayerHead) -> list[tuple[str, list[nn.Module]]]:
    """The head's parameter groups, top (closest to the output) first.

    LAYA: classifier, scorer (with psi when it is an MLP), adapters. ScalarMix: classifier, mix (the
    scalar weights; re-initialised from N(0, 1) since their own initialisation, 0, is not random; gamma
    back to 1), adapters. Concat and LastLayer: classifier.
    """
    if isinstance(head, LayaHead):
        return [("classifier", [head.classifier]), ("scorer", [head.scorer, head.psi]), ("adapters", [head.adapters])]
    if isinstance(head, ScalarMixHead):
        return [("classifier", [head.classifier]), ("mix", []), ("adapters", [head.adapters])]
    if isinstance(head, (ConcatHead, LastLayerHead)):
        return [("classifier", [head.classifier])]
    raise ConfigError(f"no parameter groups are known for a {type(head).__name__} head; "
                      "sanity checks support the lastlayer, concat, scalarmix and laya heads.")


@torch.no_grad()
def _reinitialise(head: LayerHead, group: str, modules: list[nn.Module], seed: int) -> None:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for module in modules:
            for sub in module.modules():
                if hasattr(sub, "reset_parameters"):
                    sub.reset_parameters()
        if group == "mix":
            head.scalar_weights.normal_()
            head.gamma.fill_(1.0)


def _rows(check: str, step: int, params: str, base: dict, scores: dict, effects: np.ndarray,
          options: SanityOptions) -> list[dict]:
    rows = []
    for name, s in scores.items():
        sim = attribution_similarity(base[name], s, similarity=options.similarity, n_resamples=options.bootstrap,
                                     seed=options.seed + step)
        rows.append({"check": check, "step": step, "params": params, "method": name, "similarity": sim.mean,
                     "similarity_ci_low": sim.low, "similarity_ci_high": sim.high,
                     "faithfulness": faithfulness(s, effects)})
    return rows


def cascading_randomisation(model: LayeredModel, features: Features, options: SanityOptions | None = None
                            ) -> pd.DataFrame:
    """Re-initialise the head's parameter groups top-down, cumulatively, and compare the attributions.

    Returns
    -------
    DataFrame
        Columns :data:`RANDOMISATION_COLUMNS`; ``check = "cascading"``; step 0 is the original model
        (similarity 1 by construction), step ``k`` has the top ``k`` groups re-initialised (``params``
        names them, ``+``-joined).
    """
    options = options or SanityOptions()
    methods = method_names(options)
    base, effects = attribute_features(model, features, methods, ablation=options.ablation, seed=options.seed,
                                       batch_size=options.batch_size)
    rows = _rows("cascading", 0, "none", base, base, effects, options)
    head = copy.deepcopy(model.head)
    done: list[str] = []
    for step, (group, modules) in enumerate(head_parameter_groups(head), 1):
        _reinitialise(head, group, modules, options.seed + step)
        done.append(group)
        scores, eff = attribute_features(head_model(model, head), features, list(base), ablation=options.ablation,
                                         seed=options.seed + step, batch_size=options.batch_size)
        rows += _rows("cascading", step, "+".join(done), base, scores, eff, options)
    return pd.DataFrame(rows, columns=RANDOMISATION_COLUMNS)


def data_randomisation(model: LayeredModel, train: Features, val: Features, test: Features,
                       options: SanityOptions | None = None) -> pd.DataFrame:
    """Retrain a fresh head on shuffled labels (same protocol and seed) and compare its attributions.

    The shuffle is one seeded permutation of the training and validation labels (``options.seed``).

    Returns
    -------
    DataFrame
        Columns :data:`RANDOMISATION_COLUMNS` plus ``accuracy`` (test accuracy of the head of that step);
        ``check = "data"``, step 0 the real model, step 1 (``params = "labels"``) the head trained on
        shuffled labels.
    """
    options = options or SanityOptions()
    methods = method_names(options)
    base, effects = attribute_features(model, test, methods, ablation=options.ablation, seed=options.seed,
                                       batch_size=options.batch_size)
    gen = torch.Generator().manual_seed(options.seed)
    shuffled = [replace(f, y=f.y[torch.randperm(len(f), generator=gen)]) for f in (train, val)]
    head = retrained_head(model.head, model.head.layer_dims, *shuffled, options.train)
    scores, eff = attribute_features(head_model(model, head), test, list(base), ablation=options.ablation,
                                     seed=options.seed + 1, batch_size=options.batch_size)
    rows = [{**r, "accuracy": accuracy(model.head, test)} for r in _rows("data", 0, "none", base, base, effects, options)]
    rows += [{**r, "accuracy": accuracy(head, test)} for r in _rows("data", 1, "labels", base, scores, eff, options)]
    return pd.DataFrame(rows, columns=[*RANDOMISATION_COLUMNS, "accuracy"])
