"""A full disk during `faithfulness --out`: one line, and what the error says is true -- no partial files left
in a folder the run created, an earlier result kept byte for byte.

The oracle is the file system itself: what exists under the output folder's parent after the failed run.
"""

from __future__ import annotations

import errno
import os

import pytest

from tests.cli_helpers import assert_one_line_error, run


def _faithfulness(checkpoint, out):
    return run(
        "faithfulness",
        checkpoint,
        "--data",
        "digits",
        "--methods",
        "contribution,random",
        "--limit",
        40,
        "--bootstrap",
        0,
        "--out",
        out,
        "-q",
    )


def _full_at(monkeypatch, where):
    """Make ``os.replace`` in the writers fail with ENOSPC at the partial chunks or at the finished result."""
    from laya_eval.output import files

    real = files.os.replace

    def replace(src, dst, *args, **kwargs):
        at_partial = ".partial" in str(dst)
        if (where == "partial") == at_partial:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dst))
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(files.os, "replace", replace)
    monkeypatch.setattr(files, "_exchange", lambda a, b: False)  # the swap by two renames, where a rename fails


@pytest.mark.parametrize("where", ["partial", "result"])
def test_a_full_disk_under_a_new_out_leaves_no_folder(digits_checkpoints, tmp_path, monkeypatch, where):
    parent = tmp_path / "runs"
    parent.mkdir()
    out = parent / "new"
    _full_at(monkeypatch, where)
    result = _faithfulness(digits_checkpoints["laya"], out)
    monkeypatch.undo()
    assert_one_line_error(result, r"no space left on the device")
    assert sorted(p.name for p in parent.iterdir()) == []  # no out/.partial, no temporary folder beside it
    assert _faithfulness(digits_checkpoints["laya"], out).exit_code == 0  # with room again: the run works
    assert (out / "summary.csv").is_file() and not (out / ".partial").exists()


def test_a_full_disk_over_an_earlier_result_keeps_it_whole(digits_checkpoints, tmp_path, monkeypatch):
    out = tmp_path / "res"
    assert _faithfulness(digits_checkpoints["laya"], out).exit_code == 0
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    _full_at(monkeypatch, "result")
    result = _faithfulness(digits_checkpoints["concat"], out)
    monkeypatch.undo()
    assert_one_line_error(result, r"no space left on the device .*\(nothing there was changed\)")
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["res"]


def test_partial_files_of_an_interrupted_run_are_kept_for_resume(tmp_path):
    from laya_eval.errors import StorageError
    from laya_eval.output.files import unfinished_removed_on_storage_failure

    out = tmp_path / "res"
    (out / ".partial").mkdir(parents=True)
    (out / ".partial" / "chunk-0-10.npz").write_bytes(b"an earlier run's chunk")
    with pytest.raises(StorageError):
        with unfinished_removed_on_storage_failure(out, ".partial"):
            raise StorageError("cannot write to 'res': no space left on the device")
    assert (out / ".partial" / "chunk-0-10.npz").read_bytes() == b"an earlier run's chunk"
    with pytest.raises(ValueError):  # not a storage failure: nothing is removed
        with unfinished_removed_on_storage_failure(tmp_path / "other", ".partial"):
            (tmp_path / "other" / ".partial").mkdir(parents=True)
            raise ValueError("a bug")
    assert (tmp_path / "other" / ".partial").is_dir()
