"""The command pages of docs/ against the click commands: no option missing, none stale.

Every option of ``laya-eval COMMAND`` (read from the click command, secondary names such as ``--no-timing``
included) appears on ``docs/commands/COMMAND.md``; every ``--option`` written on a page exists in the command
it is written for: on a command page, prose and inline code belong to that command; anywhere, a command line
or inline code span starting ``laya-eval OTHER`` belongs to ``OTHER``; other programs' command lines (pip,
python scripts) are theirs. On pages that are not a command's, a bare ``--option`` must exist in some command.
"""

from __future__ import annotations

import re

import click
import pytest

from laya_eval_cli.main import cli
from tests.doc_blocks import FENCE, PAGES, ROOT, commands

COMMANDS = dict(cli.commands)
COMMAND_PAGES = ROOT / "docs" / "commands"
GLOBAL_OPTIONS = {"--threads", "--version", "--help"}
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
OTHER_PROGRAMS = ("pip", "python", "make", "pytest", "mkdocs", "apt-get", "jupyter", "torchrun")


def command_options(command: click.Command) -> set[str]:
    """Every long option name of ``command``, ``--help`` included."""
    names = {"--help"}
    for param in command.params:
        if isinstance(param, click.Option):
            names.update(n for n in [*param.opts, *param.secondary_opts] if n.startswith("--"))
    return names


def _owner(line: str) -> tuple[str | None, str]:
    """(the laya-eval command a command line is for, the line from that command on).

    The owner is '' for another program's line and None for text that is not a command line.
    """
    words = re.sub(r"^\$ ", "", line.strip()).split()
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
        words.pop(0)
    if "laya_eval_cli" in words:  # python -m laya_eval_cli ..., torchrun ... -m laya_eval_cli ...
        words = ["laya-eval", *words[words.index("laya_eval_cli") + 1 :]]
    if not words:
        return None, line
    if words[0] == "laya-eval":
        rest = [w for w in words[1:] if not w.startswith("-") and not w.isdigit()]
        return (rest[0] if rest and rest[0] in COMMANDS else "laya-eval"), " ".join(words)
    return ("" if words[0] in OTHER_PROGRAMS else None), line


def documented_options(text: str, default: str | None) -> dict[str | None, set[str]]:
    """``{command: options written for it}``; ``default`` owns bare options (None: any command)."""
    found: dict[str | None, set[str]] = {}

    def add(owner, snippet):
        if owner != "":
            found.setdefault(owner, set()).update(OPTION.findall(snippet))

    prose = FENCE.sub("", text)
    for match in FENCE.finditer(text):
        if match.group(1) in ("console", "text"):
            body = match.group(2) if match.group(1) == "text" else "\n".join(f"$ {c}" for c in commands(match.group(2)))
            for line in re.sub(r"\\\n\s*", " ", body).splitlines():
                owner, snippet = _owner(line)
                if owner is not None:
                    add(owner, snippet)
    prose = re.sub(r"<!--.*?-->", "", prose, flags=re.S)
    for span in re.findall(r"`([^`\n]+)`", prose):
        owner, snippet = _owner(span)
        add(default if owner is None else owner, snippet)
    add(default, re.sub(r"`[^`\n]+`", "", prose))
    return found


def options_table(text: str) -> set[str]:
    """The options named in the first column of the table under a page's ``## Options`` heading."""
    section = text.split("\n## Options\n", 1)[1].split("\n## ", 1)[0] if "\n## Options\n" in text else ""
    return {o for row in re.findall(r"^\| ([^|]*)\|", section, flags=re.M) for o in OPTION.findall(row)}


def problems(page_text: str, page_command: str | None) -> list[str]:
    """What is wrong with one page: options missing from a command page, options a command does not have."""
    out = []
    found = documented_options(page_text, page_command)
    every = set().union(*(command_options(c) for c in COMMANDS.values())) | GLOBAL_OPTIONS
    for owner, options in found.items():
        if owner is None:
            allowed = every
        elif owner == "laya-eval":
            allowed = GLOBAL_OPTIONS
        else:
            allowed = command_options(COMMANDS[owner]) | GLOBAL_OPTIONS
        out += [f"{option} is not an option of {owner or 'any command'}" for option in sorted(options - allowed)]
    if page_command is not None:
        written = options_table(page_text)
        missing = command_options(COMMANDS[page_command]) - written - {"--help"}
        out += [f"{option} of {page_command} is not documented" for option in sorted(missing)]
    return out


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_has_a_page_with_every_option(name):
    page = COMMAND_PAGES / f"{name}.md"
    assert page.is_file(), f"no page {page.relative_to(ROOT)}"
    assert problems(page.read_text(), name) == []


def test_no_page_documents_an_option_that_does_not_exist():
    for page in PAGES:
        command = page.stem if page.parent == COMMAND_PAGES else None
        issues = [p for p in problems(page.read_text(), command) if "is not an option" in p]
        assert issues == [], f"{page.relative_to(ROOT)}: {issues}"


def test_no_command_page_for_a_command_that_does_not_exist():
    assert sorted(p.stem for p in COMMAND_PAGES.glob("*.md")) == sorted(COMMANDS)


def test_a_wrong_or_missing_option_is_found():
    """The check can fail: a made-up option, an option of another command, a dropped one."""
    text = (COMMAND_PAGES / "prune.md").read_text()
    assert problems(text, "prune") == []
    assert problems(text + "\nUse `--retrain-all` to refit.\n", "prune") == ["--retrain-all is not an option of prune"]
    assert problems(text + "\n```console\n$ laya-eval train --roar-seeds 2\n```\n", "prune") == [
        "--roar-seeds is not an option of train"
    ]
    dropped = re.sub(r"^\| `--random-refits`.*\n", "", text, flags=re.M)
    assert problems(dropped, "prune") == ["--random-refits of prune is not documented"]
    assert problems("see `laya-eval sanity --similarity per_sample` and --no-such-thing", None) == [
        "--no-such-thing is not an option of any command"
    ]


@pytest.mark.parametrize("name", ["faithfulness", "sanity", "prune"])
def test_the_methods_row_lists_every_built_in_method(name):
    """The Options table's `--methods` row names every built-in method of the catalog, and the default set: all but
    the opt-in ones."""
    from laya_eval.catalog import BUILTIN_METHODS, METHOD_SPECS

    text = (ROOT / "docs" / "commands" / f"{name}.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `--methods`"))
    opt_in = [m for m in METHOD_SPECS if m in BUILTIN_METHODS and METHOD_SPECS[m].opt_in]
    default = f"(default: all but {', '.join(opt_in)}):" if opt_in else "(default: all):"
    listed = row.split(default, 1)[1].rsplit(".", 1)[0]
    assert [m.strip() for m in listed.split(",")] == [m for m in METHOD_SPECS if m in BUILTIN_METHODS], row


def test_the_landing_page_links_every_command_page_in_help_order():
    from laya_eval.options.record import COMMANDS as HELP_ORDER

    row = next(line for line in (ROOT / "docs" / "index.md").read_text().splitlines() if "**Commands**" in line)
    linked = re.findall(r"\]\(commands/([a-z-]+)\.md\)", row)
    assert linked == list(HELP_ORDER) and sorted(linked) == sorted(COMMANDS), linked
