"""Kendall's W against scipy's Friedman statistic and hand computations; the operator sensitivity table."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.stats import friedmanchisquare

from laya_eval.engine.operators import operator_sensitivity
from laya_eval.stats.concordance import kendalls_w, kendalls_w_test


def test_kendalls_w_by_hand():
    # Ranks (1 = best) [1, 2, 3] and [1, 3, 2]: rank sums 2, 5, 5, mean 4, S = 4 + 1 + 1 = 6,
    # W = 12 S / (m^2 (n^3 - n)) = 72 / (4 * 24) = 0.75.
    assert kendalls_w(-np.array([[1, 2, 3], [1, 3, 2]], dtype=float)) == pytest.approx(0.75, abs=1e-12)
    # Opposite rankings of two raters: every rank sum is n + 1, W = 0.
    assert kendalls_w(np.array([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]])) == pytest.approx(0.0, abs=1e-12)
    assert np.isnan(kendalls_w(np.array([[1.0, 2.0]])))


def test_kendalls_w_equals_friedman_over_m_n_minus_1_with_ties():
    rng = np.random.default_rng(1)
    scores = rng.normal(size=(5, 8))
    scores[2, 3] = scores[2, 5]  # a tie
    scores[4, :3] = 0.0  # a three-way tie
    chi2 = friedmanchisquare(*scores.T).statistic
    assert kendalls_w(scores) == pytest.approx(chi2 / (5 * 7), rel=1e-10)


def test_permutation_p_value():
    perfect = np.tile(np.arange(6.0), (4, 1))
    test = kendalls_w_test(perfect, n_permutations=2000, seed=0)
    # Reaching W = 1 needs all three other raters to draw the first one's order: (1/720)^3, so p = 1/2001.
    assert test.w == pytest.approx(1.0) and test.p_value == pytest.approx(1 / 2001)
    rng = np.random.default_rng(2)
    noise = kendalls_w_test(rng.normal(size=(4, 6)), n_permutations=2000, seed=0)
    assert noise.p_value > 0.05
    assert kendalls_w_test(perfect, n_permutations=50, seed=3) == kendalls_w_test(perfect, n_permutations=50, seed=3)


def _summary(values):
    return pd.DataFrame({"method": list(values), "faithfulness": list(values.values())})


def test_operator_table_ranks_swings_and_warning():
    summaries = {
        "gate": _summary({"laya": 0.8, "ig": 0.6, "random": 0.0}),
        "mean": _summary({"laya": 0.5, "ig": 0.7, "random": 0.1}),
    }
    sens = operator_sensitivity(summaries, seed=0, n_permutations=200)
    t = sens.table.set_index("method")
    assert t.loc["laya", "rank_gate"] == 1 and t.loc["laya", "rank_mean"] == 2 and t.loc["random", "rank_mean"] == 3
    assert t.loc["laya", "largest_swing"] == pytest.approx(0.3)
    assert (t.loc["laya", "swing_from"], t.loc["laya", "swing_to"]) == ("mean", "gate")
    # ranks [1, 2, 3] and [2, 1, 3]: sums 3, 3, 6, mean 4, S = 1 + 1 + 4 = 6, W = 72 / 96.
    assert t.loc["ig", "kendall_w"] == pytest.approx(0.75)
    assert sens.best == {"gate": "laya", "mean": "ig"}  # random is a baseline, never "best"
    assert "best method changes with the operator" in sens.warning


def test_operator_table_leaves_undefined_methods_out_of_w():
    summaries = {
        "gate": _summary({"laya": 0.8, "ig": np.nan, "random": 0.0, "contribution": 0.5}),
        "zero": _summary({"laya": 0.9, "ig": 0.2, "random": 0.1, "contribution": 0.4}),
    }
    sens = operator_sensitivity(summaries, seed=0, n_permutations=100)
    t = sens.table.set_index("method")
    assert np.isnan(t.loc["ig", "rank_gate"]) and np.isnan(t.loc["ig", "largest_swing"])
    assert t.loc["laya", "n_methods_ranked"] == 3 and sens.kendall_w == pytest.approx(1.0)
    assert sens.warning is None and sens.best == {"gate": "laya", "zero": "laya"}
