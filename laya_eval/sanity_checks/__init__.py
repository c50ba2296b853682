"""Layer-level sanity checks: do a method's layer attributions depend on the model at all?

Three checks, head-only on cached features: the backbone encodes the data
once (:func:`encode_features`) and every head step re-runs only the head.

- **Cascading parameter randomisation** (Adebayo et al. 2018, at layer level,
  :func:`cascading_randomisation`): the head's parameter groups are re-initialised top-down
  (:func:`head_parameter_groups`: classifier -> scorer or mix weights -> adapters), cumulatively, then, for
  a trainable backbone (:func:`backbone_is_trainable`: trained with the head, not a frozen pretrained
  encoder), its blocks from the top (``block3``, ``block2``, ...; the test split is re-encoded once per
  block step); after each step every method's attributions are compared with the original ones and scored
  for faithfulness against the randomised model's own effects.
- **Data randomisation** (:func:`data_randomisation`): a fresh head is trained on shuffled labels with the
  same protocol and seed; its attributions are compared with the real model's.
- **Layer-ROAR** (:func:`layer_roar`, :func:`roar_agreement`): for each layer, a head without that layer is
  retrained (several seeds) and the test-accuracy drop against a retrained full head is recorded; each
  method's dataset-level layer ranking (its mean attribution per layer) is correlated with those drops.

Similarity (``similarity="across_samples"``, the default): for each layer, Spearman's rho *across samples*
between the original and the new attributions, averaged over the layers where both are non-constant;
its 95% interval is a percentile bootstrap over samples (ranks computed once on the full set). The per-sample
alternative (``"per_sample"``: rho across layers within each sample, averaged over samples) is available but
is dominated by the architecture: a LastLayer head ranks its last layer first whatever its weights, so
every method "survives" randomisation on it. ``random`` is redrawn at every step (seed + step), so its
similarity is the chance level, about 0.

Effects are computed in float64 at the head (cheap: the head is small) and tied with
:func:`laya_eval.stats.tie_effects` (default tolerance) before faithfulness is scored.

May import: errors, checks, catalog, options, output, stats, data, models, loading, engine, training, figures.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from laya_eval.data import Dataset
from laya_eval.engine.plan import check_target_class
from laya_eval.models.layered import LayeredModel
from laya_eval.sanity_checks.cached import Features, attribute_features, head_device
from laya_eval.training.features import encode_features
from laya_eval.sanity_checks.options import (
    LAYER_ROAR_COLUMNS,
    RANDOMISATION_COLUMNS,
    ROAR_AGREEMENT_COLUMNS,
    SIMILARITIES,
    SanityOptions,
    checked_methods,
)
from laya_eval.sanity_checks.output import SANITY_FILES, _write_sanity
from laya_eval.sanity_checks.randomisation import (
    backbone_is_trainable,
    cascading_randomisation,
    data_randomisation,
    head_parameter_groups,
)
from laya_eval.sanity_checks.roar import layer_roar, predictions, roar_agreement
from laya_eval.stats import ModelState, model_state
from laya_eval.sanity_checks.similarity import Resamples, attribution_similarity

__all__ = [
    "LAYER_ROAR_COLUMNS",
    "RANDOMISATION_COLUMNS",
    "ROAR_AGREEMENT_COLUMNS",
    "SANITY_FILES",
    "SIMILARITIES",
    "Features",
    "Resamples",
    "SanityOptions",
    "SanityResult",
    "attribute_features",
    "attribution_similarity",
    "backbone_is_trainable",
    "cascading_randomisation",
    "data_randomisation",
    "encode_features",
    "head_parameter_groups",
    "layer_roar",
    "retraining_on_model_device",
    "roar_agreement",
    "sanity",
]


@dataclass
class SanityResult:
    """What :func:`sanity` measured and wrote.

    Attributes
    ----------
    randomisation, data_randomisation : DataFrame
        Columns :data:`RANDOMISATION_COLUMNS`.
    layer_roar : DataFrame
        Columns :data:`LAYER_ROAR_COLUMNS`.
    roar_agreement : DataFrame
        Columns :data:`ROAR_AGREEMENT_COLUMNS`.
    meta : dict
        What was checked (``sanity.json``): the model (``label``, ``checkpoint_sha256``), dataset, options and the
        wall time of the checks (``wall_time_s``).
    files : list of Path
        The files written (``manifest.json`` last); empty without ``out``.
    warnings : list of str
        One line per warning about the run, as on every verb's result: a model at chance or predicting one class
        on the test split (:meth:`laya_eval.stats.ModelState.notes`).
    model_state : ModelState or None
        The model's accuracy on the test split beside chance (``meta["model_state"]`` holds its record).
    """

    randomisation: pd.DataFrame
    data_randomisation: pd.DataFrame
    layer_roar: pd.DataFrame
    roar_agreement: pd.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    model_state: ModelState | None = None


def retraining_on_model_device(options: SanityOptions, model: LayeredModel) -> SanityOptions:
    """``options`` with the retrained heads' device set to where ``model``'s head is (the CLI loads the model onto
    ``--device``): data randomisation and layer-ROAR train where the evaluation runs."""
    train = dataclasses.replace(options.train, device=str(head_device(model.head)))
    return dataclasses.replace(options, train=train)


def _run_checks(
    model: LayeredModel,
    train: Dataset,
    val: Dataset,
    test: Dataset,
    options: SanityOptions,
    cache_dir: str | os.PathLike | None,
) -> SanityResult:
    """The three checks on ``model``; the backbone runs once per split and once per backbone step of the cascading
    randomisation (trainable backbones only); every other step is head-only. The original model's attributions are
    computed once and shared by the checks."""
    options = retraining_on_model_device(options, model)
    check_target_class(options.target, model)
    for d in (train, val, test):
        model.check_fits(d)
    model.eval()
    train_f, val_f, test_f = (
        encode_features(model, d, batch_size=options.batch_size, cache_dir=cache_dir) for d in (train, val, test)
    )
    original = attribute_features(
        model,
        test_f,
        checked_methods(options),
        ablation=options.ablation,
        seed=options.seed,
        batch_size=options.batch_size,
        target=options.target,
    )
    roar = layer_roar(model, train_f, val_f, test_f, options)
    state = model_state(test_f.y.numpy(), predictions(model.head, test_f), model.info.num_classes)
    return SanityResult(
        randomisation=cascading_randomisation(model, test_f, options, data=test, original=original),
        data_randomisation=data_randomisation(model, train_f, val_f, test_f, options, original=original),
        layer_roar=roar,
        roar_agreement=roar_agreement(original[0], roar, n_resamples=options.bootstrap, seed=options.seed),
        warnings=state.notes(),
        model_state=state,
    )


def sanity(
    model: LayeredModel | str | os.PathLike,
    data: str | Mapping[str, Dataset] | None = None,
    *,
    out: str | os.PathLike | None = None,
    options: SanityOptions | None = None,
    data_dir: str | os.PathLike | None = None,
    limit: int | None = None,
    cache_dir: str | os.PathLike | None = None,
    device: str = "cpu",
    trust_code: bool = False,
    allow_unverified: bool = False,
    fmt: str | None = None,
    style: str = "default",
    on_start: Callable[[str], None] | None = None,
) -> SanityResult:
    """The three sanity checks of a model's attribution methods (``laya-eval sanity``).

    ``out``, ``fmt`` and ``style`` are checked before anything is loaded, the model and the data before the
    backbone runs. The backbone encodes the train, val and test splits once (and the test split once per backbone
    step of the cascading randomisation, for a trainable backbone); every other step is head-only.

    Parameters
    ----------
    model : LayeredModel or path
        A model, or a laya-eval checkpoint (loaded onto ``device``).
    data : str, mapping or None
        A dataset name, or a mapping with the Datasets ``train`` and ``val`` (for the retrained heads: data
        randomisation, layer-ROAR) and ``test`` (the evaluated samples); ``None``: the checkpoint's dataset.
    out : path, optional
        The folder to write, replaced whole: :data:`SANITY_FILES`, ``sanity.json`` (:attr:`SanityResult.meta`),
        ``sanity.<fmt>`` (similarity per step and method) and ``manifest.json`` (the sha256 of every file);
        ``None``: nothing is written.
    options : SanityOptions, optional
    data_dir : path, optional
    limit : int, optional
        Keep the first ``limit`` test samples (the heads still train on all of train and val).
    cache_dir : path, optional
        Feature cache of a frozen pretrained backbone stored by reference, shared with ``fit-head`` and ``prune``
        (:func:`encode_features`).
    device : str
        Where a checkpoint is loaded (a LayeredModel stays where it is); the retrained heads train where the model's
        head is.
    trust_code, allow_unverified : bool
        As :func:`laya_eval.loading.checkpoints.load_checkpoint`'s.
    fmt : {"png", "svg", "pdf"}, optional
        The figure's format: png, or pdf in paper style.
    style : {"default", "paper"}
        Paper style: the figure has no title and its caption is written beside it as ``sanity.caption.txt``.
    on_start : callable, optional
        Receives one line saying what is about to run (the CLI prints it).

    Returns
    -------
    SanityResult

    Raises
    ------
    ConfigError
        ``out`` cannot be written, a bad ``fmt`` or ``style``, a target class the model does not have, data the
        model does not take.
    """
    from laya_eval.data import load_splits
    from laya_eval.figures import check_format, check_style
    from laya_eval.loading.checkpoints import load_checkpoint
    from laya_eval.models.devices import resolve_device
    from laya_eval.output.files import check_output_folder, file_sha256

    options = options or SanityOptions()
    if out is not None:
        check_output_folder(out)
    check_style(style)
    if fmt is not None:
        check_format(fmt)
    path = None if isinstance(model, LayeredModel) else model
    if path is not None:
        model = load_checkpoint(
            path, map_location=resolve_device(device), trust_code=trust_code, allow_unverified=allow_unverified
        )
    label = "<in-memory>" if path is None else str(path)
    name, splits = load_splits(data or model.info.dataset, data_dir=data_dir, test_limit=limit)
    start = time.perf_counter()
    if on_start is not None:
        on_start(
            f"{label}: {model.head.name} head, {name}; encoding {sum(len(s) for s in splits)} samples "
            f"once, then {options.roar_seeds * (model.n_layers + 1) + 1} head trainings"
        )
    result = _run_checks(model, *splits, options, cache_dir)
    result.meta = {
        "label": label,
        "checkpoint_sha256": None if path is None else file_sha256(path),
        "head": model.head.name,
        "dataset": name,
        "split": "test",
        "n": len(splits[2]),
        "ablation": options.ablation,
        "scope": "head",
        "similarity": options.similarity,
        "backbone_steps": backbone_is_trainable(model),
        "roar_seeds": options.roar_seeds,
        "train": dataclasses.asdict(options.train),
        "seed": options.seed,
        "bootstrap": options.bootstrap,
        "target": options.target,
        "model_state": None if result.model_state is None else result.model_state.record(),
        "wall_time_s": round(time.perf_counter() - start, 1),
    }
    if out is not None:
        result.files = _write_sanity(result, out, fmt=fmt, style=style)
    return result
