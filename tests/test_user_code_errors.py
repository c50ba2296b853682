"""The user's own code failing — a ``py:`` module that does not compile or raises, a factory that raises, a plug-in
that fails — is one line naming the module, the callable and the exception; ``LAYA_EVAL_DEBUG=1`` adds the
traceback."""

from __future__ import annotations

import re
import sys
import textwrap

import pytest

from laya_eval.errors import UserCodeError
from laya_eval.loading.references import call_factory
from tests.cli_helpers import assert_one_line_error, run

MODULES = {
    "syntax": (
        "def make(:\n    pass\n",
        r"importing module '{path}' raised SyntaxError: invalid syntax \(nets\.py, line 1\)\.",
    ),
    "import-raises": (
        "raise RuntimeError('weights folder missing')\n",
        r"importing module '{path}' raised RuntimeError: weights folder missing\.",
    ),
    "imports-missing": (
        "import laya_eval_no_such_package_here\n",
        r"importing module '{path}' raised ModuleNotFoundError: No module named 'laya_eval_no_such_package_here'\.",
    ),
    "factory-raises": (
        "def make():\n    raise ValueError('no weights\\n  for this size')\n",
        r"calling make\(\) of module '{path}' raised ValueError: no weights for this size\.",
    ),
    "factory-type-error": (  # a TypeError inside the factory is its own failure, not a wrong signature
        "def make():\n    return len(5)\n",
        r"calling make\(\) of module '{path}' raised TypeError: object of type 'int' has no len\(\)\.",
    ),
    "factory-exits": (
        "import sys\ndef make():\n    sys.exit(3)\n",
        r"calling make\(\) of module '{path}' raised SystemExit: 3\.",
    ),
}


def _module(tmp_path, source: str):
    path = tmp_path / "nets.py"
    path.write_text(source)
    return path


@pytest.mark.parametrize("case", sorted(MODULES))
def test_a_failing_py_module_is_one_line_naming_module_callable_and_exception(tmp_path, case):
    source, message = MODULES[case]
    path = _module(tmp_path, source)
    result = run(
        "fit-head", "--model", f"py:{path}:make", "--data", "digits", "--layers", "0", "--out", tmp_path / "m.pt"
    )
    assert_one_line_error(
        result, rf"^Error: py:{re.escape(str(path))}:make: " + message.format(path=re.escape(str(path))) + "$"
    )
    assert not (tmp_path / "m.pt").exists()


def test_the_library_raises_a_user_code_error_chained_to_the_cause(tmp_path):
    path = _module(tmp_path, "def make():\n    return 1 / 0\n")
    with pytest.raises(
        UserCodeError, match=r"calling make\(\) of module .* raised ZeroDivisionError: division by zero"
    ) as info:
        call_factory(f"{path}:make")
    assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_a_factory_that_needs_arguments_is_named_as_such(tmp_path):
    path = _module(tmp_path, "def make(width):\n    return width\n")
    result = run("faithfulness", f"py:{path}:make", "--out", tmp_path / "o")
    assert_one_line_error(
        result, rf"py:{re.escape(str(path))}:make must be callable without arguments \(missing a required argument"
    )


def test_debug_prints_the_traceback_of_the_users_code(tmp_path, monkeypatch):
    path = _module(tmp_path, "def make():\n    raise ValueError('no weights')\n")
    args = ("faithfulness", f"py:{path}:make", "--out", tmp_path / "o")
    monkeypatch.setenv("LAYA_EVAL_DEBUG", "1")
    result = run(*args)
    assert result.exit_code == 2
    lines = result.output.rstrip().splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert f'File "{path}", line 2, in make' in result.output  # the user's own frame
    assert "ValueError: no weights" in result.output
    assert lines[-1] == f"Error: py:{path}:make: calling make() of module '{path}' raised ValueError: no weights."
    monkeypatch.setenv("LAYA_EVAL_DEBUG", "0")
    assert_one_line_error(run(*args), "raised ValueError: no weights")


def test_a_py_plugin_that_raises_on_import_is_one_line(tmp_path):
    path = tmp_path / "plug.py"
    path.write_text("raise KeyError('state_norm')\n")
    result = run("faithfulness", tmp_path / "m.pt", "--plugin", f"py:{path}", "--trust-code", "--out", tmp_path / "o")
    assert_one_line_error(
        result,
        rf"^Error: --plugin py:{re.escape(str(path))}: importing module '{re.escape(str(path))}' raised KeyError: 'state_norm'\.$",
    )


@pytest.fixture
def broken_entry_point(tmp_path, monkeypatch):
    """An installed ``laya_eval.plugins`` entry point naming a callable that raises (not loaded yet)."""
    from importlib import metadata

    from laya_eval.engine import plugins

    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "laya_broken_plugin.py").write_text(
        textwrap.dedent("""
            def register():
                raise RuntimeError("this plug-in needs torch >= 9")
        """)
    )
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    entry = metadata.EntryPoint(name="broken", value="laya_broken_plugin:register", group=plugins.ENTRY_POINT_GROUP)
    every = metadata.entry_points
    monkeypatch.setattr(
        metadata, "entry_points", lambda **kw: [entry] if kw.get("group") == plugins.ENTRY_POINT_GROUP else every(**kw)
    )
    monkeypatch.setattr(plugins, "_installed_done", False)
    monkeypatch.setattr(plugins, "_LOADED", list(plugins._LOADED))
    yield
    sys.modules.pop("laya_broken_plugin", None)


def test_an_installed_plugin_whose_callable_raises_is_one_line(broken_entry_point, tmp_path):
    result = run("faithfulness", tmp_path / "m.pt", "--out", tmp_path / "o")
    assert_one_line_error(
        result,
        r"^Error: plug-in entry point 'broken' \(laya_broken_plugin:register\): calling it raised RuntimeError: "
        r"this plug-in needs torch >= 9\.$",
    )
