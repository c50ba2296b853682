"""A sweep config is data: no code runs without ``--trust-code``, and no file or value in it hangs the reader,
grows without bound or ends in a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from laya_eval.errors import ConfigError
from laya_eval.sweeps.config import MAX_CONFIG_BYTES, load_config
from tests.cli_helpers import assert_one_line_error, run

ROOT = Path(__file__).resolve().parents[1]

HEADER = '[grid]\ndatasets = ["digits"]\nheads = ["concat"]\nseeds = [0]\n'
SMALL = '[data]\ntrain_limit = 100\nval_limit = 30\ntest_limit = 30\n[training]\nepochs = 1\n[evaluation]\nmethods = ["random"]\nbootstrap = 0\n'  # noqa: E501

# A module that leaves a marker file when it is imported: the marker says whether the sweep ran it.
MARKED_MODULE = """
from pathlib import Path

Path({marker!r}).write_text("imported")

import torch


def make():
    return torch.nn.Sequential(torch.nn.Linear(64, 8), torch.nn.ReLU(), torch.nn.Linear(8, 8))
"""


def _py_config(tmp_path: Path) -> tuple[Path, Path]:
    marker = tmp_path / "imported.txt"
    module = tmp_path / "shared_model.py"
    module.write_text(MARKED_MODULE.format(marker=str(marker)))
    config = tmp_path / "shared.toml"
    config.write_text(
        HEADER + f'backbones = [{{model = "py:{module}:make", label = "mine", layers = ["0", "2"]}}]\n' + SMALL
    )
    return config, marker


def test_a_py_spec_in_a_config_runs_only_with_trust_code(tmp_path):
    config, marker = _py_config(tmp_path)
    result = run("sweep", config, "--out", tmp_path / "refused", "-q")
    assert_one_line_error(
        result, r"grid\.backbones\[0\]\.model 'py:.*shared_model\.py:make' is Python code: .*--trust-code"
    )
    assert not marker.exists() and not (tmp_path / "refused").exists()
    with pytest.raises(ConfigError, match=r"is Python code"):
        load_config(config)  # the library refuses too, not only the CLI
    assert not marker.exists()

    result = run("sweep", config, "--out", tmp_path / "trusted", "--trust-code", "-q")
    assert result.exit_code == 0, result.output
    assert marker.read_text() == "imported"
    assert "1 cell(s) computed" in result.output
    assert (tmp_path / "trusted" / "cells" / "digits-mine-concat-seed0" / "eval" / "summary.csv").is_file()


def test_a_trust_code_key_cannot_grant_trust_to_itself(tmp_path):
    """``trust_code = true`` on an entry would let its checkpoint import a py: reference: refused without the flag,
    before the checkpoint is opened; with the flag the config loads (the key narrows the flag to that entry)."""
    config = tmp_path / "key.toml"
    config.write_text(HEADER + f'backbones = [{{model = "{tmp_path / "m.pt"}", trust_code = true}}]\n')
    assert_one_line_error(
        run("sweep", config, "--out", tmp_path / "o"),
        r"grid\.backbones\[0\]\.trust_code = true lets a checkpoint's py: reference run code: .*--trust-code",
    )
    assert [c.name for c in load_config(config, trust_code=True).cells] == ["digits-m-concat-seed0"]


def _cli(*args: str) -> subprocess.CompletedProcess:
    """The CLI as its own process; the timeout is what a reader that blocks or grows without bound runs into."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "cli"), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [sys.executable, "-m", "laya_eval_cli", *args], capture_output=True, text=True, env=env, timeout=10
    )


def _one_line(proc: subprocess.CompletedProcess, pattern: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), lines[:5]
    assert pattern in lines[0], lines[0]


def test_a_fifo_config_is_refused_at_once(tmp_path):
    fifo = tmp_path / "config.toml"
    os.mkfifo(fifo)  # read_text() would wait for a writer forever
    _one_line(_cli("sweep", str(fifo), "--out", str(tmp_path / "o")), f"sweep config '{fifo}' is not a regular file.")


def test_a_device_config_is_refused_at_once(tmp_path):
    # /dev/zero is only opened for reading: read_text() would grow a string of zeros until memory ran out.
    _one_line(
        _cli("sweep", "/dev/zero", "--out", str(tmp_path / "o")), "sweep config '/dev/zero' is not a regular file."
    )


def test_a_config_larger_than_the_bound_is_refused_unread(tmp_path):
    big = tmp_path / "big.toml"
    with open(big, "wb") as fh:
        fh.truncate(MAX_CONFIG_BYTES + 1)  # sparse: nothing is written
    assert_one_line_error(
        run("sweep", big, "--out", tmp_path / "o"),
        rf"'{big}' has {MAX_CONFIG_BYTES + 1} bytes; at most {MAX_CONFIG_BYTES}",
    )


def test_a_symlink_to_a_config_is_read_as_its_target(tmp_path):
    target = tmp_path / "real.toml"
    target.write_text(HEADER + 'backbones = [{name = "mlp"}]\n')
    (tmp_path / "link.toml").symlink_to(target)
    assert [c.name for c in load_config(tmp_path / "link.toml").cells] == ["digits-mlp-concat-seed0"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "[grid]\nx = " + "[" * 50_000 + "]" * 50_000 + "\n",
            r"sweep config '.*hostile\.toml' nests arrays or tables too deeply to be a sweep config\.",
        ),
        (
            HEADER + 'backbones = [{name = "mlp", label = 5}]\n',
            r"grid\.backbones\[0\]\.label must be a name of 1 to 100 characters; got 5\.",
        ),
        (
            HEADER + 'backbones = [{name = "mlp", label = [1]}]\n',
            r"grid\.backbones\[0\]\.label must be a name of 1 to 100 characters; got \[1\]\.",
        ),
        (
            HEADER + f'backbones = [{{name = "mlp", label = "{"a" * 100_000}"}}]\n',
            r"grid\.backbones\[0\]\.label must be a name of 1 to 100 characters; got 'a{199}… \(100002 characters\)\.$",
        ),
        (
            HEADER.replace('"digits"', f'"npz:{"d" * 300}.npz"') + 'backbones = [{name = "mlp"}]\n',
            r"cell name 'npz-d{195}… \(.* characters\) is longer than 200 bytes \(it names a folder\)",
        ),
        (b"\xff\xfe[grid]\n", r"sweep config '.*hostile\.toml' is not UTF-8 text \(invalid start byte at byte 0\)\."),
    ],
    ids=["deep-array", "label-int", "label-list", "label-100k", "long-cell-name", "not-utf8"],
)
def test_hostile_config_content_is_one_line(tmp_path, text, message):
    path = tmp_path / "hostile.toml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    assert_one_line_error(run("sweep", path, "--out", tmp_path / "o"), message)
    assert not (tmp_path / "o").exists()
