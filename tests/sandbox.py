"""The suite's sandbox: HOME and every cache folder point into one temporary folder.

:func:`activate` runs when ``tests/conftest.py`` is imported, before the test modules import torch,
matplotlib or transformers, and sets the variables of :data:`REDIRECTS` in ``os.environ``, so that
subprocesses (torchrun, the CLI's own entry point, notebook kernels) inherit them. Under pytest-xdist
the controller makes the folder and the workers reuse it (they inherit :data:`SANDBOX_VAR`).
Temporary files go there too (``TMPDIR``), pytest's ``tmp_path`` folders included, and are removed with the
sandbox when the session ends; ``pytest --basetemp DIR`` keeps a run's ``tmp_path`` folders for inspection.

The hooks at the bottom (imported by ``tests/conftest.py``) snapshot the real HOME when the session
starts and name, at the end, every path that appeared or changed there. The snapshot covers the
names directly in HOME and, :data:`WATCH_DEPTH` levels deep, the folders of :data:`WATCHED` where
Python tools write (caches, configuration, IPython and Jupyter state). The suite's own processes write to the
sandbox's HOME (every process it starts inherits the redirections), and a change in the real HOME cannot be told
apart from one another process on the machine made meanwhile (an editor, a shell, another test run), so it is a
warning: a run whose tests all passed never fails for it. On a machine where nothing else writes to HOME (a CI
container), ``LAYA_EVAL_TEST_STRICT_HOME=1`` makes such a change fail the run.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

SANDBOX_VAR = "LAYA_EVAL_TEST_SANDBOX"
REAL_HOME_VAR = "LAYA_EVAL_TEST_REAL_HOME"
STRICT_HOME_VAR = "LAYA_EVAL_TEST_STRICT_HOME"

# Variable -> folder inside the sandbox. LAYA_EVAL_CACHE and XDG_CACHE_HOME are what
# laya_eval.loading.feature_cache.cache_root and laya_eval.data.files read; the rest are where
# matplotlib, transformers/huggingface_hub, torch.hub, IPython, Jupyter, pip and hypothesis write by default.
# TRANSFORMERS_CACHE is left unset: transformers warns when it is set (HF_HOME covers it), and the
# notebooks must run without a word on stderr.
REDIRECTS = {
    "HOME": "home",
    "XDG_CACHE_HOME": "home/.cache",
    "XDG_CONFIG_HOME": "home/.config",
    "XDG_DATA_HOME": "home/.local/share",
    "XDG_STATE_HOME": "home/.local/state",
    "LAYA_EVAL_CACHE": "laya-eval-cache",
    "MPLCONFIGDIR": "matplotlib",
    "HF_HOME": "huggingface",
    "TORCH_HOME": "torch",
    "IPYTHONDIR": "ipython",
    "JUPYTER_CONFIG_DIR": "jupyter/config",
    "JUPYTER_DATA_DIR": "jupyter/data",
    "JUPYTER_RUNTIME_DIR": "jupyter/runtime",
    "PIP_CACHE_DIR": "pip-cache",
    "HYPOTHESIS_STORAGE_DIRECTORY": "hypothesis",  # else ./.hypothesis in the repository
    # Temporary files: what subprocesses leave behind (Chromium's org.chromium.* folders, torchrun's
    # torchelastic_* folders, the notebooks' mkdtemp folders) goes when the sandbox goes.
    "TMPDIR": "tmp",
}
# Modules that read their cache folders when they are imported: too late once they are loaded.
EARLY_READERS = ("matplotlib", "torch", "transformers", "huggingface_hub", "IPython")

WATCHED = (
    ".cache",
    ".config",
    ".local",
    ".ipython",
    ".jupyter",
    ".matplotlib",
    ".torch",
    ".huggingface",
    ".keras",
    ".laya-eval",
)
WATCH_DEPTH = 4


def activate() -> tuple[Path, Path, bool]:
    """Point :data:`REDIRECTS` into the sandbox; returns (sandbox, real HOME, whether this process made it)."""
    early = [m for m in EARLY_READERS if m in sys.modules]
    if early:
        raise RuntimeError(
            f"the test sandbox must be set before {', '.join(early)} is imported; "
            "something imported it before tests/conftest.py"
        )
    made = not os.environ.get(SANDBOX_VAR)
    if made:
        os.environ[REAL_HOME_VAR] = str(Path.home())
        os.environ[SANDBOX_VAR] = tempfile.mkdtemp(prefix="laya-eval-tests-")
    root = Path(os.environ[SANDBOX_VAR])
    for var, sub in REDIRECTS.items():
        (root / sub).mkdir(parents=True, exist_ok=True)
        os.environ[var] = str(root / sub)
    tempfile.tempdir = None  # read TMPDIR again: this process's temporary files (pytest's tmp_path) go there too
    return root, Path(os.environ[REAL_HOME_VAR]), made


def _entries(folder: Path, depth: int, out: dict[str, int], home: Path) -> None:
    try:
        children = list(os.scandir(folder))
    except OSError:
        return
    for entry in children:
        try:
            out[str(Path(entry.path).relative_to(home))] = entry.stat(follow_symlinks=False).st_mtime_ns
            if depth > 1 and entry.is_dir(follow_symlinks=False):
                _entries(Path(entry.path), depth - 1, out, home)
        except OSError:
            continue


def home_snapshot(home: Path) -> dict[str, int]:
    """{path relative to ``home``: mtime in ns} of HOME's own entries (mtime 0: only new names count)
    and of everything :data:`WATCH_DEPTH` levels deep under the folders of :data:`WATCHED`."""
    snapshot = {}
    try:
        snapshot = {entry.name: 0 for entry in os.scandir(home)}
    except OSError:
        return snapshot
    for name in WATCHED:
        if (home / name).is_dir() and not (home / name).is_symlink():
            snapshot[name] = 0
            _entries(home / name, WATCH_DEPTH, snapshot, home)
    return snapshot


def home_changes(before: dict[str, int], after: dict[str, int]) -> list[str]:
    """The paths of ``after`` that are new or whose mtime changed since ``before``, sorted."""
    return sorted(p for p, mtime in after.items() if before.get(p) != mtime)


SANDBOX, REAL_HOME, MADE_HERE = activate()
_BEFORE = pytest.StashKey[dict]()


def pytest_configure(config):
    if not hasattr(config, "workerinput"):  # the xdist controller, or a run without xdist
        config.stash[_BEFORE] = home_snapshot(REAL_HOME)


def pytest_sessionfinish(session):
    before = session.config.stash.get(_BEFORE, None)
    if before is None:
        return
    changed = home_changes(before, home_snapshot(REAL_HOME))
    if not changed:
        return
    strict = os.environ.get(STRICT_HOME_VAR) == "1"
    if strict:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    shown = "\n  ".join(str(REAL_HOME / p) for p in changed[:20])
    message = (
        f"{'Error' if strict else 'Warning'}: {len(changed)} path(s) in the real HOME appeared or changed while the "
        f"tests ran; the suite's own processes write to {SANDBOX / 'home'}, so another process on this machine may "
        f"have written them ({STRICT_HOME_VAR}=1 fails the run for it):\n  {shown}"
    )
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(message, yellow=not strict, red=strict, bold=True)
    else:
        print(message, file=sys.stderr)


def pytest_unconfigure(config):
    if MADE_HERE and not hasattr(config, "workerinput"):
        shutil.rmtree(SANDBOX, ignore_errors=True)
