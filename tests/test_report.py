"""Reports: every number in report.md equals its CSV, the CSVs equal independent recomputations,
figures are real images that name their run, the HTML is self-contained, errors are one line."""

from __future__ import annotations

import base64
import hashlib
import html
import html.parser
import json
import re
import warnings

import matplotlib.text
import numpy as np
import pandas as pd
import pytest
from PIL import Image
from scipy.stats import spearmanr
from scipy.stats import t as student_t

from laya_eval import figures as F
from laya_eval.engine.methods import METHODS
from laya_eval.errors import ConfigError, ResultsError
from laya_eval.engine.evaluation import EvalOptions, evaluate
from laya_eval.engine.outcome import write_evaluation
from laya_eval.reporting import load_run, load_runs, report, report_tables, run_from_result
from tests.cli_helpers import assert_one_line_error, run

LABEL_TO_METHOD = {label: name for name, label in F.METHOD_LABELS.items()}
LAYA_RUNS = ("digits-laya.pt [laya-s0]", "digits-laya.pt [laya-s1]")
RUN_LABELS = (*LAYA_RUNS, "digits-lastlayer.pt", "digits-scalarmix.pt")


def f4(value) -> str:
    return "n/a" if pd.isna(value) else f"{value:.4f}"


@pytest.fixture(scope="module")
def result_dirs(digits_checkpoints, tmp_path_factory):
    """Four faithfulness folders: the LAYA checkpoint under two evaluation seeds, a LastLayer and a ScalarMix one."""
    root = tmp_path_factory.mktemp("results")
    specs = {
        "laya-s0": ("laya", 0),
        "laya-s1": ("laya", 1),
        "lastlayer": ("lastlayer", 0),
        "scalarmix": ("scalarmix", 0),
    }
    for name, (head, seed) in specs.items():
        result = evaluate(digits_checkpoints[head], options=EvalOptions(limit=120, bootstrap=200, seed=seed))
        write_evaluation(result, root / name)
    return [root / name for name in specs]


@pytest.fixture(scope="module")
def report_dir(result_dirs, tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    result = run("report", *result_dirs, "--out", out, "--max-points", 60)
    assert result.exit_code == 0, result.output
    return out


def read_csv(path) -> pd.DataFrame:
    return pd.read_csv(path, keep_default_na=False, na_values=[""])


def md_unescape(text: str) -> str:
    """What a markdown renderer shows for escaped text: backslash escapes and HTML entities undone."""
    return html.unescape(re.sub(r"\\([\\`*_\[\]~|!#])", r"\1", text))


def md_tables(text: str) -> list[tuple[str, str | None, list[str], list[list[str]]]]:
    """Every markdown table as (section, subsection, header, rows); a <details> block's summary is a subsection."""
    cells = lambda line: [md_unescape(c.strip()) for c in line.strip().strip("|").split(" | ")]  # noqa: E731
    lines, out, h2, h3, i = text.splitlines(), [], None, None, 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("## "):
            h2, h3 = md_unescape(line[3:]), None
        elif line.startswith("### "):
            h3 = md_unescape(line[4:])
        elif line.startswith("<details"):
            h3 = html.unescape(re.search(r"<summary>(.*)</summary>", line).group(1))
        elif line.startswith("</details>"):
            h3 = None
        elif line.startswith("|"):
            header, rows, i = cells(line), [], i + 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(cells(lines[i]))
                i += 1
            out.append((h2, h3, header, rows))
            continue
        i += 1
    return out


def section(tables, prefix):
    found = [t for t in tables if t[0].startswith(prefix)]
    assert found, prefix
    return found


def test_every_number_in_report_md_equals_its_csv(report_dir):
    tables = md_tables((report_dir / "report.md").read_text())
    faith = read_csv(report_dir / "faithfulness.csv")
    runs = list(dict.fromkeys(faith["run"]))
    assert runs == list(RUN_LABELS)

    found = section(tables, "Faithfulness and Deletion@1")
    assert [t[1] for t in found] == runs
    for _, run_label, _, rows in found:
        part = faith[faith["run"] == run_label].set_index("method")
        assert [LABEL_TO_METHOD[r[0]] for r in rows] == list(part.index)
        for row in rows:
            s = part.loc[LABEL_TO_METHOD[row[0]]]
            assert row[1:] == [
                f4(s.faithfulness),
                f"[{f4(s.faithfulness_ci_low)}, {f4(s.faithfulness_ci_high)}]",
                f4(s.deletion_at_1),
                f"[{f4(s.deletion_at_1_ci_low)}, {f4(s.deletion_at_1_ci_high)}]",
                f4(s.top1_hit_rate),
                f4(s.aopc),
                str(s.n),
                str(s.n_undefined),
            ]

    across = read_csv(report_dir / "across_runs.csv")
    # the combined tables first, then (for the two LAYA folders) the across-seeds tables, one per metric
    found = section(tables, "Summary across runs")
    assert [t[1] for t in found] == [
        "Faithfulness (mean Spearman ρ)",
        "Deletion@1 (drop of p(predicted class))",
        *["Across seeds: laya · digits · gate · head (2 runs)"] * 2,
    ]
    found = found[:2]
    for (_, _, header, rows), metric in zip(found, ("faithfulness", "deletion_at_1")):
        assert header == ["method", "laya (2 runs)", "lastlayer (1 run)", "scalarmix (1 run)"]
        for row in rows:
            for head, cell in zip(("laya", "lastlayer", "scalarmix"), row[1:]):
                s = across[(across["head"] == head) & (across["method"] == LABEL_TO_METHOD[row[0]])]
                if s.empty:
                    assert cell == "—"
                    continue
                s = s.iloc[0]
                spread = f" ± {f4(s[metric + '_std'])}" if s.n_runs > 1 else ""
                assert cell == (
                    f"{f4(s[metric + '_mean'])}{spread} [{f4(s[metric + '_ci_low'])}, {f4(s[metric + '_ci_high'])}]"
                )

    curves = read_csv(report_dir / "deletion_curves.csv")
    found = section(tables, "Deletion@k")
    assert [t[1] for t in found] == runs
    for _, run_label, header, rows in found:
        assert header[1:] == ["k = 1", "k = 2", "k = 3"]
        for row in rows:
            part = curves[(curves["run"] == run_label) & (curves["method"] == LABEL_TO_METHOD[row[0]])]
            assert row[1:] == [f4(v) for v in part.sort_values("k")["deletion"]]

    dist = read_csv(report_dir / "spearman_distribution.csv")
    found = section(tables, "Per-sample Spearman")
    assert [t[1] for t in found] == runs
    for _, run_label, _, rows in found:
        for row in rows:
            s = dist[(dist["run"] == run_label) & (dist["method"] == LABEL_TO_METHOD[row[0]])].iloc[0]
            assert row[1:] == [
                str(s.n),
                str(s.n_rho_one),
                str(s.n_rho_high),
                str(s.n_rho_low),
                str(s.n_rho_negative),
                str(s.n_undefined),
                f4(s.share_rho_one),
                f4(s.median_rho),
            ]

    agreement = read_csv(report_dir / "agreement.csv")
    found = section(tables, "Method agreement")
    assert [t[1] for t in found] == runs
    for _, run_label, header, rows in found:
        part = agreement[agreement["run"] == run_label].set_index(["method_a", "method_b"])["mean_spearman"]
        for row in rows:
            for col_label, cell in zip(header[1:], row[1:]):
                assert cell == f4(part[(LABEL_TO_METHOD[row[0]], LABEL_TO_METHOD[col_label])])


def test_report_csvs_equal_independent_recomputations(result_dirs, report_dir):
    faith = read_csv(report_dir / "faithfulness.csv")
    summaries = {d.name: pd.read_csv(d / "summary.csv").set_index("method") for d in result_dirs}
    for folder, run_label in zip(("laya-s0", "laya-s1", "lastlayer", "scalarmix"), RUN_LABELS):
        mine = faith[faith["run"] == run_label].set_index("method")
        cols = [c for c in mine.columns if c in summaries[folder].columns]
        pd.testing.assert_frame_equal(mine[cols], summaries[folder].loc[mine.index, cols], check_dtype=False)
    assert "laya" not in set(faith.loc[faith["run"] == "digits-lastlayer.pt", "method"])

    # mean, sample std and Student t interval (scipy) over the two LAYA folders
    all_across = read_csv(report_dir / "across_runs.csv")
    across = all_across[all_across["head"] == "laya"].set_index("method")
    a, b = summaries["laya-s0"], summaries["laya-s1"]
    for m in a.index:
        for metric in ("faithfulness", "deletion_at_1"):
            pair = np.array([a.loc[m, metric], b.loc[m, metric]])
            std = abs(pair[0] - pair[1]) / np.sqrt(2)
            assert across.loc[m, f"{metric}_mean"] == pytest.approx(pair.mean(), rel=1e-7)
            assert across.loc[m, f"{metric}_std"] == pytest.approx(std, rel=1e-6, abs=1e-9)
            # (the two folders differ only in the evaluation seed: most methods have std 0, a point interval,
            # where scipy refuses scale 0)
            low, high = (
                student_t.interval(0.95, df=1, loc=pair.mean(), scale=std / np.sqrt(2))
                if std > 0
                else (pair.mean(), pair.mean())
            )
            assert across.loc[m, f"{metric}_ci_low"] == pytest.approx(low, rel=1e-6, abs=1e-9)
            assert across.loc[m, f"{metric}_ci_high"] == pytest.approx(high, rel=1e-6, abs=1e-9)
    # the combined table of report.md, straight from the per-run summaries
    (_, _, header, rows), *_ = section(md_tables((report_dir / "report.md").read_text()), "Summary across runs")
    cells = {LABEL_TO_METHOD[r[0]]: dict(zip(header[1:], r[1:])) for r in rows}
    for m in a.index:
        pair = np.array([a.loc[m, "faithfulness"], b.loc[m, "faithfulness"]])
        assert cells[m]["laya (2 runs)"].startswith(f"{f4(pair.mean())} ± {f4(np.std(pair, ddof=1))} [")
    sm = summaries["scalarmix"]
    for m in sm.index:
        assert cells[m]["scalarmix (1 run)"] == (
            f"{f4(sm.loc[m, 'faithfulness'])} "
            f"[{f4(sm.loc[m, 'faithfulness_ci_low'])}, "
            f"{f4(sm.loc[m, 'faithfulness_ci_high'])}]"
        )
    assert cells["laya"]["scalarmix (1 run)"] == cells["laya"]["lastlayer (1 run)"] == "—"
    # a head with one run keeps that run's value and bootstrap interval
    single = all_across[all_across["head"] == "lastlayer"].set_index("method")
    own = summaries["lastlayer"]
    assert list(single.index) == list(own.index) and (single["n_runs"] == 1).all()
    np.testing.assert_allclose(single["faithfulness_mean"], own["faithfulness"], rtol=1e-7)
    np.testing.assert_allclose(single["faithfulness_ci_low"], own["faithfulness_ci_low"], rtol=1e-7)
    np.testing.assert_allclose(single["deletion_at_1_ci_high"], own["deletion_at_1_ci_high"], rtol=1e-7)
    assert single["faithfulness_std"].isna().all()

    dist = read_csv(report_dir / "spearman_distribution.csv")
    samples = pd.read_csv(result_dirs[2] / "samples.csv")
    for m, rho in samples.groupby("method")["spearman"]:
        s = dist[(dist["run"] == "digits-lastlayer.pt") & (dist["method"] == m)].iloc[0]
        assert s.n_rho_one == (rho == 1).sum() and s.n_undefined == rho.isna().sum()
        assert s.n_rho_negative == (rho < 0).sum() and s.n_rho_high == ((rho >= 0.5) & (rho < 1)).sum()
        assert s.n == len(rho) == 120

    # agreement: scipy's spearmanr sample by sample
    agreement = read_csv(report_dir / "agreement.csv")
    layers = pd.read_csv(result_dirs[0] / "layers.csv")
    wide = {
        m: g.sort_values(["sample", "layer"])["attribution"].to_numpy().reshape(-1, 3)
        for m, g in layers.groupby("method")
    }
    for a_name, b_name in [("laya", "ig"), ("contribution", "random"), ("gradcam", "static"), ("ig", "ig")]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rhos = np.array([spearmanr(x, y).statistic for x, y in zip(wide[a_name], wide[b_name])])
        got = agreement[
            (agreement["run"] == LAYA_RUNS[0]) & (agreement["method_a"] == a_name) & (agreement["method_b"] == b_name)
        ].iloc[0]
        assert got.mean_spearman == pytest.approx(np.nanmean(rhos), abs=1e-7)
        assert got.n_undefined == np.isnan(rhos).sum()


def assert_plausible_image(path):
    assert path.stat().st_size > 5_000, path
    with Image.open(path) as img:
        img.load()
        gray = np.asarray(img.convert("L"))
    assert 300 <= img.size[0] <= 4000 and 250 <= img.size[1] <= 4000, (path, img.size)
    assert gray.max() - gray.min() > 100, f"{path} looks blank"


def test_figures_are_images_and_the_html_embeds_them(report_dir):
    pngs = sorted((report_dir / "figures").glob("*.png"))
    names = {p.stem for p in pngs}
    assert {"faithfulness", "deletion_curves", "spearman_distribution", "significance"} <= names
    assert len([n for n in names if n.startswith("scatter_")]) == 4
    assert len([n for n in names if n.startswith("agreement_")]) == 4
    for path in pngs:
        assert_plausible_image(path)
    md = (report_dir / "report.md").read_text()
    for path in pngs:
        assert f"](figures/{path.name})" in md
    page = (report_dir / "report.html").read_text()
    assert not re.search(r"<script|<link|(src|href)=\"(https?:|//)", page)
    uris = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    assert len(uris) == len(pngs)
    assert base64.b64decode(uris[0]) == (report_dir / "figures" / "faithfulness.png").read_bytes()


def test_every_figure_names_checkpoint_dataset_ablation_and_scope(result_dirs):
    runs = load_runs(result_dirs[:1] + result_dirs[2:])
    t = report_tables(runs)
    metas = [r.meta for r in runs]
    figs = [
        F.faithfulness_figure(t.faithfulness, metas),
        F.deletion_curves_figure(t.deletion_curves, metas),
        F.spearman_distribution_figure(t.spearman_distribution, metas),
    ]
    for r in runs:
        figs.append(F.scatter_figure(r.layers, meta=r.meta))
        matrix = t.agreement[t.agreement["run"] == r.label].pivot(
            index="method_a", columns="method_b", values="mean_spearman"
        )
        figs.append(F.agreement_figure(matrix, meta=r.meta))
    for k, fig in enumerate(figs):
        text = " ".join(obj.get_text() for obj in fig.findobj(matplotlib.text.Text))
        shown = runs if k < 3 else [runs[(k - 3) // 2]]
        for r in shown:
            for needle in (r.label, "digits", "ablation", "gate", "scope", "head"):
                assert needle in text, (k, needle, text[:300])


def test_palette_covers_every_method_once():
    from laya_eval.catalog import NEXT_TOKEN_METHODS

    assert set(F.PALETTE) == set(METHODS) | set(NEXT_TOKEN_METHODS) == set(F.METHOD_LABELS)
    assert len(set(F.PALETTE.values())) == len(F.PALETTE)
    assert len(set(F.METHOD_LABELS.values())) == len(F.METHOD_LABELS)


def test_report_is_deterministic_and_other_formats(result_dirs, tmp_path):
    runs = [load_run(result_dirs[2])]
    for out in ("a", "b"):
        report([result_dirs[2]], out=tmp_path / out, html_report=False, max_points=40)
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert files and not (tmp_path / "a" / "report.html").exists()
    for rel in files:
        assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes(), rel
    result = run("report", result_dirs[2], "--format", "pdf", "--max-points", 40, "--out", tmp_path / "pdf")
    assert result.exit_code == 0, result.output
    pdfs = list((tmp_path / "pdf" / "figures").glob("*.pdf"))
    assert len(pdfs) == 6 and all(p.read_bytes().startswith(b"%PDF") for p in pdfs)  # 5 + the significance matrix
    assert "data:image/png;base64," in (tmp_path / "pdf" / "report.html").read_text()
    fig = F.deletion_curves_figure(report_tables(runs).deletion_curves, [runs[0].meta])
    assert F.figure_bytes(fig, "svg").lstrip().startswith(b"<?xml")
    with pytest.raises(ConfigError, match=r"format must be one of \{png, svg, pdf\}; got 'gif'"):
        F.figure_bytes(fig, "gif")


def test_in_memory_results_make_the_same_tables(digits_models, result_dirs, tmp_path):
    result = evaluate(digits_models["lastlayer"], options=EvalOptions(limit=120, bootstrap=200))
    mine = report_tables([run_from_result(result, label="x")])
    theirs = report_tables([load_run(result_dirs[2])])
    pd.testing.assert_frame_equal(
        mine.spearman_distribution.drop(columns="run"), theirs.spearman_distribution.drop(columns="run")
    )
    np.testing.assert_allclose(mine.agreement["mean_spearman"], theirs.agreement["mean_spearman"], atol=1e-6)
    # report() takes the in-memory result as a run beside a folder
    done = report([result, result_dirs[2]], out=tmp_path / "rep", html_report=False, max_points=20)
    assert list(done.tables.runs["run"]) == ["<in-memory>", "digits-lastlayer.pt"] and done.warnings == []
    pd.testing.assert_frame_equal(
        done.tables.faithfulness[done.tables.faithfulness["run"] == "<in-memory>"]
        .drop(columns="run")
        .reset_index(drop=True),
        mine.faithfulness.drop(columns="run").reset_index(drop=True),
        check_dtype=False,
    )
    assert (tmp_path / "rep" / "faithfulness.csv").is_file() and done.files[-1].name == "manifest.json"
    with pytest.raises(ResultsError, match=r"a report reads result folders \(paths\) and evaluation results; got int"):
        report([3], out=tmp_path / "other")


def test_bad_result_folders_give_one_line_errors(result_dirs, tmp_path):
    assert_one_line_error(
        run("report", tmp_path / "nope", "--out", tmp_path / "o"), r"result folder '.*nope' does not exist"
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_one_line_error(
        run("report", result_dirs[0], empty, "--out", tmp_path / "o"),
        r"result folder '.*empty' has no summary.csv, samples.csv, layers.csv",
    )
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("samples.csv", "layers.csv"):
        (broken / name).write_bytes((result_dirs[0] / name).read_bytes())
    pd.read_csv(result_dirs[0] / "summary.csv").drop(columns="faithfulness").to_csv(broken / "summary.csv", index=False)
    assert_one_line_error(
        run("report", broken, "--out", tmp_path / "o"),
        r"summary.csv: missing column\(s\) faithfulness; is it from `laya-eval faithfulness`\?",
    )
    assert not (tmp_path / "o").exists()
    assert_one_line_error(run("report"), r"Missing argument 'RESULT_DIRS...'")
    with pytest.raises(ResultsError, match="at least one result folder"):
        load_runs([])


def test_a_multi_ablation_folder_stands_for_its_subfolders(digits_checkpoints, tmp_path):
    out = tmp_path / "abl"
    done = run(
        "faithfulness",
        digits_checkpoints["laya"],
        "--ablation",
        "mean,gate",
        "--limit",
        30,
        "--bootstrap",
        20,
        "--methods",
        "laya,random",
        "--out",
        out,
        "-q",
    )
    assert done.exit_code == 0, done.output
    runs = load_runs([out])
    assert [r.folder.name for r in runs] == ["gate", "mean"]
    assert [r.label for r in runs] == ["digits-laya.pt [gate]", "digits-laya.pt [mean]"]
    for r in runs:
        pd.testing.assert_frame_equal(r.summary, pd.read_csv(out / r.folder.name / "summary.csv"))
        assert (r.summary.ablation == r.folder.name).all()
    rep = run("report", out, "--out", tmp_path / "rep", "--max-points", 20)
    assert rep.exit_code == 0, rep.output
    faith = pd.read_csv(tmp_path / "rep" / "faithfulness.csv")
    assert sorted(faith.ablation.unique()) == ["gate", "mean"] and len(faith) == 4


def test_spearman_bands_and_agreement_by_hand():
    from laya_eval.reporting import Run, agreement_matrix
    from laya_eval.reporting.tables import _spearman_table

    # rho per sample: 1 (twice), 0.5, 0.2, -0.5, undefined
    samples = pd.DataFrame(
        {"sample": range(6), "label": 0, "pred": 0, "method": "laya", "spearman": [1.0, 1.0, 0.5, 0.2, -0.5, np.nan]}
    )
    summary = pd.DataFrame(
        {
            "checkpoint": ["c.pt"],
            "head": ["laya"],
            "dataset": ["d"],
            "method": ["laya"],
            "ablation": ["gate"],
            "scope": ["head"],
            "n": [6],
            "n_undefined": [1],
        }
    )
    dist = _spearman_table([Run("c.pt", summary, samples, pd.DataFrame())]).iloc[0]
    assert (dist.n_rho_one, dist.n_rho_high, dist.n_rho_low, dist.n_rho_negative, dist.n_undefined) == (2, 1, 1, 1, 1)
    assert dist.share_rho_one == pytest.approx(2 / 6) and dist.median_rho == pytest.approx(0.5)

    # Two samples, three layers. a = (1, 2, 3) and (3, 2, 1); b = (1, 2, 3) and (5, 5, 5) (constant: undefined);
    # c is constant everywhere. rho(a, b) = mean over the defined sample 0 = 1; rho(a, c) undefined -> NaN.
    layers = pd.DataFrame(
        {
            "sample": np.repeat([0, 1], 9),
            "method": np.tile(np.repeat(["a", "b", "c"], 3), 2),
            "layer": np.tile([1, 2, 3], 6),
            "attribution": [1, 2, 3, 1, 2, 3, 7, 7, 7, 3, 2, 1, 5, 5, 5, 7, 7, 7],
        }
    )
    m = agreement_matrix(layers, ["a", "b", "c"]).set_index(["method_a", "method_b"])
    assert m.loc[("a", "b"), "mean_spearman"] == 1.0 and m.loc[("a", "b"), "n_undefined"] == 1
    assert m.loc[("a", "a"), "mean_spearman"] == 1.0 and m.loc[("a", "a"), "n_defined"] == 2
    assert np.isnan(m.loc[("a", "c"), "mean_spearman"]) and m.loc[("a", "c"), "n_defined"] == 0


def test_report_has_a_toc_collapsed_runs_and_no_empty_section(report_dir):
    md = (report_dir / "report.md").read_text()
    headings = re.findall(r"^## (.+)$", md, flags=re.M)
    toc = re.findall(r"^- \[(.+)\]\(#(.+)\)$", md, flags=re.M)
    assert [t for t, _ in toc] == headings and len(headings) >= 8
    # GitHub's anchors: lower case, punctuation dropped, spaces to hyphens
    assert ("Faithfulness and Deletion@1 per run", "faithfulness-and-deletion1-per-run") in toc
    assert "Paired tests" in md  # every faithfulness folder has its comparisons.csv
    assert "nothing to aggregate" not in md
    # 4 runs x 5 per-run sections, plus each run's paired tests and significance matrix (collapsed), plus the
    # significance matrix across the two LAYA seeds (open)
    assert md.count("<details><summary>") == 4 * 5 + 4 + 4
    assert md.count("<details open><summary>") == 1 and md.count("</details>") == 4 * 5 + 4 + 4 + 1
    page = (report_dir / "report.html").read_text()
    for title, slug in toc:
        assert f'<h2 id="{slug}">' in page and f'href="#{slug}"' in page
    assert page.count("<details>") == 28 and page.count("<details open>") == 1 and "<nav>" in page
    # every section has content: something between one h2 and the next
    sections = re.split(r"^## .+$", md, flags=re.M)[1:]
    assert all(re.search(r"^\| |^!\[|^<details", s, flags=re.M) for s in sections)


class _TableParents(html.parser.HTMLParser):
    """The element around every <table> of a page, and the page's style sheet."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[tuple[str, str]] = []
        self.parents: list[tuple[str, str]] = []
        self.style = ""

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.parents.append(self.stack[-1] if self.stack else ("", ""))
        if tag not in ("meta", "img", "br", "link"):  # void elements never close
            self.stack.append((tag, dict(attrs).get("class") or ""))

    def handle_endtag(self, tag):
        while self.stack and self.stack.pop()[0] != tag:
            pass

    def handle_data(self, data):
        if self.stack and self.stack[-1][0] == "style":
            self.style += data


def test_every_table_of_report_html_scrolls_inside_its_own_box(report_dir):
    # On a 390-pixel screen a wide table (Runs) must scroll inside its box, not be cut or widen the page.
    parser = _TableParents()
    parser.feed((report_dir / "report.html").read_text())
    assert len(parser.parents) >= 8
    assert all(tag == "div" and "wide" in cls.split() for tag, cls in parser.parents), parser.parents
    rule = re.search(r"\.wide\{([^}]*)\}", parser.style)
    assert rule and "overflow-x:auto" in rule.group(1) and "max-width:100%" in rule.group(1), parser.style


def _scipy_comparisons(samples: pd.DataFrame) -> pd.DataFrame:
    """comparisons.csv in the contract's format, from scipy's Wilcoxon test and a Holm step-down by hand."""
    from itertools import combinations

    from scipy.stats import wilcoxon

    rows = []
    for metric, col in (("faithfulness", "spearman"), ("deletion_at_1", "deletion_at_1")):
        wide = samples.pivot(index="sample", columns="method", values=col)
        block = []
        for a, b in combinations(list(dict.fromkeys(samples["method"])), 2):
            if "contribution" not in (a, b):  # the default family: every method against contribution
                continue
            d = (wide[a] - wide[b]).dropna().to_numpy()
            res = wilcoxon(d[d != 0]) if (d != 0).any() else None
            block.append(
                {
                    "metric": metric,
                    "method_a": a,
                    "method_b": b,
                    "n": d.size,
                    "mean_difference": d.mean(),
                    "ci_low": np.quantile(d, 0.025),
                    "ci_high": np.quantile(d, 0.975),
                    "wilcoxon_statistic": res.statistic if res else np.nan,
                    "p_value": res.pvalue if res else 1.0,
                    "rank_biserial": 0.0,
                }
            )
        p = np.array([r["p_value"] for r in block])
        order = np.argsort(p)
        holm = np.empty_like(p)
        holm[order] = np.minimum(np.maximum.accumulate((len(p) - np.arange(len(p))) * p[order]), 1)
        rows += [{**r, "p_holm": h} for r, h in zip(block, holm)]
    return pd.DataFrame(rows)


def test_paired_tests_show_in_the_report_and_as_markers(result_dirs, tmp_path):
    import shutil

    from laya_eval.reporting.runs import COMPARISON_COLUMNS

    folder = result_dirs[0]  # written by faithfulness, comparisons.csv included
    comp = pd.read_csv(folder / "comparisons.csv")[COMPARISON_COLUMNS]
    oracle = _scipy_comparisons(pd.read_csv(folder / "samples.csv"))
    assert (comp.n.to_numpy() == oracle.n.to_numpy()).all()
    np.testing.assert_allclose(comp.mean_difference, oracle.mean_difference, atol=1e-7)
    runs = load_runs([folder])
    # a run written before comparisons.csv existed gets no (empty) block in that section
    older = tmp_path / "older"
    shutil.copytree(result_dirs[2], older)
    (older / "comparisons.csv").unlink()
    manifest = json.loads((older / "manifest.json").read_text())
    del manifest["files"]["comparisons.csv"]
    (older / "manifest.json").write_text(json.dumps(manifest))
    report([folder, older], out=tmp_path / "rep", max_points=30, html_report=False)
    md = (tmp_path / "rep" / "report.md").read_text()
    ((_, sub, header, rows),) = section(md_tables(md), "Paired tests")
    tests_part = md.split("## Paired tests", 1)[1].split("\n## ", 1)[0]
    assert tests_part.count("<details>") == 1 and "digits-lastlayer.pt" not in tests_part
    # 10 methods: 9 tests of contribution per metric (all pairs would be 45)
    assert sub == runs[0].label and len(rows) == len(comp) == 2 * 9
    for row, c in zip(rows, comp.itertuples()):
        assert row[:4] == [c.metric, F.method_label(c.method_a), F.method_label(c.method_b), str(c.n)]
        assert row[8] == f4(c.p_holm) and row[4] == f4(c.mean_difference)
        assert row[9] == "vs exact contribution, Holm over 9 tests"
    # the faithfulness figure marks each method by its test against the reference, contribution
    t = report_tables(runs)
    fig = F.faithfulness_figure(t.faithfulness, [runs[0].meta], comparisons=t.comparisons)
    faith = t.faithfulness.set_index("method")["faithfulness"].drop("random")
    marks = [a.get_text() for a in fig.axes[0].texts if isinstance(a, matplotlib.text.Annotation)]
    expected = []
    for m in faith.index:
        pair = comp[
            (comp.metric == "faithfulness") & (comp[["method_a", "method_b"]].isin([m, "contribution"]).all(axis=1))
        ]
        expected.append("ref." if m == "contribution" else F.significance_marker(pair.p_holm.iloc[0]))
    assert marks == expected


def test_report_reads_parquet_tables_like_csv(result_dirs, tmp_path):
    pytest.importorskip("pyarrow")
    import shutil

    from laya_eval.output.tables import write_table

    folder = tmp_path / "pq"
    shutil.copytree(result_dirs[2], folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    for name in ("layers", "samples"):
        path = write_table(pd.read_csv(folder / f"{name}.csv"), folder / name, "parquet")
        (folder / f"{name}.csv").unlink()
        del manifest["files"][f"{name}.csv"]  # re-signed as faithfulness --table-format parquet would sign them
        manifest["files"][path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
    (folder / "manifest.json").write_text(json.dumps(manifest))
    pq, csv = load_run(folder), load_run(result_dirs[2])
    for name in ("layers", "samples", "summary"):
        pd.testing.assert_frame_equal(getattr(pq, name), getattr(csv, name), check_exact=False, rtol=1e-7)
    a, b = report_tables([pq]), report_tables([csv])
    pd.testing.assert_frame_equal(a.agreement, b.agreement, check_exact=False, rtol=1e-6)
    pd.testing.assert_frame_equal(a.spearman_distribution, b.spearman_distribution)


def test_paper_style_report(result_dirs, tmp_path):
    result = run("report", result_dirs[2], "--style", "paper", "--max-points", 30, "--out", tmp_path / "p")
    assert result.exit_code == 0, result.output
    pdfs = sorted((tmp_path / "p" / "figures").glob("*.pdf"))
    captions = sorted((tmp_path / "p" / "figures").glob("*.caption.txt"))
    assert len(pdfs) == len(captions) == 6  # vector output by default in paper style, one caption each
    md = (tmp_path / "p" / "report.md").read_text()
    plain = md_unescape(md)  # markdown's backslash escapes and HTML entities undone
    for cap in captions:
        assert f"\n*{cap.read_text().strip()}*\n" in plain  # the caption is written under the figure
    # caption text never opens emphasis by accident: every * inside it is escaped
    for line in md.splitlines():
        if line.startswith("*") and line.endswith("*") and not line.startswith("**"):
            assert not re.search(r"(?<!\\)\*", line[1:-1]), line
    assert "data:image/png;base64," in (tmp_path / "p" / "report.html").read_text()
