"""Intervals only where they exist: enough resamples, five defined samples, the estimate inside; else n/a."""

from __future__ import annotations

import math
import re
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from laya_eval.catalog import MIN_BOOTSTRAP_RESAMPLES, MIN_INTERVAL_SAMPLES
from laya_eval.sanity_checks.similarity import attribution_similarity
from laya_eval.stats.intervals import (
    EXCLUDES_ESTIMATE,
    IntervalNotes,
    format_estimate,
    format_interval,
    percentile_interval,
)
from laya_eval.stats.metrics import bootstrap_mean
from laya_eval.stats.paired import paired_comparison
from tests.cli_helpers import run

RESAMPLE_COUNTS = (0, 1, 2, 5, 50, 99, 100, 101, 250)


def _samples(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    if kind == "skewed":  # one large value among many small: the hardest case for a percentile interval
        x = np.zeros(n)
        x[: max(1, n // 5)] = 10.0
        return x
    if kind == "ranks":  # per-sample rho of L = 3 takes few values
        return rng.choice([-1.0, -0.5, 0.5, 1.0], size=n)
    if kind == "with_nan":
        x = rng.normal(size=n)
        x[::3] = np.nan
        return x
    return rng.exponential(size=n)


def _reference_interval(defined: np.ndarray, n_resamples: int, seed) -> tuple[float, float]:
    """A slow loop over resamples with the same random stream, and the quantiles interpolated by hand."""
    rng = np.random.default_rng(seed)
    means = []
    for start in range(0, n_resamples, 100):
        rows = rng.integers(0, defined.size, size=(min(100, n_resamples - start), defined.size))
        means += [sum(defined[i] for i in row) / defined.size for row in rows]
    s = sorted(means)

    def quantile(q):
        h = (len(s) - 1) * q
        lo = math.floor(h)
        return s[lo] + (h - lo) * (s[min(lo + 1, len(s) - 1)] - s[lo])

    return quantile(0.025), quantile(0.975)


@pytest.mark.parametrize("kind", ["skewed", "ranks", "with_nan", "exponential"])
def test_no_interval_excludes_its_estimate_over_small_n_and_resample_counts(kind):
    rng = np.random.default_rng(7)
    shown = missing = 0
    for n in range(0, 12):
        for n_resamples in RESAMPLE_COUNTS:
            for seed in range(3):
                values = _samples(kind, n, rng)
                iv = bootstrap_mean(values, n_resamples=n_resamples, seed=seed)
                defined = values[~np.isnan(values)]
                if defined.size < MIN_INTERVAL_SAMPLES or n_resamples < MIN_BOOTSTRAP_RESAMPLES:
                    assert math.isnan(iv.low) and math.isnan(iv.high) and iv.note, (n, n_resamples, iv)
                    missing += 1
                    continue
                if math.isnan(iv.low):
                    assert iv.note == EXCLUDES_ESTIMATE
                    missing += 1
                    continue
                assert iv.note == ""
                assert iv.low <= iv.mean <= iv.high, (values, n_resamples, iv)
                low, high = _reference_interval(defined, n_resamples, seed)
                assert iv.low == pytest.approx(min(low, iv.mean), abs=1e-12)
                assert iv.high == pytest.approx(max(high, iv.mean), abs=1e-12)
                shown += 1
    # 12 sizes x 9 counts x 3 seeds; the counts below 100 and n < 5 give none.
    assert shown + missing == 12 * len(RESAMPLE_COUNTS) * 3
    assert shown > 0 and missing >= 12 * 6 * 3 + 5 * 3 * 3


def test_reasons_in_words():
    assert bootstrap_mean(np.array([0.5]), n_resamples=1000).note == "fewer than 5 defined samples"
    # two and four defined samples (the NaN is not counted): no interval either
    for values in ([0.5, 1.0], [-0.5, -0.5], [0.5, 1.0, np.nan, -0.5, 0.5]):
        iv = bootstrap_mean(np.array(values), n_resamples=200)
        assert math.isnan(iv.low) and math.isnan(iv.high) and iv.note == "fewer than 5 defined samples", values
    assert bootstrap_mean(np.array([0.5, 1.0, -0.5, 0.5, 0.0]), n_resamples=200).note == ""
    assert bootstrap_mean(np.array([np.nan, np.nan]), n_resamples=1000).note == "no defined samples"
    assert math.isnan(bootstrap_mean(np.array([np.nan]), n_resamples=1000).mean)
    one = bootstrap_mean(np.arange(5.0), n_resamples=1)
    assert one.note == "1 bootstrap resample, fewer than the 100 an interval needs"
    assert one.mean == 2.0 and math.isnan(one.low) and math.isnan(one.high)
    assert bootstrap_mean(np.arange(5.0), n_resamples=0).note.startswith("0 bootstrap resamples")


def test_an_interval_that_misses_its_estimate_is_not_shown():
    # Every resampled statistic above the estimate: a percentile interval [2, 3] around 1 is not an interval of 1.
    assert percentile_interval(1.0, np.full(200, 2.0) + np.linspace(0, 1, 200), n_defined=10, n_resamples=200) == (
        pytest.approx(float("nan"), nan_ok=True),
        pytest.approx(float("nan"), nan_ok=True),
        EXCLUDES_ESTIMATE,
    )
    # Rounding of two computations of one value is not a miss: the interval is closed over it.
    low, high, note = percentile_interval(1.0, np.full(200, 1.0 - 1e-15), n_defined=10, n_resamples=200)
    assert (low, high, note) == (1.0 - 1e-15, 1.0, "")


def test_similarity_intervals_contain_their_estimate_or_are_missing():
    rng = np.random.default_rng(3)
    counted = 0
    for n in (1, 2, 4, 5, 8):
        for n_resamples in (0, 1, 99, 100, 300):
            for similarity in ("across_samples", "per_sample"):
                a = rng.normal(size=(n, 3))
                b = a + rng.normal(scale=0.7, size=(n, 3))
                iv = attribution_similarity(a, b, similarity=similarity, n_resamples=n_resamples, seed=1)
                if math.isnan(iv.low):
                    assert iv.note and math.isnan(iv.high)
                    if n < MIN_INTERVAL_SAMPLES or n_resamples < 100:
                        assert iv.note != EXCLUDES_ESTIMATE
                else:
                    assert n >= MIN_INTERVAL_SAMPLES and n_resamples >= 100 and iv.low <= iv.mean <= iv.high
                counted += 1
    assert counted == 5 * 5 * 2


def test_paired_comparison_carries_the_reason():
    a, b = np.array([1.0, 0.5, 1.0, 0.0, 0.5]), np.array([0.5, 0.5, -0.5, 0.0, 0.0])
    r = paired_comparison(a, b, n_resamples=10)
    assert math.isnan(r.ci_low) and r.ci_note.startswith("10 bootstrap resamples")
    assert r.mean_difference == pytest.approx(2.5 / 5)
    r = paired_comparison(a[:3], b[:3], n_resamples=200)
    assert math.isnan(r.ci_low) and math.isnan(r.ci_high) and r.ci_note == "fewer than 5 defined samples"
    assert r.mean_difference == pytest.approx(2 / 3)


def test_formatting_says_undefined_and_n_a():
    assert format_estimate(float("nan")) == "undefined"
    assert format_estimate(None) == "undefined"
    assert format_estimate(0.25) == "+0.2500"
    assert (
        format_interval(float("nan"), float("nan"), "fewer than 5 defined samples")
        == "[n/a: fewer than 5 defined samples]"
    )
    assert format_interval(0.1, 0.2) == "[+0.100, +0.200]"
    assert format_interval(float("nan"), float("nan"), float("nan")) == "[n/a: no interval recorded]"
    notes = IntervalNotes()
    assert [notes.label("a"), notes.label("b"), notes.label("a")] == ["n/a", "n/a 2", "n/a"]
    assert notes.lines() == ["n/a: a", "n/a 2: b"]


def test_sanity_printout_of_a_static_method_says_undefined():
    from laya_eval_cli.commands.sanity import _table

    nan = float("nan")
    casc = pd.DataFrame(
        {
            "step": [1],
            "method": ["static"],
            "similarity": [nan],
            "similarity_ci_low": [nan],
            "similarity_ci_high": [nan],
            "similarity_ci_note": ["no layer where both attributions vary across samples"],
        }
    )
    result = SimpleNamespace(
        randomisation=casc,
        data_randomisation=casc,
        roar_agreement=pd.DataFrame(
            {"method": ["static"], "spearman": [0.5], "ci_low": [0.1], "ci_high": [0.9], "ci_note": [""]}
        ),
    )
    text = _table(result)
    assert "nan" not in text.lower().replace("n/a", "")
    line = text.splitlines()[1]
    assert line.split()[:3] == ["static", "undefined", "[n/a]"], text
    assert "[+0.10, +0.90]" in line
    assert text.splitlines()[-1] == "n/a: no layer where both attributions vary across samples"


@pytest.mark.parametrize(
    "args, reason",
    [
        (("--limit", 40, "--bootstrap", 1), "1 bootstrap resample, fewer than the 100 an interval needs"),
        (("--limit", 40, "--bootstrap", 0), "0 bootstrap resamples, fewer than the 100 an interval needs"),
        (("--limit", 1, "--bootstrap", 200), "fewer than 5 defined samples"),
        (("--limit", 2, "--bootstrap", 200), "fewer than 5 defined samples"),
        (("--limit", 4, "--bootstrap", 200), "fewer than 5 defined samples"),
    ],
)
def test_faithfulness_prints_n_a_and_writes_empty_interval_columns(digits_checkpoints, tmp_path, args, reason):
    out = tmp_path / "out"
    result = run(
        "faithfulness",
        digits_checkpoints["laya"],
        "--data",
        "digits",
        "--methods",
        "laya,random",
        *args,
        "--out",
        out,
        "--quiet",
    )
    assert result.exit_code == 0, result.output
    rows = [line for line in result.output.splitlines() if line.startswith(("laya ", "random "))]
    assert len(rows) == 2 and all(line.count("[n/a]") == 2 for line in rows), result.output
    assert f"n/a: {reason}" in result.output.splitlines()
    assert "nan" not in result.output
    summary = pd.read_csv(out / "summary.csv", keep_default_na=False)
    for metric in ("faithfulness", "deletion_at_1"):
        assert (summary[f"{metric}_ci_low"] == "").all() and (summary[f"{metric}_ci_high"] == "").all()
        assert (summary[f"{metric}_ci_note"] == reason).all()
        assert (summary[metric] != "").all()
    report = run("report", out, "--out", tmp_path / "report", "--no-html", "--max-points", 10)
    assert report.exit_code == 0, report.output
    md = (tmp_path / "report" / "report.md").read_text()
    assert f"n/a ({reason})" in md and not re.search(r"\bnan\b", md.lower())  # a number printed as nan


def test_faithfulness_with_enough_resamples_prints_intervals_around_the_estimate(digits_checkpoints, tmp_path):
    out = tmp_path / "out"
    result = run(
        "faithfulness",
        digits_checkpoints["laya"],
        "--data",
        "digits",
        "--methods",
        "laya,random",
        "--limit",
        40,
        "--bootstrap",
        200,
        "--out",
        out,
        "--quiet",
    )
    assert result.exit_code == 0, result.output
    summary = pd.read_csv(out / "summary.csv")
    for metric in ("faithfulness", "deletion_at_1"):
        assert (summary[f"{metric}_ci_low"] <= summary[metric]).all()
        assert (summary[metric] <= summary[f"{metric}_ci_high"]).all()
        assert summary[f"{metric}_ci_note"].isna().all()  # "" written, read back as empty
    assert "n/a" not in result.output
