"""Execute the notebooks in place, top to bottom, so that they are committed with their outputs.

    python notebooks/execute.py            # both notebooks
    python notebooks/execute.py NAME.ipynb

One CPU thread (the notebooks set it) and the bundled digits data: the numbers are the same on every run, and
``tests/test_notebooks.py`` re-executes each notebook and compares its numbers with these outputs.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent
NOTEBOOKS = ("compare_attribution_methods.ipynb", "layer_profiles.ipynb")


def execute(nb, cwd: str | Path, timeout: int = 600):
    """Run every cell of ``nb`` (in place) with the ``python3`` kernel in folder ``cwd``."""
    NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}).execute()
    return nb


def main(names: list[str]) -> None:
    for name in names or NOTEBOOKS:
        path = HERE / name
        nb = nbformat.read(path, as_version=4)
        with tempfile.TemporaryDirectory() as cwd:
            execute(nb, cwd)
        nbformat.write(nb, path)
        print(f"executed {path.name}: {path.stat().st_size // 1024} KiB")


if __name__ == "__main__":
    main(sys.argv[1:])
