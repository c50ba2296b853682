"""The tree is clean under the formatter and the linter configured in pyproject.toml (ruff)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _ruff() -> list[str]:
    found = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if found is None:
        pytest.fail("ruff is not installed: it is in the dev extra (make test installs it)")
    return [found]


@pytest.mark.parametrize("args", [["format", "--check", "--diff"], ["check"]], ids=["format", "lint"])
def test_the_tree_is_clean_under_ruff(args):
    done = subprocess.run([*_ruff(), *args, "--no-cache", "."], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
