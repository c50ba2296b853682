"""laya-eval: how faithful are layer attributions?

Load a checkpoint whose head aggregates every hidden layer (LAYA, ScalarMix,
Concat, LastLayer), compute layer attributions, measure leave-one-layer-out
effects and score the attributions.
"""

from __future__ import annotations

__version__ = "0.1.0"

from laya_eval.checkpoint import load_checkpoint, read_checkpoint, save_checkpoint
from laya_eval.errors import CheckpointError, ConfigError, DataError, LayaEvalError
from laya_eval.heads import HEADS, ConcatHead, LastLayerHead, LayaHead, ScalarMixHead, make_head
from laya_eval.model import LayeredModel, ModelInfo

__all__ = [
    "HEADS",
    "CheckpointError",
    "ConcatHead",
    "ConfigError",
    "DataError",
    "LastLayerHead",
    "LayaEvalError",
    "LayaHead",
    "LayeredModel",
    "ModelInfo",
    "ScalarMixHead",
    "__version__",
    "load_checkpoint",
    "make_head",
    "read_checkpoint",
    "save_checkpoint",
]
