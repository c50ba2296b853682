"""The notebooks are committed without outputs and execute top to bottom with the project's kernel."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from laya_eval.data import load_dataset
from laya_eval.errors import DataError

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def _fashion_mnist_present() -> bool:
    try:
        load_dataset("fashion-mnist", "test")
    except DataError:
        return False
    return True


def _text(nb) -> str:
    out = []
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            out.append(o.get("text", "") + str(o.get("data", {}).get("text/plain", "")))
    return "\n".join(out)


@pytest.mark.parametrize("name, min_images", [("compare_attribution_methods.ipynb", 5), ("layer_profiles.ipynb", 3)])
def test_notebook_is_stripped_and_executes(name, min_images, tmp_path):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code), f"{name} is committed with outputs"
    assert any("parameters" in c.metadata.get("tags", []) for c in code)

    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()

    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= min_images, f"{name}: {len(images)} figures shown"
    if name == "layer_profiles.ipynb":
        expected = "fashion-mnist" if _fashion_mnist_present() else "digits"
        assert f"dataset: {expected}" in _text(nb)
