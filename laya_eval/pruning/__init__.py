"""What the attributions are for: attribution-guided layer pruning and the early-exit what-if.

:func:`prune` removes, for every method, the k layers it ranks least important (k = 0 … L-1) and measures test
accuracy

- without retraining, under each ablation, from the cached head inputs (no backbone pass);
- with the head retrained on the kept layers only (cached features, the reference protocol, several seeds):
  the honest "smaller model" number;
- and, for backbones whose layers run as a chain, the depth actually needed (the deepest kept layer) and the
  measured latency of running the backbone only that far.

Rankings: ``dataset`` (the method's mean score per layer over the test split, one order for all inputs) and,
for input-dependent methods, ``input`` (each input's own order; no refit: it is not one smaller model).
Bounds: ``oracle`` (greedy best k-subset on the validation split, per ablation) and ``random`` (the mean of
seeded random dataset-level orders; per input, the ``random`` method's scores).

The area under each accuracy-vs-k curve summarises a method; paired bootstrap intervals over test inputs
compare methods (:mod:`laya_eval.pruning.auc`). The early-exit what-if is :mod:`laya_eval.pruning.early_exit`.

May import: errors, checks, catalog, options, output, stats, data, models, loading, engine, training, figures, sanity_checks.
"""

from laya_eval.pruning.auc import curve_area, pruning_comparisons, pruning_summary
from laya_eval.pruning.cost import depth_latency, is_chain, layer_call_order
from laya_eval.pruning.curves import evaluate_masks, greedy_order, prefix_masks, removal_order
from laya_eval.pruning.early_exit import early_exit_table, exit_depths, normalised_mass, oracle_exit_depth
from laya_eval.pruning.options import (
    EARLY_EXIT_COLUMNS,
    LATENCY_COLUMNS,
    PRUNING_COLUMNS,
    PRUNING_COMPARISON_COLUMNS,
    PRUNING_SUMMARY_COLUMNS,
    PruneOptions,
)
from laya_eval.pruning.output import PRUNE_FILES, prune_figures
from laya_eval.pruning.refit import RefitCache
from laya_eval.pruning.run import PruneResult, prune

__all__ = [
    "EARLY_EXIT_COLUMNS",
    "LATENCY_COLUMNS",
    "PRUNE_FILES",
    "PRUNING_COLUMNS",
    "PRUNING_COMPARISON_COLUMNS",
    "PRUNING_SUMMARY_COLUMNS",
    "PruneOptions",
    "PruneResult",
    "RefitCache",
    "curve_area",
    "depth_latency",
    "early_exit_table",
    "evaluate_masks",
    "exit_depths",
    "greedy_order",
    "is_chain",
    "layer_call_order",
    "normalised_mass",
    "oracle_exit_depth",
    "prefix_masks",
    "prune",
    "prune_figures",
    "pruning_comparisons",
    "pruning_summary",
    "removal_order",
]
