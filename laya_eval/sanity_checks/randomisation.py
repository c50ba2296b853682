"""Cascading parameter randomisation (the head's groups, then a trainable backbone's blocks) and data
randomisation of the head."""

from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np
import pandas as pd
import torch
from torch import nn

from laya_eval.checks import offset_seed
from laya_eval.data import Dataset
from laya_eval.errors import ConfigError
from laya_eval.models.heads import (
    ConcatHead,
    LastLayerHead,
    LayaHead,
    LayerHead,
    ScalarMixHead,
)
from laya_eval.models.layered import LayeredModel
from laya_eval.sanity_checks.cached import (
    Features,
    attribute_features,
    head_model,
)
from laya_eval.engine.results import mean_faithfulness
from laya_eval.sanity_checks.options import RANDOMISATION_COLUMNS, SanityOptions, checked_methods
from laya_eval.sanity_checks.roar import accuracy, retrained_head
from laya_eval.sanity_checks.similarity import Resamples, attribution_similarity
from laya_eval.training.features import encode_features

__all__ = ["backbone_is_trainable", "cascading_randomisation", "data_randomisation", "head_parameter_groups"]


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
    raise ConfigError(
        f"no parameter groups are known for a {type(head).__name__} head; "
        "sanity checks support the lastlayer, concat, scalarmix and laya heads."
    )


def backbone_is_trainable(model: LayeredModel) -> bool:
    """True when the backbone's weights were trained with the head (so its blocks can be randomised too).

    False for a frozen pretrained backbone: stored by reference (``hf:``, ``py:``), built around a given
    module, recorded as frozen in the checkpoint's training record, or without one module per layer.
    """
    if getattr(model.backbone, "stored_by_reference", False) or getattr(model, "pretrained_backbone", False):
        return False
    if bool((model.info.training or {}).get("freeze_backbone", False)):
        return False
    try:
        model.backbone.layer_modules()
    except (ConfigError, AttributeError):
        return False
    return True


@torch.no_grad()
def _reinitialise(head: LayerHead | None, group: str, modules: list[nn.Module], seed: int) -> None:
    """Reset every submodule of ``modules`` with a ``reset_parameters`` (seeded); ``mix`` also redraws the
    ScalarMix weights."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for module in modules:
            for sub in module.modules():
                if hasattr(sub, "reset_parameters"):
                    sub.reset_parameters()
        if group == "mix":
            head.scalar_weights.normal_()
            head.gamma.fill_(1.0)


def _rows(
    check: str, step: int, params: str, base: dict, scores: dict, effects: np.ndarray, options: SanityOptions
) -> list[dict]:
    rows = []
    # One set of bootstrap resamples per step, shared by the methods (the same draws as one call per method).
    resamples = Resamples(len(effects), options.bootstrap, offset_seed(options.seed, step))
    for name, s in scores.items():
        sim = attribution_similarity(
            base[name],
            s,
            similarity=options.similarity,
            n_resamples=options.bootstrap,
            seed=offset_seed(options.seed, step),
            resamples=resamples,
        )
        rows.append(
            {
                "check": check,
                "step": step,
                "params": params,
                "method": name,
                "similarity": sim.mean,
                "similarity_ci_low": sim.low,
                "similarity_ci_high": sim.high,
                "similarity_ci_note": sim.note,
                "faithfulness": mean_faithfulness(s, effects),
            }
        )
    return rows


Attributions = tuple[dict[str, np.ndarray], np.ndarray]


def _original(
    model: LayeredModel, features: Features, options: SanityOptions, original: Attributions | None
) -> Attributions:
    if original is not None:
        return original
    return attribute_features(
        model,
        features,
        checked_methods(options),
        ablation=options.ablation,
        seed=options.seed,
        batch_size=options.batch_size,
        target=options.target,
    )


def cascading_randomisation(
    model: LayeredModel,
    features: Features,
    options: SanityOptions | None = None,
    *,
    data: Dataset | None = None,
    original: Attributions | None = None,
) -> pd.DataFrame:
    """Re-initialise the head's parameter groups top-down, cumulatively, then the backbone's blocks from the
    top (trainable backbones only), and compare the attributions after each step.

    Parameters
    ----------
    model : LayeredModel
    features : Features
        The evaluated samples' cached hidden states; the head steps run on them, without the backbone.
    options : SanityOptions, optional
    data : Dataset, optional
        The samples ``features`` encodes. Given, and when :func:`backbone_is_trainable`, the head steps are
        followed by one step per backbone block (``backbone.layer_modules()``, last first): the block is
        re-initialised and ``data`` re-encoded (one backbone pass per block step).
    original : (dict of str to ndarray (N, L), ndarray (N, L)), optional
        The unmodified model's attributions and effects on ``features`` (:func:`attribute_features`), when
        already computed.

    Returns
    -------
    DataFrame
        Columns :data:`RANDOMISATION_COLUMNS`; ``check = "cascading"``; step 0 is the original model
        (similarity 1 by construction), step ``k`` has the top ``k`` groups re-initialised (``params``
        names them, ``+``-joined: ``classifier+scorer+adapters+block3+block2``; blocks 1-based).
    """
    options = options or SanityOptions()
    base, effects = _original(model, features, options, original)
    rows = _rows("cascading", 0, "none", base, base, effects, options)
    randomised = head_model(model, copy.deepcopy(model.head))
    done: list[str] = []

    def score(step: int, feats: Features) -> None:
        scores, eff = attribute_features(
            randomised,
            feats,
            list(base),
            ablation=options.ablation,
            seed=offset_seed(options.seed, step),
            batch_size=options.batch_size,
            target=options.target,
        )
        rows.extend(_rows("cascading", step, "+".join(done), base, scores, eff, options))

    groups = head_parameter_groups(randomised.head)
    for step, (group, modules) in enumerate(groups, 1):
        _reinitialise(randomised.head, group, modules, offset_seed(options.seed, step))
        done.append(group)
        score(step, features)
    if data is None or not backbone_is_trainable(model):
        return pd.DataFrame(rows, columns=RANDOMISATION_COLUMNS)
    randomised.backbone = copy.deepcopy(model.backbone).eval()
    blocks = randomised.backbone.layer_modules()
    for step, index in enumerate(reversed(range(len(blocks))), len(groups) + 1):
        _reinitialise(None, "block", [blocks[index]], offset_seed(options.seed, step))
        done.append(f"block{index + 1}")
        # Encoded in memory, never through the feature cache: the cache would key these randomised
        # weights as the original backbone's.
        score(step, encode_features(randomised, data, batch_size=options.batch_size, cache=False))
    return pd.DataFrame(rows, columns=RANDOMISATION_COLUMNS)


def data_randomisation(
    model: LayeredModel,
    train: Features,
    val: Features,
    test: Features,
    options: SanityOptions | None = None,
    *,
    original: Attributions | None = None,
) -> pd.DataFrame:
    """Retrain a fresh head on shuffled labels (same protocol and seed) and compare its attributions.

    The shuffle is one seeded permutation of the training and validation labels (``options.seed``).
    ``original``: as :func:`cascading_randomisation`, on ``test``.

    Returns
    -------
    DataFrame
        Columns :data:`RANDOMISATION_COLUMNS` plus ``accuracy`` (test accuracy of the head of that step);
        ``check = "data"``, step 0 the real model, step 1 (``params = "labels"``) the head trained on
        shuffled labels.
    """
    options = options or SanityOptions()
    base, effects = _original(model, test, options, original)
    gen = torch.Generator().manual_seed(options.seed)
    shuffled = [replace(f, y=f.y[torch.randperm(len(f), generator=gen)]) for f in (train, val)]
    head = retrained_head(model.head, model.head.layer_dims, *shuffled, options.train)
    scores, eff = attribute_features(
        head_model(model, head),
        test,
        list(base),
        ablation=options.ablation,
        seed=offset_seed(options.seed, 1),
        batch_size=options.batch_size,
        target=options.target,
    )
    rows = [
        {**r, "accuracy": accuracy(model.head, test)} for r in _rows("data", 0, "none", base, base, effects, options)
    ]
    rows += [{**r, "accuracy": accuracy(head, test)} for r in _rows("data", 1, "labels", base, scores, eff, options)]
    return pd.DataFrame(rows, columns=[*RANDOMISATION_COLUMNS, "accuracy"])
