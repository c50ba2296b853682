"""Options and table columns of layer pruning and the early-exit what-if."""

from __future__ import annotations

from dataclasses import field

from laya_eval.checks import check_positive_int
from laya_eval.engine.methods import check_without_ablation
from laya_eval.engine.plugins import load_installed_plugins
from laya_eval.engine.removals import check_ablations, check_fixed_ablation
from laya_eval.options import check_declared, declared, defaults_of
from laya_eval.training.trainer import TrainOptions

__all__ = [
    "EARLY_EXIT_COLUMNS",
    "LATENCY_COLUMNS",
    "PRUNING_COLUMNS",
    "PRUNING_COMPARISON_COLUMNS",
    "PRUNING_SUMMARY_COLUMNS",
    "PruneOptions",
]

PRUNING_COLUMNS = [
    "method",
    "ranking",
    "ablation",
    "k_removed",
    "layers_kept",
    "accuracy",
    "confidence",
    "accuracy_refit",
    "accuracy_refit_std",
    "depth",
    "latency_ratio",
]
PRUNING_SUMMARY_COLUMNS = ["method", "ranking", "ablation", "curve", "n", "auc", "ci_low", "ci_high", "ci_note"]
PRUNING_COMPARISON_COLUMNS = [
    "ranking",
    "ablation",
    "curve",
    "method_a",
    "method_b",
    "n",
    "auc_difference",
    "ci_low",
    "ci_high",
    "ci_note",
]
EARLY_EXIT_COLUMNS = [
    "policy",
    "method",
    "partial",
    "threshold",
    "accuracy",
    "agreement",
    "mean_depth",
    "latency_ratio",
    "partial_needs_all_layers",
    "signal_needs_all_layers",
    "saving",
]
LATENCY_COLUMNS = ["depth", "seconds", "latency_ratio"]

#: Thresholds of the early-exit policies (confidence theta, attribution mass epsilon).
CONFIDENCE_THRESHOLDS = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99)
MASS_THRESHOLDS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5)


@declared
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
        ``next-token``: a causal LM pruned by its own next-token loss (:func:`laya_eval.prune_next_token`).
    context : int
        With ``target="next-token"``: tokens per text window.
    """

    methods: tuple[str, ...] | None
    ablations: tuple[str, ...]
    seeds: int
    n_random: int
    n_random_refit: int
    seed: int
    batch_size: int
    bootstrap: int
    timing: bool
    timing_repeats: int = 15
    timing_batch: int = 512
    early_exit: bool
    train: TrainOptions = field(default_factory=lambda: TrainOptions(**defaults_of("PruneOptions.train")))
    target: str | int
    context: int

    def __post_init__(self) -> None:
        load_installed_plugins()
        check_declared(self)
        object.__setattr__(self, "ablations", check_ablations(self.ablations, "head", "PruneOptions.ablations"))
        for a in self.ablations:
            check_fixed_ablation(a, "prune")
        if self.target != "next-token":  # a language model's pruning scores every block under skip (atp included)
            check_without_ablation(self.methods, "prune")
        check_positive_int("PruneOptions.timing_repeats", self.timing_repeats)
        check_positive_int("PruneOptions.timing_batch", self.timing_batch)
