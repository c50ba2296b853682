"""The sanity checks' folder: their tables, metadata and figure, written whole by
:func:`laya_eval.sanity_checks.sanity` when given ``out``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd

from laya_eval.catalog import SANITY_FILES

__all__ = ["SANITY_FILES"]


def _write_sanity(result, out_dir: str | os.PathLike, *, fmt: str | None = None, style: str = "default") -> list[Path]:
    """Write :data:`SANITY_FILES`, ``sanity.<fmt>`` (similarity per step and method) and ``manifest.json``
    (the sha256 of every file) as the whole content of ``out_dir``. ``fmt`` defaults to png, or pdf in paper
    style; in paper style the figure has no title and its caption is written beside it as
    ``sanity.caption.txt``.

    The folder is written whole into a temporary folder and swapped in
    (:func:`laya_eval.output.files.write_result_folder`): an interrupted run leaves the previous result untouched,
    and no file of an earlier run (a figure in another format) stays beside the new ones.

    Parameters
    ----------
    result : SanityResult
        Its ``meta`` is written to ``sanity.json`` (checkpoint, dataset, options, wall time, ...) and names the
        run in the figure's subtitle.

    Returns
    -------
    list of Path
        The files written, CSVs first.
    """
    from laya_eval.figures import figure_files
    from laya_eval.figures.sanity_checks import randomisation_figure
    from laya_eval.output.files import sha256_bytes, write_result_folder
    from laya_eval.output.origin import provenance

    csv = {"index": False, "float_format": "%.8g", "lineterminator": "\n"}
    tables = (result.randomisation, result.data_randomisation, result.layer_roar, result.roar_agreement)
    files = {name: table.to_csv(**csv).encode() for name, table in zip(SANITY_FILES, tables)}
    files["sanity.json"] = (json.dumps(dict(result.meta), indent=2, sort_keys=True, default=str) + "\n").encode()
    fig = randomisation_figure(
        pd.concat([result.randomisation, result.data_randomisation]), meta=result.meta, style=style
    )
    files.update(figure_files({"sanity": fig}, fmt=fmt, style=style))
    manifest = {"kind": "sanity", **provenance(), "files": {name: sha256_bytes(data) for name, data in files.items()}}
    files["manifest.json"] = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
    return write_result_folder(out_dir, files)
