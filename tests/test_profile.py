"""Class-wise layer profiles: a hand-computed table, pandas group-by oracles, figures and CLI errors."""

from __future__ import annotations


import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image

import laya_eval
from laya_eval.errors import ConfigError
from laya_eval.figures import COLUMN_WIDTHS
from laya_eval.engine.evaluation import EvalOptions
from laya_eval.profiling.profiles import PROFILE_COLUMNS, SUBSETS, layer_table, profile_table
from tests.cli_helpers import assert_one_line_error, run


def assert_plausible_image(path, min_side=250, max_side=4000):
    assert path.stat().st_size > 5_000, path
    with Image.open(path) as img:
        img.load()
        w, h = img.size
        lo, hi = np.asarray(img.convert("L")).min(), np.asarray(img.convert("L")).max()
    assert min_side <= w <= max_side and min_side <= h <= max_side, (path, img.size)
    assert hi - lo > 100, f"{path} looks blank"


def pandas_profile(scores: pd.DataFrame, by: str) -> pd.DataFrame:
    """The oracle: a direct pandas group-by per subset (std with pandas' default ddof=1)."""
    parts = []
    for subset in SUBSETS:
        part = scores if subset == "all" else scores[(scores["label"] == scores["pred"]) == (subset == "correct")]
        g = part.groupby([by, "layer"])["score"].agg(["mean", "std", "count"]).reset_index()
        parts.append(g.rename(columns={by: "class", "count": "n"}).assign(subset=subset))
    return pd.concat(parts, ignore_index=True)


def compare(table: pd.DataFrame, oracle: pd.DataFrame) -> None:
    merged = table.merge(oracle, on=["subset", "class", "layer"], how="outer", suffixes=("", "_oracle"), indicator=True)
    assert (merged["_merge"] == "both").all(), merged[merged["_merge"] != "both"]
    np.testing.assert_allclose(merged["mean"], merged["mean_oracle"], rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(merged["std"], merged["std_oracle"], rtol=1e-6, atol=1e-12)  # NaN == NaN
    assert (merged["n"] == merged["n_oracle"]).all()


def test_profile_table_by_hand():
    # Two classes, two layers. Class 0: samples 0 (correct) and 1 (predicted 1, wrong);
    # class 1: sample 2 (correct). Scores per sample: s0 = (0.2, 0.8), s1 = (0.6, 0.4), s2 = (0.5, 0.5).
    scores = pd.DataFrame(
        {
            "sample": [0, 0, 1, 1, 2, 2],
            "label": [0, 0, 0, 0, 1, 1],
            "pred": [0, 0, 1, 1, 1, 1],
            "layer": [1, 2, 1, 2, 1, 2],
            "score": [0.2, 0.8, 0.6, 0.4, 0.5, 0.5],
        }
    )
    flat = profile_table(scores, ["cat", "dog"])
    assert list(flat.columns) == PROFILE_COLUMNS
    table = flat.set_index(["subset", "class", "layer"])
    # all, class 0, layer 1: mean (0.2 + 0.6) / 2 = 0.4; std ddof=1: sqrt(((-0.2)^2 + 0.2^2) / 1) = 0.2828...
    assert table.loc[("all", 0, 1), "mean"] == pytest.approx(0.4)
    assert table.loc[("all", 0, 1), "std"] == pytest.approx(np.sqrt(0.08))
    assert table.loc[("all", 0, 2), "mean"] == pytest.approx(0.6)
    assert table.loc[("all", 0, 1), "class_name"] == "cat" and table.loc[("all", 0, 1), "n"] == 2
    # correct: class 0 only sample 0 -> its own scores, a single sample has no std.
    assert table.loc[("correct", 0, 2), "mean"] == pytest.approx(0.8)
    assert np.isnan(table.loc[("correct", 0, 2), "std"])
    # incorrect: only sample 1 (class 0); class 1 has no error and therefore no row.
    assert table.loc[("incorrect", 0, 1), "mean"] == pytest.approx(0.6)
    assert ("incorrect", 1, 1) not in table.index
    # by predicted class: sample 1 moves to class 1 -> class 1 layer 1 = (0.6 + 0.5) / 2.
    by_pred = profile_table(scores, ["cat", "dog"], by="pred").set_index(["subset", "class", "layer"])
    assert by_pred.loc[("all", 1, 1), "mean"] == pytest.approx(0.55)
    # pooled per layer: layer 2 over all = (0.8 + 0.4 + 0.5) / 3
    layers = layer_table(scores).set_index(["subset", "layer"])
    assert layers.loc[("all", 2), "mean"] == pytest.approx(1.7 / 3) and layers.loc[("all", 2), "n"] == 3


def test_profile_csv_equals_a_pandas_group_by_of_faithfulness_scores(digits_checkpoints, digits, tmp_path):
    ckpt = digits_checkpoints["laya"]
    assert run("faithfulness", ckpt, "--methods", "laya", "--bootstrap", 0, "--out", tmp_path / "f").exit_code == 0
    result = run("profile", ckpt, "--out", tmp_path / "p")
    assert result.exit_code == 0, result.output
    layers = pd.read_csv(tmp_path / "f" / "layers.csv")
    samples = pd.read_csv(tmp_path / "f" / "samples.csv")
    scores = layers.merge(samples[["sample", "label", "pred"]], on="sample").rename(columns={"attribution": "score"})
    table = pd.read_csv(
        tmp_path / "p" / "profile.csv", keep_default_na=False, na_values=[""], dtype={"class_name": str}
    )
    assert list(table.columns) == PROFILE_COLUMNS
    compare(table, pandas_profile(scores, "label"))
    names = dict(zip(table["class"], table["class_name"]))
    assert names == {k: digits["test"].class_names[k] for k in names}
    # correct + incorrect partition all
    n = table.pivot_table(index=["class", "layer"], columns="subset", values="n", fill_value=0)
    assert (n["correct"] + n["incorrect"] == n["all"]).all()
    pooled = pd.read_csv(tmp_path / "p" / "profile_layers.csv")
    oracle = scores.groupby("layer")["score"].agg(["mean", "std"])
    got = pooled[pooled["subset"] == "all"].set_index("layer")
    np.testing.assert_allclose(got["mean"], oracle["mean"], rtol=1e-6)
    np.testing.assert_allclose(got["std"], oracle["std"], rtol=1e-6)
    for name in ("profile_heatmap_all", "profile_heatmap_correct", "profile_heatmap_incorrect", "profile_layers"):
        assert_plausible_image(tmp_path / "p" / f"{name}.png")


def test_profile_by_prediction_of_a_gradient_method(digits_models, digits):
    model = digits_models["concat"]
    prof = laya_eval.profile(model, digits["test"], method="ig", by="pred", options=EvalOptions(limit=100))
    compare(prof.table, pandas_profile(prof.scores, "pred"))
    assert prof.meta["method"] == "ig" and prof.meta["by"] == "pred" and prof.meta["n"] == 100


def test_profile_checks_out_before_any_work_and_returns_what_it_wrote(digits_models, digits, tmp_path, monkeypatch):
    from laya_eval.engine import evaluation

    def work(*args, **kwargs):
        raise AssertionError("the profile was computed before its options were checked")

    model, test = digits_models["laya"], digits["test"]
    monkeypatch.setattr(evaluation, "_evaluate", work)
    a_file = tmp_path / "a-file"
    a_file.write_text("keep me")
    with pytest.raises(ConfigError, match=r"^output folder '.*a-file' exists and is not a folder\.$"):
        laya_eval.profile(model, test, out=a_file)
    with pytest.raises(ConfigError, match=r"format must be one of \{png, svg, pdf\}; got 'gif'"):
        laya_eval.profile(model, test, out=tmp_path / "new", fmt="gif")
    with pytest.raises(ConfigError, match=r"^method must be one of \{laya, .*\}; got 'gi'\.$"):
        laya_eval.profile(model, test, out=tmp_path / "new", method="gi")
    assert a_file.read_text() == "keep me" and sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]
    monkeypatch.undo()
    written = laya_eval.profile(model, test, out=tmp_path / "p", options=EvalOptions(limit=30))
    assert [p.name for p in written.files][-1] == "manifest.json" and all(p.is_file() for p in written.files)
    assert written.files[0] == tmp_path / "p" / "profile.csv" and written.warnings == []
    in_memory = laya_eval.profile(model, test, options=EvalOptions(limit=30))
    assert in_memory.files == [] and in_memory.wall_time_s > 0
    pd.testing.assert_frame_equal(in_memory.table, written.table)


def test_static_profile_is_scalarmix_softmax_weights(digits_models, digits):
    model = digits_models["scalarmix"]
    prof = laya_eval.profile(model, digits["test"], method="static", options=EvalOptions(limit=50))
    # static = softmax(w), the same for every sample: every group's mean is softmax(w)_i, its std 0.
    expected = torch.softmax(model.head.scalar_weights.detach().double(), 0).numpy()
    for layer, w in enumerate(expected, start=1):
        part = prof.table[prof.table["layer"] == layer]
        np.testing.assert_allclose(part["mean"], w, rtol=1e-5)
        assert np.nanmax(part["std"]) < 1e-6


def test_profile_figures_in_svg_and_title_names_the_run(digits_checkpoints, tmp_path):
    result = run("profile", digits_checkpoints["laya"], "--limit", 80, "--format", "svg", "--out", tmp_path)
    assert result.exit_code == 0, result.output
    svg = (tmp_path / "profile_heatmap_all.svg").read_text()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    # The printed table names the layers as the figures do: the MLP's fc1, fc2, fc3, not "layer 1".
    header = next(line for line in result.output.splitlines() if line.startswith("class"))
    assert header.split() == ["class", "fc1", "fc2", "fc3"], header
    # The title names checkpoint, dataset, ablation and scope (matplotlib writes SVG text as glyph paths,
    # so check the figure object instead).
    from laya_eval import figures

    prof = laya_eval.profile(digits_checkpoints["laya"], options=EvalOptions(limit=80))
    fig = figures.profile_heatmap(prof.table, subset="all", meta=prof.meta)
    text = " ".join(t.get_text() for t in fig.texts)
    for needle in ("digits-laya.pt", "dataset: digits", "LAYA α(x)"):
        assert needle in text, (needle, text)
    # Nothing is removed to profile scores: no ablation line; head scope is the default and is not named.
    assert "ablation" not in text and "scope" not in text, text
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == prof.meta["layer_names"] == ["fc1", "fc2", "fc3"]


def test_profile_is_deterministic(digits_checkpoints, tmp_path):
    for out in ("a", "b"):
        assert run("profile", digits_checkpoints["laya"], "--limit", 60, "--out", tmp_path / out).exit_code == 0
    for name in (
        "profile.csv",
        "profile_layers.csv",
        "profile_heatmap_all.png",
        "profile_layers.png",
        "diagnosis.csv",
        "diagnosis_summary.csv",
        "diagnosis.png",
    ):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_profile_errors_are_one_line(digits_checkpoints, tmp_path):
    assert_one_line_error(
        run("profile", digits_checkpoints["laya"], "--method", "gi", "--out", tmp_path),
        r"--method must be one of \{laya, static, contribution, ig, gradcam, grad_x_act, random, block_influence, angular_distance, alpha_norm, atp\}; got 'gi'",
    )
    assert_one_line_error(
        run("profile", digits_checkpoints["concat"], "--out", tmp_path),
        r"no requested method applies to this model: skipped laya: it needs a LAYA head; this model "
        r"has a concat head\.",
    )
    assert_one_line_error(run("profile", tmp_path / "nope.pt", "--out", tmp_path), r"nope.pt' does not exist")
    assert_one_line_error(run("profile", digits_checkpoints["laya"], "--format", "gif"), r"--format")
    assert not list(tmp_path.glob("*.csv"))
    with pytest.raises(
        ConfigError, match=r"by must be 'label' \(true class\) or 'pred' \(predicted class\); got 'true'"
    ):
        profile_table(pd.DataFrame({"sample": [0], "label": [0], "pred": [0], "layer": [1], "score": [1.0]}), by="true")


def test_profile_paper_style_writes_pdfs_and_captions(digits_checkpoints, tmp_path):
    import re

    result = run("profile", digits_checkpoints["laya"], "--limit", 60, "--style", "paper", "--out", tmp_path)
    assert result.exit_code == 0, result.output
    pdfs = sorted(p.stem for p in tmp_path.glob("*.pdf"))
    assert pdfs == [
        "diagnosis",
        "profile_heatmap_all",
        "profile_heatmap_correct",
        "profile_heatmap_incorrect",
        "profile_layers",
    ]
    for stem in pdfs[1:]:
        caption = (tmp_path / f"{stem}.caption.txt").read_text()
        assert "digits-laya.pt" in caption and "LAYA α(x)" in caption and "ablation" not in caption
        box = [
            float(v)
            for v in re.search(rb"/MediaBox \[ *([\d. ]+)\]", (tmp_path / f"{stem}.pdf").read_bytes()).group(1).split()
        ]
        assert (box[2] - box[0]) / 72 == pytest.approx(3.3)  # three layers: a single column
    caption = (tmp_path / "diagnosis.caption.txt").read_text()
    assert "digits-laya.pt" in caption and "Jensen-Shannon distance to the predicted class's" in caption
    box = [
        float(v)
        for v in re.search(rb"/MediaBox \[ *([\d. ]+)\]", (tmp_path / "diagnosis.pdf").read_bytes()).group(1).split()
    ]
    assert (box[2] - box[0]) / 72 == pytest.approx(COLUMN_WIDTHS["double"])  # two panels: the double column
    assert not list(tmp_path.glob("*.png"))


def test_profile_folder_is_replaced_whole_with_a_manifest_and_a_foreign_folder_is_refused(digits_checkpoints, tmp_path):
    import hashlib
    import json

    from laya_eval.output.origin import code_origin

    out = tmp_path / "profile"
    assert run("profile", digits_checkpoints["laya"], "--limit", 60, "--out", out, "--quiet").exit_code == 0
    assert (
        run("profile", digits_checkpoints["laya"], "--limit", 60, "--format", "svg", "--out", out, "--quiet").exit_code
        == 0
    )
    names = {p.name for p in out.iterdir()}
    assert "profile_layers.svg" in names and not any(n.endswith(".png") for n in names)  # nothing of run 1 left
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["kind"] == "profile" and manifest["code"] == code_origin()
    assert manifest["files"] == {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in out.iterdir() if p.name != "manifest.json"
    }
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    assert_one_line_error(run("profile", digits_checkpoints["laya"], "--out", foreign), "not a laya-eval result")
    assert [p.name for p in foreign.iterdir()] == ["notes.txt"]
