"""laya-eval: how faithful are layer attributions?

Load a model whose head aggregates every hidden layer (LAYA, ScalarMix, Concat, LastLayer),
compute layer attributions, measure leave-one-layer-out effects and score the attributions.

The verbs are functions at the top level; the code lives in rooms named by role (see
``docs/architecture.md``), lowest first::

    errors, version, catalog, checks     facts and exceptions, no torch
    output, stats, data                  atomic files and tables; statistics; datasets
    models                               layered model, heads, removal fast paths, trace, backbones
    loading                              model specs, checkpoints and their schema, probe, feature cache
    engine                               plan -> collect -> merge -> summarize; methods, removals
    training                             the reference protocol, fit-head
    figures, mixers, planted, profiling, sanity_checks, pruning, reporting, sweeps

A room imports only rooms listed before it (``tests/test_layout.py`` checks every import).
The names below are imported lazily (PEP 562), so ``import laya_eval`` and the CLI's ``--help``
do not pay for importing torch.

Examples
--------
>>> import laya_eval                                                   # doctest: +SKIP
>>> result = laya_eval.evaluate("ckpt.pt", "digits")                   # doctest: +SKIP
>>> result.summary[["method", "faithfulness", "deletion_at_1"]]        # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import Any

from laya_eval.version import __version__ as __version__

#: The verbs: one library function per command.
VERBS = {
    "evaluate": "laya_eval.engine.evaluation:evaluate",
    "evaluate_next_token": "laya_eval.language.evaluation:evaluate_next_token",
    "fit_head": "laya_eval.training.head_fit:fit_head",
    "train": "laya_eval.training.head_fit:train",
    "profile": "laya_eval.profiling.run:profile",
    "sanity": "laya_eval.sanity_checks:sanity",
    "prune": "laya_eval.pruning.run:prune",
    "prune_next_token": "laya_eval.language.pruning:prune_next_token",
    "report": "laya_eval.reporting.write:report",
    "sweep": "laya_eval.sweeps.run:sweep",
    "meta": "laya_eval.planted.run:meta",
    "load_model": "laya_eval.loading.specs:load_model",
    "save_checkpoint": "laya_eval.loading.checkpoints:save_checkpoint",
    "import_keras": "laya_eval.loading.keras_import:import_keras",
    "audit_mixers": "laya_eval.mixers.audit:audit_mixers",
    "train_mixer_model": "laya_eval.mixers.training:train_mixer_model",
}

_NAMES = {
    "CheckpointError": "laya_eval.errors",
    "ConfigError": "laya_eval.errors",
    "DataError": "laya_eval.errors",
    "LayaEvalError": "laya_eval.errors",
    "ResultsError": "laya_eval.errors",
    "TrainingError": "laya_eval.errors",
    "HEADS": "laya_eval.models.heads",
    "ConcatHead": "laya_eval.models.heads",
    "LastLayerHead": "laya_eval.models.heads",
    "LayaHead": "laya_eval.models.heads",
    "ScalarMixHead": "laya_eval.models.heads",
    "make_head": "laya_eval.models.heads",
    "make_backbone": "laya_eval.models.backbones",
    "ModuleBackbone": "laya_eval.models.backbones",
    "HFBackbone": "laya_eval.models.backbones",
    "LoadedModel": "laya_eval.loading.specs",
    "load_backbone": "laya_eval.loading.specs",
    "FitResult": "laya_eval.training.head_fit",
    "backbone_features": "laya_eval.training.features",
    "Features": "laya_eval.loading.feature_cache",
    "TrainOptions": "laya_eval.training.trainer",
    "TrainResult": "laya_eval.training.trainer",
    "build_model": "laya_eval.training.build",
    "train_head": "laya_eval.training.trainer",
    "as_layer_head": "laya_eval.models.head_import",
    "import_head_state_dict": "laya_eval.models.head_import",
    "from_weighted_layer_sum": "laya_eval.models.weighted_layer_sum",
    "LayeredModel": "laya_eval.models.layered",
    "ModelInfo": "laya_eval.models.layered",
    "load_dataset": "laya_eval.data",
    "Trace": "laya_eval.models.trace",
    "METHODS": "laya_eval.engine.methods",
    "AttributionMethod": "laya_eval.engine.methods",
    "MethodContext": "laya_eval.engine.methods",
    "register_method": "laya_eval.engine.methods",
    "ABLATION_REGISTRY": "laya_eval.engine.removals",
    "Ablation": "laya_eval.engine.removals",
    "register_ablation": "laya_eval.engine.removals",
    "SampleFills": "laya_eval.engine.interventions",
    "derived_seed": "laya_eval.engine.seeding",
    "per_sample_normal": "laya_eval.engine.seeding",
    "per_sample_uniform": "laya_eval.engine.seeding",
    "network_replacement_logits": "laya_eval.engine.network_passes",
    "MethodSpec": "laya_eval.catalog",
    "AblationSpec": "laya_eval.catalog",
    "load_plugins": "laya_eval.engine.plugins",
    "pool_hidden": "laya_eval.models.heads",
    "METRICS": "laya_eval.stats.metrics",
    "EvalOptions": "laya_eval.engine.plan",
    "EvaluationResult": "laya_eval.engine.results",
    "Evaluation": "laya_eval.engine.outcome",
    "LayerProfile": "laya_eval.profiling.profiles",
    "SanityOptions": "laya_eval.sanity_checks.options",
    "SanityResult": "laya_eval.sanity_checks",
    "PruneOptions": "laya_eval.pruning.options",
    "PruneResult": "laya_eval.pruning.run",
    "load_runs": "laya_eval.reporting.runs",
    "ReportResult": "laya_eval.reporting.write",
    "MetaOptions": "laya_eval.planted.run",
    "MetaResult": "laya_eval.planted.run",
    "build_planted": "laya_eval.planted.families",
    "MixerOptions": "laya_eval.mixers.audit",
    "MixerAudit": "laya_eval.mixers.audit",
    "DepthMixer": "laya_eval.mixers.protocol",
    "find_mixers": "laya_eval.mixers.protocol",
}

__all__ = sorted([*VERBS, *_NAMES, "VERBS", "__version__"])


def __getattr__(name: str) -> Any:
    if name in VERBS:
        module, _, attr = VERBS[name].partition(":")
        value = getattr(importlib.import_module(module), attr)
    elif name in _NAMES:
        value = getattr(importlib.import_module(_NAMES[name]), name)
    else:
        raise AttributeError(f"module 'laya_eval' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
