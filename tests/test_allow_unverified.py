"""``--allow-unverified`` on every command that loads a checkpoint (and ``allow_unverified`` in a sweep config).

A checkpoint without its checksum is refused in one line by each command; with the flag it loads, and the
oracle is the same command on the intact checkpoint: the outputs must be the same bytes (the checksum only
guards the model, it does not change it).
"""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from laya_eval.errors import ConfigError
from laya_eval.sweeps.config import load_config
from tests.cli_helpers import assert_one_line_error, run

REFUSED = r"lacks checksum: nothing can check .*--allow-unverified"


@pytest.fixture(scope="module")
def unverified(digits_checkpoints, tmp_path_factory):
    """The LAYA digits checkpoint without its checksum (as an edited or older file would be)."""
    payload = torch.load(digits_checkpoints["laya"], weights_only=True)
    del payload["checksum"]
    path = tmp_path_factory.mktemp("unverified") / "digits-laya-unverified.pt"
    torch.save(payload, path)
    return path


def test_profile_refuses_an_unverified_checkpoint_and_takes_it_with_the_flag(unverified, digits_checkpoints, tmp_path):
    args = ("--method", "contribution", "--limit", 40, "--bootstrap", 0, "--quiet")
    assert_one_line_error(run("profile", unverified, *args, "--out", tmp_path / "refused"), REFUSED)
    assert not (tmp_path / "refused").exists()
    allowed = run("profile", unverified, "--allow-unverified", *args, "--out", tmp_path / "allowed")
    assert allowed.exit_code == 0, allowed.output
    intact = run("profile", digits_checkpoints["laya"], *args, "--out", tmp_path / "intact")
    assert intact.exit_code == 0, intact.output
    for name in ("profile.csv", "diagnosis.csv"):
        assert (tmp_path / "allowed" / name).read_bytes() == (tmp_path / "intact" / name).read_bytes(), name


def test_fit_head_refuses_an_unverified_checkpoint_and_takes_it_with_the_flag(
    unverified, digits_checkpoints, tmp_path, digits
):
    from laya_eval.loading.checkpoints import load_checkpoint

    args = (
        "--head",
        "concat",
        "--data",
        "digits",
        "--epochs",
        1,
        "--limit",
        120,
        "--quiet",
        "--cache-dir",
        tmp_path / "cache",
    )
    assert_one_line_error(run("fit-head", "--model", unverified, *args, "--out", tmp_path / "refused.pt"), REFUSED)
    assert not (tmp_path / "refused.pt").exists()
    allowed = run("fit-head", "--model", unverified, "--allow-unverified", *args, "--out", tmp_path / "allowed.pt")
    assert allowed.exit_code == 0, allowed.output
    intact = run("fit-head", "--model", digits_checkpoints["laya"], *args, "--out", tmp_path / "intact.pt")
    assert intact.exit_code == 0, intact.output
    x = digits["test"].x[:32]
    with torch.no_grad():
        assert torch.equal(load_checkpoint(tmp_path / "allowed.pt")(x), load_checkpoint(tmp_path / "intact.pt")(x))


@pytest.mark.parametrize("command", ["sanity", "prune", "train"])
def test_every_other_loading_command_refuses_it_before_any_work_and_has_the_flag(unverified, tmp_path, command):
    from laya_eval_cli.main import cli

    out = tmp_path / ("out.pt" if command == "train" else "out")
    args = (
        ("train", "--dataset", "digits", "--init", unverified, "--out", out)
        if command == "train"
        else (command, unverified, "--out", out)
    )
    assert_one_line_error(run(*args), REFUSED)
    assert not out.exists()
    assert "--allow-unverified" in {o for p in cli.commands[command].params for o in getattr(p, "opts", ())}


def test_a_sweep_backbone_takes_allow_unverified(unverified, tmp_path):
    grid = {
        "grid": {
            "datasets": ["digits"],
            "heads": ["concat"],
            "seeds": [0],
            "backbones": [{"model": str(unverified), "label": "ckpt"}],
        },
        "data": {"train_limit": 120, "val_limit": 40, "test_limit": 30},
        "training": {"epochs": 1},
        "evaluation": {"methods": ["contribution"], "bootstrap": 0},
    }
    with pytest.raises(ConfigError, match=r"^grid\.backbones\[0\]\.allow_unverified must be true or false; got 'yes'"):
        load_config({**grid, "grid": {**grid["grid"], "backbones": [{"model": "x.pt", "allow_unverified": "yes"}]}})
    from laya_eval.sweeps.run import sweep

    with pytest.raises(Exception, match=REFUSED):
        sweep(grid, tmp_path / "refused")
    grid["grid"]["backbones"][0]["allow_unverified"] = True
    sweep(grid, tmp_path / "allowed")
    assert set(pd.read_csv(tmp_path / "allowed" / "sweep.csv")["n"]) == {30}
