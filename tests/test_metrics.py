"""Metrics against scipy, hand-worked values and invariants."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from scipy import stats

from laya_eval.stats.metrics import METRICS, bootstrap_mean, rank_layers, spearman_per_sample, top1_hit

_rows = arrays(
    np.float64, st.tuples(st.integers(1, 8), st.integers(2, 7)), elements=st.integers(-3, 3).map(float)
)  # small integers: many ties and constant rows


@settings(max_examples=200, deadline=None)
@given(_rows, st.data())
def test_spearman_equals_scipy_row_by_row_ties_included(a, data):
    b = data.draw(arrays(np.float64, a.shape, elements=st.integers(-3, 3).map(float)))
    got = spearman_per_sample(a, b)
    for i in range(a.shape[0]):
        if np.ptp(a[i]) == 0 or np.ptp(b[i]) == 0:
            assert math.isnan(got[i])  # undefined, never a number
        else:
            assert got[i] == pytest.approx(stats.spearmanr(a[i], b[i]).statistic, abs=1e-12)


@settings(max_examples=100, deadline=None)
@given(
    arrays(np.float64, st.tuples(st.integers(1, 5), st.integers(2, 6)), elements=st.integers(-10, 10).map(float)),
    st.data(),
)
def test_spearman_invariant_to_monotone_transforms_and_layer_permutation(a, data):
    # integer-valued floats: exp(a / 5) stays strictly monotone in floating point
    b = data.draw(arrays(np.float64, a.shape, elements=st.floats(-10, 10, allow_nan=False)))
    base = spearman_per_sample(a, b)
    np.testing.assert_allclose(spearman_per_sample(np.exp(a / 5), b), base, equal_nan=True, atol=1e-12)
    perm = np.random.default_rng(0).permutation(a.shape[1])
    np.testing.assert_allclose(spearman_per_sample(a[:, perm], b[:, perm]), base, equal_nan=True, atol=1e-12)


def test_spearman_by_hand():
    # ranks (1.5, 3, 1.5) vs (1, 3, 2): centred (-.5, 1, -.5) . (-1, 1, 0) = 1.5; norms sqrt(1.5 * 2)
    got = spearman_per_sample(np.array([[1.0, 5.0, 1.0]]), np.array([[0.1, 0.9, 0.5]]))
    assert got[0] == pytest.approx(1.5 / math.sqrt(3))


def test_rank_layers_ties_go_to_the_lowest_index():
    assert rank_layers(np.array([[0.2, 0.7, 0.7, 0.1]])).tolist() == [[1, 2, 0, 3]]
    assert top1_hit(np.array([[1.0, 1.0, 0.0]]), np.array([[0.5, 0.9, 0.0]])).tolist() == [False]
    assert top1_hit(np.array([[1.0, 1.0, 0.0]]), np.array([[0.9, 0.9, 0.0]])).tolist() == [True]


def test_bootstrap_excludes_and_counts_undefined():
    values = np.array([0.5, np.nan, 1.0, np.nan, 0.0, 0.25, np.nan, 0.75])
    iv = bootstrap_mean(values, n_resamples=500, seed=3)
    assert (iv.n, iv.n_undefined) == (8, 3)
    assert iv.mean == pytest.approx(0.5)
    assert 0.0 <= iv.low <= iv.mean <= iv.high <= 1.0
    assert not any(math.isnan(v) for v in (iv.mean, iv.low, iv.high))


def test_bootstrap_interval_agrees_with_scipy():
    x = np.random.default_rng(1).normal(0.3, 1.0, size=400)
    ours = bootstrap_mean(x, n_resamples=4000, seed=0)
    ref = stats.bootstrap((x,), np.mean, n_resamples=4000, method="percentile", random_state=0).confidence_interval
    assert ours.low == pytest.approx(ref.low, abs=0.015)
    assert ours.high == pytest.approx(ref.high, abs=0.015)


def test_bootstrap_is_seeded():
    x = np.random.default_rng(2).random(50)
    assert bootstrap_mean(x, seed=[4, 1]) == bootstrap_mean(x, seed=[4, 1])
    assert bootstrap_mean(x, seed=[4, 1]).low != bootstrap_mean(x, seed=[4, 2]).low


def test_all_undefined_gives_no_number_but_counts():
    iv = bootstrap_mean(np.array([np.nan, np.nan]))
    assert (iv.n, iv.n_undefined) == (2, 2) and math.isnan(iv.mean)


@pytest.mark.parametrize("name", sorted(METRICS))
def test_every_metric_best_value_lies_in_its_bounds(name):
    info = METRICS[name]
    assert info.lower_bound <= info.best <= info.upper_bound
    assert info.best == (info.upper_bound if info.higher_is_better else info.lower_bound)
    assert info.description


def test_recall_at_k_by_hand_ties_included():
    from laya_eval.stats.metrics import recall_at_k

    effect = np.array(
        [
            [0.5, 0.1, 0.3, 0.2, 0.0],  # exact top 3: layers 0, 2, 3
            [0.2, 0.2, 0.2, 0.0, 0.1],  # three layers tie at the top: any of them counts
            [0.0, 0.4, 0.3, 0.3, 0.1],  # the 3rd largest (0.3) is tied by layers 2 and 3: both count
        ]
    )
    scores = np.array(
        [
            [9.0, 8.0, 7.0, 0.0, 1.0],  # top 3: 0, 1, 2 -> 0 and 2 are exact: 2/3; top 1: 0 -> hit
            [0.0, 0.0, 5.0, 5.0, 1.0],  # top 3 (ties to the lowest index): 2, 3, 4 -> only 2: 1/3; top 1: 2 -> hit
            [1.0, 2.0, 0.0, 3.0, 0.0],  # top 3: 3, 1, 0 -> 3 and 1: 2/3; top 1: 3 (0.3 < 0.4) -> miss
        ]
    )
    np.testing.assert_array_equal(recall_at_k(scores, effect, 3), [2 / 3, 1 / 3, 2 / 3])
    np.testing.assert_array_equal(recall_at_k(scores, effect, 1), [1.0, 1.0, 0.0])
    assert np.isnan(recall_at_k(scores, effect, 5)).all()  # k = L: every layer, recall 1 whatever the method
