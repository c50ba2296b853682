"""Early exit what-if: how deep must each input go before the prediction is settled?

The *partial* prediction at depth d reads only layers 1..d: the model's head with the deeper layers removed
and the rest renormalised (``gate-renorm``, from the cached trace), or a head retrained on layers 1..d
(``refit``). Depth L is always the full model. Per input, the oracle exit is the shallowest depth whose
partial prediction equals the full model's. Policies that need no oracle:

- ``confidence``: exit at the first depth whose partial prediction's probability reaches theta;
- ``attribution``: exit at the first depth d where the method's normalised attribution mass on layers > d falls
  below epsilon (the scores' positive part divided by its sum; a sample without positive scores has uniform
  mass);
- ``fixed``: every input exits at depth d (the baseline a policy must beat).

Whether a saving is real: a LAYA head's alpha(x) is computed from *all* layers' states, so its gate-renorm
partial predictions, and every per-input attribution signal, cannot be had without running every layer: those
rows say ``saving = hypothetical``. A refit partial head, ScalarMix/Concat/LastLayer renormalised heads, the
confidence policy on them and the dataset-level ``static`` weights need only layers 1..d: ``saving = real``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from laya_eval.pruning.options import CONFIDENCE_THRESHOLDS, EARLY_EXIT_COLUMNS, MASS_THRESHOLDS

__all__ = ["exit_depths", "early_exit_table", "normalised_mass", "oracle_exit_depth"]


def oracle_exit_depth(partial_pred: np.ndarray, full_pred: np.ndarray) -> np.ndarray:
    """Shallowest depth (1-based) whose partial prediction equals the full model's, (N,).

    Parameters
    ----------
    partial_pred : ndarray of int, (N, L)
        Column d-1: the prediction from layers 1..d; the last column is the full model.
    full_pred : ndarray of int, (N,)
    """
    agree = np.asarray(partial_pred) == np.asarray(full_pred)[:, None]
    agree[:, -1] = True
    return np.argmax(agree, axis=1) + 1


def exit_depths(signal_ok: np.ndarray) -> np.ndarray:
    """First depth (1-based) where ``signal_ok`` holds, else L. ``signal_ok``: (N, L) bool."""
    ok = np.array(signal_ok, bool)
    ok[:, -1] = True
    return np.argmax(ok, axis=1) + 1


def normalised_mass(scores: np.ndarray) -> np.ndarray:
    """Attribution mass on layers deeper than d, for d = 1..L: (N, L); column L is 0."""
    w = np.clip(np.asarray(scores, np.float64), 0, None)
    total = w.sum(1, keepdims=True)
    w = np.where(total > 0, w / np.where(total > 0, total, 1), 1.0 / w.shape[1])
    after = w[:, ::-1].cumsum(1)[:, ::-1]  # after[:, i] = mass on layers >= i
    return np.concatenate([after[:, 1:], np.zeros((len(w), 1))], axis=1)


def _row(
    policy: str,
    method: str,
    partial: str,
    threshold: float,
    depth: np.ndarray,
    pred: np.ndarray,
    full_pred: np.ndarray,
    labels: np.ndarray,
    latency: np.ndarray | None,
    partial_all: bool,
    signal_all: bool,
) -> dict:
    ratio = float("nan") if latency is None else float(np.mean(latency[depth] / latency[-1]))
    return {
        "policy": policy,
        "method": method,
        "partial": partial,
        "threshold": threshold,
        "accuracy": float(np.mean(pred == labels)),
        "agreement": float(np.mean(pred == full_pred)),
        "mean_depth": float(np.mean(depth)),
        "latency_ratio": ratio,
        "partial_needs_all_layers": partial_all,
        "signal_needs_all_layers": signal_all,
        "saving": "hypothetical" if (partial_all or signal_all) else "real",
    }


def early_exit_table(
    partial_pred: Mapping[str, np.ndarray],
    partial_conf: Mapping[str, np.ndarray],
    partial_needs_all: Mapping[str, bool],
    full_pred: np.ndarray,
    labels: np.ndarray,
    scores: Mapping[str, np.ndarray],
    dataset_level: set[str],
    latency: np.ndarray | None,
) -> pd.DataFrame:
    """Every policy and threshold for every partial-prediction kind.

    Parameters
    ----------
    partial_pred, partial_conf : mapping of partial kind to ndarray, (N, L)
        Prediction and its probability from layers 1..d (column d-1); the last column is the full model.
    partial_needs_all : mapping of partial kind to bool
        Whether that partial prediction needs every layer's state (LAYA's gate-renorm).
    full_pred, labels : ndarray of int, (N,)
    scores : mapping of method to ndarray (N, L)
        Attributions for the ``attribution`` policy.
    dataset_level : set of str
        Methods whose scores are the same for every input (their signal needs no deeper layer).
    latency : ndarray (L + 1,) or None
        :func:`laya_eval.pruning.cost.depth_latency`.

    Returns
    -------
    DataFrame
        Columns :data:`EARLY_EXIT_COLUMNS`.
    """
    rows: list[dict] = []
    n_layers = next(iter(partial_pred.values())).shape[1]
    idx = np.arange(len(full_pred))
    for kind, pp in partial_pred.items():
        pc, needs = partial_conf[kind], partial_needs_all[kind]

        def at(depth: np.ndarray) -> np.ndarray:
            return pp[idx, depth - 1]

        oracle = oracle_exit_depth(pp, full_pred)
        rows.append(_row("oracle", "", kind, float("nan"), oracle, at(oracle), full_pred, labels, latency, needs, True))
        for d in range(1, n_layers + 1):
            depth = np.full(len(full_pred), d)
            rows.append(_row("fixed", "", kind, float(d), depth, at(depth), full_pred, labels, latency, needs, False))
        for theta in CONFIDENCE_THRESHOLDS:
            depth = exit_depths(pc >= theta)
            rows.append(_row("confidence", "", kind, theta, depth, at(depth), full_pred, labels, latency, needs, needs))
        for method, s in scores.items():
            mass = normalised_mass(s)
            for eps in MASS_THRESHOLDS:
                depth = exit_depths(mass < eps)
                rows.append(
                    _row(
                        "attribution",
                        method,
                        kind,
                        eps,
                        depth,
                        at(depth),
                        full_pred,
                        labels,
                        latency,
                        needs,
                        method not in dataset_level,
                    )
                )
    return pd.DataFrame(rows, columns=EARLY_EXIT_COLUMNS)
