"""laya_eval.stats against scipy, brute-force enumeration, slow reference loops and hand-worked values."""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from scipy import stats as sps

from laya_eval.engine.methods import METHODS, MethodContext
from laya_eval.errors import ConfigError
from laya_eval.stats.metrics import spearman_per_sample
from laya_eval.engine.removals import leave_one_out_masks, removal_effects
from laya_eval.stats import null as null_module
from laya_eval.stats import (
    COMPARISON_COLUMNS,
    across_seeds,
    compare_methods,
    faithfulness_p_value,
    holm_adjust,
    identical_rankings,
    paired_comparison,
    seed_ranks,
    spearman_null,
    tie_effects,
)
from laya_eval.models.trace import trace

# ------------------------------------------------------------------------------------------ paired tests


def test_wilcoxon_equals_scipy_on_the_defined_pairs():
    rng = np.random.default_rng(1)
    a = rng.normal(0.2, 1, 60).round(1)  # rounding: ties and zero differences, as rho over few layers gives
    b = rng.normal(0.0, 1, 60).round(1)
    a[[3, 17]] = np.nan
    b[[5]] = np.nan
    keep = ~(np.isnan(a) | np.isnan(b))
    want = sps.wilcoxon(a[keep], b[keep], zero_method="zsplit")
    got = paired_comparison(a, b, n_resamples=0)
    assert got.n == 57
    assert got.p_value == pytest.approx(want.pvalue, rel=1e-12)
    assert got.wilcoxon_statistic == pytest.approx(want.statistic)
    assert got.mean_difference == pytest.approx(np.mean(a[keep] - b[keep]))


@pytest.mark.parametrize("n", [1, 2, 5, 9, 13, 14])
def test_wilcoxon_on_few_pairs_with_ties_or_zeros_is_scipys_to_the_bit(n):
    # scipy enumerates all 2**n sign flips here (n <= 13); laya-eval runs the same permutation test vectorised
    rng = np.random.default_rng(n)
    for d in (rng.integers(-3, 4, n) * 0.5, rng.normal(size=n).round(1), rng.choice([0.0, 0.25, -0.5, 1.0], n)):
        if not np.any(d != 0):
            continue
        want = sps.wilcoxon(d, zero_method="zsplit")
        got = paired_comparison(d, np.zeros(n), n_resamples=0)
        assert (got.wilcoxon_statistic, got.p_value) == (float(want.statistic), float(want.pvalue)), d


def test_all_zero_differences_give_p_one_without_warnings():
    a = np.array([0.5, 1.0, -0.5, 1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = paired_comparison(a, a.copy(), n_resamples=100)
    # every rank split half to each sign: statistic = n(n+1)/4 = 4*5/4
    assert (got.p_value, got.wilcoxon_statistic, got.rank_biserial, got.mean_difference) == (1.0, 5.0, 0.0, 0.0)


def test_rank_biserial_by_hand():
    # d = a - b = (0.5, 0, 1.5, -1): |d| ranks 2, 1, 4, 3; R+ = 2 + 4 = 6, R- = 3, total n(n+1)/2 = 10
    got = paired_comparison(np.array([1.0, 0.5, 2.0, 0.0]), np.array([0.5, 0.5, 0.5, 1.0]), n_resamples=0)
    assert got.rank_biserial == pytest.approx(0.3)
    every_pair_better = paired_comparison(np.arange(5.0) + 1, np.zeros(5), n_resamples=0)
    assert every_pair_better.rank_biserial == 1.0


def test_rank_biserial_without_zeros_is_the_classic_formula():
    # Without zeros, r = 1 - 2 R- / (n(n+1)/2) with R- the rank sum of negative differences (Kerby 2014)
    rng = np.random.default_rng(4)
    d = rng.normal(0.3, 1, 40)
    ranks = sps.rankdata(np.abs(d))
    classic = 1 - 2 * ranks[d < 0].sum() / (40 * 41 / 2)
    assert paired_comparison(d, np.zeros(40), n_resamples=0).rank_biserial == pytest.approx(classic)


def test_bootstrap_interval_matches_the_normal_approximation():
    # n = 4000 differences ~ N(0.3, 1): the 95% interval of their mean is close to mean +- 1.96 sd / sqrt(n)
    rng = np.random.default_rng(2)
    a, b = rng.normal(0.3, 1, 4000), np.zeros(4000)
    got = paired_comparison(a, b, n_resamples=2000, seed=5)
    half = 1.96 * a.std(ddof=1) / math.sqrt(4000)
    assert got.ci_low == pytest.approx(a.mean() - half, abs=0.15 * half)
    assert got.ci_high == pytest.approx(a.mean() + half, abs=0.15 * half)
    again = paired_comparison(a, b, n_resamples=2000, seed=5)
    assert (again.ci_low, again.ci_high) == (got.ci_low, got.ci_high)


def test_paired_comparison_rejects_unequal_vectors():
    with pytest.raises(ConfigError, match=r"equal length; got shapes \(3,\) and \(2,\)"):
        paired_comparison(np.zeros(3), np.zeros(2))


def test_no_defined_pair_gives_nan():
    got = paired_comparison(np.array([np.nan, 1.0]), np.array([0.0, np.nan]))
    assert got.n == 0 and math.isnan(got.p_value)


def test_holm_by_hand():
    # sorted: 0.005, 0.01, 0.03, 0.04 with m = 4 -> 4*0.005 = 0.02, 3*0.01 = 0.03, 2*0.03 = 0.06, 1*0.04 = 0.04;
    # running maximum -> 0.02, 0.03, 0.06, 0.06; back in input order:
    np.testing.assert_allclose(holm_adjust([0.01, 0.04, 0.03, 0.005]), [0.03, 0.06, 0.06, 0.02])
    np.testing.assert_allclose(holm_adjust([0.5, 0.6]), [1.0, 1.0])  # 2*0.5 capped at 1, monotone
    np.testing.assert_allclose(holm_adjust([np.nan, 0.01, 0.02]), [np.nan, 0.02, 0.02])  # NaN not counted in m


@settings(max_examples=100, deadline=None)
@given(arrays(np.float64, st.integers(1, 12), elements=st.floats(0, 1)))
def test_holm_is_monotone_bounded_and_at_least_p(p):
    adj = holm_adjust(p)
    assert np.all(adj >= p - 1e-15) and np.all(adj <= 1)
    order = np.argsort(p, kind="stable")
    assert np.all(np.diff(adj[order]) >= -1e-15)


def _per_sample(rng, n=80):
    rows = []
    truth = {
        "laya": rng.choice([-1, -0.5, 0.5, 1], n, p=[0.05, 0.15, 0.4, 0.4]),
        "ig": rng.choice([-1, -0.5, 0.5, 1], n, p=[0.1, 0.2, 0.4, 0.3]),
        "random": rng.choice([-1, -0.5, 0.5, 1], n, p=[1 / 6, 2 / 6, 2 / 6, 1 / 6]),
    }
    truth["ig"][:4] = np.nan
    deletion = {m: rng.uniform(0, 0.5, n).round(2) for m in truth}
    for m in truth:
        for s in range(n):
            rows.append({"sample": s, "method": m, "spearman": truth[m][s], "deletion_at_1": deletion[m][s]})
    return pd.DataFrame(rows).sample(frac=1, random_state=0), truth, deletion  # shuffled: alignment by sample


def test_compare_methods_every_pair_both_metrics_against_scipy():
    table, truth, deletion = _per_sample(np.random.default_rng(3))
    got = compare_methods(table, n_resamples=200, seed=0, methods=["laya", "ig", "random"])
    assert list(got.columns) == COMPARISON_COLUMNS
    assert list(zip(got.metric, got.method_a, got.method_b)) == [
        (metric, a, b)
        for metric in ("faithfulness", "deletion_at_1")
        for a, b in [("laya", "ig"), ("laya", "random"), ("ig", "random")]
    ]
    for row in got.itertuples():
        source = truth if row.metric == "faithfulness" else deletion
        a, b = source[row.method_a], source[row.method_b]
        keep = ~(np.isnan(a) | np.isnan(b))
        assert row.n == keep.sum()
        assert row.mean_difference == pytest.approx(np.mean(a[keep] - b[keep]))
        assert row.p_value == pytest.approx(sps.wilcoxon(a[keep], b[keep], zero_method="zsplit").pvalue)
    for metric in ("faithfulness", "deletion_at_1"):  # one Holm family per metric: 3 pairs each
        family = got[got.metric == metric]
        np.testing.assert_allclose(family.p_holm, _hand_holm(family.p_value.to_numpy()))
        assert (family.family_size == 3).all() and (family.reference == "all").all()
    assert got.n.tolist() == [76, 80, 76, 80, 80, 80]


def _hand_holm(p):
    """Holm's step-down written out from its definition: the k-th smallest of m p-values times (m - k + 1), a
    running maximum in that order, capped at 1."""
    out = np.empty(len(p))
    running = 0.0
    for k, i in enumerate(sorted(range(len(p)), key=lambda i: p[i])):
        running = max(running, min(1.0, (len(p) - k) * p[i]))
        out[i] = running
    return out


def _six_methods(rng, n=60):
    """Per-sample rho of six methods: contribution best, laya a little below it, the others spread out."""
    shift = {"contribution": 0.4, "laya": 0.3, "static": 0.0, "ig": 0.35, "gradcam": 0.1, "random": -0.1}
    rows = []
    for m, mu in shift.items():
        rho = np.clip(rng.normal(mu, 0.4, n), -1, 1).round(2)
        dele = rng.uniform(0, 0.5, n).round(3)
        rows += [{"sample": s, "method": m, "spearman": rho[s], "deletion_at_1": dele[s]} for s in range(n)]
    return pd.DataFrame(rows)


def test_compare_methods_reference_family_against_a_hand_holm():
    table = _six_methods(np.random.default_rng(11))
    methods = ["contribution", "laya", "static", "ig", "gradcam", "random"]
    got = compare_methods(table, n_resamples=0, methods=methods, reference="contribution")
    # the family of a metric: contribution against each of the other five methods, nothing else
    assert sorted(zip(got.metric, got.method_a, got.method_b)) == sorted(
        (metric, "contribution", m) for metric in ("faithfulness", "deletion_at_1") for m in methods[1:]
    )
    for metric, column in (("faithfulness", "spearman"), ("deletion_at_1", "deletion_at_1")):
        wide = table.pivot(index="sample", columns="method", values=column)
        family = got[got.metric == metric]
        raw = [sps.wilcoxon(wide["contribution"], wide[b], zero_method="zsplit").pvalue for b in family.method_b]
        np.testing.assert_allclose(family.p_value, raw, rtol=1e-10)
        np.testing.assert_allclose(family.p_holm, _hand_holm(np.array(raw)), rtol=1e-10)
        assert (family.family_size == 5).all() and (family.reference == "contribution").all()
        assert family.significant.tolist() == [bool(p < 0.05) for p in _hand_holm(np.array(raw))]


def test_the_reference_family_does_not_grow_with_unrelated_methods():
    table = _six_methods(np.random.default_rng(11))
    few = compare_methods(
        table, n_resamples=200, seed=3, methods=["contribution", "laya", "static"], reference="contribution"
    )
    many = compare_methods(
        table,
        n_resamples=200,
        seed=3,
        methods=["contribution", "laya", "static", "ig", "gradcam", "random"],
        reference="contribution",
    )
    key = ["metric", "method_a", "method_b"]
    row = ("faithfulness", "contribution", "laya")
    a, b = few.set_index(key).loc[row], many.set_index(key).loc[row]
    assert a.p_value == b.p_value and a.ci_low == b.ci_low and a.ci_high == b.ci_high
    # 2 then 5 tests of contribution per metric; all pairs would have been 3 then 15
    assert (a.family_size, b.family_size) == (2, 5)
    assert a.p_holm == pytest.approx(_hand_holm(few[few.metric == "faithfulness"].p_value.to_numpy())[0])
    assert b.p_holm == pytest.approx(
        _hand_holm(many[many.metric == "faithfulness"].p_value.to_numpy())[
            list(many[many.metric == "faithfulness"].method_b).index("laya")
        ]
    )
    # the same comparison under the previous rule (Holm over every pair of both metrics) would read 30 tests
    assert len(compare_methods(table, n_resamples=0, methods=list(pd.unique(table.method)))) == 30


def test_compare_methods_says_where_interval_and_holm_disagree():
    table = _six_methods(np.random.default_rng(11))
    got = compare_methods(table, n_resamples=500, seed=0, reference="all")
    for r in got.itertuples():
        excludes = r.ci_low > 0 or r.ci_high < 0
        assert r.significant == (r.p_holm < 0.05)
        if excludes != r.significant:
            assert f"Holm over {r.family_size} tests" in r.test_note and "interval" in r.test_note
        else:
            assert r.test_note == ""


def test_compare_methods_refuses_an_unknown_reference():
    table = _six_methods(np.random.default_rng(11))
    with pytest.raises(ConfigError, match=r"^reference must be one of \{.*, all\}; got 'gi'\.$"):
        compare_methods(table, reference="gi")


def test_compare_methods_rows_do_not_depend_on_the_other_methods():
    table, _, _ = _per_sample(np.random.default_rng(3))
    full = compare_methods(table, n_resamples=200, seed=7, methods=["laya", "ig", "random"])
    pair = compare_methods(table[table.method != "ig"], n_resamples=200, seed=7, methods=["laya", "random"])
    cols = ["mean_difference", "ci_low", "ci_high", "p_value"]
    want = full[(full.method_a == "laya") & (full.method_b == "random")][cols].to_numpy()
    np.testing.assert_array_equal(pair[cols].to_numpy(), want)


def test_compare_methods_names_unknown_methods():
    table, _, _ = _per_sample(np.random.default_rng(3))
    with pytest.raises(ConfigError, match=r"one row per \(sample, method\); got duplicates"):
        compare_methods(pd.concat([table, table.iloc[:1]]))
    with pytest.raises(
        ConfigError, match=r"^methods \(of the per-sample table\) must be one of \{\w+, \w+, \w+\}; got 'gi'\.$"
    ):
        compare_methods(table, methods=["laya", "gi"])


# --------------------------------------------------------------------------------------- Spearman null


def test_exact_null_for_three_layers():
    null = spearman_null(np.array([0.3, 0.1, 0.2]))
    assert dict(zip(null.values.round(12), null.probs.round(12))) == {
        -1.0: round(1 / 6, 12),
        -0.5: round(2 / 6, 12),
        0.5: round(2 / 6, 12),
        1.0: round(1 / 6, 12),
    }


@pytest.mark.parametrize(
    "effects",
    [[0.4, 0.1, 0.3, 0.2], [0.4, 0.4, 0.3, 0.2], [0.4, 0.4, 0.1, 0.1], [0.2, 0.2, 0.2, 0.9], [0.1, 0.5, 0.5, 0.5]],
)
def test_exact_null_for_four_layers_matches_enumeration_with_scipy(effects):
    rhos = [sps.spearmanr(p, effects).statistic for p in itertools.permutations(range(4))]
    values, counts = np.unique(np.round(rhos, 10), return_counts=True)
    null = spearman_null(np.array(effects))
    np.testing.assert_allclose(null.values, values, atol=1e-10)
    np.testing.assert_allclose(null.probs, counts / 24)


def _brute_force_p(effects: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every combination of one ranking per sample: the null sums of rho (scipy) and their probabilities."""
    per_sample = [[sps.spearmanr(p, e).statistic for p in itertools.permutations(range(e.size))] for e in effects]
    sums = np.array([sum(c) for c in itertools.product(*per_sample)])
    return sums, np.full(sums.size, 1 / sums.size)


@pytest.mark.parametrize(
    "effects",
    [
        [[0.1, 0.2, 0.3], [0.3, 0.2, 0.1], [0.5, 0.1, 0.2]],  # one tie pattern
        [[0.1, 0.2, 0.3], [0.2, 0.2, 0.3], [0.1, 0.3, 0.3], [0.9, 0.9, 0.1]],  # three patterns, mixed lattices
        [[0.1, 0.2, 0.3, 0.4], [0.2, 0.2, 0.3, 0.4], [0.2, 0.2, 0.4, 0.4]],
    ],
)
def test_p_value_equals_brute_force_enumeration(effects):
    effects = np.array(effects)
    sums, probs = _brute_force_p(effects)
    rng = np.random.default_rng(0)
    for _ in range(6):
        scores = rng.permutation(np.tile(np.arange(effects.shape[1]), (effects.shape[0], 1)).T).T
        rho = spearman_per_sample(scores, effects)
        want = probs[sums >= rho.sum() - 1e-9].sum()
        got = faithfulness_p_value(rho, effects)
        # exact for one tie pattern; an upper bound within 1e-4 (relative) across patterns (common grid)
        assert want - 1e-12 <= got <= want * (1 + 1e-4) + 1e-12


@pytest.mark.parametrize("direct_max", [0, 2**22], ids=["fft", "direct"])
def test_both_convolution_routes_of_the_common_grid_equal_numpy(direct_max, monkeypatch):
    # sparse non-negative bins, as binned group sums are; np.convolve sums every product directly
    monkeypatch.setattr(null_module, "_DIRECT_MAX_PRODUCTS", direct_max)
    rng = np.random.default_rng(3)
    for nx, ny in ((1, 1), (7, 300), (2000, 5)):
        x, y = np.zeros(5000), np.zeros(700)
        x[rng.choice(5000, nx, replace=False)] = rng.random(nx)
        y[rng.choice(700, ny, replace=False)] = rng.random(ny)
        np.testing.assert_allclose(null_module._convolve(x, y), np.convolve(x, y), rtol=0, atol=1e-12)
    # and the p-value across tie patterns (mixed lattices) through the FFT route against enumeration
    effects = np.array([[0.1, 0.2, 0.3, 0.4], [0.2, 0.2, 0.3, 0.4], [0.2, 0.2, 0.4, 0.4]])
    sums, probs = _brute_force_p(effects)
    rho = spearman_per_sample(np.array([[1, 2, 3, 4], [2, 1, 3, 4], [1, 2, 4, 3]]), effects)
    want = probs[sums >= rho.sum() - 1e-9].sum()
    assert want - 1e-12 <= faithfulness_p_value(rho, effects) <= want * (1 + 1e-4) + 1e-12


def test_tiny_p_values_keep_their_relative_accuracy():
    # 40 untied samples, L = 3: 2 rho = k in {-2, -1, 1, 2} with counts {1, 2, 2, 1} of 6, so the number of
    # ways to reach a sum of k is a coefficient of (x^-2 + 2x^-1 + 2x + x^2)^40: exact integers (Python ints).
    coef = {0: 1}
    for _ in range(40):
        nxt: dict[int, int] = {}
        for k, c in coef.items():
            for step, w in ((-2, 1), (-1, 2), (1, 2), (2, 1)):
                nxt[k + step] = nxt.get(k + step, 0) + c * w
        coef = nxt
    effects = np.tile([0.1, 0.2, 0.3], (40, 1))
    for target in (40, 60, 76):  # sums of 2 rho: p from about 1e-4 down to about 1e-27
        want = sum(c for k, c in coef.items() if k >= target) / 6**40
        rho = np.full(40, 0.5)
        rho[: (target - 40)] = 1.0  # 2 rho sums to 40 + (target - 40) = target
        assert faithfulness_p_value(rho, effects) == pytest.approx(want, rel=1e-6, abs=0)


def test_p_value_by_hand_two_samples():
    # untied effects: P(rho = 1) = 1/6; tied (0.2, 0.2, 0.3): rho in {-sqrt(3)/2, 0, sqrt(3)/2} each 1/3;
    # both at their maximum: 1/6 * 1/3 = 1/18; the untied one alone at 1 of 1: 1/6
    effects = np.array([[0.1, 0.2, 0.3], [0.2, 0.2, 0.3]])
    assert faithfulness_p_value(np.array([1.0, math.sqrt(3) / 2]), effects) == pytest.approx(1 / 18)
    assert faithfulness_p_value(np.array([1.0, np.nan]), effects) == pytest.approx(1 / 6)
    assert faithfulness_p_value(np.array([-1.0]), effects[:1]) == pytest.approx(1.0)


def test_permutation_route_agrees_with_the_exact_one():
    rng = np.random.default_rng(6)
    effects = rng.integers(0, 3, (40, 4)).astype(float)  # many ties, some constant rows (excluded)
    noise = rng.random((40, 4))
    exact_p = []
    for strength in (0.0, 0.05, 0.1, 0.2):
        rho = spearman_per_sample(noise + strength * effects, effects)
        exact = faithfulness_p_value(rho, effects)
        estimate = faithfulness_p_value(rho, effects, exact_max_layers=3, n_resamples=20000, seed=1)
        assert estimate == pytest.approx(exact, abs=4 * math.sqrt(exact * (1 - exact) / 20000) + 1e-4)
        exact_p.append(exact)
    assert min(exact_p) < 0.01 and max(exact_p) > 0.2  # the comparison covers small and large p


def test_constant_effects_have_no_null():
    with pytest.raises(ConfigError, match="constant"):
        spearman_null(np.array([0.2, 0.2, 0.2]))
    assert math.isnan(faithfulness_p_value(np.array([np.nan]), np.array([[0.2, 0.2, 0.2]])))


@pytest.fixture(scope="module")
def laya_effects(digits_models, digits):
    model = digits_models["laya"]
    tr = trace(model, digits["test"].x)
    effects = removal_effects(tr, model, leave_one_out_masks(tr.n_layers)).numpy().astype(np.float64)
    ctx = MethodContext()
    contribution = METHODS["contribution"].fn(tr, model, target=tr.pred, context=ctx).numpy()
    return tie_effects(effects).effects, contribution


def test_p_value_of_random_scores_is_uniform_over_seeds(laya_effects):
    effects, _ = laya_effects
    p = []
    for seed in range(200):
        scores = np.random.default_rng(seed).random(effects.shape)
        p.append(faithfulness_p_value(spearman_per_sample(scores, effects), effects))
    p = np.array(p)
    assert p[:20].min() > 0.01  # 20 seeds, none below 0.01
    assert sps.kstest(p, "uniform").pvalue > 0.01
    assert np.mean(p <= 0.05) <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 200)


def test_p_value_of_contribution_on_a_trained_laya_model_is_tiny(laya_effects):
    effects, contribution = laya_effects
    rho = spearman_per_sample(contribution, effects)
    assert np.nanmean(rho) > 0.3
    assert faithfulness_p_value(rho, effects) < 1e-6


def test_p_value_of_perfectly_aligned_scores():
    effects = np.random.default_rng(0).random((200, 5))
    rho = spearman_per_sample(effects * 2, effects)
    assert faithfulness_p_value(rho, effects) < 1e-6
    assert faithfulness_p_value(-rho, effects) == pytest.approx(1.0)


# ---------------------------------------------------------------------------------------------- ties


def _slow_tie(row: np.ndarray, rtol: float) -> tuple[list[float], int]:
    """Single linkage one value at a time: walk the sorted values, join a neighbour within the tolerance."""
    tol = rtol * max(abs(v) for v in row)
    order = sorted(range(len(row)), key=lambda i: row[i])
    groups = [[order[0]]]
    for prev, cur in itertools.pairwise(order):
        if row[cur] - row[prev] <= tol:
            groups[-1].append(cur)
        else:
            groups.append([cur])
    out = list(row)
    for g in groups:
        if len(g) > 1:
            for i in g:
                out[i] = sum(row[j] for j in g) / len(g)
    return out, sum(len(g) for g in groups if len(g) > 1)


@settings(max_examples=200, deadline=None)
@given(
    arrays(
        np.float64, st.tuples(st.integers(1, 6), st.integers(2, 7)), elements=st.integers(-40, 40).map(lambda v: v / 40)
    ),
    st.sampled_from([0.0, 0.02, 0.1, 0.3]),
)
def test_tie_effects_equals_a_slow_single_linkage_loop(effects, rtol):
    got = tie_effects(effects, rtol=rtol)
    for i, row in enumerate(effects):
        want, n_tied = _slow_tie(list(row), rtol)
        np.testing.assert_allclose(got.effects[i], want, rtol=1e-12, atol=1e-15)
        assert got.n_tied_effects[i] == n_tied
    tol = rtol * np.abs(effects).max(1, keepdims=True)
    np.testing.assert_array_equal(got.negligible, np.abs(effects) <= tol)


def test_tied_effects_get_the_average_rank_of_their_group():
    # 0.999, 0.9995, 1.0 chain within 6e-4 * 1.0: one group of three, mean 0.9995; 0.5 stays alone
    effects = np.array([[1.0, 0.9995, 0.5, 0.999]])
    got = tie_effects(effects, rtol=6e-4)
    np.testing.assert_allclose(got.effects, [[0.9995, 0.9995, 0.5, 0.9995]])
    assert got.n_tied_effects.tolist() == [3]
    # ranks with the group tied: (3, 3, 1, 3) -> scipy on the tied vector by hand
    scores = np.array([[0.1, 0.9, 0.2, 0.4]])
    want = sps.spearmanr(scores[0], [3, 3, 1, 3]).statistic
    assert spearman_per_sample(scores, got.effects)[0] == pytest.approx(want)


def test_negligible_and_all_zero_effects():
    # tolerance 1e-4 * 1.0: 1e-5 and -2e-5 are negligible, and tied (3e-5 apart)
    got = tie_effects(np.array([[1.0, 1e-5, -2e-5, 0.5], [0.0, 0.0, 0.0, 0.0]]), rtol=1e-4)
    assert got.negligible.tolist() == [[False, True, True, False], [True] * 4]
    assert got.n_tied_effects.tolist() == [2, 4]
    assert got.n_effect_ties == 2 and got.share_negligible_effects == pytest.approx(6 / 8)
    exact = tie_effects(np.array([[0.3, 0.1, 0.3]]), rtol=0.0)
    assert exact.n_tied_effects.tolist() == [2]


def test_tie_effects_rejects_bad_input():
    with pytest.raises(ConfigError, match="rtol must be a number >= 0; got -1"):
        tie_effects(np.zeros((2, 3)), rtol=-1)
    with pytest.raises(ConfigError, match=r"2-d array \(samples, layers\); got shape \(3,\)"):
        tie_effects(np.zeros(3))


def test_identical_rankings_flags_a_collapsed_head():
    rng = np.random.default_rng(0)
    alpha = rng.random((300, 3))
    scores = {"laya": alpha, "contribution": 3 * alpha + 1, "ig": np.exp(alpha), "random": rng.random((300, 3))}
    got = identical_rankings(scores)
    assert got.identical and got.share_identical == 1.0 and got.methods == ("laya", "contribution", "ig")
    scores["ig"] = scores["ig"].copy()
    scores["ig"][:6] = scores["ig"][:6, ::-1]  # 2% of the samples ranked differently
    got = identical_rankings(scores)
    assert not got.identical and got.share_identical == pytest.approx(294 / 300)
    assert identical_rankings(scores, min_share=0.95).identical
    assert not identical_rankings({"laya": alpha, "random": alpha}).identical  # one real method: nothing to compare


# ---------------------------------------------------------------------------------------- across seeds


def _summaries():
    # faithfulness per seed (rows) and method; laya best on every seed, ig second except seed 3
    values = {
        "laya": [0.90, 0.85, 0.88, 0.80, 0.86],
        "ig": [0.70, 0.72, 0.69, 0.81, 0.75],
        "random": [0.01, -0.02, 0.00, 0.03, -0.01],
    }
    return pd.DataFrame(
        [{"checkpoint": f"seed{s}.pt", "method": m, "faithfulness": v[s]} for m, v in values.items() for s in range(5)]
    ), values


def test_across_seeds_by_hand_and_against_scipy():
    table, values = _summaries()
    got = across_seeds(table).set_index("method")
    assert got.index.tolist() == ["laya", "ig", "random"] and set(got.reference) == {"laya"}
    for m, v in values.items():
        assert got.loc[m, "mean"] == pytest.approx(np.mean(v))
        assert got.loc[m, "std"] == pytest.approx(np.std(v, ddof=1))
    # ig - laya: -0.2, -0.13, -0.19, +0.01, -0.11: ranks of |d| 5, 3, 4, 1, 2 -> R+ = 1, exact two-sided p
    assert got.loc["ig", "wilcoxon_statistic"] == 1.0
    assert got.loc["ig", "p_value"] == pytest.approx(sps.wilcoxon(values["ig"], values["laya"]).pvalue)
    assert got.loc["random", "p_value"] == pytest.approx(2 / 32)  # all five below: the smallest p of 5 runs
    # ranks: laya 1 everywhere; ig 2 except seed 3 where 0.81 > 0.80 -> 1
    assert got.loc["laya", "mean_rank"] == pytest.approx((1 + 1 + 1 + 2 + 1) / 5)
    assert got.loc["ig", "mean_rank"] == pytest.approx((2 + 2 + 2 + 1 + 2) / 5)
    assert math.isnan(got.loc["laya", "p_value"])
    np.testing.assert_allclose(got.p_holm.dropna(), holm_adjust(got.p_value.dropna().to_numpy()))


def test_seed_ranks_per_run():
    table, _ = _summaries()
    ranks = seed_ranks(table)
    assert ranks.columns.tolist() == ["checkpoint", "method", "faithfulness", "rank"]
    seed3 = ranks[ranks.checkpoint == "seed3.pt"].set_index("method")["rank"].to_dict()
    assert seed3 == {"ig": 1.0, "laya": 2.0, "random": 3.0}


def test_across_seeds_needs_one_row_per_run_and_method():
    table, _ = _summaries()
    with pytest.raises(
        ConfigError, match=r"one row per \(checkpoint, method\); got several for \['seed0.pt', 'laya'\]"
    ):
        across_seeds(pd.concat([table, table.iloc[:1]]))
    with pytest.raises(ConfigError, match=r"missing \['seed'\]"):
        across_seeds(table, run="seed")
