"""Area under a pruning curve and paired bootstrap intervals between methods.

The curve of a ranking is its accuracy against the number of layers removed, k = 0 … L-1. Its area is the
trapezoid rule on x = k / (L - 1), the fraction of the removable layers removed; it is in accuracy units (the
mean accuracy along the curve): a ranking that loses nothing has the unpruned accuracy as its area (0.98 for a
flat curve at 0.98), not 1.
Because the area is linear in the per-sample correctness, it is the mean of per-sample areas: the bootstrap
resamples test inputs, and two methods are compared on the *same* resampled inputs (paired), as the
difference of their per-sample areas.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from laya_eval.stats.metrics import bootstrap_mean
from laya_eval.pruning.options import PRUNING_COMPARISON_COLUMNS, PRUNING_SUMMARY_COLUMNS

__all__ = ["curve_area", "pruning_comparisons", "pruning_summary"]


def curve_area(correct: np.ndarray) -> np.ndarray:
    """Per-sample area under the accuracy-vs-k curve.

    Parameters
    ----------
    correct : ndarray, (N, K)
        Correctness (or a mean correctness in [0, 1]) at k = 0 … K-1 layers removed; K >= 2.

    Returns
    -------
    ndarray of float64, (N,)
    """
    c = np.asarray(correct, np.float64)
    k = c.shape[1]
    return (c.sum(1) - 0.5 * (c[:, 0] + c[:, -1])) / (k - 1)


def pruning_summary(
    curves: Mapping[tuple[str, str, str, str], np.ndarray], *, n_resamples: int = 1000, seed: int = 0
) -> pd.DataFrame:
    """Area under every curve with a 95% percentile bootstrap interval over test inputs.

    Parameters
    ----------
    curves : mapping of (method, ranking, ablation, curve) to ndarray (N, K)
        ``curve``: ``accuracy`` (no retraining) or ``refit``.
    """
    rows = []
    for (method, ranking, ablation, curve), correct in curves.items():
        iv = bootstrap_mean(curve_area(correct), n_resamples=n_resamples, seed=seed)
        rows.append(
            {
                "method": method,
                "ranking": ranking,
                "ablation": ablation,
                "curve": curve,
                "n": len(correct),
                "auc": iv.mean,
                "ci_low": iv.low,
                "ci_high": iv.high,
                "ci_note": iv.note,
            }
        )
    return pd.DataFrame(rows, columns=PRUNING_SUMMARY_COLUMNS)


def pruning_comparisons(
    curves: Mapping[tuple[str, str, str, str], np.ndarray], *, n_resamples: int = 1000, seed: int = 0
) -> pd.DataFrame:
    """Paired bootstrap interval of the area difference ``a - b`` for every pair of rows with the same ranking,
    ablation and curve (each pair once, in the order the rows come)."""
    rows = []
    keys = list(curves)
    for i, (ma, ranking, ablation, curve) in enumerate(keys):
        for mb, rb, ab, cb in keys[i + 1 :]:
            if (rb, ab, cb) != (ranking, ablation, curve):
                continue
            diff = curve_area(curves[(ma, ranking, ablation, curve)]) - curve_area(curves[(mb, rb, ab, cb)])
            iv = bootstrap_mean(diff, n_resamples=n_resamples, seed=seed)
            rows.append(
                {
                    "ranking": ranking,
                    "ablation": ablation,
                    "curve": curve,
                    "method_a": ma,
                    "method_b": mb,
                    "n": len(diff),
                    "auc_difference": iv.mean,
                    "ci_low": iv.low,
                    "ci_high": iv.high,
                    "ci_note": iv.note,
                }
            )
    return pd.DataFrame(rows, columns=PRUNING_COMPARISON_COLUMNS)
