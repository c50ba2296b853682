"""Options and table columns of layer pruning and the early-exit what-if."""

from __future__ import annotations

from dataclasses import dataclass, field

from laya_eval.catalog import BOOTSTRAP_RESAMPLES, PRUNE_RANDOM_RANKINGS, PRUNE_RANDOM_REFITS, PRUNE_SEEDS
from laya_eval.engine.methods import resolve_methods
from laya_eval.engine.plan import check_target
from laya_eval.catalog import fixed_ablation_names
from laya_eval.checks import check_fields, check_non_negative_int, check_positive_int, check_seed
from laya_eval.engine.removals import check_ablations, check_fixed_ablation
from laya_eval.training.trainer import TrainOptions

__all__ = ["EARLY_EXIT_COLUMNS", "LATENCY_COLUMNS", "PRUNING_COLUMNS", "PRUNING_COMPARISON_COLUMNS",
           "PRUNING_SUMMARY_COLUMNS", "PruneOptions"]

PRUNING_COLUMNS = ["method", "ranking", "ablation", "k_removed", "layers_kept", "accuracy", "confidence",
                   "accuracy_refit", "accuracy_refit_std", "depth", "latency_ratio"]
PRUNING_SUMMARY_COLUMNS = ["method", "ranking", "ablation", "curve", "n", "auc", "ci_low", "ci_high", "ci_note"]
PRUNING_COMPARISON_COLUMNS = ["ranking", "ablation", "curve", "method_a", "method_b", "n", "auc_difference",
                              "ci_low", "ci_high", "ci_note"]
EARLY_EXIT_COLUMNS = ["policy", "method", "partial", "threshold", "accuracy", "agreement", "mean_depth",
                      "latency_ratio", "partial_needs_all_layers", "signal_needs_all_layers", "saving"]
LATENCY_COLUMNS = ["depth", "seconds", "latency_ratio"]

#: Thresholds of the early-exit policies (confidence theta, attribution mass epsilon).
CONFIDENCE_THRESHOLDS = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99)
MASS_THRESHOLDS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5)


@dataclass(frozen=True)
class PruneOptions:
    """Options of :func:`laya_eval.pruning.prune` (the CLI's flags).

    Attributes
    ----------
    methods : tuple of str or None
        Attribution methods whose rankings are pruned with (None: every registered method that applies to the
        head). ``random`` is not a method row here: the ``random`` row is the mean over ``n_random`` seeded
        random dataset-level rankings (and, per input, the ``random`` method's per-sample scores).
    ablations : tuple of str
        How the removed layers are removed for the no-retraining accuracy (head scope).
    seeds : int
        Training seeds of every refit head (``train.seed``, ``train.seed + 1``, ...); 0 skips the refit.
    n_random : int
        Seeded random dataset-level rankings averaged into the ``random`` row (no retraining).
    n_random_refit : int
        How many of them are also refit (the r-th with seed ``train.seed + r % seeds``).
    timing : bool
        Measure the latency of the truncated backbone (chain backbones only); False leaves the latency
        columns empty, so the files are byte-identical from run to run.
    timing_repeats, timing_batch : int
        Most rounds (median taken; fewer, at least 3, when they would take over a minute) and batch size of the
        latency measurement.
    early_exit : bool
        Also run the early-exit what-if.
    target : "pred", "label" or int
        The class whose logit the methods' rankings explain (as ``--target``): the prediction, the true label or
        a fixed class index. The pruning curves themselves measure accuracy, whatever the target.
    """

    methods: tuple[str, ...] | None = None
    ablations: tuple[str, ...] = tuple(fixed_ablation_names())
    seeds: int = PRUNE_SEEDS
    n_random: int = PRUNE_RANDOM_RANKINGS
    n_random_refit: int = PRUNE_RANDOM_REFITS
    seed: int = 0
    batch_size: int = 256
    bootstrap: int = BOOTSTRAP_RESAMPLES
    timing: bool = True
    timing_repeats: int = 15
    timing_batch: int = 512
    early_exit: bool = True
    train: TrainOptions = field(default_factory=TrainOptions)
    target: str | int = "pred"

    def __post_init__(self) -> None:
        check_target(self.target)
        object.__setattr__(self, "ablations", check_ablations(self.ablations, "head"))
        for a in self.ablations:
            check_fixed_ablation(a, "prune")
        check_fields(self, _PRUNE_RULES)
        resolve_methods(None if self.methods is None else list(self.methods))


_PRUNE_RULES = {
    "seeds": check_non_negative_int,
    "n_random": check_positive_int,
    "n_random_refit": check_non_negative_int,
    "seed": check_seed,
    "batch_size": check_positive_int,
    "bootstrap": check_non_negative_int,
    "timing_repeats": check_positive_int,
    "timing_batch": check_positive_int,
}
