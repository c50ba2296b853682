"""What a manifest records about the code that wrote it: laya-eval's version, the sha256 of its code, the git
commit; and what ``laya-eval report`` shows of them."""

from __future__ import annotations


import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

import laya_eval
from laya_eval.output.origin import checkout_state, code_origin, package_source_sha256, provenance, python_files_sha256
from tests.cli_helpers import run

PACKAGE = Path(laya_eval.__file__).resolve().parent
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _tree_digest(root: Path) -> str:
    """The code digest worked out here: per .py file in path order, its relative path and its bytes' sha256."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(
            f"{path.relative_to(root).as_posix()}\0{hashlib.sha256(path.read_bytes()).hexdigest()}\0".encode()
        )
    return digest.hexdigest()


def _tree(root: Path) -> list[Path]:
    return sorted(root.rglob("*.py"))


def test_the_code_digest_is_the_sha256_of_the_package_files():
    assert package_source_sha256() == _tree_digest(PACKAGE)
    assert code_origin()["sha256"] == package_source_sha256()
    assert provenance()["code"] == code_origin()


def test_the_code_digest_changes_with_any_file_of_a_copied_package(tmp_path):
    copy = tmp_path / "laya_eval"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert python_files_sha256(copy, _tree(copy)) == package_source_sha256()  # same files, same digest

    edited = copy / "stats" / "metrics.py"
    original = edited.read_bytes()
    edited.write_bytes(original + b"\n")
    changed = python_files_sha256(copy, _tree(copy))
    assert changed != package_source_sha256() and changed == _tree_digest(copy)

    edited.write_bytes(original)
    assert python_files_sha256(copy, _tree(copy)) == package_source_sha256()
    (copy / "extra.py").write_text("")  # a new, empty module
    assert python_files_sha256(copy, _tree(copy)) != package_source_sha256()
    (copy / "extra.py").rename(copy / "stats" / "extra.py")  # the same bytes under another path
    assert python_files_sha256(copy, _tree(copy)) not in (package_source_sha256(), changed)


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


@pytest.fixture
def checkout(tmp_path):
    """A git repository whose package ``pkg`` (two modules and a data file) is committed."""
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "__init__.py").write_text("")
    (repo / "pkg" / "core.py").write_text("X = 1\n")
    (repo / "pkg" / "notes.txt").write_text("notes\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "first")
    return repo


@needs_git
def test_the_commit_is_git_rev_parse_head_and_dirty_tracks_the_python_files(checkout):
    pkg = checkout / "pkg"
    assert checkout_state(pkg) == {"commit": _git(checkout, "rev-parse", "HEAD"), "dirty": False}

    (pkg / "notes.txt").write_text("other notes\n")  # not code: the package is still the commit's
    assert checkout_state(pkg)["dirty"] is False
    (pkg / "core.py").write_text("X = 2\n")
    assert checkout_state(pkg)["dirty"] is True
    _git(checkout, "checkout", "-q", "--", ".")
    (pkg / "sub").mkdir()
    (pkg / "sub" / "new.py").write_text("")  # untracked code is code too
    assert checkout_state(pkg)["dirty"] is True
    _git(checkout, "add", ".")
    _git(checkout, "commit", "-q", "-m", "second")
    assert checkout_state(pkg) == {"commit": _git(checkout, "rev-parse", "HEAD"), "dirty": False}
    assert len(checkout_state(pkg)["commit"]) == 40


@needs_git
def test_no_commit_outside_a_checkout_or_for_an_untracked_copy(checkout, tmp_path, monkeypatch):
    unknown = {"commit": None, "dirty": None}
    loose = tmp_path / "loose"
    loose.mkdir()
    (loose / "__init__.py").write_text("")
    assert checkout_state(loose) == unknown
    # a copy installed inside a checkout (a virtual environment in the repository) is not that checkout's code
    installed = checkout / ".venv" / "site-packages" / "pkg"
    installed.mkdir(parents=True)
    (installed / "__init__.py").write_text("")
    assert checkout_state(installed) == unknown
    assert checkout_state(tmp_path / "missing") == unknown
    monkeypatch.setenv("PATH", str(tmp_path / "no-programs-here"))  # git not installed
    assert checkout_state(checkout / "pkg") == unknown


@needs_git
def test_a_git_dir_in_the_environment_does_not_redirect_the_reading(checkout, tmp_path, monkeypatch):
    other = tmp_path / "other"
    other.mkdir()
    _git(other, "init", "-q")
    _git(other, "commit", "-q", "--allow-empty", "-m", "elsewhere")
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    assert checkout_state(checkout / "pkg")["commit"] == _git(
        checkout, "--git-dir", str(checkout / ".git"), "rev-parse", "HEAD"
    )


def test_a_changed_code_record_keeps_the_result_key_and_the_tables(tmp_path, digits_checkpoints, monkeypatch):
    """The code's identity is provenance: a finished result is resumed, not refused, and the tables are the same."""
    import laya_eval.output.origin as origin
    from laya_eval import evaluate
    from laya_eval.engine.evaluation import EvalOptions

    options = EvalOptions(limit=30, bootstrap=20, n_steps=4)
    out = tmp_path / "run"
    evaluate(digits_checkpoints["laya"], "digits", options=options, out=out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    monkeypatch.setattr(origin, "code_origin", lambda: {"sha256": "0" * 64, "commit": None, "dirty": None})
    evaluate(digits_checkpoints["laya"], "digits", options=options, out=out, resume=True)
    after = json.loads((out / "manifest.json").read_text())
    assert after["code"] == {"sha256": "0" * 64, "commit": None, "dirty": None}
    assert after["result_key"] == json.loads(before["manifest.json"])["result_key"]
    assert all((out / name).read_bytes() == data for name, data in before.items() if name != "manifest.json")


def test_report_prints_and_shows_each_folders_code(tmp_path, digits_checkpoints):
    from laya_eval import evaluate
    from laya_eval.engine.evaluation import EvalOptions

    options = EvalOptions(limit=30, bootstrap=20, n_steps=4, methods=("laya", "random"))
    new, old = tmp_path / "new", tmp_path / "old"
    evaluate(digits_checkpoints["laya"], "digits", options=options, out=new)
    shutil.copytree(new, old)
    manifest = json.loads((old / "manifest.json").read_text())
    del manifest["code"]  # as a folder written before the code was recorded
    (old / "manifest.json").write_text(json.dumps(manifest))

    result = run("report", new, old, "--out", tmp_path / "report", "--no-html", "--max-points", 20)
    assert result.exit_code == 0, result.output
    code = code_origin()
    commit = "n/a" if code["commit"] is None else code["commit"][:12] + (" (modified)" if code["dirty"] else "")
    version = laya_eval.__version__
    lines = result.output.splitlines()
    start = lines.index(next(line for line in lines if line.startswith("run ") and "code sha256" in line))
    assert lines[start].split() == ["run", "kind", "laya-eval", "code", "sha256", "commit"]
    assert lines[start + 1].split() == [
        "digits-laya.pt",
        "[new]",
        "faithfulness",
        version,
        code["sha256"][:12],
        *commit.split(),
    ]
    assert lines[start + 2].split() == [
        "digits-laya.pt",
        "[old]",
        "faithfulness",
        version,
        "not",
        "recorded",
        "not",
        "recorded",
    ]
    md = (tmp_path / "report" / "report.md").read_text()
    section = md.split("## Provenance\n", 1)[1]
    assert f"| digits-laya.pt \\[new\\] | faithfulness | {version} | {code['sha256'][:12]} | {commit} |" in section
    assert f"| digits-laya.pt \\[old\\] | faithfulness | {version} | not recorded | not recorded |" in section
    assert "- [Provenance](#provenance)" in md
    assert json.loads((tmp_path / "report" / "manifest.json").read_text())["code"] == code
