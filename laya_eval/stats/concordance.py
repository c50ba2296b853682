"""Agreement of several rankings of the same items: Kendall's coefficient of concordance W.

With ``m`` raters (here: removal operators) each ranking the same ``n`` items (here: attribution methods by
faithfulness), ``R_j`` the sum of item ``j``'s ranks and ``S = sum_j (R_j - mean R)^2``,

    W = 12 S / (m^2 (n^3 - n) - m sum_raters sum_groups (t^3 - t)),

``t`` the size of each group of tied ranks of a rater (average ranks; the correction of Kendall and Babington
Smith). ``W = 1``: every rater ranks alike; ``W = 0``: no agreement beyond chance. It equals Friedman's
chi-square divided by ``m (n - 1)``. Its p-value here is a permutation test: each rater's ranking is shuffled
independently (no agreement) and ``p = (1 + #{W_perm >= W}) / (1 + n_permutations)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import rankdata

from laya_eval.checks import check_non_negative_int
from laya_eval.errors import ConfigError

__all__ = ["Concordance", "kendalls_w", "kendalls_w_test"]

# W computed from permuted ranks can differ from the observed one by rounding alone: count those as reaching it.
_RTOL = 1e-12


@dataclass(frozen=True)
class Concordance:
    """Kendall's W of one table of rankings.

    Attributes
    ----------
    w : float
        In [0, 1]; NaN when undefined (fewer than 2 raters or items, or every rater ties every item).
    p_value : float
        Permutation p-value (NaN where W is undefined or no permutation was drawn).
    n_raters, n_items, n_permutations : int
    """

    w: float
    p_value: float
    n_raters: int
    n_items: int
    n_permutations: int


def _ranks(scores: np.ndarray) -> np.ndarray:
    """Average ranks of each row, 1 = the highest score."""
    return np.vstack([rankdata(-row, method="average") for row in scores])


def _w_of_ranks(ranks: np.ndarray, correction: float) -> float:
    m, n = ranks.shape
    sums = ranks.sum(0)
    s = float(((sums - sums.mean()) ** 2).sum())
    denominator = m * m * (n**3 - n) - m * correction
    return float("nan") if denominator <= 0 else 12.0 * s / denominator


def _tie_correction(ranks: np.ndarray) -> float:
    total = 0.0
    for row in ranks:
        _, counts = np.unique(row, return_counts=True)
        total += float((counts.astype(np.float64) ** 3 - counts).sum())
    return total


def kendalls_w(scores: np.ndarray) -> float:
    """Kendall's W of ``scores`` (m raters, n items); each rater ranks the items by descending score.

    Examples
    --------
    >>> kendalls_w(np.array([[3.0, 2.0, 1.0], [3.0, 2.0, 1.0]]))
    1.0
    """
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim != 2:
        raise ConfigError(f"scores must be a 2-d array (raters, items); got {scores.ndim} dimensions.")
    if np.isnan(scores).any():
        raise ConfigError("scores must not hold NaN: leave out the items a rater could not score.")
    if scores.shape[0] < 2 or scores.shape[1] < 2:
        return float("nan")
    ranks = _ranks(scores)
    return _w_of_ranks(ranks, _tie_correction(ranks))


def kendalls_w_test(scores: np.ndarray, *, n_permutations: int = 10000, seed: int = 0) -> Concordance:
    """Kendall's W of ``scores`` (m raters, n items) and its permutation p-value.

    The permutations shuffle each rater's ranks (ties keep their average ranks, so the tie correction is
    the same for every permutation); they are drawn from ``numpy.random.default_rng(seed)``.
    """
    check_non_negative_int("n_permutations", n_permutations)
    scores = np.asarray(scores, dtype=np.float64)
    w = kendalls_w(scores)
    m, n = scores.shape
    if np.isnan(w) or n_permutations == 0:
        return Concordance(w, float("nan"), m, n, n_permutations)
    ranks = _ranks(scores)
    correction = _tie_correction(ranks)
    rng = np.random.default_rng(seed)
    reached = 0
    for _ in range(n_permutations):
        shuffled = np.vstack([rng.permutation(row) for row in ranks])
        reached += _w_of_ranks(shuffled, correction) >= w * (1 - _RTOL)
    return Concordance(w, (1 + reached) / (1 + n_permutations), m, n, n_permutations)
