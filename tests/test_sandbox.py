"""The suite writes only in its temporary folders: HOME and the caches are moved (tests/sandbox.py),
the CLI writes nothing to HOME, and a change in the real HOME while the suite runs is named (a warning: another
process may have made it; a failure with LAYA_EVAL_TEST_STRICT_HOME=1)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests import sandbox

ROOT = Path(__file__).resolve().parents[1]


def _inside(path, folder) -> bool:
    return Path(path).resolve().is_relative_to(Path(folder).resolve())


def test_home_and_the_caches_point_into_the_sandbox():
    import matplotlib
    import torch

    from laya_eval.loading.feature_cache import cache_root

    assert Path.home() == sandbox.SANDBOX / "home" and Path.home() != sandbox.REAL_HOME
    assert _inside(matplotlib.get_cachedir(), sandbox.SANDBOX)
    assert _inside(cache_root(), sandbox.SANDBOX)
    assert _inside(torch.hub.get_dir(), sandbox.SANDBOX)
    assert _inside(Path("~/.cache").expanduser(), sandbox.SANDBOX)
    assert not _inside(sandbox.SANDBOX, sandbox.REAL_HOME)


def test_temporary_files_of_the_tests_and_their_subprocesses_go_into_the_sandbox(tmp_path):
    """What a subprocess leaves in its temporary folder (Chromium, torchrun, a notebook's mkdtemp) goes with the
    sandbox rather than piling up in the system's temporary folder."""
    assert _inside(tmp_path, sandbox.SANDBOX)
    assert _inside(tempfile.gettempdir(), sandbox.SANDBOX)
    child = subprocess.run(
        [sys.executable, "-c", "import tempfile; print(tempfile.mkdtemp())"], capture_output=True, text=True, check=True
    )
    made = Path(child.stdout.strip())
    assert made.is_dir() and _inside(made, sandbox.SANDBOX / "tmp")


def test_home_snapshot_finds_new_and_changed_paths(tmp_path):
    home = tmp_path / "home"
    (home / ".config" / "tool").mkdir(parents=True)
    (home / ".config" / "tool" / "settings.ini").write_text("a = 1\n")
    (home / ".editor").mkdir()
    (home / ".editor" / "history").write_text("one\n")
    before = sandbox.home_snapshot(home)
    assert set(before) == {".config", ".editor", ".config/tool", ".config/tool/settings.ini"}

    os.utime(home / ".config" / "tool" / "settings.ini", ns=(1, 1))  # changed in place
    (home / ".editor" / "history").write_text("two\n")  # not watched: only HOME's own names count there
    (home / ".cache" / "laya-eval" / "features" / "k").mkdir(parents=True)
    (home / ".cache" / "laya-eval" / "features" / "k" / "x.pt").write_bytes(b"")  # 4 levels below .cache
    (home / "stray.txt").write_text("")
    after = sandbox.home_snapshot(home)
    assert sandbox.home_changes(before, after) == [
        ".cache",
        ".cache/laya-eval",
        ".cache/laya-eval/features",
        ".cache/laya-eval/features/k",
        ".cache/laya-eval/features/k/x.pt",
        ".config/tool/settings.ini",
        "stray.txt",
    ]
    assert sandbox.home_changes(after, sandbox.home_snapshot(home)) == []


INNER_CONFTEST = "from tests.sandbox import pytest_configure, pytest_sessionfinish, pytest_unconfigure\n"
INNER_TEST = """
import os
import subprocess
import sys


def test_writes():
    if os.environ.get("WRITE_HOME") == "1":  # another process, with a HOME of its own, writes to the real HOME
        note = os.path.join(os.environ["LAYA_EVAL_TEST_REAL_HOME"], ".cache", "note.txt")
        subprocess.run([sys.executable, "-c", f"open({note!r}, 'w').write('x')"], check=True)
"""


@pytest.mark.slow
def test_a_change_in_the_real_home_is_a_warning_unless_strict(tmp_path):
    """Whole pytest sessions (the boundary is the point: their exit codes) with a stand-in real HOME under tmp_path;
    HOME itself points at the inner sandbox, also under tmp_path."""
    project, home = tmp_path / "project", tmp_path / "home"
    project.mkdir()
    (home / ".cache").mkdir(parents=True)
    (project / "conftest.py").write_text(INNER_CONFTEST)
    (project / "test_inner.py").write_text(INNER_TEST)
    env = {
        **os.environ,
        "HOME": str(tmp_path / "inner-sandbox" / "home"),
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        sandbox.SANDBOX_VAR: str(tmp_path / "inner-sandbox"),
        sandbox.REAL_HOME_VAR: str(home),
    }
    env.pop(sandbox.STRICT_HOME_VAR, None)
    results = {}
    for case, extra in {"quiet": {}, "written": {"WRITE_HOME": "1"}, "strict": {sandbox.STRICT_HOME_VAR: "1"}}.items():
        if case == "strict":
            (home / ".cache" / "note.txt").unlink()  # written again during this run
            extra["WRITE_HOME"] = "1"
        results[case] = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", str(project)],
            cwd=project,
            capture_output=True,
            text=True,
            env={**env, **extra},
            timeout=120,
        )
    warning = "1 path(s) in the real HOME appeared or changed while the tests ran"
    assert results["quiet"].returncode == 0 and "real HOME" not in results["quiet"].stdout, results["quiet"].stdout
    written = results["written"].stdout
    assert results["written"].returncode == 0, written
    assert "1 passed" in written and f"Warning: {warning}" in written
    assert str(home / ".cache" / "note.txt") in written
    assert results["strict"].returncode == 1, results["strict"].stdout
    assert f"Error: {warning}" in results["strict"].stdout and "1 passed" in results["strict"].stdout


@pytest.mark.slow
def test_the_cli_writes_nothing_to_home(tmp_path):
    """`train` and `faithfulness` as real processes, HOME an empty read-only folder: it stays empty and unchanged.

    Read-only refuses a write for any user but root (root writes anyway), so the emptiness and the folder's
    unchanged mtime are checked too."""
    home = tmp_path / "home"
    home.mkdir(mode=0o555)
    stamp = home.stat().st_mtime_ns
    env = {**os.environ, "HOME": str(home), "LAYA_EVAL_THREADS": "1"}
    for var, sub in sandbox.REDIRECTS.items():  # every redirected folder fresh for this run, outside HOME
        if var != "HOME":
            env[var] = str(tmp_path / "redirected" / sub.replace("home/", "home-"))
    Path(env["TMPDIR"]).mkdir(parents=True)
    commands = [
        [
            "train",
            "--dataset",
            "digits",
            "--backbone",
            "mlp",
            "--head",
            "laya",
            "--epochs",
            "1",
            "--out",
            str(tmp_path / "m.pt"),
            "--quiet",
        ],
        [
            "faithfulness",
            str(tmp_path / "m.pt"),
            "--limit",
            "20",
            "--bootstrap",
            "10",
            "--out",
            str(tmp_path / "res"),
            "--quiet",
        ],
    ]
    for args in commands:
        proc = subprocess.run(
            [sys.executable, "-m", "laya_eval_cli", *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        assert proc.returncode == 0, (args[0], proc.stderr[-2000:])
    assert (tmp_path / "res" / "summary.csv").is_file()
    assert list(home.iterdir()) == [] and home.stat().st_mtime_ns == stamp
    assert home.stat().st_mode & 0o777 == 0o555
