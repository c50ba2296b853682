"""Helpers shared by the CLI tests."""

from __future__ import annotations

import re

from click.testing import CliRunner

from laya_eval_cli.main import cli


def run(*args):
    """Invoke ``laya-eval ARGS...`` in-process; every argument is turned into a string."""
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def assert_one_line_error(result, pattern):
    """Exit code 2 and exactly one output line, ``Error: ...`` matching ``pattern``, no traceback."""
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    assert re.search(pattern, lines[0]), lines[0]
    assert "Traceback" not in result.output
