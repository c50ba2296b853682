"""The repository's shape: no import circles, modules of readable size, an engine that names no method or ablation."""

from __future__ import annotations

import ast
from pathlib import Path

from laya_eval.catalog import ABLATION_SPECS, METHOD_SPECS

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "laya_eval").rglob("*.py")) + sorted((ROOT / "cli").rglob("*.py"))


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT / "cli" if "cli" in path.relative_to(ROOT).parts[:1] else ROOT).with_suffix("")
    parts = list(rel.parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _top_level_imports(path: Path, known: set[str]) -> set[str]:
    """laya_eval modules ``path`` imports at module level (``if TYPE_CHECKING`` blocks included: a circle
    hidden from the interpreter is still a circle for the reader)."""
    tree = ast.parse(path.read_text())
    out: set[str] = set()
    for node in tree.body:
        for sub in ast.walk(node) if isinstance(node, (ast.Import, ast.ImportFrom, ast.If, ast.Try)) else []:
            if isinstance(sub, ast.Import):
                out.update(a.name for a in sub.names if a.name in known)
            elif isinstance(sub, ast.ImportFrom) and sub.module and sub.level == 0:
                full = [f"{sub.module}.{a.name}" for a in sub.names]
                out.update(f for f in full if f in known)
                if sub.module in known:
                    out.add(sub.module)
    return out


def _graph() -> dict[str, set[str]]:
    names = {_module_name(p): p for p in SOURCES}
    return {name: _top_level_imports(path, set(names)) - {name} for name, path in names.items()}


def _find_circle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            # a package's __init__ importing its own submodules is how packages re-export; not a circle
            if nxt.startswith(node + ".") or node.startswith(nxt + "."):
                continue
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if state.get(nxt) is None and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_circle_among_modules():
    graph = _graph()
    assert "laya_eval.evaluate" in graph and "laya_eval.results" in graph  # the walk saw the engine
    assert _find_circle(graph) is None, " -> ".join(_find_circle(graph))


def test_the_detector_finds_a_circle(tmp_path):
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("import laya_eval.b\n")
    b.write_text("if TYPE_CHECKING:\n    from laya_eval.a import x\n")
    graph = {"laya_eval.a": _top_level_imports(a, {"laya_eval.b"}),
             "laya_eval.b": _top_level_imports(b, {"laya_eval.a"})}
    assert graph == {"laya_eval.a": {"laya_eval.b"}, "laya_eval.b": {"laya_eval.a"}}
    assert _find_circle(graph) == ["laya_eval.a", "laya_eval.b", "laya_eval.a"]


def test_no_module_is_over_400_lines():
    long = {str(p.relative_to(ROOT)): n for p in SOURCES if (n := len(p.read_text().splitlines())) > 400}
    assert not long, long


def test_the_engine_names_no_method_or_ablation():
    tree = ast.parse((ROOT / "laya_eval" / "evaluate.py").read_text())
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and n.body
                  and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    literals = {n.value for n in ast.walk(tree)
                if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings}
    assert not literals & (set(METHOD_SPECS) | set(ABLATION_SPECS))


def test_the_cli_reads_choices_from_the_catalog_without_torch():
    import subprocess
    import sys

    code = ("import sys; import laya_eval_cli.main; "
            "print('torch' in sys.modules, 'laya_eval.catalog' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "True"]
