"""The model's own state beside a verdict: accuracy, the chance levels, at chance, one class, tiny effects."""

from __future__ import annotations

from math import comb

import numpy as np
import pytest

from laya_eval.errors import ConfigError
from laya_eval.stats import EFFECT_FLOOR, model_state, typical_largest_effect


def _upper_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), summed by hand (the oracle for scipy's binomtest)."""
    return sum(comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(k, n + 1))


def test_accuracy_and_both_chance_levels_by_hand():
    labels = [0, 0, 0, 0, 0, 0, 1, 1, 2, 2]  # majority class 0: 6 of 10
    preds = [0, 1, 0, 0, 2, 0, 1, 0, 2, 1]  # correct at 0, 2, 3, 5, 6, 8: 6 of 10
    s = model_state(labels, preds, n_classes=3)
    assert (s.n, s.accuracy, s.uniform_chance, s.majority_chance) == (10, 0.6, 1 / 3, 0.6)
    assert s.chance == 0.6  # the stricter of 1/3 and 0.6
    assert s.p_value == pytest.approx(_upper_tail(6, 10, 0.6), rel=1e-12)
    assert s.at_chance  # 6 of 10 right when always answering class 0 gives 6 of 10
    assert s.describe() == "accuracy 0.600 on these 10 samples (chance 0.333, majority class 0.600)"


def test_at_chance_is_the_one_sided_binomial_rule():
    labels = np.arange(40) % 10  # balanced: chance 0.1 either way
    # 8 of 40 right: P(X >= 8 | n 40, p 0.1) = 0.042 < 0.05, above chance; 7 of 40: 0.10, at chance
    above = model_state(labels, np.where(np.arange(40) < 8, labels, (labels + 1) % 10), n_classes=10)
    near = model_state(labels, np.where(np.arange(40) < 7, labels, (labels + 1) % 10), n_classes=10)
    assert above.accuracy == 8 / 40 and near.accuracy == 7 / 40
    assert above.p_value == pytest.approx(_upper_tail(8, 40, 0.1), rel=1e-12) and above.p_value < 0.05
    assert near.p_value == pytest.approx(_upper_tail(7, 40, 0.1), rel=1e-12) and near.p_value >= 0.05
    assert not above.at_chance and near.at_chance
    assert near.notes()[0].startswith("the model is at chance on these samples: accuracy 0.175 is not above")
    assert above.notes() == []


def test_one_class_share():
    labels = np.arange(20) % 4
    nineteen = np.array([3] * 19 + [0])  # 95% class 3
    eighteen = np.array([3] * 18 + [0, 1])  # 90%
    s = model_state(labels, nineteen, n_classes=4)
    assert (s.top_prediction, s.top_prediction_share, s.one_class) == (3, 0.95, True)
    assert "predicts class 3 for 95% of these samples" in s.notes()[-1]
    assert not model_state(labels, eighteen, n_classes=4).one_class


def test_a_working_model_has_no_notes():
    labels = np.arange(100) % 10
    preds = labels.copy()
    preds[:5] = (preds[:5] + 1) % 10  # 95 of 100 right
    s = model_state(labels, preds, n_classes=10)
    assert s.accuracy == 0.95 and not s.at_chance and not s.one_class and s.notes() == []


def test_no_samples_and_bad_input():
    empty = model_state([], [], n_classes=2)
    assert empty.describe() == "no samples evaluated" and not empty.at_chance and empty.notes() == []
    with pytest.raises(ConfigError, match=r"preds must be one prediction per label \(3\); got '2 predictions'"):
        model_state([0, 1, 1], [0, 1], n_classes=2)
    with pytest.raises(ConfigError, match="n_classes must be a positive integer; got 0"):
        model_state([0], [0], n_classes=0)


def test_typical_largest_effect_is_the_median_of_each_samples_largest():
    effects = np.array([[0.1, -0.3], [0.0, 0.002], [5e-4, -1e-4]])  # largest |effect|: 0.3, 0.002, 5e-4
    assert typical_largest_effect(effects) == 0.002 >= EFFECT_FLOOR
    small = typical_largest_effect(effects[1:] / 10)  # largest 2e-4 and 5e-5: their median
    assert small == pytest.approx(1.25e-4) and small < EFFECT_FLOOR
    with pytest.raises(ConfigError, match=r"effects must be a 2-d array \(samples, layers\); got 'shape \(3,\)'"):
        typical_largest_effect(np.zeros(3))


def test_too_few_samples_are_said_to_be_too_few_not_a_failing_model():
    """Two samples of a 4-class model, both right: chance is the majority label's share 0.5 (labels 0 and 1), p =
    0.5^2 = 0.25 >= 0.05, so the rule cannot tell the model from chance, and no accuracy on 2 samples could (0.25 is
    the smallest p there is): the note says so. Three samples of three labels all right: chance 1/3, p = 1/27 <
    0.05, not at chance."""
    two = model_state(np.array([0, 1]), np.array([0, 1]), n_classes=4)
    assert two.at_chance and two.p_value == pytest.approx(0.25)
    (note,) = two.notes()
    assert note.startswith("accuracy 1.000 on 2 samples cannot be told from the chance level 0.500")
    assert "too few samples to judge the model" in note
    three = model_state(np.array([0, 1, 2]), np.array([0, 1, 2]), n_classes=4)
    assert not three.at_chance and three.notes() == []
    # a model that is wrong on few samples is at chance in the plain words
    wrong = model_state(np.array([0, 1]), np.array([1, 0]), n_classes=4)
    assert wrong.notes()[0].startswith("the model is at chance on these samples")
