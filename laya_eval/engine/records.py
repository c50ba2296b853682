"""Per-sample records: what ``collect`` produces and ``summarize`` reads.

A :class:`Records` holds, for every evaluated sample (keyed by its global index in the
evaluated set), the label, the prediction, the confidence, each method's layer scores,
each ablation's leave-one-layer-out effects, each (ablation, method) deletion curve and
per-sample diagnostics (such as IG's completeness delta). Records from batches, chunks,
resumed runs and processes :func:`merge <merge_records>` exactly: concatenation ordered by
sample index, whatever order the parts came in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from laya_eval.errors import LayaEvalError

__all__ = ["Records", "merge_records", "method_diagnostic", "method_scores"]


@dataclass
class Records:
    """Per-sample results of an evaluation, all arrays with one row per sample.

    Attributes
    ----------
    sample : ndarray of int64, (N,)
        Global sample index in the evaluated set.
    label, pred : ndarray of int64, (N,)
    confidence : ndarray of float64, (N,)
        ``p_c(x)`` of the predicted class on the intact input.
    scores : dict of str to ndarray, each (N, L)
        Layer attributions per method.
    effects : dict of str to ndarray, each (N, L)
        Leave-one-layer-out effects per ablation.
    deletion : dict of str to dict of str to ndarray, each (N, L)
        ``deletion[ablation][method][:, k-1]``: the effect of removing the k top-ranked layers.
    diagnostics : dict of str to ndarray, each (N,)
        Per-sample checks keyed ``"<method>:<name>"``.
    donors : dict of str to ndarray of int64, each (N, K)
        Per ablation that draws donors (``resample``): the global index of each draw's donor.
    """

    sample: np.ndarray
    label: np.ndarray
    pred: np.ndarray
    confidence: np.ndarray
    scores: dict[str, np.ndarray] = field(default_factory=dict)
    effects: dict[str, np.ndarray] = field(default_factory=dict)
    deletion: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    diagnostics: dict[str, np.ndarray] = field(default_factory=dict)
    donors: dict[str, np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.sample.shape[0])

    def _flat(self) -> dict[str, np.ndarray]:
        out = {"sample": self.sample, "label": self.label, "pred": self.pred, "confidence": self.confidence}
        out.update({f"scores/{k}": v for k, v in self.scores.items()})
        out.update({f"effects/{k}": v for k, v in self.effects.items()})
        out.update({f"deletion/{a}/{m}": v for a, per in self.deletion.items() for m, v in per.items()})
        out.update({f"diagnostics/{k}": v for k, v in self.diagnostics.items()})
        out.update({f"donors/{k}": v for k, v in self.donors.items()})
        return out

    def to_arrays(self) -> dict[str, np.ndarray]:
        """Flat ``{key: array}`` (keys like ``"scores/ig"``, ``"deletion/gate/laya"``) for ``np.savez``."""
        return dict(self._flat())

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> Records:
        """Inverse of :meth:`to_arrays`."""
        rec = cls(sample=arrays["sample"], label=arrays["label"], pred=arrays["pred"], confidence=arrays["confidence"])
        for key, value in arrays.items():
            kind, _, rest = key.partition("/")
            if kind == "scores":
                rec.scores[rest] = value
            elif kind == "effects":
                rec.effects[rest] = value
            elif kind == "deletion":
                ablation, _, method = rest.partition("/")
                rec.deletion.setdefault(ablation, {})[method] = value
            elif kind == "diagnostics":
                rec.diagnostics[rest] = value
            elif kind == "donors":
                rec.donors[rest] = value
        return rec

    def take(self, rows: np.ndarray | slice) -> Records:
        """The records of the given rows (an index array, a boolean mask or a slice)."""
        return Records.from_arrays({k: v[rows] for k, v in self._flat().items()})


def method_scores(records: Records, method: str, ablation: str) -> np.ndarray:
    """A method's scores as scored against ``ablation``: its own ``"method@ablation"`` entry where the scores
    depend on the ablation (Integrated Gradients from each ablation's removed state), else the shared one."""
    return records.scores.get(f"{method}@{ablation}", records.scores.get(method))


def method_diagnostic(records: Records, method: str, ablation: str) -> np.ndarray | None:
    """A method's per-sample diagnostic for ``ablation``, as :func:`method_scores`."""
    return records.diagnostics.get(f"{method}@{ablation}", records.diagnostics.get(method))


def merge_records(parts: Iterable[Records]) -> Records:
    """One :class:`Records` from many, ordered by sample index.

    Raises
    ------
    LayaEvalError
        If the parts disagree on what they hold or a sample appears twice.
    """
    parts = [p for p in parts if p is not None]
    if not parts:
        raise LayaEvalError("no records to merge.")
    flats = [p._flat() for p in parts]
    keys = list(flats[0])
    for f in flats[1:]:
        if list(f) != keys:
            raise LayaEvalError(f"records disagree on what they hold: {sorted(set(keys) ^ set(f))}.")
    merged = {k: np.concatenate([f[k] for f in flats]) for k in keys}
    order = np.argsort(merged["sample"], kind="stable")
    sample = merged["sample"][order]
    if sample.size > 1 and (np.diff(sample) == 0).any():
        raise LayaEvalError(f"sample {int(sample[np.flatnonzero(np.diff(sample) == 0)[0]])} appears in two records.")
    return Records.from_arrays({k: v[order] for k, v in merged.items()})
