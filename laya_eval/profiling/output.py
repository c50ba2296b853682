"""A layer profile's folder: its tables, figures and ``manifest.json`` (the sha256 of every file), written whole
or not at all (:func:`laya_eval.output.files.write_result_folder`), as every result folder is.
:func:`laya_eval.profiling.run.profile` (``laya_eval.profile``) writes it when given ``out``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from laya_eval.profiling.profiles import SUBSETS, LayerProfile

__all__ = ["profile_figures"]


def _write_profile(
    profile: LayerProfile, out_dir: str | os.PathLike, *, fmt: str | None = None, style: str = "default"
) -> list[Path]:
    """Write profile.csv, profile_layers.csv, profile.json, the figures and manifest.json as the whole content
    of ``out_dir``.

    Figures: ``profile_heatmap_{all,correct,incorrect}.<fmt>`` (one per subset with samples; a shared colour
    range) and ``profile_layers.<fmt>`` (violins of the per-sample scores per layer, correct and incorrect
    predictions side by side). With a diagnosis also ``diagnosis.csv``
    (:data:`~laya_eval.profiling.diagnosis.DIAGNOSIS_COLUMNS`), ``diagnosis_summary.csv``
    (:data:`~laya_eval.profiling.diagnosis.SUMMARY_COLUMNS`) and the figure ``diagnosis.<fmt>`` (distance ECDFs,
    ROC curve). The folder is written whole into a temporary folder and swapped in: an interrupted run leaves
    the previous result untouched, and no file of an earlier run stays beside the new ones.

    Parameters
    ----------
    profile : LayerProfile
    out_dir : path
    fmt : {"png", "svg", "pdf"}, optional
        Default: png, or pdf in paper style.
    style : {"default", "paper"}
        Paper style: no titles, paper column widths; each figure's caption is written
        beside it as ``NAME.caption.txt``.

    Returns
    -------
    list of Path
        The files written, CSVs first.
    """
    from laya_eval.figures import figure_files
    from laya_eval.output.files import sha256_bytes, write_result_folder
    from laya_eval.output.origin import provenance

    csv = dict(index=False, float_format="%.8g", lineterminator="\n")
    files = {
        "profile.csv": profile.table.to_csv(**csv).encode(),
        "profile_layers.csv": profile.layers.to_csv(**csv).encode(),
        "profile.json": (json.dumps(profile.meta, indent=2, sort_keys=True, default=str) + "\n").encode(),
    }
    if profile.diagnosis is not None:
        files["diagnosis.csv"] = profile.diagnosis.samples.to_csv(**csv).encode()
        files["diagnosis_summary.csv"] = profile.diagnosis.summary.to_csv(**csv).encode()
    files.update(figure_files(profile_figures(profile, style=style), fmt=fmt, style=style))
    manifest = {"kind": "profile", **provenance(), "files": {name: sha256_bytes(data) for name, data in files.items()}}
    files["manifest.json"] = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
    return write_result_folder(out_dir, files)


def profile_figures(profile: LayerProfile, *, style: str = "default") -> dict[str, Any]:
    """The figures of a profile's folder, by file name without extension.

    ``profile_heatmap_{all,correct,incorrect}`` (one per subset with samples, one colour range for all),
    ``profile_layers`` and, with a diagnosis, ``diagnosis``.
    """
    from laya_eval import figures

    means = profile.table["mean"]
    vmin, vmax = float(means.min()), float(means.max())
    if (means < 0).any():
        vmax = max(abs(vmin), abs(vmax))
        vmin = -vmax
    figs = {
        f"profile_heatmap_{subset}": figures.profile_heatmap(
            profile.table, subset=subset, meta=profile.meta, vmin=vmin, vmax=vmax, style=style
        )
        for subset in SUBSETS
        if (profile.table["subset"] == subset).any()
    }
    figs["profile_layers"] = figures.profile_distribution(profile.scores, meta=profile.meta, style=style)
    if profile.diagnosis is not None:
        figs["diagnosis"] = figures.diagnosis_figure(profile.diagnosis, meta=profile.meta, style=style)
    return figs
