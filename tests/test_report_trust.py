"""The report's trust sections: statistics across seeds, the significance matrix, the sanity section.

Oracles: scipy's Wilcoxon signed-rank test and rankdata on the runs' own summary.csv / samples.csv,
Holm's step-down written out here, hand-built tables whose cells are worked out in comments, and the
verdict rule applied here to the sanity folder's own CSVs.
"""

from __future__ import annotations

import itertools
import json
import re

import matplotlib.text
import numpy as np
import pandas as pd
import pytest
import torch
from scipy import stats as sps

from laya_eval import figures as F
from laya_eval.errors import ResultsError
from laya_eval.engine.evaluation import EvalOptions, evaluate
from laya_eval.engine.outcome import write_evaluation
from laya_eval.reporting import load_inputs, load_run, load_sanity, sanity_table, significance_matrix
from laya_eval.reporting.sanity_verdicts import SanityRun
from laya_eval.reporting.significance import cell_text
from laya_eval.stats import min_wilcoxon_p, seed_comparisons
from laya_eval.training.trainer import TrainOptions, build_model, train_in_place
from tests.cli_helpers import assert_one_line_error, run
from tests.result_mutations import rehash
from tests.test_report import assert_plausible_image, md_tables, read_csv

LABEL_TO_METHOD = {label: name for name, label in F.METHOD_LABELS.items()}
SEEDS = (0, 1, 2, 3, 4)
METHODS = ("laya", "contribution", "ig", "random")


def f4(value) -> str:
    return "undefined" if pd.isna(value) else f"{value:.4f}"


def holm(p: np.ndarray) -> np.ndarray:
    """Holm's step-down, written out: sort, scale the k-th smallest by (m - k), running maximum, cap at 1."""
    order = np.argsort(p, kind="stable")
    out = np.empty_like(p)
    running = 0.0
    for k, i in enumerate(order):
        running = max(running, min(1.0, (len(p) - k) * p[i]))
        out[i] = running
    return out


def scipy_p(a: np.ndarray, b: np.ndarray) -> float:
    d = a - b
    return 1.0 if not np.any(d != 0) else float(sps.wilcoxon(a, b, zero_method="zsplit").pvalue)


# ------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def seed_dirs(digits, tmp_path_factory):
    """Five LAYA heads on digits trained with seeds 0..4 (different checkpoints), one faithfulness folder each."""
    from laya_eval.loading.checkpoints import save_checkpoint

    root = tmp_path_factory.mktemp("seeds")
    folders = []
    for s in SEEDS:
        torch.manual_seed(s)
        model = build_model(
            "mlp",
            "laya",
            digits["train"],
            backbone_kwargs={"widths": [64, 32, 16]},
            head_kwargs={"d_star": 16, "scorer_hidden": 16},
            seed=s,
        )
        train_in_place(model, digits["train"], digits["val"], TrainOptions(epochs=1, seed=s, batch_size=64))
        ckpt = save_checkpoint(model, root / f"digits-laya-seed{s}.pt")
        result = evaluate(ckpt, options=EvalOptions(methods=METHODS, limit=80, bootstrap=50, seed=0))
        write_evaluation(result, root / f"run{s}")
        folders.append(root / f"run{s}")
    return folders


@pytest.fixture(scope="module")
def seed_report(seed_dirs, tmp_path_factory):
    out = tmp_path_factory.mktemp("seed-report")
    result = run("report", *seed_dirs, "--out", out, "--max-points", 20, "--no-html")
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def sanity_dir(digits_checkpoints, digits, tmp_path_factory):
    """A small `laya-eval sanity` folder written by the library on the digits LAYA checkpoint."""
    import laya_eval
    from laya_eval.sanity_checks import SanityOptions

    options = SanityOptions(
        methods=("laya", "static", "contribution", "random"),
        roar_seeds=2,
        bootstrap=100,
        train=TrainOptions(epochs=3, seed=0, batch_size=64, patience=2),
    )
    out = tmp_path_factory.mktemp("sanity") / "sanity-digits"
    done = laya_eval.sanity(digits_checkpoints["laya"], digits, out=out, options=options, limit=150)
    assert done.meta["n"] == 150 and done.files[-1] == out / "manifest.json"
    return out


# ------------------------------------------------------------------------------------------ across seeds


def test_min_wilcoxon_p_is_scipys_smallest_exact_p():
    for n in range(1, 9):
        # every difference positive, distinct magnitudes: the most extreme sign pattern
        assert min_wilcoxon_p(n) == pytest.approx(sps.wilcoxon(np.arange(1.0, n + 1)).pvalue)
    assert min_wilcoxon_p(5) == 0.0625 and min_wilcoxon_p(6) == 0.03125


def test_seed_comparisons_every_pair_against_scipy():
    # faithfulness per run and method (five runs); deletion made up the same way
    values = {
        "laya": [0.90, 0.85, 0.88, 0.80, 0.86],
        "ig": [0.70, 0.72, 0.69, 0.81, 0.75],
        "random": [0.01, -0.02, 0.00, 0.03, -0.01],
    }
    rows = [
        {"run": f"seed{s}.pt", "method": m, "faithfulness": v[s], "deletion_at_1": v[s] / 2 + 0.1 * (s == 2)}
        for m, v in values.items()
        for s in range(5)
    ]
    table = pd.DataFrame(rows)
    got = seed_comparisons(table, run="run", n_resamples=0)
    wide = {
        metric: table.pivot(index="run", columns="method", values=metric)
        for metric in ("faithfulness", "deletion_at_1")
    }
    expected = []
    for metric in ("faithfulness", "deletion_at_1"):
        for a, b in itertools.combinations(values, 2):
            x, y = wide[metric][a].to_numpy(), wide[metric][b].to_numpy()
            expected.append((metric, a, b, np.mean(x - y), scipy_p(x, y)))
    assert [tuple(r) for r in got[["metric", "method_a", "method_b"]].to_numpy()] == [e[:3] for e in expected]
    np.testing.assert_allclose(got.mean_difference, [e[3] for e in expected], rtol=1e-12)
    np.testing.assert_allclose(got.p_value, [e[4] for e in expected], rtol=1e-12)
    for k in (0, 3):  # each metric's three pairs are one Holm family
        np.testing.assert_allclose(
            got.p_holm[k : k + 3], holm(np.array([e[4] for e in expected[k : k + 3]])), rtol=1e-12
        )
    assert (got.n == 5).all() and (got.family_size == 3).all()
    # laya above random on all five runs: the smallest p five runs allow
    assert got.set_index(["metric", "method_a", "method_b"]).loc[
        ("faithfulness", "laya", "random"), "p_value"
    ] == pytest.approx(0.0625)


def test_across_seeds_section_against_scipy(seed_dirs, seed_report):
    summaries = pd.concat([pd.read_csv(d / "summary.csv") for d in seed_dirs], ignore_index=True)
    summaries["run"] = [f"digits-laya-seed{s}.pt" for s in SEEDS for _ in METHODS]
    across = read_csv(seed_report / "across_seeds.csv")
    ranks = read_csv(seed_report / "seed_ranks.csv")
    assert set(across["group"]) == {"laya · digits · gate · head"}
    for metric in ("faithfulness", "deletion_at_1"):
        wide = summaries.pivot(index="run", columns="method", values=metric)
        mine = across[across.metric == metric].set_index("method")
        best = wide.mean().idxmax()
        assert (mine.reference == best).all() and mine.index[0] == best
        p = {}
        for m in METHODS:
            assert mine.loc[m, "mean"] == pytest.approx(wide[m].mean(), rel=1e-7)
            assert mine.loc[m, "std"] == pytest.approx(np.std(wide[m], ddof=1), rel=1e-6, abs=1e-12)
            if m != best:
                p[m] = scipy_p(wide[m].to_numpy(), wide[best].to_numpy())
                assert mine.loc[m, "p_value"] == pytest.approx(p[m], rel=1e-7)
        adjusted = dict(zip(p, holm(np.array(list(p.values())))))
        for m, value in adjusted.items():
            assert mine.loc[m, "p_holm"] == pytest.approx(value, rel=1e-7)
        # rank 1 = highest in its run, ties averaged: scipy's rankdata on the negated values
        rank = ranks[ranks.metric == metric].set_index(["run", "method"])["rank"]
        for run_label, row in wide.iterrows():
            expected = sps.rankdata(-row.to_numpy(), method="average")
            assert [rank[(run_label, m)] for m in row.index] == list(expected)
        assert mine.loc[best, "mean_rank"] == pytest.approx(
            np.mean([sps.rankdata(-r.to_numpy())[list(r.index).index(best)] for _, r in wide.iterrows()])
        )

    md = (seed_report / "report.md").read_text()
    # five runs can never reach p < 0.05 with the exact test: the report says so
    assert "With n = 5 runs the smallest two-sided p-value the exact test can give is 2/2^5 = 0.0625" in md
    assert "Wilcoxon signed-rank test over runs, paired by run" in md
    tables = [t for t in md_tables(md) if t[0] == "Summary across runs" and t[1].startswith("Across seeds")]
    assert len(tables) == 2
    for (_, _, header, rows), metric in zip(tables, ("faithfulness", "deletion_at_1")):
        runs = [h.removeprefix("rank in ") for h in header[8:]]
        assert runs == [f"digits-laya-seed{s}.pt" for s in SEEDS]
        mine = across[across.metric == metric].set_index("method")
        rank = ranks[ranks.metric == metric].set_index(["method", "run"])["rank"]
        for row in rows:
            s = mine.loc[LABEL_TO_METHOD[row[0]]]
            assert row[1:8] == [
                f"{f4(s['mean'])} ± {f4(s['std'])}",
                f4(s.mean_rank),
                F.method_label(s.reference),
                f4(s.mean_difference),
                f4(s.wilcoxon_statistic),
                f4(s.p_value),
                f4(s.p_holm),
            ]
            assert row[8:] == [f4(rank[(LABEL_TO_METHOD[row[0]], r)]) for r in runs]


# ------------------------------------------------------------------------------------- significance matrix


def test_significance_matrix_by_hand():
    comparisons = pd.DataFrame(
        [
            # a beats b: significant, positive mean difference -> (a, b) "▲ 0.003", (b, a) "▼ 0.003"
            {
                "metric": "faithfulness",
                "method_a": "a",
                "method_b": "b",
                "n": 9,
                "mean_difference": 0.2,
                "p_holm": 0.003,
            },
            # a vs c: not significant -> "· 0.200" both ways
            {
                "metric": "faithfulness",
                "method_a": "a",
                "method_b": "c",
                "n": 9,
                "mean_difference": -0.1,
                "p_holm": 0.2,
            },
            # b vs c: significant with a zero mean difference -> "≠ <0.001"
            {
                "metric": "faithfulness",
                "method_a": "b",
                "method_b": "c",
                "n": 9,
                "mean_difference": 0.0,
                "p_holm": 2e-4,
            },
            # another metric must not leak in
            {
                "metric": "deletion_at_1",
                "method_a": "a",
                "method_b": "b",
                "n": 9,
                "mean_difference": -1.0,
                "p_holm": 1e-9,
            },
            # d: its test is undefined -> "?"
            {
                "metric": "faithfulness",
                "method_a": "a",
                "method_b": "d",
                "n": 0,
                "mean_difference": np.nan,
                "p_holm": np.nan,
            },
        ]
    )
    m = significance_matrix(comparisons, metric="faithfulness", methods=["a", "b", "c", "d"])
    cells = {(r.method, r.versus): cell_text(r.symbol, r.p_holm) for r in m.itertuples()}
    assert cells == {
        ("a", "b"): "▲ 0.003",
        ("b", "a"): "▼ 0.003",
        ("a", "c"): "· 0.200",
        ("c", "a"): "· 0.200",
        ("b", "c"): "≠ <0.001",
        ("c", "b"): "≠ <0.001",
        ("a", "d"): "?",
        ("d", "a"): "?",
    }
    assert m.set_index(["method", "versus"]).loc[("b", "a"), "mean_difference"] == -0.2
    # exactly at alpha is not significant
    at = comparisons.iloc[:1].assign(p_holm=0.05)
    assert significance_matrix(at, metric="faithfulness").symbol.tolist() == ["·", "·"]


def test_significance_matrix_in_the_report_against_scipy(seed_dirs, seed_report):
    folder = seed_dirs[0]
    samples = pd.read_csv(folder / "samples.csv")
    # comparisons.csv recomputed from samples.csv by the documented rule: each method against the reference
    # (contribution, the default where a run has it), scipy's Wilcoxon (zsplit), Holm over one metric's 3 tests
    keys, diffs, adjusted = [], [], []
    for metric, col in (("faithfulness", "spearman"), ("deletion_at_1", "deletion_at_1")):
        wide = samples.pivot(index="sample", columns="method", values=col)
        ps = []
        for a, b in itertools.combinations(METHODS, 2):
            if "contribution" not in (a, b):
                continue
            pair = wide[[a, b]].dropna()
            keys.append((metric, a, b))
            diffs.append(float((pair[a] - pair[b]).mean()))
            ps.append(scipy_p(pair[a].to_numpy(), pair[b].to_numpy()))
        adjusted += list(holm(np.array(ps)))
    expected = {(metric, a, b): "" for metric in ("faithfulness", "deletion_at_1") for a in METHODS for b in METHODS}
    for (metric, a, b), d, p in zip(keys, diffs, adjusted):
        up, down = ("▲", "▼") if d > 0 else ("▼", "▲")
        text = lambda s: f"{s} {'<0.001' if p < 0.001 else f'{p:.3f}'}"  # noqa: E731
        expected[(metric, a, b)] = text(up if p < 0.05 else "·")
        expected[(metric, b, a)] = text(down if p < 0.05 else "·")
    assert any(v.startswith(("▲", "▼")) for v in expected.values())  # the check has significant cells to check

    label = "digits-laya-seed0.pt"
    md = (seed_report / "report.md").read_text()
    found = [t for t in md_tables(md) if t[0] == "Significance between methods" and t[1] == label]
    assert len(found) == 2  # faithfulness, then Deletion@1
    assert md.count("Faithfulness (Holm over 3 tests):") >= 1
    for (_, _, header, rows), metric in zip(found, ("faithfulness", "deletion_at_1")):
        cols = [LABEL_TO_METHOD[h] for h in header[1:]]
        assert cols == list(METHODS)
        for row in rows:
            a = LABEL_TO_METHOD[row[0]]
            for b, cell in zip(cols, row[1:]):
                assert cell == ("—" if a == b else expected[(metric, a, b)]), (metric, a, b)
    sig = read_csv(seed_report / "significance.csv")
    own = sig[(sig.source == "run") & (sig.name == label)].set_index(["metric", "method", "versus"])
    for (metric, a, b), d in zip(keys, diffs):
        assert own.loc[(metric, a, b), "mean_difference"] == pytest.approx(d, abs=1e-7)
        assert own.loc[(metric, b, a), "mean_difference"] == pytest.approx(-d, abs=1e-7)
    # across seeds: the same matrix from the tests over runs
    seeds = sig[sig.source == "seeds"]
    assert set(seeds.name) == {"laya · digits · gate · head"} and (seeds.n == 5).all()
    assert (seeds.p_holm >= 0.0625).all() and set(seeds.symbol) == {"·"}  # five runs: nothing can reach 0.05
    assert "across seeds: laya · digits · gate · head" in md


def test_significance_figure_shows_the_report_cells(seed_dirs, seed_report):
    assert_plausible_image(seed_report / "figures" / "significance.png")
    runs = [load_run(d) for d in seed_dirs[:1]]
    from laya_eval.reporting import report_tables
    from laya_eval.reporting.write import _significance_panels

    panels = _significance_panels(runs, report_tables(runs).significance)
    fig = F.significance_figure(panels)
    shown = sorted(t.get_text() for t in fig.axes[0].texts if isinstance(t, matplotlib.text.Text))
    md = (seed_report / "report.md").read_text()
    (_, _, _, rows), _ = [
        t for t in md_tables(md) if t[0] == "Significance between methods" and t[1] == "digits-laya-seed0.pt"
    ]
    assert shown == sorted(c for row in rows for c in row[1:] if c not in ("—", ""))  # empty: outside the family
    # colour: sign(mean of row - column) * -log10 p (Holm), capped at 4; nothing on the diagonal
    values = panels[0]["values"]
    sig = read_csv(seed_report / "significance.csv")
    own = sig[(sig.source == "run") & (sig.name == "digits-laya-seed0.pt") & (sig.metric == "faithfulness")]
    assert len(own) == 2 * (len(METHODS) - 1)  # contribution against each other method, both ways
    assert panels[0]["test"] == "Wilcoxon over samples, Holm over 3 tests"
    for r in own.itertuples():
        expected = np.sign(r.mean_difference) * min(-np.log10(r.p_holm), 4.0)
        assert values.loc[r.method, r.versus] == pytest.approx(expected, rel=1e-6, abs=1e-9), (r.method, r.versus)
    assert np.isnan(np.diag(values.to_numpy())).all()


def test_faithfulness_figure_marks_are_the_csv_decisions(seed_dirs):
    """Each method's mark on the faithfulness figure is its comparisons.csv row against the reference: n.s. exactly
    where ``significant`` is False, stars where it is True."""
    comparisons = pd.read_csv(seed_dirs[0] / "comparisons.csv")
    summary = pd.read_csv(seed_dirs[0] / "summary.csv")
    label = "digits-laya-seed0.pt"
    table = summary.assign(run=label)
    fig = F.faithfulness_figure(table, [{"label": label}], comparisons=comparisons.assign(run=label))
    for ax, metric in zip(fig.axes[:2], ("faithfulness", "deletion_at_1")):
        by_y = {round(y): LABEL_TO_METHOD[t.get_text()] for y, t in zip(ax.get_yticks(), ax.get_yticklabels())}
        marks = {
            by_y[round(a.xy[1])]: a.get_text()
            for a in ax.texts
            if isinstance(a, matplotlib.text.Annotation) and round(a.xy[1]) in by_y
        }
        assert marks.pop("contribution") == "ref."
        rows = comparisons[comparisons.metric == metric]
        assert set(rows.reference) == {"contribution"} and (rows.family_size == 3).all()
        for m, mark in marks.items():
            row = rows[(rows.method_a == m) | (rows.method_b == m)].iloc[0]
            assert (mark != "n.s.") == bool(row.significant), (metric, m, mark, row.p_holm)
            assert row.significant == (row.p_holm < 0.05)
        assert set(marks) == {"laya", "ig"}  # random is the baseline line, not a dot


# ------------------------------------------------------------------------------------------------ sanity


def _verdicts_by_the_rule(folder) -> pd.DataFrame:
    """The documented rule applied to the sanity folder's own CSVs (upper bound < 0.5, lower bound > 0, ...)."""
    casc, data = pd.read_csv(folder / "randomisation.csv"), pd.read_csv(folder / "data_randomisation.csv")
    roar, drops = pd.read_csv(folder / "roar_agreement.csv"), pd.read_csv(folder / "layer_roar.csv")
    last, shuffled = casc[casc.step == casc.step.max()].set_index("method"), data[data.step == 1].set_index("method")
    informative = drops.groupby("layer").accuracy_drop.mean().max() >= 0.01
    rows = []
    for m in roar.method:
        check = lambda r: "n/a" if np.isnan(r.similarity) else ("pass" if r.similarity_ci_high < 0.5 else "fail")  # noqa
        c, d = check(last.loc[m]), check(shuffled.loc[m])
        lo = roar.set_index("method").loc[m, "ci_low"]
        defined = [v for v in (c, d) if v != "n/a"]
        rows.append(
            {
                "method": m,
                "cascading_verdict": c,
                "data_verdict": d,
                "roar_verdict": ("agrees" if lo > 0 else "disagrees") if informative else "uninformative",
                "verdict": "chance reference"
                if m == "random"
                else ("not testable" if not defined else "fails" if "fail" in defined else "passes"),
            }
        )
    return pd.DataFrame(rows).set_index("method")


def test_the_printed_sanity_table_keeps_the_roar_and_method_verdicts_apart():
    from laya_eval_cli.commands.report import _sanity_lines

    table = pd.DataFrame(
        {
            "sanity_run": ["m.pt", "m.pt"],
            "method": ["laya", "random"],
            "cascading_verdict": ["pass", "pass"],
            "data_verdict": ["fail", "n/a"],
            "roar_verdict": ["uninformative", "agrees"],
            "verdict": ["fails", "chance reference"],
        }
    )
    header, laya, random = _sanity_lines(table).splitlines()
    # every column starts under its header, two spaces after the longest entry of the column before
    assert header.split() == ["sanity", "run", "method", "cascading", "labels", "ROAR", "verdict"]
    for word, column in [("ROAR", "uninformative"), ("verdict", "fails"), ("labels", "fail")]:
        assert laya.index(f" {column}") + 1 == header.index(word), (header, laya)
    assert "uninformative  fails" in laya and random.endswith("agrees         chance reference")


def test_sanity_only_report(sanity_dir, tmp_path):
    out = tmp_path / "rep"
    result = run("report", sanity_dir, "--out", out)
    assert result.exit_code == 0, result.output
    assert "sanity run" in result.output and "verdict" in result.output
    md = (out / "report.md").read_text()
    assert re.findall(r"^## (.+)$", md, flags=re.M) == ["Sanity checks", "Provenance"]
    assert md.startswith("# Layer-attribution sanity report")
    assert "passes when the interval's upper bound is below 0.5" in md
    expected = _verdicts_by_the_rule(sanity_dir)
    ((_, sub, header, rows),) = [t for t in md_tables(md) if t[1] == "sanity: digits-laya.pt"]
    casc = pd.read_csv(sanity_dir / "randomisation.csv")
    # the trainable digits MLP: the cascade goes on from the head's groups into the backbone's blocks
    assert casc.loc[casc.step.idxmax(), "params"] == "classifier+scorer+adapters+block3+block2+block1"
    assert header[1] == "cascading (classifier+scorer+adapters+block3+block2+block1)"
    last = casc[casc.step == casc.step.max()].set_index("method")
    roar = pd.read_csv(sanity_dir / "roar_agreement.csv").set_index("method")
    assert [LABEL_TO_METHOD[r[0]] for r in rows] == ["laya", "static", "contribution", "random"]
    for row in rows:
        m = LABEL_TO_METHOD[row[0]]
        e = expected.loc[m]
        assert [row[2], row[4], row[6], row[7]] == [e.cascading_verdict, e.data_verdict, e.roar_verdict, e.verdict]
        c = last.loc[m]
        assert row[1] == (
            "undefined"
            if np.isnan(c.similarity)
            else f"{f4(c.similarity)} [{f4(c.similarity_ci_low)}, {f4(c.similarity_ci_high)}]"
        )
        # two ROAR seeds: fewer than the 5 an interval needs, and the cell says so
        assert np.isnan(roar.loc[m, "ci_low"]) and roar.loc[m, "ci_note"] == "fewer than 5 defined samples"
        assert row[5] == f"{f4(roar.loc[m, 'spearman'])} n/a (fewer than 5 defined samples)"
    assert expected.loc["static", "verdict"] == "not testable"  # constant across samples: undefined similarity
    assert expected.loc["laya", "cascading_verdict"] == "pass"  # alpha changes once the scorer is re-initialised
    fig = out / "figures" / "sanity_digits-laya.png"
    assert_plausible_image(fig)
    assert f"](figures/{fig.name})" in md
    assert "data:image/png;base64," in (out / "report.html").read_text()
    assert not (out / "faithfulness.csv").exists()
    runs = read_csv(out / "sanity_runs.csv").iloc[0]
    data = pd.read_csv(sanity_dir / "data_randomisation.csv")
    assert runs.shuffled_label_accuracy == pytest.approx(data.loc[data.step == 1, "accuracy"].iloc[0])
    drops = pd.read_csv(sanity_dir / "layer_roar.csv").groupby("layer").accuracy_drop.mean()
    assert runs.max_roar_drop == pytest.approx(drops.max())


def test_sanity_verdict_rules_by_hand():
    def table(rows):
        return pd.DataFrame(
            rows,
            columns=[
                "check",
                "step",
                "params",
                "method",
                "similarity",
                "similarity_ci_low",
                "similarity_ci_high",
                "faithfulness",
            ],
        )

    casc = table(
        [("cascading", 0, "none", m, 1, 1, 1, 0.9) for m in "abcde"]
        + [
            ("cascading", 1, "classifier", "a", 0.90, 0.80, 0.95, 0.5),  # an earlier step never decides
            ("cascading", 2, "all", "a", 0.40, 0.30, 0.49, 0.5),  # upper bound 0.49 < 0.5: pass
            ("cascading", 2, "all", "b", 0.45, 0.40, 0.50, 0.5),  # upper bound exactly 0.5: fail
            ("cascading", 2, "all", "c", np.nan, np.nan, np.nan, 0.5),  # undefined: n/a
            ("cascading", 2, "all", "d", 0.30, np.nan, np.nan, 0.5),  # no interval (no bootstrap): the estimate
            ("cascading", 2, "all", "random", 0.0, -0.1, 0.1, 0.0),
        ]
    )
    data = table(
        [
            ("data", 1, "labels", m, s, s - 0.1, s + 0.1, 0.1)
            for m, s in (("a", 0.1), ("b", 0.1), ("c", np.nan), ("d", 0.6), ("random", 0.0))
        ]
    )
    roar = pd.DataFrame(
        {
            "method": ["a", "b", "c", "d", "random"],
            "spearman": [0.8, 0.5, 0.9, -0.5, 0.0],
            "ci_low": [0.2, -0.1, np.nan, -0.9, -0.5],
            "ci_high": [1, 1, np.nan, 0, 0.5],
        }
    )
    # layer 2 drops 0.02 on average over two seeds: ROAR is informative
    drops = pd.DataFrame(
        {"layer": [1, 1, 2, 2], "seed": [0, 1, 0, 1], "accuracy": 0.9, "accuracy_drop": [0.001, 0.003, 0.03, 0.01]}
    )
    got = sanity_table([SanityRun("x.pt", casc, data, drops, roar)]).set_index("method")
    assert got.loc[["a", "b", "c", "d"], "cascading_verdict"].tolist() == ["pass", "fail", "n/a", "pass"]
    assert got.loc[["a", "b", "c", "d"], "data_verdict"].tolist() == ["pass", "pass", "n/a", "fail"]
    assert got.loc[["a", "b", "c", "d"], "roar_verdict"].tolist() == ["agrees", "disagrees", "agrees", "disagrees"]
    assert got.loc[["a", "b", "c", "d", "random"], "verdict"].tolist() == [
        "passes",
        "fails",
        "not testable",
        "fails",
        "chance reference",
    ]
    assert got.loc["a", "cascading_similarity"] == 0.40 and got.loc["a", "cascading_params"] == "all"
    # mean drops 0.002 and 0.008: no layer reaches 0.01, ROAR says nothing
    flat = drops.assign(accuracy_drop=[0.001, 0.003, 0.012, 0.004])
    got = sanity_table([SanityRun("x.pt", casc, data, flat, roar)])
    assert set(got.roar_verdict) == {"uninformative"}


def test_report_mixes_faithfulness_runs_and_sanity_folders(seed_dirs, sanity_dir, tmp_path):
    inputs = load_inputs([seed_dirs[0], sanity_dir])
    assert len(inputs.runs) == 1 and [s.label for s in inputs.sanity] == ["digits-laya.pt"]
    out = tmp_path / "mixed"
    result = run("report", sanity_dir, seed_dirs[0], "--out", out, "--max-points", 20)
    assert result.exit_code == 0, result.output
    md = (out / "report.md").read_text()
    headings = re.findall(r"^## (.+)$", md, flags=re.M)
    assert (
        headings.index("Summary across runs")
        < headings.index("Significance between methods")
        < headings.index("Sanity checks")
        < headings.index("Faithfulness and Deletion@1 per run")
    )
    assert [t for t, _ in re.findall(r"^- \[(.+)\]\(#(.+)\)$", md, flags=re.M)] == headings
    assert "from 1 result folder(s) and 1 sanity folder(s)" in md
    assert (out / "sanity.csv").is_file() and (out / "faithfulness.csv").is_file()
    assert not (out / "across_seeds.csv").exists()  # one run: no seed group, no empty table


def test_sanity_folder_errors(sanity_dir, tmp_path):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(sanity_dir, broken)
    (broken / "layer_roar.csv").unlink()
    assert_one_line_error(
        run("report", broken, "--out", tmp_path / "o"),
        r"sanity folder '.*broken' has no layer_roar.csv: expected the output of `laya-eval sanity`",
    )
    shutil.copy(sanity_dir / "layer_roar.csv", broken / "layer_roar.csv")
    pd.read_csv(sanity_dir / "roar_agreement.csv").drop(columns="ci_low").to_csv(
        broken / "roar_agreement.csv", index=False
    )
    # each edit is re-hashed into the manifest (which is checked first): the table's own check must catch it
    rehash(broken)
    assert_one_line_error(
        run("report", broken, "--out", tmp_path / "o"),
        r"roar_agreement.csv: missing column\(s\) ci_low; is it from `laya-eval sanity`\?",
    )
    shutil.copy(sanity_dir / "roar_agreement.csv", broken / "roar_agreement.csv")
    (broken / "sanity.json").write_text("[1, 2]")
    rehash(broken)
    assert_one_line_error(run("report", broken, "--out", tmp_path / "o"), r"sanity.json' is not a JSON object")
    (broken / "sanity.json").write_text("{nope")
    rehash(broken)
    assert_one_line_error(run("report", broken, "--out", tmp_path / "o"), r"sanity.json' is unreadable")
    (broken / "sanity.json").write_text("{}")  # not re-hashed: the manifest says it is not the file the run wrote
    assert_one_line_error(run("report", broken, "--out", tmp_path / "o"), r"sanity.json' is not the file its run wrote")
    assert not (tmp_path / "o").exists()
    with pytest.raises(ResultsError, match=r"is a `laya-eval sanity` folder, not a faithfulness result folder"):
        load_run(sanity_dir)
    assert load_sanity(sanity_dir).meta == json.loads((sanity_dir / "sanity.json").read_text())


def _sanity_cell(folder, name, column, value, row=0):
    table = pd.read_csv(folder / name, dtype=str, keep_default_na=False)
    table.loc[row, column] = value
    table.to_csv(folder / name, index=False)


def _sanity_column(folder, name, column, value):
    table = pd.read_csv(folder / name, dtype=str, keep_default_na=False)
    table[column] = value
    table.to_csv(folder / name, index=False)


def _sanity_repeat_first_row(folder, name):
    table = pd.read_csv(folder / name, dtype=str, keep_default_na=False)
    pd.concat([table, table.iloc[:1]]).to_csv(folder / name, index=False)


@pytest.mark.parametrize(
    "edit, pattern",
    [
        (
            lambda d: _sanity_cell(d, "randomisation.csv", "similarity", "abc"),
            r"randomisation\.csv: column 'similarity' must be numbers; row 1 holds 'abc'",
        ),
        (
            lambda d: _sanity_cell(d, "data_randomisation.csv", "step", "1.5"),
            r"data_randomisation\.csv: column 'step' must be whole non-negative numbers; row 1 holds 1\.5\.$",
        ),
        (
            lambda d: _sanity_cell(d, "randomisation.csv", "method", ""),
            r"randomisation\.csv: column 'method' must be text; row 1 holds nan",
        ),
        (
            lambda d: _sanity_cell(d, "layer_roar.csv", "accuracy", ""),
            r"layer_roar\.csv: column 'accuracy' must be finite numbers; row 1 holds nan",
        ),
        (
            lambda d: _sanity_cell(d, "layer_roar.csv", "seed", "true"),
            r"layer_roar\.csv: column 'seed' must be (whole non-negative )?numbers",
        ),
        (
            lambda d: _sanity_cell(d, "roar_agreement.csv", "spearman", "inf"),
            r"roar_agreement\.csv: column 'spearman' must be numbers or empty; row 1 holds inf",
        ),
        (
            # every note a number (the notes say why no interval exists: with two ROAR seeds, every row has one)
            lambda d: _sanity_column(d, "roar_agreement.csv", "ci_note", "7"),
            r"roar_agreement\.csv: column 'ci_note' must be text or empty; row 1 holds '?7(\.0)?'?\.$",
        ),
        (
            lambda d: _sanity_repeat_first_row(d, "roar_agreement.csv"),
            r"roar_agreement\.csv: columns 'method' must be unique",
        ),
        (
            lambda d: _sanity_repeat_first_row(d, "randomisation.csv"),
            r"randomisation\.csv: columns 'check', 'step', 'method' must be unique",
        ),
    ],
)
def test_a_sanity_table_of_the_wrong_kind_is_one_line_naming_file_and_column(sanity_dir, tmp_path, edit, pattern):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(sanity_dir, broken)
    edit(broken)
    rehash(broken)
    assert_one_line_error(
        run("report", broken, "--out", tmp_path / "o"), str(broken).replace(".", r"\.") + "/" + pattern
    )
    assert not (tmp_path / "o").exists()
