"""Metrics over per-sample layer scores: plain functions with one metadata record each.

Spearman uses average ranks. A sample whose attribution or effect vector is
constant has an undefined rho: it is counted in ``n_undefined`` and excluded
from means (never a NaN in a summary, never hidden with an ``eps``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy.stats import rankdata

from laya_eval.stats.intervals import interval_note, percentile_interval

__all__ = [
    "METRICS",
    "MetricInfo",
    "Interval",
    "bootstrap_mean",
    "rank_layers",
    "recall_at_k",
    "spearman_per_sample",
    "top1_hit",
]


@dataclass(frozen=True)
class MetricInfo:
    """What a metric means: direction, range and best value (read by CSVs, tables and plots)."""

    name: str
    higher_is_better: bool
    lower_bound: float
    upper_bound: float
    best: float
    description: str


METRICS: dict[str, MetricInfo] = {
    m.name: m
    for m in (
        MetricInfo(
            "faithfulness",
            True,
            -1.0,
            1.0,
            1.0,
            "Mean over samples of Spearman rho between attribution and leave-one-layer-out effect.",
        ),
        MetricInfo(
            "deletion_at_1",
            True,
            -1.0,
            1.0,
            1.0,
            "Mean drop of the predicted class probability when the top-ranked layer is removed.",
        ),
        MetricInfo(
            "top1_hit_rate",
            True,
            0.0,
            1.0,
            1.0,
            "Share of samples whose top-ranked layer is also the layer with the largest effect.",
        ),
        MetricInfo("aopc", True, -1.0, 1.0, 1.0, "Area over the perturbation curve: mean of deletion@1..L."),
        *(
            MetricInfo(
                f"recall_at_{k}",
                True,
                0.0,
                1.0,
                1.0,
                f"Mean share of the {k} layers with the largest effects that are among the method's top {k} "
                f"(a layer whose effect ties the {k}-th largest counts; undefined when {k} >= L).",
            )
            for k in (1, 3)
        ),
    )
}


@dataclass(frozen=True)
class Interval:
    """A mean over samples with its bootstrap interval and counts.

    ``low`` and ``high`` are NaN where no interval exists; ``note`` then says why
    (see :mod:`laya_eval.stats.intervals`), and is "" otherwise.
    """

    mean: float
    low: float
    high: float
    n: int
    n_undefined: int
    note: str = ""


def spearman_per_sample(attribution: np.ndarray, effect: np.ndarray) -> np.ndarray:
    """Spearman rho per row, average ranks for ties.

    Parameters
    ----------
    attribution, effect : ndarray, (N, L)

    Returns
    -------
    ndarray, (N,)
        NaN where either row is constant (rho undefined).
    """
    a = rankdata(np.asarray(attribution, dtype=np.float64), axis=1, method="average")
    e = rankdata(np.asarray(effect, dtype=np.float64), axis=1, method="average")
    a -= a.mean(1, keepdims=True)
    e -= e.mean(1, keepdims=True)
    num = (a * e).sum(1)
    den = np.sqrt((a * a).sum(1) * (e * e).sum(1))
    out = np.full(a.shape[0], np.nan)
    ok = den > 0
    out[ok] = np.clip(num[ok] / den[ok], -1.0, 1.0)
    return out


def rank_layers(attribution: np.ndarray) -> np.ndarray:
    """Layer indices by descending score, ties broken by the lowest layer index.

    Parameters
    ----------
    attribution : ndarray, (N, L)

    Returns
    -------
    ndarray of int, (N, L)
    """
    return np.argsort(-np.asarray(attribution, dtype=np.float64), axis=1, kind="stable")


def top1_hit(attribution: np.ndarray, effect: np.ndarray) -> np.ndarray:
    """Whether the top-ranked layer is also the layer with the largest effect (ties: lowest index), (N,) bool."""
    return rank_layers(attribution)[:, 0] == rank_layers(effect)[:, 0]


def recall_at_k(attribution: np.ndarray, effect: np.ndarray, k: int) -> np.ndarray:
    """Per sample, the share of the exact top-``k`` layers (by effect) that the method's top ``k`` contains, (N,).

    The method's top ``k`` are its ``k`` highest-scored layers (:func:`rank_layers`: ties broken by the lowest layer
    index). A layer counts as one of the exact top ``k`` when its effect is at least the ``k``-th largest effect of
    the sample, so effects tied at the boundary all count and the result does not depend on their order; the
    count is divided by ``k``. NaN for every sample when ``k >= L`` (the top ``k`` would be every layer, a recall of
    1 whatever the method).
    """
    effect = np.asarray(effect, dtype=np.float64)
    n, n_layers = effect.shape
    if k >= n_layers:
        return np.full(n, np.nan)
    kth = -np.sort(-effect, axis=1)[:, k - 1]
    top = rank_layers(attribution)[:, :k]
    hits = np.take_along_axis(effect, top, axis=1) >= kth[:, None]
    return hits.sum(1) / k


_CHUNK = 100


def bootstrap_mean(
    values: np.ndarray, *, n_resamples: int = 1000, seed: int | Sequence[int] = 0, level: float = 0.95
) -> Interval:
    """Mean of the defined values with a percentile bootstrap interval over samples.

    NaN entries are undefined samples: counted, excluded. Resamples are drawn
    vectorised, 100 at a time. Fewer than ``MIN_INTERVAL_SAMPLES`` (5) defined samples or fewer than
    ``MIN_BOOTSTRAP_RESAMPLES`` resamples give no interval (NaN bounds, ``note`` says why).
    """
    values = np.asarray(values, dtype=np.float64)
    defined = values[~np.isnan(values)]
    n_undefined = int(values.size - defined.size)
    mean = float(defined.mean()) if defined.size else float("nan")
    means = np.empty(0)
    if not interval_note(int(defined.size), n_resamples):  # draw only where an interval can exist
        rng = np.random.default_rng(seed)
        # Resamples are drawn in fixed chunks so memory stays at chunk x n, whatever n_resamples is.
        means = np.concatenate(
            [
                defined[rng.integers(0, defined.size, size=(min(_CHUNK, n_resamples - start), defined.size))].mean(1)
                for start in range(0, n_resamples, _CHUNK)
            ]
        )
    low, high, note = percentile_interval(
        mean, means, n_defined=int(defined.size), n_resamples=n_resamples, level=level
    )
    return Interval(mean, low, high, int(values.size), n_undefined, note)
