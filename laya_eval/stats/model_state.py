"""The model's own state on the evaluated samples: accuracy against chance, one-class predictions, tiny effects.

A verdict about attributions is only as good as the model it explains: a confident faithfulness on a model at
chance, or on one that predicts a single class, ranks layers of a network that does nothing useful. The rules
(docs/concepts/statistics.md, "The model's own state"):

- **chance** is the stricter of two levels: ``1 / n_classes`` (guessing uniformly) and the share of the most
  frequent label among the evaluated samples (always answering the majority class).
- **at chance**: the accuracy is not above chance beyond binomial noise, i.e. the one-sided exact binomial test
  of ``correct ~ Binomial(n, chance)`` against "better than chance" (``scipy.stats.binomtest``) gives
  ``p >= CHANCE_ALPHA`` (0.05).
- **one class**: at least ``ONE_CLASS_SHARE`` (95%) of the predictions are the same class.
- **the verdict** (:func:`verdict`): ``ok``, or the names of the rules that hold, joined by ``;``:
  ``model-at-chance``, ``one-class``, ``negligible-effects``.
- **negligible effects** (:func:`typical_largest_effect`): the median over samples of the largest |effect| is
  below ``EFFECT_FLOOR`` (1e-3, a drop of 0.1 percentage points of a probability), whatever the relative
  tie check says.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import binomtest

from laya_eval.checks import check_positive_int, fail

__all__ = [
    "CHANCE_ALPHA",
    "EFFECT_FLOOR",
    "ONE_CLASS_SHARE",
    "ModelState",
    "model_state",
    "typical_largest_effect",
    "verdict",
]

CHANCE_ALPHA = 0.05
ONE_CLASS_SHARE = 0.95
EFFECT_FLOOR = 1e-3


@dataclass(frozen=True)
class ModelState:
    """How well the model does on the evaluated samples, beside the chance levels.

    Attributes
    ----------
    n : int
        Evaluated samples.
    n_classes : int
    accuracy : float
        Share of samples whose prediction equals the label (NaN without samples).
    uniform_chance : float
        ``1 / n_classes``.
    majority_chance : float
        Share of the most frequent label among the evaluated samples.
    p_value : float
        One-sided exact binomial p of the number correct under ``Binomial(n, chance)``.
    top_prediction : int
        The class predicted most often (-1 without samples).
    top_prediction_share : float
        Its share of the predictions.
    """

    n: int
    n_classes: int
    accuracy: float
    uniform_chance: float
    majority_chance: float
    p_value: float
    top_prediction: int
    top_prediction_share: float

    @property
    def chance(self) -> float:
        """The stricter chance level: the larger of uniform guessing and the majority class."""
        return max(self.uniform_chance, self.majority_chance)

    @property
    def at_chance(self) -> bool:
        """Not better than chance beyond binomial noise (``p_value >= CHANCE_ALPHA``); False without samples."""
        return self.n > 0 and not self.p_value < CHANCE_ALPHA

    @property
    def one_class(self) -> bool:
        """At least ``ONE_CLASS_SHARE`` of the predictions are one class; False without samples."""
        return self.n > 0 and self.top_prediction_share >= ONE_CLASS_SHARE

    def describe(self) -> str:
        """``accuracy 0.175 on these 200 samples (chance 0.100, majority class 0.115)``."""
        if self.n == 0:
            return "no samples evaluated"
        return (
            f"accuracy {self.accuracy:.3f} on these {self.n} samples "
            f"(chance {self.uniform_chance:.3f}, majority class {self.majority_chance:.3f})"
        )

    def notes(self) -> list[str]:
        """Plain-language warnings for a model at chance or predicting one class (empty for a working model)."""
        out = []
        if self.at_chance and self.accuracy > self.chance and self.chance**self.n >= CHANCE_ALPHA:
            # even every sample right would not pass the test: the samples are too few to judge, not the model
            out.append(
                f"accuracy {self.accuracy:.3f} on {self.n} samples cannot be told from the chance level "
                f"{self.chance:.3f} (one-sided p = {self.p_value:.2g} >= {CHANCE_ALPHA:g}; with {self.n} samples "
                "not even all of them right could be): too few samples to judge the model, so its verdict says "
                "model-at-chance; evaluate more samples."
            )
        elif self.at_chance:
            out.append(
                f"the model is at chance on these samples: accuracy {self.accuracy:.3f} is not above the stricter "
                f"chance level {self.chance:.3f} beyond binomial noise (one-sided p = {self.p_value:.2g} >= "
                f"{CHANCE_ALPHA:g}); the layer ranking explains a model that does not work."
            )
        if self.one_class:
            out.append(
                f"the model predicts class {self.top_prediction} for {self.top_prediction_share:.0%} of these "
                "samples: its layers are ranked on a nearly constant output."
            )
        return out

    def record(self) -> dict:
        """The manifest's ``model_state`` entry (plain numbers, the rules' thresholds)."""
        return {
            "n": self.n,
            "n_classes": self.n_classes,
            "accuracy": self.accuracy,
            "uniform_chance": self.uniform_chance,
            "majority_chance": self.majority_chance,
            "chance": self.chance,
            "p_value": self.p_value,
            "at_chance": self.at_chance,
            "top_prediction": self.top_prediction,
            "top_prediction_share": self.top_prediction_share,
            "one_class": self.one_class,
            "rule": (
                f"at chance: one-sided exact binomial p >= {CHANCE_ALPHA:g} against the larger of 1/n_classes and "
                f"the majority label's share; one class: >= {ONE_CLASS_SHARE:.0%} of predictions one class"
            ),
        }


def model_state(labels, preds, n_classes: int) -> ModelState:
    """Accuracy of ``preds`` against ``labels`` beside the chance levels.

    Parameters
    ----------
    labels, preds : array-like of int, (N,)
        True classes and the model's predictions on the evaluated samples.
    n_classes : int
        Classes the model can predict (>= 1).

    Returns
    -------
    ModelState

    Examples
    --------
    >>> s = model_state([0, 1, 2, 3], [0, 1, 2, 0], n_classes=4)
    >>> s.describe()
    'accuracy 0.750 on these 4 samples (chance 0.250, majority class 0.250)'
    """
    check_positive_int("n_classes", n_classes)
    labels = np.asarray(labels, dtype=np.int64).reshape(-1)
    preds = np.asarray(preds, dtype=np.int64).reshape(-1)
    if labels.shape != preds.shape:
        raise fail("preds", f"one prediction per label ({labels.size})", f"{preds.size} predictions")
    n = int(labels.size)
    uniform = 1.0 / n_classes
    if n == 0:
        nan = float("nan")
        return ModelState(0, n_classes, nan, uniform, nan, nan, -1, nan)
    correct = int((labels == preds).sum())
    majority = float(np.unique(labels, return_counts=True)[1].max() / n)
    chance = max(uniform, majority)
    p_value = float(binomtest(correct, n, min(chance, 1.0), alternative="greater").pvalue)
    classes, counts = np.unique(preds, return_counts=True)
    return ModelState(
        n=n,
        n_classes=int(n_classes),
        accuracy=correct / n,
        uniform_chance=uniform,
        majority_chance=majority,
        p_value=p_value,
        top_prediction=int(classes[counts.argmax()]),
        top_prediction_share=float(counts.max() / n),
    )


def typical_largest_effect(effects: np.ndarray) -> float:
    """The median over samples of each sample's largest |effect|, (N, L) -> float (NaN without samples).

    Below :data:`EFFECT_FLOOR` the effects are negligible in absolute terms: removing any one layer moves the
    explained probability by less than 0.1 percentage points on a typical sample.
    """
    effects = np.asarray(effects, dtype=np.float64)
    if effects.ndim != 2:
        raise fail("effects", "a 2-d array (samples, layers)", f"shape {effects.shape}")
    if effects.shape[0] == 0 or effects.shape[1] == 0:
        return float("nan")
    return float(np.median(np.abs(effects).max(1)))


def verdict(state: ModelState, largest_effect: float = float("nan")) -> str:
    """``"ok"``, or the rules that hold joined by ``;`` (``model-at-chance;one-class;negligible-effects``).

    ``largest_effect`` is :func:`typical_largest_effect` of the run's effects (NaN: no effects to judge).

    Examples
    --------
    >>> verdict(model_state([0, 1, 0, 1], [0, 0, 0, 0], n_classes=2), 5e-4)
    'model-at-chance;one-class;negligible-effects'
    """
    rules = (
        ("model-at-chance", state.at_chance),
        ("one-class", state.one_class),
        ("negligible-effects", largest_effect < EFFECT_FLOOR),
    )
    return ";".join(name for name, holds in rules if holds) or "ok"
