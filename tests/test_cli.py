"""The click front end: exit codes, one-line errors, end to end on a real tiny checkpoint."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
import torch

from laya_eval.catalog import MIXER_MODEL_KINDS
from laya_eval.engine.methods import METHODS
from laya_eval.models.backbones import BACKBONES
from laya_eval.models.heads import HEADS
from laya_eval.engine.removals import ABLATIONS
from laya_eval_cli.commands import ALL
from laya_eval_cli.commands import train as train_cmd
from tests.cli_helpers import assert_one_line_error, run

README = Path(__file__).resolve().parents[1] / "README.md"


@pytest.mark.parametrize("command", [c.name for c in ALL])
def test_every_command_has_help_and_is_in_the_readme(command):
    result = run(command, "--help")
    assert result.exit_code == 0 and "Usage:" in result.output
    assert f"laya-eval {command}" in README.read_text()


def test_cli_choices_come_from_the_registries():
    from laya_eval import catalog

    from laya_eval.options import option

    # One owner: the catalog, read by the option records the CLI is built from and by the registries.
    assert list(METHODS) == catalog.method_names()
    # --methods also takes the scores of a causal LM's own next-token prediction that no classifier method shares.
    next_token_only = [m for m in catalog.NEXT_TOKEN_METHODS if m not in METHODS]
    assert next_token_only == ["logit_lens"]
    assert option("EvalOptions.methods").choice_list() == list(METHODS) + next_token_only
    assert option("EvalOptions.ablation").choice_list() == list(catalog.ABLATIONS) == list(ABLATIONS)
    head = next(p for p in train_cmd.train.params if p.name == "head")
    assert list(head.type.choices) == list(catalog.HEAD_NAMES) == list(HEADS)
    # 'modules' wraps a Python object; the depth-mixer classifiers are trained by train too (their own registry).
    backbone = next(p for p in train_cmd.train.params if p.name == "backbone")
    assert set(backbone.type.choices) == (set(BACKBONES) - {"modules"}) | set(MIXER_MODEL_KINDS)


def test_faithfulness_end_to_end(digits_checkpoints, tmp_path):
    out = tmp_path / "res"
    result = run("faithfulness", digits_checkpoints["scalarmix"], "--limit", 40, "--bootstrap", 50, "--out", out, "-q")
    assert result.exit_code == 0, result.output
    assert "Skipped laya: it needs a LAYA head; this model has a scalarmix head." in result.output
    assert sorted(p.name for p in out.iterdir()) == [
        "comparisons.csv",
        "layers.csv",
        "manifest.json",
        "samples.csv",
        "summary.csv",
    ]
    summary = pd.read_csv(out / "summary.csv")
    assert list(summary.method) == [
        "static",
        "contribution",
        "ig",
        "gradcam",
        "grad_x_act",
        "random",
        "block_influence",
        "angular_distance",
        "alpha_norm",
    ]
    for row in summary.itertuples():  # every method's row of the printed table carries its numbers
        assert re.search(rf"^{row.method}\s+{re.escape(f'{row.faithfulness:+.4f}')} ", result.output, re.M)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["n_samples"] == 40 and manifest["options"]["bootstrap"] == 50


def test_faithfulness_with_several_ablations(digits_checkpoints, tmp_path):
    args = ("--limit", 30, "--bootstrap", 20, "--methods", "laya,contribution,random", "-q")
    both = run("faithfulness", digits_checkpoints["laya"], "--ablation", "gate,mean", "--out", tmp_path / "both", *args)
    assert both.exit_code == 0, both.output
    assert sorted(p.name for p in (tmp_path / "both").iterdir()) == ["gate", "mean", "operators.csv"]
    for ablation in ("gate", "mean"):
        alone = run(
            "faithfulness", digits_checkpoints["laya"], "--ablation", ablation, "--out", tmp_path / ablation, *args
        )
        assert alone.exit_code == 0, alone.output
        a = pd.read_csv(tmp_path / "both" / ablation / "summary.csv")
        b = pd.read_csv(tmp_path / ablation / "summary.csv")
        pd.testing.assert_frame_equal(a, b)
        assert (a.ablation == ablation).all()
        assert f"ablation {ablation}, scope head" in both.output
    assert_one_line_error(
        run("faithfulness", digits_checkpoints["laya"], "--ablation", "gate,bogus", "--out", tmp_path / "bad"),
        r"--ablation must be one of \{gate, gate-renorm, zero, mean, resample, noise, skip, mean-update, resample-update, noise-update\}; got 'bogus'",
    )
    assert_one_line_error(
        run(
            "faithfulness",
            digits_checkpoints["laya"],
            "--ablation",
            "zero,gate",
            "--scope",
            "network",
            "--out",
            tmp_path / "bad",
        ),
        r"network",
    )
    assert not (tmp_path / "bad").exists()


def test_train_then_info(digits, tmp_path):
    ckpt = tmp_path / "m.pt"
    result = run(
        "train",
        "--dataset",
        "digits",
        "--head",
        "concat",
        "--epochs",
        2,
        "--seed",
        0,
        "--out",
        ckpt,
        "-q",
        "--backbone-arg",
        "widths=[16,8]",
    )
    assert result.exit_code == 0, result.output
    m = re.search(r"test accuracy (\d\.\d{4}), macro-F1 (\d\.\d{4})", result.output)
    assert m, result.output
    info = run("info", ckpt)
    assert info.exit_code == 0
    stored = float(re.search(r"metrics\.test_accuracy\s+(\S+)", info.output).group(1))
    assert stored == pytest.approx(float(m.group(1)), abs=1e-4)
    assert re.search(r"backbone\s+mlp .*'widths': \[16, 8\]", info.output)
    # the faithfulness manifest says how the model was trained and how well it did
    out = tmp_path / "res"
    faith = run("faithfulness", ckpt, "--limit", 20, "--bootstrap", 10, "--methods", "contribution", "--out", out, "-q")
    assert faith.exit_code == 0, faith.output
    model = json.loads((out / "manifest.json").read_text())["model"]
    assert model["training"]["seed"] == 0 and model["training"]["epochs"] == 2
    assert model["training"]["epochs_run"] == 2 and "history" not in model["training"]
    assert model["metrics"]["test_accuracy"] == pytest.approx(float(m.group(1)), abs=1e-4)


def test_train_limit_trains_and_tests_on_the_first_rows_and_the_checkpoint_says_so(digits, tmp_path):
    from laya_eval.loading.checkpoints import load_checkpoint

    ckpt = tmp_path / "m.pt"
    args = ("--head", "concat", "--epochs", 1, "--out", ckpt, "-q", "--backbone-arg", "widths=[8]")
    result = run("train", "--dataset", "digits", "--limit", 40, *args)
    assert result.exit_code == 0, result.output
    assert "on 40 held-out rows (train 40, val 40;" in result.output
    metrics = load_checkpoint(ckpt).info.metrics
    assert (metrics["n_train"], metrics["n_val"], metrics["n_test"]) == (40, 40, 40)
    assert_one_line_error(run("train", "--dataset", "digits", "--limit", 0, *args), r"--limit")


def test_threads_option_sets_torch_threads(digits_checkpoints):
    before = torch.get_num_threads()
    try:
        target = 1 if before != 1 else 2
        result = run("--threads", target, "info", digits_checkpoints["laya"])
        assert result.exit_code == 0, result.output
        assert torch.get_num_threads() == target
    finally:
        torch.set_num_threads(before)
    assert_one_line_error(run("--threads", 0, "info", digits_checkpoints["laya"]), r"--threads")


def test_freeze_backbone_with_init(digits_checkpoints, tmp_path):
    ckpt = tmp_path / "head-only.pt"
    result = run(
        "train",
        "--dataset",
        "digits",
        "--head",
        "laya",
        "--epochs",
        1,
        "--out",
        ckpt,
        "-q",
        "--freeze-backbone",
        "--init",
        digits_checkpoints["concat"],
        "--d-star",
        8,
    )
    assert result.exit_code == 0, result.output
    from laya_eval.loading.checkpoints import load_checkpoint

    new, old = load_checkpoint(ckpt), load_checkpoint(digits_checkpoints["concat"])
    for (k, a), b in zip(new.backbone.state_dict().items(), old.backbone.state_dict().values()):
        assert torch.equal(a, b), k


def test_bad_input_gives_one_line_and_exit_2(digits_checkpoints, tmp_path):
    ckpt = digits_checkpoints["laya"]
    assert_one_line_error(
        run("faithfulness", ckpt, "--methods", "ig,gi"),
        r"--methods must be one of \{laya, static, contribution, ig, gradcam, grad_x_act, random, block_influence, angular_distance, alpha_norm, atp, logit_lens\}; got 'gi'",
    )
    assert_one_line_error(run("faithfulness", tmp_path / "nope.pt"), r"checkpoint '.*nope.pt' does not exist")
    assert_one_line_error(run("faithfulness", ckpt, "--limit", 99999), r"limit 99999 is larger than the 360 samples")
    assert_one_line_error(run("faithfulness", ckpt, "--ablation", "drop"), r"--ablation")
    assert_one_line_error(
        run("faithfulness", ckpt, "--scope", "network", "--ablation", "gate"),
        re.escape(
            "--ablation must be an ablation defined at network scope (zero, mean, resample, noise, skip, mean-update, resample-update, noise-update: "
            "gate acts on the head's terms, not inside the backbone); got 'gate'."
        ),
    )
    assert_one_line_error(run("faithfulness", ckpt, "--data", "imagenet"), r"dataset must be one of .*got 'imagenet'")
    assert_one_line_error(run("train", "--dataset", "digits", "--head", "lay", "--out", tmp_path / "x.pt"), r"--head")
    assert_one_line_error(
        run(
            "train",
            "--dataset",
            "cifar10",
            "--backbone",
            "cnn",
            "--data-dir",
            tmp_path,
            "--out",
            tmp_path / "x.pt",
            "--epochs",
            1,
        ),
        r"cifar",
    )
    if not torch.cuda.is_available():
        assert_one_line_error(
            run("faithfulness", ckpt, "--device", "cuda"), r"no CUDA GPU is available; use --device cpu"
        )
    truncated = tmp_path / "cut.pt"
    truncated.write_bytes(Path(ckpt).read_bytes()[:1000])
    assert_one_line_error(run("info", truncated), r"cut.pt' is not a readable checkpoint")
    assert_one_line_error(run("nosuchcommand"), r"No such command")


def test_data_that_does_not_fit_the_model(digits_checkpoints, tmp_path):
    import numpy as np

    path = tmp_path / "wrong.npz"
    np.savez(path, x=np.zeros((5, 10), dtype=np.float32), y=np.zeros(5, dtype=np.int64))
    assert_one_line_error(
        run("faithfulness", digits_checkpoints["laya"], "--data", f"npz:{path}"),
        r"has samples of shape \(10,\); the model expects \(64,\)",
    )


def test_help_does_not_import_torch():
    """--help must be instant: the library (and torch) load only inside a command."""
    import subprocess
    import sys

    code = (
        "import sys; from click.testing import CliRunner; from laya_eval_cli.main import cli; "
        "r = CliRunner().invoke(cli, ['faithfulness', '--help']); "
        "assert r.exit_code == 0, r.output; print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_public_api_names_resolve():
    import laya_eval

    for name in laya_eval.__all__:
        assert getattr(laya_eval, name) is not None


@pytest.mark.slow
def test_python_dash_m_runs_the_same_cli_and_version():
    """`python -m laya_eval_cli` and `python -m laya_eval_cli.main` are `laya-eval` (a process boundary: subprocess)."""
    import importlib.metadata
    import importlib.util
    import os
    import subprocess
    import sys
    from pathlib import Path

    import laya_eval
    import laya_eval_cli

    # The package has its own __main__ (an editable install elsewhere could otherwise supply one).
    spec = importlib.util.find_spec("laya_eval_cli.__main__")
    assert spec is not None and Path(spec.origin).parent == Path(laya_eval_cli.__file__).parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    script = Path(sys.executable).with_name("laya-eval")
    if not script.is_file():
        pytest.skip("the laya-eval entry point is not installed next to this Python")
    reference = subprocess.run([str(script), "--help"], capture_output=True, text=True, env=env)
    assert reference.returncode == 0 and reference.stdout.startswith("Usage: laya-eval ")
    for module in ("laya_eval_cli", "laya_eval_cli.main"):
        out = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, env=env)
        assert out.returncode == 0 and out.stderr == ""
        assert out.stdout == reference.stdout, module
    out = subprocess.run([sys.executable, "-m", "laya_eval_cli", "--version"], capture_output=True, text=True, env=env)
    assert out.stdout == f"laya-eval, version {laya_eval.__version__}\n"
    assert laya_eval.__version__ == importlib.metadata.version("laya-eval")
    bad = subprocess.run(
        [sys.executable, "-m", "laya_eval_cli", "report", "/nonexistent-folder"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert bad.returncode == 2 and bad.stderr.startswith("Error: result folder") and "Traceback" not in bad.stderr


def test_cli_defaults_are_the_librarys():
    # every option the CLI shares with an option class has the class's default (one copy, in the catalog)
    import dataclasses

    from laya_eval import EvalOptions, PruneOptions, SanityOptions, TrainOptions
    from laya_eval_cli.main import cli

    def default(command, option):
        return next(p.default for p in cli.commands[command].params if p.name == option)

    train, evaluation = TrainOptions(), EvalOptions()
    for command in ("train", "fit-head"):
        for field in ("epochs", "batch_size", "lr", "patience", "seed"):
            assert default(command, field) == getattr(train, field), (command, field)
    for command, retrained in (("sanity", SanityOptions().train), ("prune", PruneOptions().train)):
        for field in ("epochs", "patience", "lr"):
            assert default(command, field) == getattr(retrained, field), (command, field)
        assert default(command, "train_seed") == retrained.seed
    for field in ("batch_size", "bootstrap", "chunk_size", "tie_rtol", "seed"):
        assert default("faithfulness", field) == getattr(evaluation, field), field
    assert default("sanity", "bootstrap") == SanityOptions().bootstrap
    assert default("prune", "bootstrap") == PruneOptions().bootstrap
    assert {f.name for f in dataclasses.fields(TrainOptions)} >= {"epochs", "batch_size", "lr", "patience", "seed"}
