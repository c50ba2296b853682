"""The null distribution of Spearman's rho between an attribution and the layer effects, and the p-value
of a method's faithfulness (the mean rho over samples).

Null hypothesis: the attribution is unrelated to the effects, i.e. its ranking of the ``L`` layers is a
uniformly random permutation, independently per sample. The effects stay as observed, ties included
(average ranks), so each sample's null distribution of rho depends on its effects' tie pattern.

Exact route (``L <= EXACT_MAX_LAYERS = 8``, at most 8! = 40,320 rankings). With ``e`` twice the centred
average ranks of the effects (integers) and ``a`` twice the centred ranks of a permutation, ``rho = (a . e) /
sqrt(|a|^2 |e|^2)``: the numerator is an integer, so each tie pattern's null is an exact distribution on an
integer lattice, found by enumerating the ``L!`` rankings. The null is the same for any reordering or negation
of ``e``, so samples are grouped by the sorted pattern (up to sign). Within a group of ``m`` samples the sum
of rho is the ``m``-fold convolution of that lattice distribution, computed by one FFT power. A plain FFT is
accurate to about 1e-12 *absolute*, useless for the tiny p-values of good methods, so the null is first
exponentially tilted (``p(v) exp(theta v) / M(theta)``, ``theta`` chosen so that the tilted mean is the
observed sum): the observed value then lies in the bulk of the tilted distribution and ``P(S >= s) =
M(theta)^n E_theta[exp(-theta S) 1{S >= s}]`` keeps its relative accuracy down to floating-point underflow.
With one tie pattern the result is exact up to round-off. Groups live on different lattices (``1 /
sqrt(|e|^2)`` differs), so with several groups their sums are placed on a common grid of ``2**20`` steps
spanning the whole range of the sum, each value rounded *up*, and convolved (directly over the non-zero bins
when they are few, else by FFT). Rounding up can only raise the reported p-value (conservative, with the
tilt's weight bounded accordingly): it exceeds the exact one by at most the probability that the mean lies
within ``G * step / n`` below the observed mean (``G`` groups, ``step = range / 2**20``, about ``2 G / 2**20``
in units of rho), times a factor ``exp(theta G step)`` (below 1 + 1e-4 in the tests; larger only for p-values
that are astronomically small anyway). The observed mean itself at the maximum (every sample at rho's largest
value) is answered exactly: the product of those probabilities.

Permutation route (``L > 8``): ``n_resamples`` (default 2000) seeded null means, each drawing one
uniformly random ranking per sample; ``p = (1 + #{null mean >= observed}) / (1 + n_resamples)``, never 0
(so at least 1/2001 by default).
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import rankdata

from laya_eval.errors import ConfigError

__all__ = ["EXACT_MAX_LAYERS", "SpearmanNull", "faithfulness_p_value", "spearman_null"]

EXACT_MAX_LAYERS = 8
_GRID = 2**20
_CHUNK_ELEMENTS = 2**22  # permutation route: random numbers drawn at a time
_DIRECT_MAX_PRODUCTS = 2**22  # common grid: convolve directly up to this many products of non-zero bins


@dataclass(frozen=True)
class SpearmanNull:
    """A discrete distribution of Spearman's rho.

    Attributes
    ----------
    values : ndarray, (K,)
        Distinct values of rho, ascending.
    probs : ndarray, (K,)
        Their probabilities (sum to 1).
    """

    values: np.ndarray
    probs: np.ndarray


def _twice_centred_ranks(x: np.ndarray) -> np.ndarray:
    """``2 * rank - (L + 1)`` with average ranks, as integers, along the last axis, (..., L)."""
    ranks = rankdata(np.asarray(x, dtype=np.float64), axis=-1, method="average")
    return np.rint(2 * ranks - (x.shape[-1] + 1)).astype(np.int64)


@functools.cache
def _all_rankings(n_layers: int) -> np.ndarray:
    """Twice the centred ranks of all ``L!`` permutations, (L!, L) int64."""
    perms = np.array(list(itertools.permutations(range(1, n_layers + 1))), dtype=np.int64)
    return 2 * perms - (n_layers + 1)


def _lattice_null(pattern: tuple[int, ...]) -> tuple[np.ndarray, int, int, float]:
    """Exact null of one tie pattern on its integer lattice.

    Returns ``(pmf, offset, step, scale)``: ``P(numerator = offset + step * k) = pmf[k]`` and
    ``rho = numerator / scale``.
    """
    e = np.asarray(pattern, dtype=np.int64)
    a = _all_rankings(e.size)
    numerators = a @ e
    values, counts = np.unique(numerators, return_counts=True)
    step = int(np.gcd.reduce(np.diff(values))) if values.size > 1 else 1
    offset = int(values[0])
    pmf = np.zeros((int(values[-1]) - offset) // step + 1)
    pmf[(values - offset) // step] = counts / counts.sum()
    scale = math.sqrt(float((a[0] ** 2).sum()) * float((e**2).sum()))
    return pmf, offset, step, scale


def spearman_null(effects: np.ndarray) -> SpearmanNull:
    """Exact null distribution of rho for one sample's effects (ties as they occur), ``L <= 8``.

    Parameters
    ----------
    effects : ndarray, (L,)
        Must not be constant (rho would be undefined).

    Returns
    -------
    SpearmanNull

    Examples
    --------
    >>> null = spearman_null(np.array([0.1, 0.3, 0.2]))
    >>> null.values.tolist(), (null.probs * 6).round().tolist()
    ([-1.0, -0.5, 0.5, 1.0], [1.0, 2.0, 2.0, 1.0])
    """
    effects = np.asarray(effects, dtype=np.float64)
    _check_layers(effects.shape[-1])
    e = _twice_centred_ranks(effects)
    if not np.any(e):
        raise ConfigError("the effects are constant: Spearman's rho is undefined, so it has no null distribution.")
    pmf, offset, step, scale = _lattice_null(tuple(int(v) for v in e))
    k = np.flatnonzero(pmf > 0)
    return SpearmanNull(values=(offset + step * k) / scale, probs=pmf[k])


def _check_layers(n_layers: int) -> None:
    if n_layers > EXACT_MAX_LAYERS:
        raise ConfigError(
            f"the exact null is enumerated for at most {EXACT_MAX_LAYERS} layers; got {n_layers}. "
            "Use faithfulness_p_value, which estimates it by permutation above that size."
        )


def faithfulness_p_value(
    rho: np.ndarray,
    effects: np.ndarray,
    *,
    seed: int = 0,
    n_resamples: int = 2000,
    exact_max_layers: int = EXACT_MAX_LAYERS,
) -> float:
    """P(mean rho >= observed) when the attribution is unrelated to the effects (one-sided).

    Parameters
    ----------
    rho : ndarray, (N,)
        Per-sample Spearman rho of the method (NaN where undefined: excluded, with its sample).
    effects : ndarray, (N, L)
        The effects the rho were computed against (after :func:`laya_eval.stats.tie_effects`, if used).
    seed : int
        Seeds the permutation route (``L > exact_max_layers``); the exact route uses no randomness.
    n_resamples : int
        Null means drawn by the permutation route.
    exact_max_layers : int
        Largest ``L`` handled exactly (at most :data:`EXACT_MAX_LAYERS`).

    Returns
    -------
    float
        NaN when no sample has a defined rho.
    """
    rho = np.asarray(rho, dtype=np.float64)
    effects = np.asarray(effects, dtype=np.float64)
    if effects.ndim != 2 or effects.shape[0] != rho.shape[0]:
        raise ConfigError(f"effects must be (N, L) with N = len(rho) = {rho.shape[0]}; got shape {effects.shape}.")
    if exact_max_layers > EXACT_MAX_LAYERS:
        raise ConfigError(f"exact_max_layers must be at most {EXACT_MAX_LAYERS}; got {exact_max_layers}.")
    finite = np.isfinite(effects).all(axis=1)  # a non-finite effect has no rank (its rho is undefined anyway)
    rho, effects = rho[finite], effects[finite]
    e = _twice_centred_ranks(effects)
    keep = ~np.isnan(rho) & np.any(e != 0, axis=1)
    if not keep.any():
        return float("nan")
    observed = float(rho[keep].sum())
    if effects.shape[1] <= exact_max_layers:
        return _exact_p_value(e[keep], observed)
    return _permutation_p_value(e[keep], observed, seed=seed, n_resamples=n_resamples)


def _groups(e: np.ndarray) -> dict[tuple[int, ...], int]:
    """Samples per tie pattern, the pattern sorted and taken up to sign (its null is the same)."""
    patterns = np.sort(e, axis=1)
    negated = np.sort(-e, axis=1)
    # The lexicographically smaller of the two represents both.
    flip = np.array([tuple(n) < tuple(p) for p, n in zip(patterns, negated)])
    patterns[flip] = negated[flip]
    keys, counts = np.unique(patterns, axis=0, return_counts=True)
    return {tuple(int(v) for v in k): int(c) for k, c in zip(keys, counts)}


def _power(pmf: np.ndarray, m: int) -> np.ndarray:
    """Distribution of the sum of ``m`` iid draws from a lattice pmf, by one FFT power."""
    size = m * (pmf.size - 1) + 1
    n_fft = 1 << max(1, (size - 1).bit_length())
    out = np.fft.irfft(np.fft.rfft(pmf, n_fft) ** m, n_fft)[:size]
    return np.clip(out, 0.0, None)


def _exact_p_value(e: np.ndarray, observed: float) -> float:
    tol = 1e-9 * max(1.0, abs(observed))  # the observed sum carries round-off; a tie counts as ">="
    groups = []  # (pmf, values in rho units, number of samples)
    for pattern, m in _groups(e).items():
        pmf, offset, step, scale = _lattice_null(pattern)
        groups.append((pmf, (offset + step * np.arange(pmf.size)) / scale, m))
    if observed >= sum(m * v[-1] for _, v, m in groups) - tol:
        # Only every sample at its largest rho reaches the observed mean.
        return float(np.exp(sum(m * np.log(pmf[-1]) for pmf, _, m in groups)))
    theta = _tilt(groups, observed)
    log_mgf, sums = 0.0, []
    for pmf, values, m in groups:
        tilted, log_m = _tilted(pmf, values, theta)
        log_mgf += m * log_m
        sums.append((_power(tilted, m), m * values[0], values[1] - values[0]))
    if len(sums) == 1:
        dist, low, step = sums[0]
        grid_values, slack = low + step * np.arange(dist.size), 0.0
    else:
        dist, grid_values, slack = _on_common_grid(sums)
    tail = grid_values >= observed - tol
    # Undo the tilt: P(S >= s) = M(theta) E_theta[exp(-theta S) 1{S >= s}]; rounding S up on the common grid
    # lowers exp(-theta S) by at most exp(-theta * slack), so multiplying by exp(theta * slack) stays an upper bound.
    weights = np.exp(log_mgf + theta * slack - theta * grid_values[tail])
    return float(min(1.0, (dist[tail] * weights).sum()))


def _tilted(pmf: np.ndarray, values: np.ndarray, theta: float) -> tuple[np.ndarray, float]:
    """``pmf * exp(theta v) / M(theta)`` and ``log M(theta)``, computed without overflow."""
    w = pmf * np.exp(theta * (values - values[-1]))
    total = w.sum()
    return w / total, theta * values[-1] + float(np.log(total))


def _tilt(groups: list, observed: float) -> float:
    """Exponential tilt ``theta >= 0`` that moves the null mean of the sum to ``observed``.

    Under the tilted distribution the observed value lies in the bulk, where the FFT is accurate to
    round-off relative to the probabilities that matter, instead of an absolute ~1e-12 floor.
    """

    def mean(theta: float) -> float:
        return sum(m * float((_tilted(pmf, v, theta)[0] * v).sum()) for pmf, v, m in groups)

    if observed <= mean(0.0):
        return 0.0
    low, high = 0.0, 1.0
    while mean(high) < observed and high < 1e8:
        low, high = high, 2 * high
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if mean(mid) < observed else (low, mid)
    return low


def _on_common_grid(sums: list) -> tuple[np.ndarray, np.ndarray, float]:
    """Convolve group sums living on different lattices, each rounded up onto one grid of ``_GRID`` steps.

    Returns the distribution, the grid values and the largest total rounding (``G`` steps).
    """
    total_low = sum(low for _, low, _ in sums)
    grid = sum(step * (dist.size - 1) for dist, _, step in sums) / _GRID
    binned = []
    for dist, _, step in sums:
        # Rounding each group's sum up can only include more outcomes in the tail: a conservative p-value.
        index = np.ceil(step * np.arange(dist.size) / grid - 1e-9).astype(np.int64)
        binned.append(np.bincount(index, weights=dist))
    # Sparsest first: the small groups' products are summed directly, and a large group (most samples share one
    # tie pattern) joins by one FFT at the end instead of at every step.
    binned.sort(key=np.count_nonzero)
    combined = binned[0]
    for other in binned[1:]:
        combined = _convolve(combined, other)
    return combined, total_low + grid * np.arange(combined.size), grid * len(sums)


def _convolve(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``x * y`` (full convolution, both non-negative).

    Binned group sums are sparse on the common grid: a group of a few samples has a few hundred non-zero
    bins. When the products of the non-zero bins are few (at most ``_DIRECT_MAX_PRODUCTS``) they are summed
    directly, exactly up to the round-off of non-negative sums; otherwise by FFT, whose error is about 1e-16
    of the largest entry on every bin. The choice depends on the data only.
    """
    size = x.size + y.size - 1
    nx, ny = np.flatnonzero(x), np.flatnonzero(y)
    if nx.size * ny.size <= _DIRECT_MAX_PRODUCTS:
        index = (nx[:, None] + ny[None, :]).ravel()
        return np.bincount(index, weights=(x[nx][:, None] * y[ny][None, :]).ravel(), minlength=size)
    n_fft = 1 << max(1, (size - 1).bit_length())
    return np.clip(np.fft.irfft(np.fft.rfft(x, n_fft) * np.fft.rfft(y, n_fft), n_fft)[:size], 0.0, None)


def _permutation_p_value(e: np.ndarray, observed: float, *, seed: int, n_resamples: int) -> float:
    if n_resamples < 1:
        raise ConfigError(f"n_resamples must be a positive integer; got {n_resamples}.")
    n, n_layers = e.shape
    scale = np.sqrt((e.astype(np.float64) ** 2).sum(1) * (n_layers**3 - n_layers) / 3.0)  # |a|^2 = (L^3 - L)/3
    rng = np.random.default_rng(seed)
    chunk = max(1, _CHUNK_ELEMENTS // (n * n_layers))
    tol = 1e-9 * max(1.0, abs(observed))
    hits = 0
    for start in range(0, n_resamples, chunk):
        r = min(chunk, n_resamples - start)
        # A uniformly random ranking per (resample, sample): argsort of iid uniforms.
        a = 2 * rng.random((r, n, n_layers)).argsort(-1) - (n_layers - 1)
        null_sums = ((a * e[None]).sum(-1) / scale[None]).sum(-1)
        hits += int((null_sums >= observed - tol).sum())
    return (1 + hits) / (1 + n_resamples)
