"""Where a result comes from: versions, machine, command line, and laya-eval's own code.

- :func:`provenance`: what every manifest records about the process that wrote it.
- :func:`package_source_sha256`: the sha256 of laya-eval's code (every ``.py`` file of the ``laya_eval`` package,
  relative path and bytes, in path order; :func:`python_files_sha256`), computed once per process. A sweep's
  cell key holds it, so changed code recomputes its cells; every manifest records it.
- :func:`checkout_state`: the git commit of a folder inside a git checkout, and whether its ``.py`` files differ
  from that commit. Read with ``git`` under a short timeout; no git, no checkout or a failed call leaves it
  unknown and never stops a run.

The code's identity is provenance only: run keys and feature-cache keys are computed elsewhere and do not
read it.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

from laya_eval.output.files import file_sha256

__all__ = ["checkout_state", "code_origin", "package_source_sha256", "provenance", "python_files_sha256"]

#: Seconds one ``git`` call may take before the commit is left unknown.
GIT_TIMEOUT_S = 2.0
_PACKAGE = Path(__file__).resolve().parents[1]


def python_files_sha256(root: str | os.PathLike, files: Sequence[str | os.PathLike]) -> str:
    """Hex SHA-256 over ``files`` (each below ``root``), in the order given: per file its path relative to
    ``root`` (POSIX form) and the sha256 of its bytes."""
    root = Path(root)
    digest = hashlib.sha256()
    for path in map(Path, files):
        digest.update(f"{path.relative_to(root).as_posix()}\0{file_sha256(path)}\0".encode())
    return digest.hexdigest()


@functools.lru_cache(maxsize=1)
def package_source_sha256() -> str:
    """Hex SHA-256 of laya-eval's own code: every ``.py`` file of the ``laya_eval`` package (relative path and
    bytes, in path order; :func:`python_files_sha256`). Computed once per process."""
    return python_files_sha256(_PACKAGE, sorted(p for p in _PACKAGE.rglob("*.py") if p.is_file()))


def _git(folder: Path, *args: str) -> str | None:
    """``git ARGS`` run in ``folder``: its standard output, or None when git is missing, fails or is slow."""
    # The folder's own checkout (no GIT_DIR or GIT_WORK_TREE of a calling hook), and no optional locks: reading the
    # state must not rewrite the checkout's index.
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_OPTIONAL_LOCKS="0", GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    try:
        done = subprocess.run(
            ["git", *args],
            cwd=folder,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
        )
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return done.stdout if done.returncode == 0 else None


def checkout_state(folder: str | os.PathLike) -> dict[str, Any]:
    """The git commit that ``folder``'s code comes from, where ``folder`` is part of a git checkout.

    Returns
    -------
    dict
        ``commit``: the 40-hex commit of ``HEAD``, or None when ``folder`` is not in a checkout, its
        ``__init__.py`` is not tracked there (a copy installed inside another checkout's virtual environment), or
        git is missing or fails. ``dirty``: whether a ``.py`` file below ``folder`` differs from that commit
        (changed, added, removed or untracked); None when the commit is unknown or the check fails.
    """
    folder = Path(folder)
    unknown: dict[str, Any] = {"commit": None, "dirty": None}
    if not folder.is_dir():
        return unknown
    head = _git(folder, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
    tracked = _git(folder, "ls-files", "--", "__init__.py")
    if not head or not head.strip() or not tracked or not tracked.strip():
        return unknown
    status = _git(folder, "status", "--porcelain", "--untracked-files=all", "--", "*.py")
    return {"commit": head.strip(), "dirty": None if status is None else bool(status.strip())}


@functools.lru_cache(maxsize=1)
def code_origin() -> dict[str, Any]:
    """laya-eval's code in this process: ``sha256`` (:func:`package_source_sha256`) and the ``commit`` and
    ``dirty`` flag of the checkout it runs from (:func:`checkout_state`; None outside a checkout)."""
    return {"sha256": package_source_sha256(), **checkout_state(_PACKAGE)}


def _version(module: str) -> str:
    """A library's version: from the module where it is imported, else from its installed metadata (importing
    torch or captum only to read a version costs seconds; the report never imports them)."""
    loaded = sys.modules.get(module)
    if loaded is not None and getattr(loaded, "__version__", None):
        return str(loaded.__version__)
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(module)
    except PackageNotFoundError:
        return "not installed"


def _versions() -> dict[str, str]:
    from laya_eval.version import __version__

    return {
        "laya_eval": __version__,
        "python": platform.python_version(),
        "torch": _version("torch"),
        "captum": _version("captum"),
        "numpy": _version("numpy"),
        "scipy": _version("scipy"),
        "pandas": _version("pandas"),
    }


def provenance(device: str | None = None) -> dict[str, Any]:
    """Versions, laya-eval's code (:func:`code_origin`), machine and command line of this process, for a manifest
    or a benchmark result. The torch thread count is recorded where torch is loaded."""
    machine: dict[str, Any] = {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
    }
    torch = sys.modules.get("torch")
    if torch is not None:
        machine["torch_threads"] = torch.get_num_threads()
        if device and str(device).startswith("cuda") and torch.cuda.is_available():
            machine["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return {"versions": _versions(), "code": dict(code_origin()), "machine": machine, "command": " ".join(sys.argv)}
