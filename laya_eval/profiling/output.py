"""Writing a layer profile's folder, and ``laya-eval profile`` as one call.

:func:`write_profile` writes the tables, the figures and ``manifest.json`` (the sha256 of every file) as the whole
content of a folder, replaced whole or not at all (:func:`laya_eval.output.files.write_result_folder`), as every
result folder is; :func:`profile_to_folder` checks the folder and the figure options, computes the profile
(:func:`~laya_eval.profiling.profiles.layer_profile`) and writes it.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from laya_eval.profiling.diagnosis import DiagnosisOptions
from laya_eval.profiling.profiles import SUBSETS, LayerProfile, layer_profile

__all__ = ["ProfileRun", "profile_figures", "profile_to_folder", "write_profile"]


def write_profile(profile: LayerProfile, out_dir: str | os.PathLike, *, fmt: str | None = None,
                  style: str = "default") -> list[Path]:
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
    files = {"profile.csv": profile.table.to_csv(**csv).encode(),
             "profile_layers.csv": profile.layers.to_csv(**csv).encode(),
             "profile.json": (json.dumps(profile.meta, indent=2, sort_keys=True, default=str) + "\n").encode()}
    if profile.diagnosis is not None:
        files["diagnosis.csv"] = profile.diagnosis.samples.to_csv(**csv).encode()
        files["diagnosis_summary.csv"] = profile.diagnosis.summary.to_csv(**csv).encode()
    files.update(figure_files(profile_figures(profile, style=style), fmt=fmt, style=style))
    manifest = {"kind": "profile", **provenance(), "files": {name: sha256_bytes(data) for name, data in files.items()}}
    files["manifest.json"] = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
    return write_result_folder(out_dir, files)


def profile_figures(profile: LayerProfile, *, style: str = "default") -> dict[str, Any]:
    """The figures :func:`write_profile` writes, by file name without extension.

    ``profile_heatmap_{all,correct,incorrect}`` (one per subset with samples, one colour range for all),
    ``profile_layers`` and, with a diagnosis, ``diagnosis``.
    """
    from laya_eval import figures

    means = profile.table["mean"]
    vmin, vmax = float(means.min()), float(means.max())
    if (means < 0).any():
        vmax = max(abs(vmin), abs(vmax))
        vmin = -vmax
    figs = {f"profile_heatmap_{subset}": figures.profile_heatmap(profile.table, subset=subset, meta=profile.meta,
                                                                 vmin=vmin, vmax=vmax, style=style)
            for subset in SUBSETS if (profile.table["subset"] == subset).any()}
    figs["profile_layers"] = figures.profile_distribution(profile.scores, meta=profile.meta, style=style)
    if profile.diagnosis is not None:
        figs["diagnosis"] = figures.diagnosis_figure(profile.diagnosis, meta=profile.meta, style=style)
    return figs


@dataclass
class ProfileRun:
    """What :func:`profile_to_folder` did: the profile, the files written and the wall time."""

    profile: LayerProfile
    wall_time_s: float
    files: list[Path] = field(default_factory=list)


def profile_to_folder(model: Any, out_dir: str | os.PathLike, data: Any = None, *, method: str = "laya",
                      by: str = "label", options: Any = None, data_dir: str | os.PathLike | None = None,
                      progress: Any = None, world: Any = None,
                      diagnosis: DiagnosisOptions | None = DiagnosisOptions(), fmt: str | None = None,
                      style: str = "default") -> ProfileRun | None:
    """``laya-eval profile`` as one call: :func:`~laya_eval.profiling.profiles.layer_profile` (its arguments),
    then :func:`write_profile` into ``out_dir``.

    ``out_dir``, ``fmt`` and ``style`` are checked before any work. Under torchrun every process profiles its
    shard and rank 0 writes the folder; the other ranks get ``None``.
    """
    from laya_eval.figures import check_format, check_style
    from laya_eval.output.files import check_output_folder

    check_output_folder(out_dir)
    check_style(style)
    if fmt is not None:
        check_format(fmt)
    start = time.perf_counter()
    prof = layer_profile(model, data, method=method, by=by, options=options, data_dir=data_dir, progress=progress,
                         world=world, diagnosis=diagnosis)
    if prof is None:
        return None
    files = write_profile(prof, out_dir, fmt=fmt, style=style)
    return ProfileRun(profile=prof, wall_time_s=time.perf_counter() - start, files=files)
