"""Similarity of two layer attributions of the same samples, with a bootstrap interval over samples.

The across-samples similarity is, per layer, Spearman's rho over samples (ranks computed once on the full
set), averaged over the layers where both attributions vary. Its bootstrap resamples the samples: a
resample is a vector of counts ``w`` (how often each sample was drawn), and Pearson's r of the ranks under
``w`` needs only the weighted sums ``w @ [x, y, x*x, y*y, x*y]``: one matrix product per chunk of
resamples instead of gathering an (R, N, L) copy of the ranks. The counts are drawn once per
(sample count, resample count, seed) and shared by every method of a randomisation step
(:class:`Resamples`).
"""

from __future__ import annotations

import warnings

import numpy as np
from scipy.stats import rankdata

from laya_eval.errors import ConfigError
from laya_eval.stats.intervals import interval_note, percentile_interval
from laya_eval.stats.metrics import Interval, bootstrap_mean, spearman_per_sample
from laya_eval.sanity_checks.options import SIMILARITIES
from laya_eval.checks import check_choice

__all__ = ["Resamples", "attribution_similarity"]

# Resample indices are drawn this many elements at a time (the chunking fixes the random stream).
_DRAW_ELEMENTS = 2**22


class Resamples:
    """Bootstrap resamples of ``n`` samples as count vectors, drawn lazily and kept for reuse.

    Parameters
    ----------
    n : int
        Number of samples.
    n_resamples : int
    seed : int

    Notes
    -----
    The indices are drawn with ``numpy.random.default_rng(seed).integers(0, n, (chunk, n))``, chunk after
    chunk, where ``chunk = max(1, 2**22 // (n * width))`` depends on the number of defined layers
    ``width``; the counts of each chunking are kept, so methods with the same ``width`` share them.
    """

    def __init__(self, n: int, n_resamples: int, seed: int) -> None:
        self.n, self.n_resamples, self.seed = int(n), int(n_resamples), int(seed)
        self._counts: dict[int, list[np.ndarray]] = {}

    def counts(self, width: int) -> list[np.ndarray]:
        """The resamples as count matrices, each (chunk, n) float64, ``n_resamples`` rows in all."""
        chunk = max(1, _DRAW_ELEMENTS // (self.n * max(1, width)))
        if chunk not in self._counts:
            rng = np.random.default_rng(self.seed)
            out = []
            for start in range(0, self.n_resamples, chunk):
                rows = min(chunk, self.n_resamples - start)
                index = rng.integers(0, self.n, (rows, self.n))
                flat = (index + self.n * np.arange(rows)[:, None]).ravel()
                out.append(np.bincount(flat, minlength=rows * self.n).reshape(rows, self.n).astype(np.float64))
            self._counts[chunk] = out
        return self._counts[chunk]


def _centred_ranks(x: np.ndarray) -> np.ndarray:
    r = rankdata(x, axis=0, method="average")
    return r - r.mean(0)


def _mean_rho(x: np.ndarray, y: np.ndarray) -> float:
    """Mean over columns of Pearson's r of the columns of x and y, (N, L) each; NaN where one is constant."""
    x, y = x - x.mean(0), y - y.mean(0)
    den = np.sqrt((x * x).sum(0) * (y * y).sum(0))
    return float(np.nanmean(np.where(den > 0, (x * y).sum(0) / np.where(den > 0, den, 1), np.nan)))


def _resampled_mean_rho(x: np.ndarray, y: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Mean over columns of the weighted Pearson r, one per row of ``weights`` (R, N) -> (R,).

    A resample whose values of a column are all equal has zero variance there (NaN, excluded from the
    mean, as a constant column is); "zero" allows for the rounding of the sums (64 ulps of ``sum w x^2``).
    """
    n = weights[0].sum()
    # One product reads the (R, N) weights once for the five sums.
    sx, sy, sxx, syy, sxy = np.split(weights @ np.concatenate([x, y, x * x, y * y, x * y], 1), 5, axis=1)
    vx, vy = sxx - sx * sx / n, syy - sy * sy / n
    tol = 64 * np.finfo(np.float64).eps
    ok = (vx > tol * sxx) & (vy > tol * syy)
    rho = np.where(ok, (sxy - sx * sy / n) / np.sqrt(np.where(ok, vx * vy, 1.0)), np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a resample with no defined column: NaN, as documented
        return np.nanmean(rho, 1)


def attribution_similarity(
    a: np.ndarray,
    b: np.ndarray,
    *,
    similarity: str = "across_samples",
    n_resamples: int = 1000,
    seed: int = 0,
    resamples: Resamples | None = None,
) -> Interval:
    """Similarity of two attributions of the same samples, with a 95% bootstrap interval.

    Parameters
    ----------
    a, b : ndarray, (N, L)
    similarity : {"across_samples", "per_sample"}
        See :mod:`laya_eval.sanity_checks`.
    n_resamples, seed : int
        The percentile bootstrap over samples.
    resamples : Resamples, optional
        Drawn resamples to reuse (across_samples only); must match ``N``, ``n_resamples`` and ``seed``.

    Returns
    -------
    Interval
        ``n_undefined``: layers (across_samples) or samples (per_sample) where rho is undefined.
    """
    if similarity == "per_sample":
        return bootstrap_mean(spearman_per_sample(a, b), n_resamples=n_resamples, seed=seed)
    check_choice("similarity", similarity, SIMILARITIES)
    ra, rb = _centred_ranks(np.asarray(a, np.float64)), _centred_ranks(np.asarray(b, np.float64))
    defined = (np.abs(ra).sum(0) > 0) & (np.abs(rb).sum(0) > 0)
    n_undefined = int((~defined).sum())
    if not defined.any():
        return Interval(
            float("nan"),
            float("nan"),
            float("nan"),
            a.shape[1],
            n_undefined,
            "no layer where both attributions vary across samples",
        )
    ra, rb = ra[:, defined], rb[:, defined]
    value = _mean_rho(ra, rb)
    note = interval_note(ra.shape[0], n_resamples)
    if note:
        return Interval(value, float("nan"), float("nan"), a.shape[1], n_undefined, note)
    if resamples is None:
        resamples = Resamples(ra.shape[0], n_resamples, seed)
    elif (resamples.n, resamples.n_resamples, resamples.seed) != (ra.shape[0], n_resamples, seed):
        raise ConfigError(
            f"resamples were drawn for (n, n_resamples, seed) = "
            f"{(resamples.n, resamples.n_resamples, resamples.seed)}; got {(ra.shape[0], n_resamples, seed)}."
        )
    means = np.concatenate([_resampled_mean_rho(ra, rb, w) for w in resamples.counts(ra.shape[1])])
    low, high, note = percentile_interval(value, means, n_defined=ra.shape[0], n_resamples=n_resamples)
    return Interval(value, low, high, a.shape[1], n_undefined, note)
