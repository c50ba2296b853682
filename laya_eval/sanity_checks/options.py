"""Options and table columns of the sanity checks."""

from __future__ import annotations

from dataclasses import dataclass, field

from laya_eval.catalog import (BOOTSTRAP_RESAMPLES, EVAL_BATCH_SIZE, LAYER_ROAR_COLUMNS, RANDOMISATION_COLUMNS,
                               RETRAIN_PATIENCE, ROAR_AGREEMENT_COLUMNS, ROAR_SEEDS)
from laya_eval.engine.methods import resolve_methods
from laya_eval.engine.plan import check_target
from laya_eval.checks import check_choice, check_fields, check_non_negative_int, check_positive_int, check_seed
from laya_eval.engine.removals import check_ablation, check_fixed_ablation
from laya_eval.training.trainer import TrainOptions

__all__ = ["LAYER_ROAR_COLUMNS", "RANDOMISATION_COLUMNS", "RETRAIN_PATIENCE", "ROAR_AGREEMENT_COLUMNS", "SIMILARITIES",
           "SanityOptions", "checked_methods"]

SIMILARITIES = ("across_samples", "per_sample")
#: Early-stopping patience of the heads the checks retrain (the reference protocol's otherwise: Adam, lr 3e-4,
#: batch 128, at most 50 epochs). A fresh head on cached features is within half a point of its best validation
#: accuracy after a few epochs; the reference protocol's patience 5 spends five more epochs per head confirming
#: it. On both reference models patience 2 gives the same verdict for every method and check as patience 5, at
#: 0.64x the cost on Fashion-MNIST (benchmarks/results/sanity-*/README.md); ``TrainOptions(patience=5)``
#: restores it.


@dataclass(frozen=True)
class SanityOptions:
    """Options of :func:`sanity` (the CLI's flags).

    ``methods`` None: every registered method that applies to the head. ``train``: the protocol used to
    retrain heads (data randomisation, layer-ROAR): by default the reference protocol with early-stopping
    patience :data:`RETRAIN_PATIENCE` (2); its seed seeds the first ROAR run, the others use
    ``train.seed + 1, ...`` (``roar_seeds`` runs in all). ``target``: the class the attributions explain and whose
    probability the effects measure, as ``--target`` (``"pred"``, ``"label"`` or a class index).
    """

    methods: tuple[str, ...] | None = None
    ablation: str = "gate"
    similarity: str = "across_samples"
    roar_seeds: int = ROAR_SEEDS
    bootstrap: int = BOOTSTRAP_RESAMPLES
    seed: int = 0
    batch_size: int = EVAL_BATCH_SIZE
    train: TrainOptions = field(default_factory=lambda: TrainOptions(patience=RETRAIN_PATIENCE))
    target: str | int = "pred"

    def __post_init__(self) -> None:
        check_target(self.target)
        check_ablation(self.ablation, "head")
        check_fixed_ablation(self.ablation, "sanity")
        check_fields(self, _SANITY_RULES)
        resolve_methods(None if self.methods is None else list(self.methods))


_SANITY_RULES = {
    "similarity": lambda name, value: check_choice(name, value, SIMILARITIES),
    "roar_seeds": check_positive_int,
    "bootstrap": check_non_negative_int,
    "seed": check_seed,
    "batch_size": check_positive_int,
}


def checked_methods(options: SanityOptions) -> list[str]:
    """The methods the checks run: ``options.methods``, or every registered one (installed plug-ins included)."""
    return list(options.methods) if options.methods is not None else [m.name for m in resolve_methods(None)]
