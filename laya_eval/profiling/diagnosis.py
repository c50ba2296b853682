"""Diagnosis from attention shift: is a sample's distance to its class's layer profile an error signal?

For one attribution method's per-sample layer scores ``a(x)`` (shape (N, L)):

1. **Reference profiles.** For each class ``c``, the reference is the mean profile of the
   *correctly* predicted samples of class ``c``. The class of a sample is, by default, its
   **predicted** class (``by="pred"``): the only class known at deployment time, which is what an
   error *signal* needs. ``by="label"`` uses the true class instead (an analysis, not a signal).
2. **No leakage: leave-one-out references.** A correct sample is compared with the mean of the
   *other* correct samples of its class (its own profile is taken out of the sum); an incorrect
   sample is never in a reference, so it is compared with the mean of all correct samples of its
   class. A sample whose reference has no sample (a class without correct predictions, or the only
   correct sample of its class) has no distance: it is counted in ``n_undefined`` and left out.
3. **Distance** (:data:`laya_eval.catalog.DISTANCE_SPECS`): ``jensen_shannon`` (base 2, in [0, 1])
   when the scores are non-negative and sum to one per sample (LAYA alpha, ScalarMix weights);
   otherwise ``cosine_minmax``, 1 - cosine similarity of per-sample min-max normalised scores, whose
   references are means of the normalised scores. ``distance="auto"`` picks between them from the data.
4. **Separation.** ROC AUC with incorrect predictions as positives and a larger distance as more
   suspicious (ties count one half), overall and per class (the reference class); a percentile
   bootstrap interval **stratified by correctness** (correct and incorrect samples are resampled
   separately, so every resample keeps both counts and has a defined AUC), seeded.

Examples
--------
>>> diag = diagnose_scores(prof.scores, by="pred", seed=0)  # doctest: +SKIP
>>> diag.summary.iloc[0][["auc", "ci_low", "ci_high"]]  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pandas as pd
from scipy.spatial.distance import jensenshannon
from scipy.stats import rankdata

from laya_eval.stats.intervals import interval_note, percentile_interval
from laya_eval.catalog import DISTANCE_SPECS
from laya_eval.checks import check_fields, check_non_negative_int, check_number
from laya_eval.errors import ConfigError
from laya_eval.checks import check_choice

__all__ = [
    "DIAGNOSIS_COLUMNS",
    "SUMMARY_COLUMNS",
    "Diagnosis",
    "DiagnosisOptions",
    "bootstrap_auc",
    "cosine_minmax_distance",
    "diagnose",
    "diagnose_scores",
    "is_weight_profile",
    "jensen_shannon_distance",
    "leave_one_out_references",
    "minmax_normalise",
    "roc_auc",
]

DIAGNOSIS_COLUMNS = ["sample", "label", "pred", "correct", "distance"]
SUMMARY_COLUMNS = [
    "class",
    "class_name",
    "n_correct",
    "n_incorrect",
    "n_undefined",
    "auc",
    "ci_low",
    "ci_high",
    "distance_name",
]
_BY = ("pred", "label")
# Layer weights from a float32 softmax sum to one within a few ulps; anything further off is not a weight vector.
_SUM_TOLERANCE = 1e-5
_CHUNK = 100


@dataclass
class Diagnosis:
    """Per-sample distances to the reference profiles and how well they flag errors.

    Attributes
    ----------
    samples : DataFrame
        :data:`DIAGNOSIS_COLUMNS`, one row per sample, sorted by sample; ``distance`` NaN where undefined.
    summary : DataFrame
        :data:`SUMMARY_COLUMNS`: first the row ``class = "all"``, then one per class in index order;
        ``n_correct`` and ``n_incorrect`` count the samples with a distance, ``n_undefined`` those
        without; ``auc`` and its interval are NaN where the class lacks correct or incorrect samples
        with a distance.
    meta : dict
        ``distance``, ``reference_by``, ``references`` (how leakage is avoided), ``bootstrap``,
        ``n_resamples``, ``level``, ``seed``, ``positive``.
    """

    samples: pd.DataFrame
    summary: pd.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def overall(self) -> pd.Series:
        """The summary row of all classes pooled."""
        return self.summary.iloc[0]


@dataclass(frozen=True)
class DiagnosisOptions:
    """How ``profile`` diagnoses errors (see :func:`diagnose`); the seed is the evaluation's.

    Attributes
    ----------
    by : {"pred", "label"}
        Reference class: predicted (default, the one known at deployment) or true.
    distance : {"auto", "jensen_shannon", "cosine_minmax"}
    n_resamples : int
        Bootstrap resamples for the AUC intervals (0: none).
    level : float
    """

    by: str = "pred"
    distance: str = "auto"
    n_resamples: int = 1000
    level: float = 0.95

    def __post_init__(self) -> None:  # wrong names fail before any evaluation is run
        _check_names(self.by, self.distance)
        check_fields(self, _DIAGNOSIS_RULES)


_DIAGNOSIS_RULES = {
    "n_resamples": check_non_negative_int,
    "level": lambda name, value: check_number(name, value, low=0, high=1, low_open=True, high_open=True),
}


def is_weight_profile(scores: np.ndarray) -> bool:
    """Whether every row is non-negative and sums to one (within 1e-5): layer weights.

    Parameters
    ----------
    scores : ndarray, (N, L)
    """
    scores = np.asarray(scores, dtype=np.float64)
    return bool(
        scores.size
        and np.isfinite(scores).all()
        and (scores >= 0).all()
        and np.abs(scores.sum(1) - 1.0).max() <= _SUM_TOLERANCE
    )


def jensen_shannon_distance(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Jensen-Shannon distance in base 2 per row, in [0, 1].

    :func:`scipy.spatial.distance.jensenshannon` along the rows (``base=2``): ``sqrt(KL(p || m) / 2 +
    KL(q || m) / 2)`` with ``m = (p + q) / 2``, each row first divided by its sum.

    Parameters
    ----------
    p, q : ndarray, (N, L)
        Non-negative rows; a row containing NaN gives NaN.

    Returns
    -------
    ndarray, (N,)
    """
    distance = jensenshannon(np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64), base=2, axis=1)
    # Rounding can leave a distance a few ulps above 1.
    return np.minimum(distance, 1.0)


def minmax_normalise(scores: np.ndarray) -> np.ndarray:
    """Per-row min-max normalisation ``(a - min a) / (max a - min a)``; a constant row becomes NaN.

    Parameters
    ----------
    scores : ndarray, (N, L)

    Returns
    -------
    ndarray, (N, L)
    """
    scores = np.asarray(scores, dtype=np.float64)
    low = scores.min(1, keepdims=True)
    span = scores.max(1, keepdims=True) - low
    out = np.full_like(scores, np.nan)
    ok = span[:, 0] > 0
    out[ok] = (scores[ok] - low[ok]) / span[ok]
    return out


def cosine_minmax_distance(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``1 - cos(u, v)`` per row of non-negative (min-max normalised) vectors, in [0, 1].

    Parameters
    ----------
    u, v : ndarray, (N, L)

    Returns
    -------
    ndarray, (N,)
        NaN where a row holds NaN.
    """
    u = np.asarray(u, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    cos = (u * v).sum(1) / np.sqrt((u * u).sum(1) * (v * v).sum(1))
    return np.clip(1.0 - cos, 0.0, 1.0)


_DISTANCE_FUNCTIONS = {"jensen_shannon": jensen_shannon_distance, "cosine_minmax": cosine_minmax_distance}
if set(_DISTANCE_FUNCTIONS) != set(DISTANCE_SPECS):  # the catalog owns the names; this module implements them
    raise ImportError(f"distances {sorted(_DISTANCE_FUNCTIONS)} do not match the catalog {sorted(DISTANCE_SPECS)}")


def leave_one_out_references(
    profiles: np.ndarray, classes: np.ndarray, correct: np.ndarray, n_classes: int
) -> np.ndarray:
    """Each sample's reference: the mean profile of the correct samples of its class, itself left out.

    Parameters
    ----------
    profiles : ndarray, (N, L)
        Rows containing NaN (no profile) are in no reference.
    classes : ndarray of int, (N,)
        The reference class of each sample, in [0, n_classes).
    correct : ndarray of bool, (N,)
    n_classes : int

    Returns
    -------
    ndarray, (N, L)
        NaN rows where the reference has no sample.
    """
    profiles = np.asarray(profiles, dtype=np.float64)
    member = np.asarray(correct, dtype=bool) & ~np.isnan(profiles).any(1)
    sums = np.zeros((n_classes, profiles.shape[1]))
    np.add.at(sums, classes[member], profiles[member])
    counts = np.bincount(classes[member], minlength=n_classes).astype(np.float64)
    total, n = sums[classes], counts[classes]
    total[member] -= profiles[member]  # leave the sample itself out of its own reference
    n = n - member
    refs = np.full_like(profiles, np.nan)
    ok = n > 0
    refs[ok] = total[ok] / n[ok, None]
    return refs


def roc_auc(distance: np.ndarray, incorrect: np.ndarray) -> float:
    """ROC AUC of ``distance`` as a score for ``incorrect`` (the positives), ties counted one half.

    The Mann-Whitney form: (sum of the positives' average ranks - n_pos (n_pos + 1) / 2) / (n_pos n_neg).

    Parameters
    ----------
    distance : ndarray, (N,)
        Finite values.
    incorrect : ndarray of bool, (N,)

    Returns
    -------
    float
        NaN when either class is empty.
    """
    incorrect = np.asarray(incorrect, dtype=bool)
    n_pos, n_neg = int(incorrect.sum()), int((~incorrect).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = rankdata(np.asarray(distance, dtype=np.float64), method="average")
    return float((ranks[incorrect].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def bootstrap_auc(
    distance: np.ndarray,
    incorrect: np.ndarray,
    *,
    n_resamples: int = 1000,
    seed: int | Sequence[int] = 0,
    level: float = 0.95,
) -> tuple[float, float, float]:
    """ROC AUC with a percentile bootstrap interval stratified by correctness.

    Each resample draws ``n_pos`` positives from the positives and ``n_neg`` negatives from the
    negatives, with replacement (vectorised, 100 resamples at a time).

    Parameters
    ----------
    distance : ndarray, (N,)
    incorrect : ndarray of bool, (N,)
    n_resamples : int
        Below ``MIN_BOOTSTRAP_RESAMPLES``: no interval (NaN bounds); likewise when the percentile interval
        excludes the AUC (:mod:`laya_eval.stats.intervals`).
    seed : int or sequence of int
        For :func:`numpy.random.default_rng`.
    level : float

    Returns
    -------
    tuple of float
        ``(auc, low, high)``; all NaN when either class is empty.
    """
    distance = np.asarray(distance, dtype=np.float64)
    incorrect = np.asarray(incorrect, dtype=bool)
    auc = roc_auc(distance, incorrect)
    if np.isnan(auc) or interval_note(distance.size, n_resamples):
        return auc, float("nan"), float("nan")
    pos, neg = distance[incorrect], distance[~incorrect]
    rng = np.random.default_rng(seed)
    aucs = []
    for start in range(0, n_resamples, _CHUNK):
        k = min(_CHUNK, n_resamples - start)
        values = np.concatenate(
            [pos[rng.integers(0, pos.size, size=(k, pos.size))], neg[rng.integers(0, neg.size, size=(k, neg.size))]],
            axis=1,
        )
        ranks = rankdata(values, method="average", axis=1)
        aucs.append((ranks[:, : pos.size].sum(1) - pos.size * (pos.size + 1) / 2) / (pos.size * neg.size))
    low, high, _ = percentile_interval(
        auc, np.concatenate(aucs), n_defined=distance.size, n_resamples=n_resamples, level=level
    )
    return auc, low, high


def _check_names(by: str, distance: str) -> None:
    if by not in _BY:
        raise ConfigError(f"by must be 'pred' (predicted class) or 'label' (true class); got {by!r}.")
    names = ("auto", *DISTANCE_SPECS)
    check_choice("distance", distance, names)


def _check_options(by: str, distance: str, scores: np.ndarray) -> str:
    _check_names(by, distance)
    weights = is_weight_profile(scores)
    if distance == "auto":
        return "jensen_shannon" if weights else "cosine_minmax"
    if DISTANCE_SPECS[distance].needs_weights and not weights:
        raise ConfigError(
            f"distance {distance!r} needs scores that are non-negative and sum to one per sample "
            "(LAYA alpha, ScalarMix weights); these do not. Use distance 'cosine_minmax' or 'auto'."
        )
    return distance


def _summary_row(key, name, distance, incorrect, n_undefined, *, n_resamples, seed, level, distance_name):
    defined = ~np.isnan(distance)
    auc, low, high = bootstrap_auc(
        distance[defined], incorrect[defined], n_resamples=n_resamples, seed=seed, level=level
    )
    return {
        "class": key,
        "class_name": name,
        "n_correct": int((defined & ~incorrect).sum()),
        "n_incorrect": int((defined & incorrect).sum()),
        "n_undefined": n_undefined,
        "auc": auc,
        "ci_low": low,
        "ci_high": high,
        "distance_name": distance_name,
    }


def diagnose(
    scores: np.ndarray,
    label: np.ndarray,
    pred: np.ndarray,
    *,
    by: str = "pred",
    distance: str = "auto",
    n_resamples: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    class_names: Sequence[str] | None = None,
    sample: np.ndarray | None = None,
) -> Diagnosis:
    """Distance of every sample's profile to its class's correct-prediction reference, and its ROC AUC.

    See the module docstring for the choices (reference class, leave-one-out, distance, bootstrap).

    Parameters
    ----------
    scores : ndarray, (N, L)
        One method's layer scores per sample.
    label, pred : ndarray of int, (N,)
        True and predicted class.
    by : {"pred", "label"}
        The reference class: predicted (default; available at deployment) or true.
    distance : {"auto", "jensen_shannon", "cosine_minmax"}
    n_resamples : int
        Bootstrap resamples (0: no interval).
    seed : int
        The overall row uses ``default_rng([seed, 0])``, class ``k`` uses ``default_rng([seed, k + 1])``.
    level : float
    class_names : sequence of str, optional
    sample : ndarray of int, (N,), optional
        Sample ids (default 0..N-1).

    Returns
    -------
    Diagnosis
    """
    scores = np.asarray(scores, dtype=np.float64)
    label, pred = np.asarray(label, dtype=np.int64), np.asarray(pred, dtype=np.int64)
    name = _check_options(by, distance, scores)
    cls = pred if by == "pred" else label
    n_classes = int(max(label.max(initial=-1), pred.max(initial=-1)) + 1)
    n_classes = max(n_classes, len(class_names or ()))
    correct = label == pred
    profiles = scores if name == "jensen_shannon" else minmax_normalise(scores)
    refs = leave_one_out_references(profiles, cls, correct, n_classes)
    dist = _DISTANCE_FUNCTIONS[name](profiles, refs)
    dist[np.isnan(refs).any(1) | np.isnan(profiles).any(1)] = np.nan
    samples = pd.DataFrame(
        {
            "sample": np.arange(len(label)) if sample is None else np.asarray(sample),
            "label": label,
            "pred": pred,
            "correct": correct,
            "distance": dist,
        }
    )[DIAGNOSIS_COLUMNS]
    common = dict(n_resamples=n_resamples, level=level, distance_name=name)
    undefined = np.isnan(dist)
    rows = [_summary_row("all", "all", dist, ~correct, int(undefined.sum()), seed=[seed, 0], **common)]
    for k in range(n_classes):
        mask = cls == k
        if mask.any():
            cname = class_names[k] if class_names and k < len(class_names) else str(k)
            rows.append(
                _summary_row(
                    k, cname, dist[mask], ~correct[mask], int(undefined[mask].sum()), seed=[seed, k + 1], **common
                )
            )
    meta = {
        "distance": name,
        "reference_by": by,
        "positive": "incorrect prediction (larger distance = more suspicious)",
        "references": "leave-one-out mean of the correct predictions of the sample's class",
        "bootstrap": "percentile, stratified by correctness",
        "n_resamples": n_resamples,
        "level": level,
        "seed": seed,
    }
    return Diagnosis(samples=samples, summary=pd.DataFrame(rows, columns=SUMMARY_COLUMNS), meta=meta)


def diagnose_scores(scores: pd.DataFrame, *, class_names: Sequence[str] | None = None, **options) -> Diagnosis:
    """:func:`diagnose` on a long score table (``sample, label, pred, layer, score``, layers 1..L).

    ``options`` are :func:`diagnose`'s keyword arguments (``by``, ``distance``, ``n_resamples``,
    ``seed``, ``level``).
    """
    wide = scores.pivot(index="sample", columns="layer", values="score").sort_index()
    if wide.isna().any().any():
        raise ConfigError("every sample needs a score for every layer; some (sample, layer) pairs are missing.")
    who = scores.drop_duplicates("sample").set_index("sample").loc[wide.index]
    return diagnose(
        wide.to_numpy(),
        who["label"].to_numpy(),
        who["pred"].to_numpy(),
        class_names=class_names,
        sample=wide.index.to_numpy(),
        **options,
    )
