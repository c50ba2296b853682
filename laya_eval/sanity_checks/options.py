"""Options and table columns of the sanity checks."""

from __future__ import annotations

from dataclasses import field

from laya_eval.catalog import (
    LAYER_ROAR_COLUMNS,
    RANDOMISATION_COLUMNS,
    RETRAIN_PATIENCE,
    ROAR_AGREEMENT_COLUMNS,
    SIMILARITIES,
)
from laya_eval.engine.methods import check_without_ablation, resolve_methods
from laya_eval.engine.plugins import load_installed_plugins
from laya_eval.engine.removals import check_ablation, check_fixed_ablation
from laya_eval.options import check_declared, declared, defaults_of
from laya_eval.training.trainer import TrainOptions

__all__ = [
    "LAYER_ROAR_COLUMNS",
    "RANDOMISATION_COLUMNS",
    "RETRAIN_PATIENCE",
    "ROAR_AGREEMENT_COLUMNS",
    "SIMILARITIES",
    "SanityOptions",
    "checked_methods",
]

#: Early-stopping patience of the heads the checks retrain (the reference protocol's otherwise: Adam, lr 3e-4,
#: batch 128, at most 50 epochs). A fresh head on cached features is within half a point of its best validation
#: accuracy after a few epochs; the reference protocol's patience 5 spends five more epochs per head confirming
#: it. On both reference models patience 2 gives the same verdict for every method and check as patience 5, at
#: 0.64x the cost on Fashion-MNIST (benchmarks/results/sanity-*/README.md); ``TrainOptions(patience=5)``
#: restores it.


@declared
class SanityOptions:
    """Options of :func:`sanity` (the CLI's flags; each declared in :mod:`laya_eval.options`).

    ``methods`` None: every registered method that applies to the head. ``train``: the protocol used to
    retrain heads (data randomisation, layer-ROAR): by default the reference protocol with early-stopping
    patience :data:`RETRAIN_PATIENCE` (2); its seed seeds the first ROAR run, the others use
    ``train.seed + 1, ...`` (``roar_seeds`` runs in all). ``target``: the class the attributions explain and whose
    probability the effects measure, as ``--target`` (``"pred"``, ``"label"`` or a class index).
    """

    methods: tuple[str, ...] | None
    ablation: str
    similarity: str
    roar_seeds: int
    bootstrap: int
    seed: int
    batch_size: int
    train: TrainOptions = field(default_factory=lambda: TrainOptions(**defaults_of("SanityOptions.train")))
    target: str | int

    def __post_init__(self) -> None:
        load_installed_plugins()
        check_declared(self)
        check_ablation(self.ablation, "head", "SanityOptions.ablation")
        check_fixed_ablation(self.ablation, "sanity")
        check_without_ablation(self.methods, "sanity")


def checked_methods(options: SanityOptions) -> list[str]:
    """The methods the checks run: ``options.methods``, or every registered one (installed plug-ins included)."""
    return list(options.methods) if options.methods is not None else [m.name for m in resolve_methods(None)]
