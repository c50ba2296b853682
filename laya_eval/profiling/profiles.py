"""Class-wise layer profiles, as in the paper's analysis of LAYA's attention.

For one attribution method (default ``laya``: the attention alpha(x)) the
per-sample layer scores ``a_i(x)`` are summarised by class and layer: mean,
standard deviation and count, separately for all, correctly and incorrectly
predicted samples. The scores come from :func:`laya_eval.engine.evaluation.evaluate`
(one backbone pass per batch, the registered method), so a profile and a
``faithfulness`` run of the same checkpoint see identical numbers.

Conventions: ``std`` is the sample standard deviation (``ddof=1``, pandas'
default) and is NaN (an empty CSV cell) for a group of a single sample; a
(class, layer) group without samples has no row.

The verb that computes a profile (and writes its folder) is :func:`laya_eval.profiling.run.profile`.

Examples
--------
>>> import laya_eval
>>> prof = laya_eval.profile("ckpt.pt", method="laya", out="profile-out")  # doctest: +SKIP
>>> prof.table.query("subset == 'all'").pivot(index="class_name", columns="layer", values="mean")  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from laya_eval.profiling.diagnosis import Diagnosis, DiagnosisOptions, diagnose_scores
from laya_eval.errors import ConfigError
from laya_eval.stats import ModelState
from laya_eval.checks import check_choice

__all__ = [
    "LAYER_COLUMNS",
    "PROFILE_COLUMNS",
    "SUBSETS",
    "LayerProfile",
    "layer_table",
    "profile_from_result",
    "profile_table",
    "scores_from_tables",
]

SUBSETS = ("all", "correct", "incorrect")
PROFILE_COLUMNS = ["subset", "class", "class_name", "layer", "mean", "std", "n"]
LAYER_COLUMNS = ["subset", "layer", "mean", "std", "n"]
_BY = ("label", "pred")


@dataclass
class LayerProfile:
    """A method's layer scores summarised per class and layer.

    Attributes
    ----------
    table : DataFrame
        :data:`PROFILE_COLUMNS`, one row per (subset, class, layer) with samples.
    layers : DataFrame
        :data:`LAYER_COLUMNS`, all classes pooled, one row per (subset, layer).
    scores : DataFrame
        The per-sample scores it summarises: ``sample, label, pred, layer, score``.
    meta : dict
        Checkpoint (``label`` = file name, ``path``, ``sha256``), ``head``,
        ``dataset``, ``split``, ``n``, ``method``, ``by``, ``scope``,
        ``n_layers``, ``layer_names``, ``class_names``, ``model_state``; ``diagnosis`` (its
        :attr:`~laya_eval.profiling.diagnosis.Diagnosis.meta`) when there is one.
    diagnosis : Diagnosis or None
        Distances to the class reference profiles and their ROC AUC as an error
        signal (:mod:`laya_eval.profiling.diagnosis`); ``None`` when not asked for.
    files : list of Path
        The files :func:`laya_eval.profile` wrote (``manifest.json`` last); empty without ``out``.
    warnings : list of str
        One line per warning about the run, as on every verb's result: a model at chance or predicting one class
        (:meth:`laya_eval.stats.ModelState.notes`); a profile measures no effect, so has no effect warnings.
    wall_time_s : float or None
        Seconds :func:`laya_eval.profile` took, the writing included; None for a profile made from a result.
    model_state : ModelState or None
        The model's accuracy on the profiled samples beside chance (``meta["model_state"]`` holds its record).
    """

    table: pd.DataFrame
    layers: pd.DataFrame
    scores: pd.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)
    diagnosis: Diagnosis | None = None
    files: list[Path] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    wall_time_s: float | None = None
    model_state: ModelState | None = None


def _check_by(by: str) -> None:
    if by not in _BY:
        raise ConfigError(f"by must be 'label' (true class) or 'pred' (predicted class); got {by!r}.")


def _check_method(method: str) -> None:
    from laya_eval.engine.methods import resolve_methods

    check_choice("method", method, [m.name for m in resolve_methods(None)])  # installed plug-ins included


def _subset_masks(label: np.ndarray, pred: np.ndarray) -> dict[str, np.ndarray]:
    correct = label == pred
    return {"all": np.ones_like(correct), "correct": correct, "incorrect": ~correct}


def _group_stats(values: np.ndarray, groups: np.ndarray, n_groups: int) -> tuple[np.ndarray, ...]:
    """Count, mean and sample std (ddof=1, NaN below 2 samples) per group, two-pass for accuracy."""
    n = np.bincount(groups, minlength=n_groups)
    safe = np.maximum(n, 1)
    mean = np.bincount(groups, weights=values, minlength=n_groups) / safe
    dev = values - mean[groups]
    ss = np.bincount(groups, weights=dev * dev, minlength=n_groups)
    std = np.full(n_groups, np.nan)
    std[n > 1] = np.sqrt(ss[n > 1] / (n[n > 1] - 1))
    return n, mean, std


def _columns(scores: pd.DataFrame) -> None:
    missing = [c for c in ("sample", "label", "pred", "layer", "score") if c not in scores.columns]
    if missing:
        raise ConfigError(f"scores need the columns sample, label, pred, layer, score; missing {missing}.")


def profile_table(scores: pd.DataFrame, class_names: Sequence[str] | None = None, *, by: str = "label") -> pd.DataFrame:
    """Mean, std and count of the score per (subset, class, layer).

    Parameters
    ----------
    scores : DataFrame
        ``sample, label, pred, layer, score``, one row per (sample, layer); layers 1..L.
    class_names : sequence of str, optional
        Names by class index; the index itself when omitted.
    by : {"label", "pred"}
        Group samples by their true or their predicted class.

    Returns
    -------
    DataFrame
        :data:`PROFILE_COLUMNS`, ordered by subset (all, correct, incorrect), class, layer.
    """
    _check_by(by)
    _columns(scores)
    cls = scores[by].to_numpy(dtype=np.int64)
    layer = scores["layer"].to_numpy(dtype=np.int64)
    n_layers, n_classes = int(layer.max()), int(max(cls.max() + 1, len(class_names or ())))
    values = scores["score"].to_numpy(dtype=np.float64)
    groups = cls * n_layers + (layer - 1)
    parts = []
    for subset, mask in _subset_masks(scores["label"].to_numpy(), scores["pred"].to_numpy()).items():
        n, mean, std = _group_stats(values[mask], groups[mask], n_classes * n_layers)
        keep = np.flatnonzero(n > 0)
        c = keep // n_layers
        parts.append(
            pd.DataFrame(
                {
                    "subset": subset,
                    "class": c,
                    "class_name": [class_names[k] if class_names and k < len(class_names) else str(k) for k in c],
                    "layer": keep % n_layers + 1,
                    "mean": mean[keep],
                    "std": std[keep],
                    "n": n[keep],
                }
            )
        )
    return pd.concat(parts, ignore_index=True)[PROFILE_COLUMNS]


def layer_table(scores: pd.DataFrame) -> pd.DataFrame:
    """Mean, std and count of the score per (subset, layer), all classes pooled.

    Returns
    -------
    DataFrame
        :data:`LAYER_COLUMNS`; ``n`` counts samples (one score per sample and layer).
    """
    _columns(scores)
    layer = scores["layer"].to_numpy(dtype=np.int64)
    values = scores["score"].to_numpy(dtype=np.float64)
    n_layers = int(layer.max())
    parts = []
    for subset, mask in _subset_masks(scores["label"].to_numpy(), scores["pred"].to_numpy()).items():
        n, mean, std = _group_stats(values[mask], layer[mask] - 1, n_layers)
        keep = np.flatnonzero(n > 0)
        parts.append(
            pd.DataFrame({"subset": subset, "layer": keep + 1, "mean": mean[keep], "std": std[keep], "n": n[keep]})
        )
    return pd.concat(parts, ignore_index=True)[LAYER_COLUMNS]


def scores_from_tables(layers: pd.DataFrame, samples: pd.DataFrame, method: str) -> pd.DataFrame:
    """One method's per-sample layer scores with the true and predicted class.

    Parameters
    ----------
    layers, samples : DataFrame
        The ``layers`` and ``samples`` tables of an evaluation (or its layers.csv / samples.csv).
    method : str

    Returns
    -------
    DataFrame
        ``sample, label, pred, layer, score``, sorted by sample and layer.
    """
    available = list(dict.fromkeys(layers["method"]))
    if method not in available:
        raise ConfigError(f"method {method!r} is not in these results; they hold {{{', '.join(available)}}}.")
    part = layers.loc[layers["method"] == method, ["sample", "layer", "attribution"]]
    who = samples.loc[samples["method"] == method, ["sample", "label", "pred"]]
    out = part.merge(who, on="sample", how="left", validate="many_to_one").rename(columns={"attribution": "score"})
    return out.sort_values(["sample", "layer"], kind="stable").reset_index(drop=True)[
        ["sample", "label", "pred", "layer", "score"]
    ]


def profile_from_result(
    result,
    *,
    method: str = "laya",
    class_names: Sequence[str] | None = None,
    by: str = "label",
    meta: dict[str, Any] | None = None,
    diagnosis: DiagnosisOptions | None = None,
) -> LayerProfile:
    """The profile of ``method`` from an :class:`~laya_eval.engine.evaluation.EvaluationResult` already computed.

    Parameters
    ----------
    result : EvaluationResult
    method : str
    class_names : sequence of str, optional
    by : {"label", "pred"}
        Grouping of the profile table (the diagnosis has its own, ``diagnosis.by``).
    meta : dict, optional
        Extra entries for :attr:`LayerProfile.meta` (they win over those read from the manifest).
    diagnosis : DiagnosisOptions, optional
        Also diagnose errors from the profiles (:func:`laya_eval.profiling.diagnosis.diagnose`), seeded with
        the manifest's seed; ``None``: no diagnosis.
    """
    _check_by(by)
    scores = scores_from_tables(result.layers, result.samples, method)
    manifest = result.manifest
    ckpt = manifest.get("checkpoint") or {}
    info = {
        "label": Path(ckpt["path"]).name if ckpt.get("path") else "<in-memory>",
        "path": ckpt.get("path"),
        "sha256": ckpt.get("sha256"),
        "head": manifest.get("head"),
        "dataset": manifest.get("dataset"),
        "split": manifest.get("split"),
        "n": manifest.get("n_samples"),
        "method": method,
        "by": by,
        "scope": (manifest.get("options") or {}).get("scope", "head"),
        "ablation": "none (scores only)",
        "n_layers": manifest.get("n_layers"),
        "layer_names": manifest.get("layer_names"),
        "class_names": list(class_names) if class_names else None,
        "seed": manifest.get("seed"),
        "model_state": manifest.get("model_state"),
    }
    info.update(meta or {})
    diag = None
    if diagnosis is not None:
        diag = diagnose_scores(
            scores,
            class_names=class_names,
            by=diagnosis.by,
            distance=diagnosis.distance,
            n_resamples=diagnosis.n_resamples,
            level=diagnosis.level,
            seed=int(info.get("seed") or 0),
        )
        info["diagnosis"] = diag.meta
    return LayerProfile(
        table=profile_table(scores, class_names, by=by),
        layers=layer_table(scores),
        scores=scores,
        meta=info,
        diagnosis=diag,
        model_state=result.model_state,
        warnings=result.model_state.notes() if result.model_state is not None else [],
    )
