"""``laya_eval.sweep``: config checks, the cells it computes, resume after a stop, the aggregate."""

from __future__ import annotations

import copy
import json
import re

import numpy as np
import pandas as pd
import pytest
import torch

from tests.cli_helpers import assert_one_line_error, run
from laya_eval import load_model
from laya_eval.data import load_dataset
from laya_eval.errors import ConfigError, DataError
from laya_eval.reporting.runs import load_runs
from laya_eval.sweeps.config import load_config
from laya_eval.sweeps.run import sweep

# 2 widths × 2 seeds × 2 heads on digits, 1 epoch, 40 samples scored: a few seconds.
GRID = {
    "grid": {
        "datasets": ["digits"],
        "heads": ["concat", "laya"],
        "seeds": [0, 1],
        "backbones": [
            {"name": "mlp", "label": "w8", "kwargs": {"widths": [8, 8]}},
            {"name": "mlp", "label": "w16", "kwargs": {"widths": [16, 8]}},
        ],
    },
    "data": {"train_limit": 200, "val_limit": 60, "test_limit": 60},
    "training": {"epochs": 1},
    "evaluation": {
        "ablation": ["gate", "mean"],
        "methods": ["contribution", "random"],
        "limit": 40,
        "bootstrap": 20,
        "n_steps": 4,
    },
}
AGGREGATE = ("runs.csv", "sweep.csv", "sweep_summary.csv", "layer_weights.csv")
CELLS = [f"digits-{w}-{h}-seed{s}" for w in ("w8", "w16") for s in (0, 1) for h in ("concat", "laya")]


class Stop(Exception):
    pass


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "full"
    return sweep(GRID, out)


def test_cells_in_grid_order_with_their_folders(uninterrupted):
    assert uninterrupted.computed == CELLS and uninterrupted.reused == []
    for cell in CELLS:
        folder = uninterrupted.out_dir / "cells" / cell
        assert (folder / f"{cell}.pt").is_file()
        assert sorted(p.name for p in (folder / "eval").iterdir()) == ["gate", "mean", "operators.csv"]
    runs = uninterrupted.tables["runs"]
    assert list(runs["cell"]) == CELLS and set(runs["n_test"]) == {60}


def test_sweep_table_rows_come_from_the_cells_summaries(uninterrupted):
    table = pd.read_csv(uninterrupted.out_dir / "sweep.csv")
    assert len(table) == 8 * 2 * 2  # cells × ablations × methods
    row = table[(table.cell == "digits-w16-laya-seed1") & (table.ablation == "mean") & (table.method == "random")]
    summary = pd.read_csv(uninterrupted.out_dir / "cells/digits-w16-laya-seed1/eval/mean/summary.csv")
    expected = summary[summary.method == "random"].iloc[0]
    assert row["faithfulness"].item() == expected["faithfulness"] and row["n"].item() == 40
    record = json.loads((uninterrupted.out_dir / "cells/digits-w16-laya-seed1/cell.json").read_text())
    assert row["accuracy"].item() == pytest.approx(record["metrics"]["accuracy"], rel=1e-7)


def test_summary_is_mean_and_sample_std_over_seeds(uninterrupted):
    table = pd.read_csv(uninterrupted.out_dir / "sweep.csv")
    summary = pd.read_csv(uninterrupted.out_dir / "sweep_summary.csv")
    assert len(summary) == 2 * 2 * 2 * 2 and set(summary["n_seeds"]) == {2}
    sel = table[
        (table.backbone == "w8")
        & (table["head"] == "concat")
        & (table.ablation == "gate")
        & (table.method == "contribution")
    ]
    values = sel["deletion_at_1"].to_numpy()
    got = summary[
        (summary.backbone == "w8")
        & (summary["head"] == "concat")
        & (summary.ablation == "gate")
        & (summary.method == "contribution")
    ].iloc[0]
    assert got["deletion_at_1_mean"] == pytest.approx((values[0] + values[1]) / 2, rel=1e-7)
    assert got["deletion_at_1_std"] == pytest.approx(abs(values[0] - values[1]) / np.sqrt(2), rel=1e-6)


def test_layer_weights_are_a_softmax_for_laya_only(uninterrupted):
    weights = pd.read_csv(uninterrupted.out_dir / "layer_weights.csv")
    assert set(weights["head"]) == {"laya"} and len(weights) == 4 * 2
    np.testing.assert_allclose(weights.groupby("cell")["mean_weight"].sum(), 1.0, atol=1e-5)


def test_stopped_sweep_resumes_only_the_missing_cells(uninterrupted, tmp_path):
    out = tmp_path / "stopped"
    done = []

    def stop_after_three(cell, status):
        if status == "done":
            done.append(cell.name)
            if len(done) == 3:
                raise Stop

    with pytest.raises(Stop):
        sweep(GRID, out, progress=stop_after_three)
    # the fourth cell is left half-done: its folder exists without cell.json
    half = out / "cells" / CELLS[3]
    half.mkdir(parents=True)
    (half / "stale.txt").write_text("partial")
    stamps = {c: (out / "cells" / c / "cell.json").stat().st_mtime_ns for c in CELLS[:3]}
    started = []
    result = sweep(GRID, out, progress=lambda c, s: started.append(c.name) if s == "start" else None)
    assert result.reused == CELLS[:3] and result.computed == CELLS[3:] == started
    assert {c: (out / "cells" / c / "cell.json").stat().st_mtime_ns for c in CELLS[:3]} == stamps
    assert not (half / "stale.txt").exists()
    for name in AGGREGATE:
        assert (out / name).read_bytes() == (uninterrupted.out_dir / name).read_bytes(), name


def test_a_changed_or_damaged_cell_is_redone(uninterrupted, tmp_path):
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(uninterrupted.out_dir, out)
    summary = out / "cells" / CELLS[5] / "eval" / "gate" / "summary.csv"
    summary.write_text(summary.read_text().replace("random", "randon"))
    result = sweep(GRID, out)
    assert result.computed == [CELLS[5]]
    assert (out / "sweep.csv").read_bytes() == (uninterrupted.out_dir / "sweep.csv").read_bytes()
    changed = copy.deepcopy(GRID)
    changed["evaluation"]["limit"] = 30  # a different key for every cell
    assert sweep(changed, out).computed == CELLS
    assert sweep(GRID, out, resume=False).computed == CELLS


def test_changed_laya_eval_code_redoes_every_cell(uninterrupted, tmp_path, monkeypatch):
    """The cell key holds the code's sha256 (worked out from the files in tests/test_provenance.py)."""
    import shutil

    from laya_eval.output.origin import code_origin

    out = tmp_path / "copy"
    shutil.copytree(uninterrupted.out_dir, out)
    assert sweep(GRID, out).reused == CELLS  # the same code: nothing to redo
    monkeypatch.setattr("laya_eval.sweeps.cells.package_source_sha256", lambda: "0" * 64)  # as after an edit
    assert sweep(GRID, out).computed == CELLS
    assert (out / "sweep.csv").read_bytes() == (uninterrupted.out_dir / "sweep.csv").read_bytes()
    record = json.loads((out / "cells" / CELLS[0] / "cell.json").read_text())
    assert record["code"] == code_origin()  # the code recorded beside the key, which the edit changed


def test_report_reads_a_sweep_folder(uninterrupted):
    runs = load_runs([uninterrupted.out_dir])
    assert len(runs) == 8 * 2
    assert {(r.meta["head"], r.meta["ablation"]) for r in runs} == {
        (h, a) for h in ("concat", "laya") for a in ("gate", "mean")
    }


def _with(path: tuple, value, drop: bool = False) -> dict:
    config = copy.deepcopy(GRID)
    table = config
    for key in path[:-1]:
        table = table[key]
    if drop:
        del table[path[-1]]
    else:
        table[path[-1]] = value
    return config


@pytest.mark.parametrize(
    "config, message",
    [
        (
            _with(("grid", "head"), ["laya"]),
            "grid: unknown key 'head'; expected among {backbones, datasets, heads, seeds}.",
        ),
        (_with(("grid", "seeds"), None, drop=True), "grid: missing key 'seeds'."),
        (
            _with(("grid", "heads"), ["laya", "lasso"]),
            "grid.heads must be one of {lastlayer, concat, scalarmix, laya}; got 'lasso'.",
        ),
        (_with(("grid", "seeds"), [0, -1]), "grid.seeds must be an integer from 0 to 2**63 - 1; got -1."),
        (_with(("grid", "seeds"), []), "grid.seeds must be a non-empty list; got []."),
        (
            _with(("grid", "backbones"), [{"name": "resnet"}]),
            "grid.backbones[0].name must be one of {mlp, cnn, vit, hf}; got 'resnet'.",
        ),
        (
            _with(("grid", "backbones"), [{"name": "mlp"}, {"name": "mlp", "kwargs": {"widths": [8]}}]),
            "grid.backbones labels must be distinct (give each backbone a label); got ['mlp', 'mlp'].",
        ),
        (_with(("training", "epochs"), 0), "training.epochs must be a positive integer; got 0."),
        (
            _with(("training", "epoch"), 2),
            "training: unknown key 'epoch'; expected among {batch_size, device, epochs, freeze_backbone, lr, patience}.",
        ),
        (
            _with(("evaluation", "ablation"), ["gate", "erase"]),
            "evaluation.ablation must be one of {gate, gate-renorm, zero, mean, resample, noise, skip, mean-update, resample-update, noise-update}; got 'erase'.",
        ),
        (_with(("evaluation", "bootstrap"), True), "evaluation.bootstrap must be a non-negative integer; got True."),
        (_with(("evaluation", "scope"), "nope"), "evaluation.scope must be one of {head, network}; got 'nope'."),
        (
            _with(("evaluation", "scope"), "network"),
            "evaluation.ablation must be an ablation defined at network scope (zero, mean, resample, noise, skip, mean-update, resample-update, noise-update: gate acts on "
            "the head's terms, not inside the backbone); got 'gate'.",
        ),
        (
            _with(("evaluation", "seed"), 2**63),
            "evaluation.seed must be an integer from 0 to 2**63 - 1; got 9223372036854775808.",
        ),
        (
            _with(("evaluation", "device"), "quantum"),
            "evaluation.device must be 'cpu', 'cuda' or 'cuda:N'; got 'quantum'.",
        ),
        (
            _with(("evaluation", "target"), "next-token"),
            "evaluation.target 'next-token' is for a causal LM's own prediction (laya-eval faithfulness hf:DIR "
            "--target next-token); a sweep evaluates the heads it trains: use pred, label or a class index.",
        ),
        (
            _with(("evaluation", "targets"), "label"),
            "evaluation: unknown key 'targets'; expected among {ablation, "
            "allow_nonfinite, angular_span, batch_size, bootstrap, cache, chunk_size, context, device, draws, dtype, ig_baseline, "
            "internal_batch_size, limit, max_memory_mb, methods, n_steps, reference, save_draws, scope, seed, split, table_format, "
            "target, tie_rtol}.",
        ),
        (_with(("training", "device"), "tpu"), "training.device must be 'cpu', 'cuda' or 'cuda:N'; got 'tpu'."),
        (_with(("training", "lr"), 0.0), "training.lr must be a finite number > 0; got 0.0."),
        (
            _with(("outdir",), "x"),
            "the sweep config: unknown key 'outdir'; expected among {cache_dir, data, evaluation, grid, head_kwargs, "
            "training}.",
        ),
    ],
)
def test_config_errors_name_the_key_and_the_value(config, message):
    with pytest.raises(ConfigError) as err:
        load_config(config)
    assert str(err.value) == message


def test_cli_bad_config_is_one_line_before_any_work(tmp_path):
    config = tmp_path / "bad.toml"
    config.write_text(
        '[grid]\ndatasets = ["digits"]\nheads = ["laya"]\nseeds = [0]\n'
        'backbones = [{name = "mlp"}]\n[evaluation]\nlimit = -5\n'
    )
    out = tmp_path / "out"
    assert_one_line_error(
        run("sweep", config, "--out", out), re.escape("evaluation.limit must be a positive integer; got -5.")
    )
    assert not out.exists()
    # Refused by the options the cells build, still before the first cell is trained.
    config.write_text(
        config.read_text().replace("limit = -5", "scope = 'network'\nablation = ['zero']\nseed = 9223372036854775808")
    )
    assert_one_line_error(
        run("sweep", config, "--out", out),
        re.escape("evaluation.seed must be an integer from 0 to 2**63 - 1; got 9223372036854775808."),
    )
    assert not out.exists()
    config.write_text("[grid\n")
    assert_one_line_error(run("sweep", config, "--out", out), "is not valid TOML")


def test_cli_runs_a_sweep_and_prints_the_summary(tmp_path):
    config = tmp_path / "one.toml"
    config.write_text(
        '[grid]\ndatasets = ["digits"]\nheads = ["scalarmix"]\nseeds = [3]\n'
        'backbones = [{name = "mlp", kwargs = {widths = [8, 8]}}]\n[data]\ntrain_limit = 100\n'
        "val_limit = 40\ntest_limit = 30\n[training]\nepochs = 1\n"
        '[evaluation]\nmethods = ["static"]\nbootstrap = 0\nlimit = 1000\n'
    )
    result = run("sweep", config, "--out", tmp_path / "out", "--quiet")
    assert result.exit_code == 0, result.output
    assert "1 cell(s) computed, 0 reused" in result.output and "static" in result.output
    # limit is "at most": the 30 test samples of the cell, not an error after the training
    assert set(pd.read_csv(tmp_path / "out" / "sweep.csv")["n"]) == {30}
    again = run("sweep", config, "--out", tmp_path / "out", "--quiet")
    assert "0 cell(s) computed, 1 reused" in again.output


def test_changed_data_content_redoes_the_cells(tmp_path):
    """Same config, same file name, other numbers in the file: the key sees the content, so nothing is reused."""
    rng = np.random.default_rng(0)
    path = tmp_path / "data.npz"

    def write(shift: float) -> None:
        x = rng.normal(size=(80, 6)).astype(np.float32) + shift
        np.savez(path, x_train=x[:60], y_train=np.arange(60) % 3, x_test=x[60:], y_test=np.arange(20) % 3)

    config = {
        "grid": {
            "datasets": [f"npz:{path}"],
            "heads": ["concat"],
            "seeds": [0],
            "backbones": [{"name": "mlp", "kwargs": {"widths": [4, 4]}}],
        },
        "training": {"epochs": 1},
        "evaluation": {"methods": ["random"], "bootstrap": 0},
    }
    write(0.0)
    assert len(sweep(config, tmp_path / "out").computed) == 1
    assert len(sweep(config, tmp_path / "out").reused) == 1
    write(1.0)
    assert len(sweep(config, tmp_path / "out").computed) == 1


def test_a_network_scope_sweep_scores_the_removals_inside_the_backbone(tmp_path):
    """``scope = "network"`` with a network ablation runs (the options carry the config's first ablation), and the
    effects are those of zeroing each block's output inside the backbone, computed here by hand."""
    config = {
        "grid": {
            "datasets": ["digits"],
            "heads": ["laya"],
            "seeds": [0],
            "backbones": [{"name": "mlp", "kwargs": {"widths": [8, 8]}}],
        },
        "data": {"train_limit": 200, "val_limit": 60, "test_limit": 60},
        "training": {"epochs": 1},
        "evaluation": {"scope": "network", "ablation": ["zero"], "methods": ["random"], "limit": 20, "bootstrap": 0},
    }
    done = sweep(config, tmp_path / "out")
    assert len(done.computed) == 1
    cell = tmp_path / "out" / "cells" / "digits-mlp-laya-seed0"
    manifest = json.loads((cell / "eval" / "manifest.json").read_text())
    assert manifest["options"]["scope"] == "network" and manifest["options"]["ablation"] == "zero"
    model = load_model(cell / "digits-mlp-laya-seed0.pt").model
    x = load_dataset("digits", "test").x[:20]
    with torch.no_grad():
        probs = torch.softmax(model.head(model.hidden_states(x)), -1)
        pred = probs.argmax(-1)
        expected = [
            probs.gather(1, pred[:, None])[:, 0]
            - torch.softmax(model.head(model.hidden_states(x, {i: torch.zeros_like})), -1).gather(1, pred[:, None])[
                :, 0
            ]
            for i in range(model.n_layers)
        ]
    layers = pd.read_csv(cell / "eval" / "layers.csv").query("method == 'random'").sort_values(["sample", "layer"])
    got = layers["effect"].to_numpy().reshape(20, model.n_layers)
    np.testing.assert_allclose(got, torch.stack(expected, 1).numpy(), rtol=0, atol=1e-6)


def test_cell_names_are_folder_names():
    config = copy.deepcopy(GRID)
    config["grid"]["datasets"] = ["npz:/data/a b/set.npz"]
    config["grid"]["backbones"] = [{"model": "hf:org/enc", "label": "org/enc"}]
    assert [c.name for c in load_config(config).cells][:2] == [
        "npz-set-org_enc-concat-seed0",
        "npz-set-org_enc-laya-seed0",
    ]
    config["grid"]["datasets"] = ["npz:/x/set.npz", "npz:/y/set.npz"]
    with pytest.raises(
        ConfigError,
        match=re.escape(
            "grid.datasets must be datasets whose names give distinct "
            "cell folders; got ['npz:/x/set.npz', 'npz:/y/set.npz']."
        ),
    ):
        load_config(config)


def test_a_missing_dataset_fails_before_any_cell(tmp_path):
    config = copy.deepcopy(GRID)
    config["grid"]["datasets"] = ["digits", f"npz:{tmp_path / 'absent.npz'}"]
    started = []
    with pytest.raises(DataError, match="absent.npz"):
        sweep(config, tmp_path / "out", progress=lambda c, s: started.append(c.name))
    assert started == [] and not any((tmp_path / "out" / "cells").iterdir())


def test_every_evaluation_option_is_a_sweep_key_and_each_cell_runs_with_it(tmp_path):
    """[evaluation] takes every EvalOptions field a run can set by its field name (the option records), and a cell
    evaluates with exactly those values: its manifest records them and its tables equal evaluate() called with them."""

    from laya_eval.engine.evaluation import EvalOptions, evaluate
    from laya_eval.options import options_of
    from laya_eval.sweeps.config import _EVALUATION

    settable = {n for n, o in options_of("EvalOptions").items() if o.role != "permission"} - {"cache_dir"}
    assert _EVALUATION == settable
    asked = {
        "target": "label",
        "dtype": "bfloat16",
        "draws": 3,
        "tie_rtol": 0.001,
        "ig_baseline": "mean",
        "ablation": ["gate", "noise"],
        "methods": ["contribution", "ig", "random"],
        "limit": 30,
        "bootstrap": 20,
        "n_steps": 4,
    }
    config = {**copy.deepcopy(GRID), "evaluation": asked}
    config["grid"] = {**config["grid"], "heads": ["laya"], "seeds": [0], "backbones": config["grid"]["backbones"][:1]}
    done = sweep(config, tmp_path / "sweep")
    cell = tmp_path / "sweep" / "cells" / done.computed[0]
    for ablation in ("gate", "noise"):
        manifest = json.loads((cell / "eval" / ablation / "manifest.json").read_text())
        for key in ("target", "dtype", "draws", "tie_rtol", "ig_baseline"):
            assert manifest["options"][key] == asked[key], key
        assert manifest["options"]["ablation"] == ablation
    # the oracle: the same checkpoint evaluated directly with the same options
    options = EvalOptions(**{k: tuple(v) if isinstance(v, list) else v for k, v in asked.items()})
    test = load_dataset("digits", "test").subset(slice(0, 60))
    direct = evaluate(load_model(cell / f"{done.computed[0]}.pt").model, test, options=options)
    for ablation in ("gate", "noise"):
        got = pd.read_csv(cell / "eval" / ablation / "summary.csv")
        want = direct[ablation].summary
        np.testing.assert_allclose(got["faithfulness"], want["faithfulness"], rtol=1e-6, atol=1e-8)
