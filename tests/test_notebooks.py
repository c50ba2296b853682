"""The notebooks are committed without outputs and execute top to bottom with the project's kernel,
on the bundled digits data, quickly and without a word on stderr."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
# Timings stay out of tests (STYLE): the 30 s budget per notebook on digits is measured by hand and
# reported; nbclient's timeout below only stops a hung cell.


def _text(nb) -> str:
    out = []
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            out.append(o.get("text", "") + str(o.get("data", {}).get("text/plain", "")))
    return "\n".join(out)


def _with_parameters(nb, source: str):
    """Papermill's convention: a cell of overrides right after the cell tagged 'parameters'."""
    k = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    nb.cells.insert(k + 1, nbformat.v4.new_code_cell(source, metadata={"tags": ["injected-parameters"]}))
    return nb


@pytest.mark.slow
@pytest.mark.parametrize("name, min_images, parameters", [
    ("compare_attribution_methods.ipynb", 6, ""),
    ("layer_profiles.ipynb", 5, 'DATASET = "digits"'),
])
def test_notebook_is_stripped_and_executes(name, min_images, parameters, tmp_path):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code), f"{name} is committed with outputs"
    assert any("parameters" in c.metadata.get("tags", []) for c in code)

    nb = _with_parameters(nb, parameters)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()

    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    stderr = [o.text for o in outputs if o.output_type == "stream" and o.name == "stderr"]
    assert not stderr, stderr  # no warnings (TqdmWarning included), no progress bars
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= min_images, f"{name}: {len(images)} figures shown"
    if name == "layer_profiles.ipynb":
        assert "dataset: digits" in _text(nb)
        assert "fc1" in _text(nb) or "layer" in _text(nb)
