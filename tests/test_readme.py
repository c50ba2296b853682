"""Every shell and Python block of the README runs, or names the test that runs it.

Each fenced ``bash``/``python`` block falls in exactly one class:

- a **synopsis** (``[--option …]`` templates): every option it names must exist in that command's ``--help``;
- a **command block**: each command is run as written in a scratch folder, with the substitutions in
  :data:`SUBSTITUTIONS` (Fashion-MNIST → the bundled digits) and the shortening options in :data:`SHORTER`
  appended, so that the whole file runs in seconds;
- a **Python block**: executed with the same substitutions (and, for the statistics cheat sheet, a
  prelude that defines the arrays it names);
- **covered elsewhere**: :data:`ELSEWHERE` names the test that runs it (and this module checks that test
  exists), e.g. the bring-your-own-model recipes in ``tests/test_byom.py``.

A new block that fits no class fails :func:`test_every_block_is_classified`, so a documented command
cannot go untested.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_helpers import run

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
BLOCKS = [(m.group(1), m.group(2), README[:m.start()].count("\n") + 1)
          for m in re.finditer(r"```(bash|python)\n(.*?)```", README, flags=re.S)]

# Real data the scratch runs do not need: the bundled digits stand in (same code path, seconds not minutes).
SUBSTITUTIONS = {"fashion-mnist": "digits", "limit=1000": "limit=30", "EvalOptions()": "EvalOptions(limit=30)"}
# Appended per command so every run is short; none changes what the command means.
SHORTER = {"train": ["--epochs", "2"], "faithfulness": ["--limit", "30", "--bootstrap", "20"],
           "profile": ["--limit", "30"], "report": ["--max-points", "30"], "sanity": []}
# Blocks run by another test (first words of the block -> test module::function that runs them).
ELSEWHERE = {
    "make demo": "tests/test_readme.py::test_make_demo_commands_run",
    "HF_HUB_OFFLINE=1 laya-eval train --dataset rotten-tomatoes": "tests/test_byom.py::test_readme_recipe_hf_text",
    "export HF_HUB_OFFLINE=1": "tests/test_byom.py::test_readme_recipe_hf_text",
    "import laya_eval\nfrom laya_eval.engine.evaluation import evaluate\n\nfit": "tests/test_byom.py::test_readme_recipes_python",
    "import os, torch, laya_eval": "tests/test_byom.py::test_readme_recipes_python",
    "python benchmarks/reproduce.py": "tests/test_reproduce.py::test_per_run_csv_schema",
}


def _commands(body: str) -> list[str]:
    """The block's commands: continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", body)
    return [line.split("  #")[0].strip() for line in joined.splitlines() if line.strip()
            and not line.strip().startswith("#")]


def _kind(lang: str, body: str) -> str:
    if any(body.startswith(prefix) for prefix in ELSEWHERE):
        return "elsewhere"
    if lang == "python":
        return "python"
    return "synopsis" if re.search(r"\[--|\bMODEL\b|\bSPEC\b|…", body) else "commands"


def test_every_block_is_classified():
    kinds = [_kind(lang, body) for lang, body, _ in BLOCKS]
    assert len(BLOCKS) >= 15 and {"synopsis", "commands", "python", "elsewhere"} <= set(kinds)
    for prefix, where in ELSEWHERE.items():
        path, name = where.split("::")
        assert f"def {name}(" in (ROOT / path).read_text(), where
        assert any(body.startswith(prefix) for _, body, _ in BLOCKS), f"no README block starts with {prefix!r}"


def test_synopses_name_only_real_options():
    checked = 0
    for lang, body, line in BLOCKS:
        if _kind(lang, body) != "synopsis" or not body.startswith("laya-eval "):
            continue
        command = body.split()[1]
        help_text = run(command, "--help").output
        for option in set(re.findall(r"--[a-z][a-z-]*", body)):
            assert option in help_text, f"README line {line}: `laya-eval {command}` has no {option}"
        checked += 1
    assert checked >= 2


@pytest.fixture(scope="module")
def scratch(tmp_path_factory, digits_checkpoints):
    """A folder with what the README's examples refer to: runs/{lastlayer,...,laya} and runs/ablations."""
    root = tmp_path_factory.mktemp("readme")
    for head, ckpt in digits_checkpoints.items():
        res = run("faithfulness", ckpt, "--limit", 30, "--bootstrap", 20, "--out", root / "runs" / head, "-q")
        assert res.exit_code == 0, res.output
    res = run("faithfulness", digits_checkpoints["laya"], "--ablation", "gate,mean", "--limit", 30, "--bootstrap",
              20, "--out", root / "runs" / "ablations", "-q")
    assert res.exit_code == 0, res.output
    return root


def _substituted(text: str) -> str:
    for old, new in SUBSTITUTIONS.items():
        text = text.replace(old, new)
    return text


def _run_command(command: str, cwd: Path) -> None:
    words = shlex.split(_substituted(command))
    env = {}
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    if words[0] == "laya-eval":
        args = words[1:]
    elif words[:3] == ["python", "-m", "laya_eval_cli"]:
        args = words[3:]
    elif words[0] == "torchrun":
        args = [a if a != "DIR" else str(cwd / "dir") for a in words[1:]] + SHORTER["faithfulness"] + ["-q"]
        proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", *args], cwd=cwd, capture_output=True,
                              text=True, env={**os.environ, **env, "LAYA_EVAL_THREADS": "1"}, timeout=600)
        assert proc.returncode == 0, (command, proc.stderr[-2000:])
        return
    else:
        raise AssertionError(f"README command of an unknown kind: {command!r}")
    args = [str(cwd / "dir") if a == "DIR" else a for a in args]
    args += SHORTER.get(args[0], [])
    old = Path.cwd()
    os.chdir(cwd)
    try:
        res = run(*args)
    finally:
        os.chdir(old)
    assert res.exit_code == 0, (command, res.output[-2000:])


@pytest.mark.slow
@pytest.mark.xdist_group("torchrun")  # runs the README's torchrun command
def test_command_blocks_run_as_written(scratch):
    ran = []
    for lang, body, line in BLOCKS:
        if _kind(lang, body) == "commands":
            for command in _commands(body):
                _run_command(command, scratch)
                ran.append(command)
    assert any(c.startswith("laya-eval train") for c in ran) and any(c.startswith("torchrun") for c in ran)
    assert (scratch / "ckpt.pt").is_file() and (scratch / "report" / "report.md").is_file()
    assert (scratch / "profile-ig" / "profile.csv").is_file() and (scratch / "figs").is_dir()


STATS_PRELUDE = """
import numpy as np, pandas as pd
from laya_eval.engine.evaluation import EvalOptions, evaluate
_r = evaluate("ckpt.pt", "digits", options=EvalOptions(limit=30, bootstrap=20, methods=("laya", "ig", "random")))
samples_table = _r.samples
_w = _r.samples.pivot(index="sample", columns="method", values="spearman")
rho_a, rho_b, rho = _w["laya"].to_numpy(), _w["ig"].to_numpy(), _w["laya"].to_numpy()
effects = _r.layers[_r.layers.method == "laya"].sort_values(["sample", "layer"]).effect.to_numpy().reshape(30, -1)
effects_row = effects[0]
p_values = np.array([0.01, 0.04, 0.03])
_s = _r.layers.pivot_table(index=["sample"], columns=["method", "layer"], values="attribution")
a, b, r = (_s[m].to_numpy() for m in ("laya", "ig", "random"))
summaries = pd.concat([_r.summary.assign(checkpoint=f"seed{k}") for k in range(3)])
"""


@pytest.mark.slow
def test_python_blocks_run(scratch, monkeypatch):
    monkeypatch.chdir(scratch)
    ran = 0
    for lang, body, line in BLOCKS:
        if _kind(lang, body) != "python":
            continue
        code = _substituted(body)
        prelude = STATS_PRELUDE if "stats." in code else ""
        exec(compile(prelude + code, f"README.md:{line}", "exec"), {"__name__": "readme"})
        ran += 1
    assert ran >= 2 and (scratch / "results" / "summary.csv").is_file()  # the last call wrote one ablation


@pytest.mark.slow
def test_make_demo_commands_run(tmp_path):
    """The Makefile's demo recipe, command by command (make itself is what CI's `make test` runs)."""
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\ndemo:", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    commands = [c.strip().replace("$(BIN)/", "").replace("$(DEMO)", str(tmp_path / "demo-out")) for c in recipe]
    assert len(commands) == 4 and all(c.startswith("laya-eval ") for c in commands)
    for command in commands:
        args = shlex.split(command)[1:]
        res = run(*args, *(["--epochs", "3"] if args[0] == "train" else SHORTER.get(args[0], [])))
        assert res.exit_code == 0, (command, res.output[-2000:])
    assert "laya" in (tmp_path / "demo-out" / "faithfulness-laya" / "summary.csv").read_text()
