"""Can the answer be trusted? Paired tests between methods, the null of faithfulness, honest ties.

- :mod:`~laya_eval.stats.paired`: :func:`paired_comparison` (bootstrap interval, Wilcoxon signed-rank,
  rank-biserial), :func:`holm_adjust`, :func:`compare_methods` (the ``comparisons.csv`` table).
- :mod:`~laya_eval.stats.null`: the exact null distribution of Spearman's rho for small ``L``
  (:func:`spearman_null`) and :func:`faithfulness_p_value`.
- :mod:`~laya_eval.stats.ties`: :func:`tie_effects` (near-equal and negligible effects) and
  :func:`identical_rankings` (a collapsed head).
- :mod:`~laya_eval.stats.model_state`: :func:`model_state` (accuracy on the evaluated samples beside the chance
  levels, at chance, one class) and :func:`typical_largest_effect` (effects negligible in absolute terms).
- :mod:`~laya_eval.stats.seeds`: :func:`across_seeds`, :func:`seed_ranks` and :func:`seed_comparisons` over
  several runs of one head.

Plain functions on NumPy arrays and pandas tables; no torch.

May import: errors, checks, catalog.
"""

from laya_eval.stats.model_state import (
    CHANCE_ALPHA,
    EFFECT_FLOOR,
    ONE_CLASS_SHARE,
    ModelState,
    model_state,
    typical_largest_effect,
    verdict,
)
from laya_eval.stats.null import (
    EXACT_MAX_LAYERS,
    SpearmanNull,
    faithfulness_p_value,
    spearman_null,
)
from laya_eval.stats.paired import (
    ALL_PAIRS,
    ALPHA,
    COMPARED_METRICS,
    COMPARISON_COLUMNS,
    PairedComparison,
    compare_methods,
    comparison_pairs,
    holm_adjust,
    interval_test_note,
    paired_comparison,
)
from laya_eval.stats.seeds import ACROSS_SEEDS_COLUMNS, across_seeds, min_wilcoxon_p, seed_comparisons, seed_ranks
from laya_eval.stats.ties import (
    DEFAULT_RTOL,
    RankingAgreement,
    TiedEffects,
    identical_rankings,
    tie_effects,
)

__all__ = [
    "ACROSS_SEEDS_COLUMNS",
    "ALL_PAIRS",
    "ALPHA",
    "CHANCE_ALPHA",
    "COMPARED_METRICS",
    "COMPARISON_COLUMNS",
    "DEFAULT_RTOL",
    "EFFECT_FLOOR",
    "EXACT_MAX_LAYERS",
    "ModelState",
    "ONE_CLASS_SHARE",
    "PairedComparison",
    "RankingAgreement",
    "SpearmanNull",
    "TiedEffects",
    "across_seeds",
    "compare_methods",
    "comparison_pairs",
    "faithfulness_p_value",
    "holm_adjust",
    "identical_rankings",
    "interval_test_note",
    "min_wilcoxon_p",
    "model_state",
    "paired_comparison",
    "seed_comparisons",
    "seed_ranks",
    "spearman_null",
    "tie_effects",
    "typical_largest_effect",
    "verdict",
]
