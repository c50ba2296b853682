"""The notebooks are committed executed (a reader on a code host sees their tables and figures) with small
outputs, use only the top-level names of ``laya_eval``, and re-execute top to bottom with the project's kernel, on
the bundled digits data, without a word on stderr and with the same numbers as the committed outputs."""

from __future__ import annotations

import base64
import importlib.util
import io
import re
from pathlib import Path

import nbformat
import numpy as np
import pytest
from PIL import Image

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
_spec = importlib.util.spec_from_file_location("notebook_execute", NOTEBOOKS / "execute.py")
execute_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(execute_module)
# Timings stay out of tests (STYLE); nbclient's timeout only stops a hung cell.
CASES = [("compare_attribution_methods.ipynb", 6), ("layer_profiles.ipynb", 5)]
MAX_IMAGE_BYTES = 120_000  # a PNG at the figures' 110 dpi; a 300-dpi or full-colour one is several times this
MAX_NOTEBOOK_BYTES = 1_500_000
_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


def _cell_text(cell) -> str:
    parts = []
    for o in cell.get("outputs", []):
        if o.output_type == "stream" and o.name == "stdout":
            parts.append(o.text)
        elif "text/plain" in o.get("data", {}):
            parts.append(o.data["text/plain"])
    return "\n".join(parts)


def numbers(nb) -> list[list[float]]:
    """Per code cell, the numbers its text outputs print (tokens with a path in them left out)."""
    out = []
    for cell in nb.cells:
        if cell.cell_type == "code":
            tokens = [t for t in _cell_text(cell).split() if "/" not in t and not t.startswith("<")]
            out.append([float(m) for t in tokens for m in _NUMBER.findall(t)])
    return out


def _images(nb) -> list[bytes]:
    return [
        base64.b64decode(o.data["image/png"])
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.outputs
        if "image/png" in o.get("data", {})
    ]


def test_numbers_compares_what_the_cells_print():
    """The comparison can fail: it reads every number of stdout and text/plain, and skips temporary paths."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x")])
    nb.cells[0].outputs = [
        nbformat.v4.new_output("stream", name="stdout", text="rho +0.8926 n = 360 /tmp/tmp12/f.pdf\n"),
        nbformat.v4.new_output("execute_result", data={"text/plain": "   fc1  1.5e-3"}),
    ]
    assert numbers(nb) == [[0.8926, 360.0, 1.0, 1.5e-3]]


@pytest.mark.parametrize("name, min_images", CASES)
def test_notebook_is_committed_executed_with_small_outputs(name, min_images):
    path = NOTEBOOKS / name
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code), f"{name}: a cell is committed without running"
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1)), "cells run once, in order"
    images = _images(nb)
    assert len(images) >= min_images, f"{name}: {len(images)} figures committed"
    for data in images:
        assert len(data) <= MAX_IMAGE_BYTES, len(data)
        with Image.open(io.BytesIO(data)) as img:
            # Written as laya-eval writes figures: 110 dpi on screen (300 for the paper-style one), 256 colours.
            assert round(img.info["dpi"][0]) in (110, 300) and img.mode == "P", (img.info, img.mode)
            assert img.size[0] <= 1600, img.size
    assert path.stat().st_size <= MAX_NOTEBOOK_BYTES
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]


def public_names_used(source: str) -> tuple[list[str], set[str]]:
    """(imports of a module below ``laya_eval``, every name taken from ``laya_eval``) in notebook code."""
    import ast

    tree = ast.parse("\n".join(line for line in source.splitlines() if not line.lstrip().startswith("%")))
    imports = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    rooms = [
        ast.unparse(n)
        for n in imports
        if (isinstance(n, ast.ImportFrom) and (n.module or "").startswith("laya_eval."))
        or (isinstance(n, ast.Import) and any(a.name.startswith("laya_eval.") for a in n.names))
    ]
    names = {a.name for n in imports if isinstance(n, ast.ImportFrom) and n.module == "laya_eval" for a in n.names}
    names |= {
        n.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "laya_eval"
    }
    return rooms, names


def test_public_names_used_sees_room_imports_and_names_that_are_not_public():
    rooms, names = public_names_used(
        "%matplotlib inline\nimport laya_eval\nfrom laya_eval import figures\n"
        "from laya_eval.engine.evaluation import evaluate\nlaya_eval.profile(1)"
    )
    assert rooms == ["from laya_eval.engine.evaluation import evaluate"] and names == {"figures", "profile"}


@pytest.mark.parametrize("name, min_images", CASES)
def test_notebook_uses_only_the_top_level_names(name, min_images):
    import laya_eval

    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    rooms, names = public_names_used("\n".join(c.source for c in nb.cells if c.cell_type == "code"))
    assert rooms == [] and names <= set(dir(laya_eval)), (rooms, names - set(dir(laya_eval)))


@pytest.mark.slow
@pytest.mark.parametrize("name, min_images", CASES)
def test_notebook_reexecutes_with_the_committed_numbers(name, min_images, tmp_path):
    committed = nbformat.read(NOTEBOOKS / name, as_version=4)
    assert any("parameters" in c.metadata.get("tags", []) for c in committed.cells if c.cell_type == "code")
    fresh = nbformat.read(NOTEBOOKS / name, as_version=4)
    for cell in fresh.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    execute_module.execute(fresh, tmp_path, timeout=300)

    outputs = [o for c in fresh.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    stderr = [o.text for o in outputs if o.output_type == "stream" and o.name == "stderr"]
    assert not stderr, stderr  # no warnings (TqdmWarning included), no progress bars
    assert len(_images(fresh)) == len(_images(committed)) >= min_images
    got, want = numbers(fresh), numbers(committed)
    assert [len(g) for g in got] == [len(w) for w in want], "a cell prints other numbers than committed"
    for k, (g, w) in enumerate(zip(got, want)):
        # Printed with 3-4 decimals: one unit in the last place is rounding, not a different result.
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=2e-3, err_msg=f"{name}, code cell {k}")
    if name == "layer_profiles.ipynb":
        text = "\n".join(_cell_text(c) for c in fresh.cells)
        assert "dataset: digits" in text and "fc1" in text
