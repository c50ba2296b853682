"""The code blocks of README.md and docs/, read by one convention and run as written.

The convention (also in docs/development.md, "How the blocks of these pages run"):

- a ```` ```console ```` block holds commands, each on a line starting with ``$ `` (a trailing ``\\`` continues
  it); they run in order in the page's scratch folder;
- a ```` ```python ```` block runs in the page's namespace (one per page, like a notebook), in the same folder;
- a ```` ```text ```` block right after a console or python block is what that block prints: compared line by
  line, with durations (``1.2 s``) masked and a line ``...`` standing for any number of lines; any other
  ```` ```text ```` block is an illustration and does not run;
- an HTML comment right above a block changes how it is taken:
  ``<!-- file: NAME -->`` writes the block to ``NAME`` in the scratch folder instead of running it;
  ``<!-- requires: WHAT -->`` skips the block, with its reason, where ``WHAT`` (``minilm``, ``rotten-tomatoes``)
  is not installed; ``<!-- covered-by: tests/FILE.py::TEST -->`` leaves the block to that test;
  ``<!-- shorten: ARGS -->`` appends ``ARGS`` to each ``laya-eval`` command of the block (bounding its time; its
  output is then not compared).

Every other fenced block (``toml`` without ``file:``, ``bash``, no language) is an error: a block whose role the
reader cannot tell is a block the suite cannot check.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
RUN_LANGS = ("console", "python")
FENCE = re.compile(r"^```([A-Za-z0-9_-]*)\n(.*?)^```\n", re.S | re.M)
DIRECTIVE = re.compile(r"<!-- (file|requires|covered-by|shorten): (.*?) -->\s*$")
DURATION = re.compile(r"\b\d+(?:\.\d+)? s\b")
# A trained checkpoint's sha256: training is bit-reproducible on one CPU, but another CPU's float kernels (other
# vector widths) round some sums differently, so the file's bytes, unlike its printed metrics, differ by machine.
DIGEST = re.compile(r"\b[0-9a-f]{64}\b")


@dataclass
class Block:
    """One fenced block: where it is, its language and body, its directives and the output shown for it."""

    page: Path
    line: int
    lang: str
    body: str
    directives: dict[str, str] = field(default_factory=dict)
    output: str | None = None

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def read_blocks(page: Path) -> list[Block]:
    """The page's blocks in order; a text block right after a runnable one becomes its ``output``."""
    text = page.read_text()
    blocks: list[Block] = []
    previous_end = None
    for match in FENCE.finditer(text):
        lang, body = match.group(1), match.group(2)
        before = text[: match.start()].rstrip("\n").splitlines()
        directives = {}
        while before and DIRECTIVE.match(before[-1]):
            key, value = DIRECTIVE.match(before[-1]).groups()
            directives[key] = value.strip()
            before.pop()
        line = text[: match.start()].count("\n") + 1
        between = text[previous_end : match.start()] if previous_end is not None else None
        if (
            lang == "text"
            and blocks
            and blocks[-1].lang in RUN_LANGS
            and between is not None
            and not between.strip()
            and blocks[-1].output is None
        ):
            blocks[-1].output = body
        else:
            blocks.append(Block(page, line, lang, body, directives))
        previous_end = match.end()
    return blocks


def commands(body: str) -> list[str]:
    """The ``$ `` lines of a console block, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", body)
    found = [line[2:].strip() for line in joined.splitlines() if line.startswith("$ ")]
    return [c for c in found if c]


def normalise(text: str) -> list[str]:
    """Lines without trailing blanks, durations and sha256 digests masked, blank lines at the ends dropped."""
    lines = [DIGEST.sub("<sha256>", DURATION.sub("<t> s", line.rstrip())) for line in text.strip("\n").splitlines()]
    return lines


def output_matches(shown: str, actual: str) -> bool:
    """Whether ``actual`` is what ``shown`` documents; a shown line ``...`` stands for any lines."""
    want, got = normalise(shown), normalise(actual)
    segments, current = [], []
    for line in want:
        if line == "...":
            segments.append(current)
            current = []
        else:
            current.append(line)
    segments.append(current)
    if len(segments) == 1:
        return want == got
    first, *middle, last = segments
    if got[: len(first)] != first or (last and got[len(got) - len(last) :] != last):
        return False
    position, end = len(first), len(got) - len(last)
    for segment in middle:
        while position + len(segment) <= end and got[position : position + len(segment)] != segment:
            position += 1
        if position + len(segment) > end:
            return False
        position += len(segment)
    return position <= end


def _split_env(words: list[str]) -> tuple[dict[str, str], list[str]]:
    env = {}
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    return env, words


class PageRunner:
    """Runs one page's blocks in ``scratch``; ``cli`` runs ``laya-eval ARGS`` in-process and returns its output."""

    def __init__(self, scratch: Path, cli, env: dict[str, str]) -> None:
        self.scratch, self.cli, self.env = scratch, cli, dict(env)
        self.namespace: dict[str, object] = {"__name__": "docs_page"}

    def run_command(self, command: str, extra: list[str]) -> str:
        env, words = _split_env(shlex.split(command))
        if words[0] == "export":
            for assignment in words[1:]:
                key, _, value = assignment.partition("=")
                self.env[key] = os.path.expanduser(value) if value.startswith("~") else value
            os.environ.update(self.env)
            return ""
        words = [os.path.expanduser(w) if w.startswith("~") else w for w in words]
        os.environ.update({**self.env, **env})
        if words[0] == "laya-eval":
            return self.cli(words[1:] + extra)
        if words[:3] == ["python", "-m", "laya_eval_cli"]:
            return self.cli(words[3:] + extra)
        program = {
            "python": [sys.executable],
            "torchrun": [sys.executable, "-m", "torch.distributed.run"],
            "pip": [sys.executable, "-m", "pip"],
        }.get(words[0])
        if program is None:
            raise AssertionError(f"a command of an unknown kind: {command!r}")
        proc = subprocess.run(
            [*program, *words[1:]],
            cwd=self.scratch,
            capture_output=True,
            text=True,
            env={**os.environ, **self.env, **env},
            timeout=600,
        )
        if proc.returncode != 0:
            raise AssertionError(f"`{command}` failed ({proc.returncode}): {proc.stderr[-2000:]}")
        return proc.stdout + proc.stderr

    def run_block(self, block: Block) -> str:
        if "file" in block.directives:
            (self.scratch / block.directives["file"]).write_text(block.body)
            return ""
        if block.lang == "console":
            extra = shlex.split(block.directives.get("shorten", ""))
            return "".join(self.run_command(c, extra) for c in commands(block.body))
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block.body, block.where, "exec"), self.namespace)  # noqa: S102 - the docs' own code
        return out.getvalue()
