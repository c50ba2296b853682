"""Honest ties: effects too close to rank, negligible effects, and collapsed heads.

Two effects of a sample count as tied when they are closer than ``rtol`` times the sample's largest
|effect| (``<=``, so exactly equal effects are always tied, even when every effect is zero). Groups are
formed by single linkage on the sorted effects: consecutive sorted values within the tolerance join the
same group, so a chain of close values forms one group even if its ends are further apart than the
tolerance. Every member of a group is replaced by the group's mean; as groups are disjoint intervals of
the sorted values the order between groups is kept, and Spearman's average ranks then give each tied layer
the average rank of its group.

The default ``rtol`` comes from ``benchmarks/tie_tolerance.py`` (results in
``benchmarks/results/tie_tolerance.md``): on trained digits MLPs (L = 3 and 5, every head, short and long
training) and the Fashion-MNIST reference MLP + LAYA, gate and zero ablations, float32 and float64
leave-one-layer-out effects differ by at most 2.3e-5 of the sample's largest |effect|, and no pair that
float32 orders differently is more than 3.5e-7 apart; ``DEFAULT_RTOL = 1e-4`` lies above every such
rounding difference. Float32 probabilities carry an absolute error of about 1e-7, so the relative
rounding grows as 1 / max|effect|: compute effects in float64 where samples have tiny effects.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import rankdata

from laya_eval.catalog import TIE_RTOL
from laya_eval.errors import ConfigError

__all__ = ["DEFAULT_RTOL", "RankingAgreement", "TiedEffects", "identical_rankings", "tie_effects"]

DEFAULT_RTOL = TIE_RTOL  # the catalog owns the value (the CLI reads it without torch)


@dataclass(frozen=True)
class TiedEffects:
    """Effects with near-equal values made equal.

    Attributes
    ----------
    effects : ndarray, (N, L)
        The effects to rank: each tied group replaced by its mean, the rest unchanged.
    n_tied_effects : ndarray of int, (N,)
        Layers of the sample whose effect is tied with at least one other layer's.
    negligible : ndarray of bool, (N, L)
        ``|effect| <= rtol * max_i |effect_i|``: too small to tell from zero.
    rtol : float
    """

    effects: np.ndarray
    n_tied_effects: np.ndarray
    negligible: np.ndarray
    rtol: float

    @property
    def n_effect_ties(self) -> int:
        """Samples with at least one tie."""
        return int((self.n_tied_effects > 0).sum())

    @property
    def share_negligible_effects(self) -> float:
        """Share of all (sample, layer) effects that are negligible."""
        return float(self.negligible.mean()) if self.negligible.size else float("nan")


def tie_effects(effects: np.ndarray, *, rtol: float = DEFAULT_RTOL) -> TiedEffects:
    """Tie the effects of each sample that lie within ``rtol`` of its largest |effect|.

    Parameters
    ----------
    effects : ndarray, (N, L)
        Leave-one-layer-out effects.
    rtol : float
        Relative tolerance, >= 0 (0: only exactly equal effects are tied).

    Returns
    -------
    TiedEffects

    Examples
    --------
    >>> t = tie_effects(np.array([[0.5, 0.50001, 0.1]]), rtol=1e-3)
    >>> t.effects.tolist(), t.n_tied_effects.tolist()
    ([[0.500005, 0.500005, 0.1]], [2])
    """
    effects = np.asarray(effects, dtype=np.float64)
    if effects.ndim != 2:
        raise ConfigError(f"effects must be a 2-d array (samples, layers); got shape {effects.shape}.")
    if not rtol >= 0:
        raise ConfigError(f"rtol must be a number >= 0; got {rtol}.")
    n, n_layers = effects.shape
    tol = rtol * np.abs(effects).max(1, initial=0.0)[:, None]  # (N, 1)
    order = np.argsort(effects, axis=1, kind="stable")
    ordered = np.take_along_axis(effects, order, 1)
    linked = np.diff(ordered, axis=1) <= tol  # (N, L-1): joins sorted neighbours
    group = np.concatenate([np.zeros((n, 1), np.int64), np.cumsum(~linked, axis=1)], 1)  # (N, L)
    flat = (group + n_layers * np.arange(n)[:, None]).ravel()
    sums = np.bincount(flat, weights=ordered.ravel(), minlength=n * n_layers)
    sizes = np.bincount(flat, minlength=n * n_layers)
    means = (sums / np.maximum(sizes, 1))[flat].reshape(n, n_layers)
    size_of = sizes[flat].reshape(n, n_layers)
    # Untied values keep their exact bits (a mean of one value could round differently).
    tied_sorted = np.where(size_of > 1, means, ordered)
    out = np.empty_like(effects)
    np.put_along_axis(out, order, tied_sorted, 1)
    return TiedEffects(
        effects=out, n_tied_effects=(size_of > 1).sum(1), negligible=np.abs(effects) <= tol, rtol=float(rtol)
    )


@dataclass(frozen=True)
class RankingAgreement:
    """Whether the real methods all rank the layers the same way.

    Attributes
    ----------
    identical : bool
        ``share_identical >= min_share`` with at least two methods compared: the head has probably
        collapsed onto one layer, and the methods' faithfulness cannot tell them apart.
    share_identical : float
        Share of samples on which every compared method gives the same ranking (average ranks, so ties
        must match too).
    methods : tuple of str
        The methods compared.
    """

    identical: bool
    share_identical: float
    methods: tuple[str, ...]


def identical_rankings(
    scores_by_method: Mapping[str, np.ndarray], *, exclude: Sequence[str] = ("random",), min_share: float = 0.99
) -> RankingAgreement:
    """Detect a collapsed head: all real methods give the same layer ranking on (nearly) every sample.

    Parameters
    ----------
    scores_by_method : mapping of str to ndarray, each (N, L)
        Attributions of each method on the same samples.
    exclude : sequence of str
        Methods that are not explanations (the ``random`` baseline).
    min_share : float
        Share of samples with identical rankings above which they count as identical.

    Returns
    -------
    RankingAgreement
        ``identical`` is False when fewer than two methods are compared.
    """
    names = tuple(m for m in scores_by_method if m not in set(exclude))
    if len(names) < 2:
        return RankingAgreement(False, float("nan"), names)
    ranks = [rankdata(np.asarray(scores_by_method[m], dtype=np.float64), axis=1, method="average") for m in names]
    if len({r.shape for r in ranks}) != 1:
        raise ConfigError(f"every method's scores must have the same shape; got {[r.shape for r in ranks]}.")
    same = np.all([np.all(r == ranks[0], axis=1) for r in ranks[1:]], axis=0)
    share = float(same.mean()) if same.size else float("nan")
    return RankingAgreement(bool(share >= min_share), share, names)
