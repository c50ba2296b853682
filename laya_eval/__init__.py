"""laya-eval: how faithful are layer attributions?

Load a checkpoint whose head aggregates every hidden layer (LAYA, ScalarMix,
Concat, LastLayer), compute layer attributions, measure leave-one-layer-out
effects and score the attributions.

The public names below are imported lazily (PEP 562), so ``import laya_eval``
and the CLI's ``--help`` do not pay for importing torch. Submodules load on first
access too; no exported name equals a submodule's name, so ``laya_eval.trace`` and
``laya_eval.evaluate`` are always the modules, whatever was imported before.

Examples
--------
>>> import laya_eval                                            # doctest: +SKIP
>>> result = laya_eval.evaluate.evaluate("ckpt.pt")             # doctest: +SKIP
>>> result.summary[["method", "faithfulness", "deletion_at_1"]]  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "CheckpointError": "laya_eval.errors",
    "ConfigError": "laya_eval.errors",
    "DataError": "laya_eval.errors",
    "LayaEvalError": "laya_eval.errors",
    "ResultsError": "laya_eval.errors",
    "TrainingError": "laya_eval.errors",
    "HEADS": "laya_eval.heads",
    "ConcatHead": "laya_eval.heads",
    "LastLayerHead": "laya_eval.heads",
    "LayaHead": "laya_eval.heads",
    "ScalarMixHead": "laya_eval.heads",
    "make_head": "laya_eval.heads",
    "make_backbone": "laya_eval.backbones",
    "ModuleBackbone": "laya_eval.backbones",
    "HFBackbone": "laya_eval.backbones",
    "LoadedModel": "laya_eval.specs",
    "load_model": "laya_eval.specs",
    "load_backbone": "laya_eval.specs",
    "FitResult": "laya_eval.fit",
    "fit_head": "laya_eval.fit",
    "backbone_features": "laya_eval.fit",
    "Features": "laya_eval.features",
    "TrainOptions": "laya_eval.train",
    "TrainResult": "laya_eval.train",
    "build_model": "laya_eval.train",
    "train_head": "laya_eval.train",
    "as_layer_head": "laya_eval.head_import",
    "import_head_state_dict": "laya_eval.head_import",
    "from_weighted_layer_sum": "laya_eval.weighted_layer_sum",
    "LayeredModel": "laya_eval.model",
    "ModelInfo": "laya_eval.model",
    "load_checkpoint": "laya_eval.checkpoint",
    "read_checkpoint": "laya_eval.checkpoint",
    "save_checkpoint": "laya_eval.checkpoint",
    "load_dataset": "laya_eval.data",
    "Trace": "laya_eval.trace",
    "METHODS": "laya_eval.attribution",
    "METRICS": "laya_eval.metrics",
    "EvalOptions": "laya_eval.evaluate",
    "EvaluationResult": "laya_eval.evaluate",
    "evaluate_ablations": "laya_eval.evaluate",
    "write_results": "laya_eval.evaluate",
    "layer_profile": "laya_eval.profile",
    "write_profile": "laya_eval.profile",
    "load_runs": "laya_eval.report",
    "write_report": "laya_eval.report",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f"{__name__}.{name}")  # the import binds it as an attribute
    raise AttributeError(f"module 'laya_eval' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
