"""Bad CLI inputs and hostile files: one line ``Error: …``, exit 2, nothing left behind."""

from __future__ import annotations

import io
import os

import pytest
import torch

from laya_eval.loading.schema import metadata_sha256
from laya_eval_cli.main import MAX_THREADS
from tests.cli_helpers import assert_one_line_error, run


def test_info_on_a_text_file_says_it_is_not_a_checkpoint(tmp_path):
    notes = tmp_path / "notes.pt"
    notes.write_text("# my notes\n")
    result = run("info", notes)
    assert_one_line_error(result, r"notes.pt' is not a laya-eval checkpoint \(it starts with b'# my not")
    assert "weights_only" not in result.output and "could run code" not in result.output


def test_info_on_a_fifo_returns_at_once(tmp_path):
    fifo = tmp_path / "pipe.pt"
    os.mkfifo(fifo)  # opening it for reading without O_NONBLOCK would wait for a writer forever
    assert_one_line_error(run("info", fifo), r"pipe.pt' is a FIFO \(named pipe\), not a file")


def test_info_on_a_device_is_refused():
    assert_one_line_error(run("info", "/dev/zero"), r"'/dev/zero' is a character device, not a file")


def test_info_escapes_terminal_sequences(digits_checkpoints, tmp_path):
    payload = torch.load(digits_checkpoints["laya"], weights_only=True)
    payload["config"]["dataset"] = "digits\x1b[2J\x1b]0;owned\x07"
    payload["config"]["class_names"] = [f"c{i}\u202e" for i in range(10)]  # right-to-left override
    payload["checksum"]["metadata"] = metadata_sha256(payload)  # edited and re-hashed: only the escaping is tested
    path = tmp_path / "esc.pt"
    buf = io.BytesIO()
    torch.save(payload, buf)
    path.write_bytes(buf.getvalue())
    result = run("info", path)
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output and "\x07" not in result.output and "\u202e" not in result.output
    assert "digits\\x1b[2J\\x1b]0;owned\\x07" in result.output and "c0\\u202e" in result.output


def test_threads_beyond_the_machine_are_refused(digits_checkpoints):
    result = run("--threads", MAX_THREADS + 1, "info", digits_checkpoints["laya"])
    assert_one_line_error(result, rf"--threads.*{MAX_THREADS + 1} is not in the range 1<=x<={MAX_THREADS}")
    assert MAX_THREADS == (os.cpu_count() or 1)


@pytest.mark.parametrize("command", ["train", "faithfulness"])
def test_negative_seed_is_one_line(digits_checkpoints, tmp_path, command):
    args = (
        ["train", "--dataset", "digits", "--out", tmp_path / "x.pt"]
        if command == "train"
        else ["faithfulness", digits_checkpoints["laya"], "--out", tmp_path / "o"]
    )
    assert_one_line_error(run(*args, "--seed", -1), r"--seed.*-1 is not in the range 0<=x<=9223372036854775807")


@pytest.mark.parametrize("lr", ["inf", "1e30"])
def test_training_that_diverges_saves_nothing(tmp_path, lr):
    out = tmp_path / "nan.pt"
    result = run(
        "train",
        "--dataset",
        "digits",
        "--epochs",
        2,
        "--lr",
        lr,
        "--out",
        out,
        "--quiet",
        "--backbone-arg",
        "widths=[16,8]",
    )
    pattern = (
        "lr must be a finite number > 0; got inf"
        if lr == "inf"
        else r"training diverged: the loss is nan at epoch 1 \(lr=1e\+30\); nothing was saved"
    )
    assert_one_line_error(result, pattern)
    assert not out.exists() and not list(tmp_path.iterdir())


def test_train_output_problems_are_found_before_training(tmp_path):
    (tmp_path / "afile").write_text("x")
    assert_one_line_error(run("train", "--dataset", "digits", "--out", ""), "the checkpoint path is empty")
    assert_one_line_error(
        run("train", "--dataset", "digits", "--out", tmp_path / "afile" / "x.pt"), r"afile' is a file, not a folder"
    )
    assert_one_line_error(
        run("train", "--dataset", "digits", "--out", "/dev/null"), r"'/dev/null': it exists and is not a regular file"
    )
    assert_one_line_error(
        run("train", "--dataset", "digits", "--out", tmp_path / ("n" * 250 + ".pt")), r"the file name is 253 bytes long"
    )


def test_report_on_a_single_resample_folder(digits_checkpoints, tmp_path):
    out = tmp_path / "b1"
    faith = run(
        "faithfulness",
        digits_checkpoints["laya"],
        "--limit",
        20,
        "--bootstrap",
        1,
        "--methods",
        "contribution,random",
        "--out",
        out,
        "--quiet",
    )
    assert faith.exit_code == 0, faith.output
    report = run("report", out, "--out", tmp_path / "report", "--no-html")
    assert report.exit_code == 0, report.output
    assert (tmp_path / "report" / "report.md").is_file()
