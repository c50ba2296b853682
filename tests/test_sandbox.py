"""The suite stays in its sandbox: HOME and the caches point into a temporary folder, and the CLI needs no home."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SANDBOX, SANDBOX_VARIABLES, WATCHED, _listing


def test_home_and_caches_point_into_the_sandbox():
    for var in SANDBOX_VARIABLES:
        assert Path(os.environ[var]).is_relative_to(SANDBOX), var
    assert Path.home().is_relative_to(SANDBOX)


def test_the_real_home_check_sees_a_new_file(tmp_path):
    # the session-end check compares listings; a file created in a watched folder must show up
    watched = tmp_path / ".cache" / "laya-eval"
    watched.mkdir(parents=True)
    before = _listing([watched])
    (watched / "features").mkdir()
    assert _listing([watched]) - before == {str(watched / "features")}
    assert any(str(w).endswith(".cache/laya-eval") for w in WATCHED)


@pytest.mark.slow
def test_the_cli_runs_with_an_unwritable_home(tmp_path):
    # HOME is a regular file: creating anything below it fails (chmod would not stop root), so a command that
    # tried to write a cache or config there would fail. Caches go where the test configuration points them.
    home = tmp_path / "home-is-a-file"
    home.write_text("not a folder\n")
    env = dict(os.environ, HOME=str(home))
    for var in ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "MPLCONFIGDIR"):
        env[var] = str(tmp_path / var.lower())
    cli = [sys.executable, "-m", "laya_eval_cli"]
    ckpt = tmp_path / "m.pt"
    steps = [
        ["train", "--dataset", "digits", "--backbone", "mlp", "--head", "laya", "--epochs", "1", "--seed", "0",
         "--backbone-arg", "widths=[16,8]", "--out", str(ckpt), "--quiet"],
        ["faithfulness", str(ckpt), "--limit", "20", "--bootstrap", "0", "--methods", "laya,random",
         "--out", str(tmp_path / "faith"), "--quiet"],
        ["fit-head", "--model", str(ckpt), "--data", "digits", "--epochs", "1", "--limit", "20",
         "--out", str(tmp_path / "head.pt"), "--quiet"],
    ]
    for args in steps:
        proc = subprocess.run([*cli, *args], capture_output=True, text=True, env=env, cwd=tmp_path)
        assert proc.returncode == 0, (args[0], proc.stderr[-800:])
    assert home.read_text() == "not a folder\n"
    assert (tmp_path / "faith" / "summary.csv").is_file() and (tmp_path / "head.pt").is_file()
