"""``laya-eval prune`` from the command line: files, byte-stability without timing, and bad input."""

from __future__ import annotations

import hashlib
import json

import pandas as pd
import pytest

from laya_eval.loading.checkpoints import save_checkpoint
from laya_eval.output.origin import code_origin
from laya_eval.training.head_fit import train
from laya_eval.training.trainer import TrainOptions
from laya_eval.version import __version__
from tests.cli_helpers import assert_one_line_error, run

QUICK = ["--epochs", 2, "--seeds", 1, "--random-rankings", 3, "--random-refits", 1, "--bootstrap", 20]


@pytest.fixture(scope="module")
def checkpoint(digits, tmp_path_factory):
    fitted = train(
        "mlp",
        "laya",
        digits,
        backbone_kwargs={"widths": [16, 16]},
        head_kwargs={"d_star": 8, "scorer_hidden": 8},
        options=TrainOptions(epochs=2, seed=0),
    )
    return save_checkpoint(fitted.model, tmp_path_factory.mktemp("prune") / "m.pt")


def test_prune_writes_its_folder_and_is_byte_stable_without_timing(checkpoint, tmp_path):
    outs = [tmp_path / "a", tmp_path / "b"]
    for out in outs:
        result = run("prune", checkpoint, *QUICK, "--no-timing", "--limit", 120, "--out", out, "--quiet")
        assert result.exit_code == 0, result.output
    assert "area under test accuracy vs fraction of layers removed, in accuracy units" in result.output
    assert "1 = nothing lost" not in result.output
    names = {
        "pruning.csv",
        "pruning_summary.csv",
        "pruning_comparisons.csv",
        "early_exit.csv",
        "pruning.png",
        "early_exit.png",
        "manifest.json",
    }
    assert {p.name for p in outs[0].iterdir()} == names  # no latency.csv without timing
    for name in ("pruning.csv", "pruning_summary.csv", "pruning_comparisons.csv", "early_exit.csv"):
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes()
    table = pd.read_csv(outs[0] / "pruning.csv")
    assert len(table) and table["latency_ratio"].isna().all() and table["depth"].notna().all()
    manifest = json.loads((outs[0] / "manifest.json").read_text())
    assert manifest["kind"] == "prune" and set(manifest["files"]) == names - {"manifest.json"}
    assert manifest["code"] == code_origin() and manifest["versions"]["laya_eval"] == __version__
    # A second run replaces the folder whole; with timing, latency.csv appears and ratios are filled.
    result = run("prune", checkpoint, *QUICK, "--limit", 120, "--out", outs[0], "--quiet", "--no-early-exit")
    assert result.exit_code == 0, result.output
    assert {p.name for p in outs[0].iterdir()} == {
        "pruning.csv",
        "pruning_summary.csv",
        "pruning_comparisons.csv",
        "latency.csv",
        "pruning.png",
        "manifest.json",
    }
    latency = pd.read_csv(outs[0] / "latency.csv")
    assert latency["depth"].tolist() == [0, 1, 2] and latency["latency_ratio"].iloc[-1] == 1.0


@pytest.mark.parametrize(
    "args, pattern",
    [
        (["--ablation", "gate,bogus"], "--ablation"),
        (["--methods", "nope"], "--methods"),
        (["--seeds", "-1"], "--seeds"),
        (["--train-seed", "-1"], "--train-seed"),
        (["--data", "no-such-dataset"], "no-such-dataset"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(checkpoint, tmp_path, args, pattern):
    assert_one_line_error(run("prune", checkpoint, *args, "--out", tmp_path / "x", "--quiet"), pattern)
    assert not (tmp_path / "x").exists()


def test_sanity_takes_the_same_seed_range(checkpoint, tmp_path):
    assert_one_line_error(run("sanity", checkpoint, "--train-seed", "-1", "--out", tmp_path / "x"), "--train-seed")


def test_a_missing_checkpoint_is_one_line(tmp_path):
    assert_one_line_error(run("prune", tmp_path / "missing.pt", "--out", tmp_path / "x"), "missing.pt")


def test_a_foreign_output_folder_is_refused_before_work(checkpoint, tmp_path):
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    assert_one_line_error(run("prune", checkpoint, "--out", foreign, "--quiet"), "not a laya-eval result")
    assert (foreign / "notes.txt").read_text() == "keep me"


def test_prune_paper_style_writes_pdfs_and_captions(checkpoint, tmp_path):
    """--style paper: each figure as PDF with its caption beside it, every file in the manifest."""
    out = tmp_path / "paper"
    result = run("prune", checkpoint, *QUICK, "--no-timing", "--limit", 60, "--style", "paper", "--out", out, "--quiet")
    assert result.exit_code == 0, result.output
    names = {p.name for p in out.iterdir()}
    assert {"pruning.pdf", "pruning.caption.txt", "early_exit.pdf", "early_exit.caption.txt"} <= names
    assert not any(n.endswith(".png") for n in names)
    assert (out / "pruning.pdf").read_bytes()[:5] == b"%PDF-"
    assert (out / "pruning.caption.txt").read_text().endswith(".\n")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["files"] == {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in out.iterdir() if p.name != "manifest.json"
    }
