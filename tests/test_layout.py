"""The repository's shape: rooms in one order, no import circles, readable modules, verbs that are functions.

Every ``import`` is read — at module level, inside functions and under ``TYPE_CHECKING`` alike: a circle
closed by a lazy import is still a circle for the reader.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

from laya_eval.catalog import ABLATION_SPECS, METHOD_SPECS

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "laya_eval"
SOURCES = sorted(PACKAGE.rglob("*.py")) + sorted((ROOT / "cli").rglob("*.py"))
MAX_TOP_LEVEL_MODULES = 10


def _module_name(path: Path) -> str:
    base = ROOT / "cli" if path.relative_to(ROOT).parts[0] == "cli" else ROOT
    parts = list(path.relative_to(base).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, module: str, known: set[str]) -> set[str]:
    """The laya_eval modules ``path`` imports anywhere in its body (a name ``from`` a package that is a module
    counts as that module)."""
    tree = ast.parse(path.read_text())
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                out.add(full if full in known else base)
    return {m for m in out if m in known} - {module}


def _graph(paths=SOURCES) -> dict[str, set[str]]:
    names = {_module_name(p): p for p in paths}
    return {name: _imports(path, name, set(names)) for name, path in names.items()}


def _find_circle(graph: dict[str, set[str]]) -> list[str] | None:
    """A circle of imports, or None. A package's ``__init__`` importing its submodules counts like any import:
    importing one submodule runs the package's ``__init__`` first."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if state.get(nxt) is None and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def _room(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "laya_eval" and len(parts) > 1 else None


def _rooms() -> dict[str, Path]:
    """Each room (a top-level module or subpackage of laya_eval) and the file holding its docstring."""
    rooms = {p.stem: p for p in PACKAGE.glob("*.py") if p.name != "__init__.py"}
    rooms.update({p.parent.name: p for p in PACKAGE.glob("*/__init__.py")})
    return rooms


def _declared(path: Path) -> set[str]:
    """The rooms a room's docstring says it may import: its line ``May import: a, b, c.`` (or ``nothing.``)."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    found = re.findall(r"^May import: (.*)\.$", doc, re.M)
    assert len(found) == 1, f"{path.relative_to(ROOT)}: its docstring needs one line 'May import: ...'."
    return set() if found[0] == "nothing" else {r.strip() for r in found[0].split(",")}


def _room_violations(graph: dict[str, set[str]], declared: dict[str, set[str]]) -> list[str]:
    bad = []
    for module, targets in sorted(graph.items()):
        here = _room(module)
        for target in sorted(targets):
            there = _room(target)
            if target == "laya_eval" and here is not None:  # the CLI is a client of the public names; rooms are not
                bad.append(f"{module} imports the package top (its public names); import from a room")
            elif here and there and here != there and there not in declared.get(here, set()):
                bad.append(f"{module} imports {target}: room {here!r} may import only {sorted(declared[here])}")
    return bad


def test_no_import_circle_among_modules():
    graph = _graph()
    assert "laya_eval.engine.evaluation" in graph and "laya_eval.engine.results" in graph  # the walk saw the engine
    assert graph["laya_eval.loading.checkpoints"] >= {"laya_eval.loading.references"}  # and function-level imports
    circle = _find_circle(graph)
    assert circle is None, " -> ".join(circle)


def test_rooms_form_one_order():
    declared = {room: _declared(path) for room, path in _rooms().items()}
    unknown = {room: sorted(deps - set(declared)) for room, deps in declared.items() if deps - set(declared)}
    assert not unknown, unknown
    circle = _find_circle({f"laya_eval.{r}": {f"laya_eval.{d}" for d in deps} for r, deps in declared.items()})
    assert circle is None, "the declared rooms do not form one order: " + " -> ".join(circle)
    assert not _room_violations(_graph(), declared)


def test_the_checks_fail_on_a_planted_function_level_import(tmp_path):
    # A lower room importing a higher one inside a function: an order violation and (with the edge back) a circle.
    (tmp_path / "laya_eval" / "models").mkdir(parents=True)
    (tmp_path / "laya_eval" / "engine").mkdir()
    low = tmp_path / "laya_eval" / "models" / "heads.py"
    high = tmp_path / "laya_eval" / "engine" / "plan.py"
    low.write_text("def f():\n    from laya_eval.engine.plan import make_plan\n")
    high.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from laya_eval.models import heads\n")
    known = {"laya_eval.models.heads", "laya_eval.engine.plan"}
    graph = {
        "laya_eval.models.heads": _imports(low, "laya_eval.models.heads", known),
        "laya_eval.engine.plan": _imports(high, "laya_eval.engine.plan", known),
    }
    assert graph == {
        "laya_eval.models.heads": {"laya_eval.engine.plan"},
        "laya_eval.engine.plan": {"laya_eval.models.heads"},
    }
    assert _find_circle(graph) == ["laya_eval.engine.plan", "laya_eval.models.heads", "laya_eval.engine.plan"]
    violations = _room_violations(graph, {"models": {"errors"}, "engine": {"models"}})
    assert violations == [
        "laya_eval.models.heads imports laya_eval.engine.plan: room 'models' may import only ['errors']"
    ]


def test_at_most_ten_top_level_modules():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top


def logical_lines(text: str) -> int:
    """Statements, comment lines and the lines of multi-line strings (docstrings): the size of a module as a reader
    meets it, which the formatter does not change by giving each argument of a long call its own line."""
    count = 0
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.NEWLINE or (tok.type == tokenize.COMMENT and tok.line.lstrip().startswith("#")):
            count += 1
        elif tok.type == tokenize.STRING and tok.start[0] != tok.end[0]:
            count += tok.end[0] - tok.start[0]
    return count


def test_logical_lines_count_statements_comments_and_docstrings_not_wrapped_arguments():
    compact = 'def f(a, b):\n    """One.\n\n    Two.\n    """\n    # why\n    return g(a, b)\n'
    wrapped = 'def f(\n    a,\n    b,\n):\n    """One.\n\n    Two.\n    """\n    # why\n    return g(\n        a,\n        b,\n    )\n'
    assert (
        logical_lines(compact) == logical_lines(wrapped) == 1 + 4 + 1 + 1
    )  # def, the 4 docstring lines, comment, return


def test_no_module_is_over_400_logical_lines():
    long = {str(p.relative_to(ROOT)): n for p in SOURCES if (n := logical_lines(p.read_text())) > 400}
    assert not long, long


def test_no_module_shares_a_verbs_name():
    import laya_eval

    modules = {p.stem for p in PACKAGE.rglob("*.py")} | {p.name for p in PACKAGE.rglob("*") if p.is_dir()}
    assert not set(laya_eval.VERBS) & modules


@pytest.mark.parametrize(
    "verb",
    [
        "evaluate",
        "fit_head",
        "train",
        "profile",
        "sanity",
        "prune",
        "report",
        "sweep",
        "meta",
        "load_model",
        "save_checkpoint",
        "import_keras",
    ],
)
def test_every_verb_is_a_function_at_the_top(verb):
    import inspect

    import laya_eval

    assert inspect.isfunction(getattr(laya_eval, verb)), verb


def test_the_engine_names_no_method_or_ablation():
    for name in ("evaluation.py", "plan.py", "results.py"):
        tree = ast.parse((PACKAGE / "engine" / name).read_text())
        docstrings = {
            id(n.body[0].value)
            for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef))
            and n.body
            and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant)
        }
        literals = {
            n.value
            for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings
        }
        assert not literals & (set(METHOD_SPECS) | set(ABLATION_SPECS)), name


def test_the_cli_reads_choices_from_the_catalog_without_torch():
    import subprocess
    import sys

    code = "import sys; import laya_eval_cli.main; print('torch' in sys.modules, 'laya_eval.catalog' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "True"]


def test_the_report_reads_result_folders_without_torch(tmp_path):
    """``report`` recognises and checks a sanity folder from the catalog's schema, not by importing the sanity
    package (which loads torch): the report command starts about two seconds sooner."""
    import subprocess
    import sys

    (tmp_path / "randomisation.csv").write_text("x\n")
    code = (
        "import sys; from laya_eval.reporting.sanity_verdicts import is_sanity_folder, load_sanity; "
        f"print(is_sanity_folder({str(tmp_path)!r}));\n"
        f"try: load_sanity({str(tmp_path)!r})\nexcept Exception as e: print(type(e).__name__)\n"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "ResultsError", "False"]
