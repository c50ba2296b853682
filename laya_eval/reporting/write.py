"""Writing a report: its CSVs, figures, ``report.md``, ``report.html`` and ``manifest.json``, as one folder.

Every file is made in memory first and the folder is then written whole by
:func:`laya_eval.output.files.write_result_folder` (the writer of every result folder): a failed write (a full
disk) leaves the previous report as it was.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from laya_eval.reporting.operator_sections import find_operator_tables
from laya_eval.reporting.render import _html, _markdown, _slug
from laya_eval.reporting.sections import _blocks
from laya_eval.output.files import MANIFEST, check_output_folder, sha256_bytes, write_result_folder
from laya_eval.output.origin import provenance
from laya_eval.errors import ConfigError, ResultsError
from laya_eval.reporting.mixer_sections import MixerRun, mixer_verdicts
from laya_eval.reporting.provenance_sections import provenance_table
from laya_eval.reporting.runs import ReportInputs, Run, _unique_labels, load_inputs
from laya_eval.reporting.sanity_verdicts import SanityRun, sanity_runs_table, sanity_table, unique_sanity_labels
from laya_eval.reporting.tables import ReportTables, report_tables

__all__ = ["ReportRun", "check_report_output", "report", "report_figures", "report_to_folder", "write_report"]


def _csv_text(table: pd.DataFrame) -> str:
    return table.to_csv(index=False, float_format="%.8g", lineterminator="\n")


def _scatter_points(run: Run, max_samples: int, seed: int) -> tuple[pd.DataFrame, int]:
    samples = np.sort(run.layers["sample"].unique())
    if samples.size > max_samples:
        samples = np.sort(np.random.default_rng(seed).choice(samples, size=max_samples, replace=False))
    return run.layers[run.layers["sample"].isin(samples)], int(samples.size)


def _make_figures(runs: Sequence[Run], tables: ReportTables, *, max_points: int, seed: int,
                  style: str) -> dict[str, Any]:
    """Figure name (without extension) -> Figure, in report order."""
    from laya_eval import figures as F

    metas = [r.meta for r in runs]
    comparisons = tables.comparisons if not tables.comparisons.empty else None
    out = {"faithfulness": F.faithfulness_figure(tables.faithfulness, metas, comparisons=comparisons, style=style),
           "deletion_curves": F.deletion_curves_figure(tables.deletion_curves, metas, style=style),
           "spearman_distribution": F.spearman_distribution_figure(tables.spearman_distribution, metas, style=style)}
    for r in runs:
        points, n = _scatter_points(r, max_points, seed)
        out[f"scatter_{_slug(r.label)}"] = F.scatter_figure(points, meta={**r.meta, "n_points": n}, style=style,
                                                             seed=seed)
    for r in runs:
        long = tables.agreement[tables.agreement["run"] == r.label]
        matrix = long.pivot(index="method_a", columns="method_b", values="mean_spearman").loc[r.methods, r.methods]
        out[f"agreement_{_slug(r.label)}"] = F.agreement_figure(matrix, meta=r.meta, style=style)
    panels = _significance_panels(runs, tables.significance)
    if panels:
        out["significance"] = F.significance_figure(panels, style=style)
    for t in find_operator_tables(runs):
        out[f"operators_{_slug(t.label)}"] = F.operators_figure(t.table, t.operators, style=style)
    return out


def _significance_panels(runs: Sequence[Run], significance: pd.DataFrame) -> list[dict[str, Any]]:
    """Faithfulness matrices as heat-map panels: every run with paired tests, then every seed group."""
    from laya_eval.catalog import in_registry_order
    from laya_eval.reporting.significance import matrix_cells, signed_log_p

    metas = {("run", r.label): r.meta for r in runs}
    part = significance[significance["metric"] == "faithfulness"]
    panels = []
    for source, name in part[["source", "name"]].drop_duplicates().itertuples(index=False):
        long = part[(part["source"] == source) & (part["name"] == name)]
        methods = in_registry_order(long["method"])
        if source == "run":
            meta, test = metas[(source, name)], "over samples"
        else:
            head, dataset, ablation, scope = name.split(" · ")
            meta = {"label": f"across seeds ({long['n'].max()} runs)", "head": head, "dataset": dataset,
                    "ablation": ablation, "scope": scope}
            test = "over runs (seeds)"
        panels.append({"meta": meta, "test": f"Wilcoxon {test}, Holm",
                       "values": pd.DataFrame(signed_log_p(long, methods), index=methods, columns=methods),
                       "cells": pd.DataFrame(matrix_cells(long, methods), index=methods, columns=methods)})
    return panels


def _sanity_figures(sanity: Sequence[SanityRun], style: str = "default") -> dict[str, Any]:
    from laya_eval.figures.sanity_checks import randomisation_figure

    return {f"sanity_{_slug(s.label)}": randomisation_figure(pd.concat([s.randomisation, s.data_randomisation]),
                                                              meta={**s.meta, "label": s.label}, style=style)
            for s in sanity}


def report_figures(runs: Sequence[Run], *, sanity: Sequence[SanityRun] = (), max_points: int = 300, seed: int = 0,
                   style: str = "default") -> dict[str, Any]:
    """Every figure of a report, by file name without extension (``faithfulness``, ``scatter_<run>``, ...).

    The arguments are those of :func:`write_report`; the figures are :class:`matplotlib.figure.Figure` objects.
    """
    runs, sanity = _unique_labels(list(runs)), unique_sanity_labels(list(sanity))
    figs = _make_figures(runs, report_tables(runs), max_points=max_points, seed=seed, style=style) if runs else {}
    figs.update(_sanity_figures(sanity, style))
    return figs


_TABLES = ("runs", "faithfulness", "across_runs", "deletion_curves", "spearman_distribution", "agreement",
           "comparisons", "across_seeds", "seed_ranks", "seed_comparisons", "significance")
# Written only when they have rows (a run without comparisons.csv, a report without seed groups).
_OPTIONAL = {"comparisons", "across_seeds", "seed_ranks", "seed_comparisons", "significance"}


def write_report(runs: Sequence[Run], out_dir: str | os.PathLike, *, fmt: str | None = None,
                 html_report: bool = True, title: str | None = None, max_points: int = 300, seed: int = 0,
                 style: str = "default", sanity: Sequence[SanityRun] = (),
                 mixers: Sequence[MixerRun] = (), tables: ReportTables | None = None) -> list[Path]:
    """Write the report's CSVs, figures (``figures/``), ``report.md``, ``report.html`` and ``manifest.json`` (the
    sha256 of every file) as the whole content of ``out_dir``, replaced at once (a failed write leaves it as it was).

    Parameters
    ----------
    runs : sequence of Run
        Faithfulness runs (may be empty when ``sanity`` is not).
    out_dir : path
    fmt : {"png", "svg", "pdf"}, optional
        Figure files' format (default png, or pdf in paper style); the HTML embeds PNG (or SVG)
        renderings either way.
    html_report : bool
        Also write the self-contained ``report.html``.
    title : str, optional
    max_points : int
        Samples drawn (seeded) for each attribution-vs-effect scatter.
    seed : int
    style : {"default", "paper"}
        Paper style: figures without titles at paper column widths; each figure's caption is
        written beside it (``figures/NAME.caption.txt``) and under it in the report.
    sanity : sequence of SanityRun
        ``laya-eval sanity`` folders: the "Sanity checks" section.
    mixers : sequence of MixerRun
        ``laya-eval mixers`` folders: the "Depth mixers" section (``mixers.csv``: the verdict per mixer;
        ``figures/mixers_<run>``: the map of mass and effect).
    tables : ReportTables, optional
        :func:`~laya_eval.reporting.tables.report_tables` of ``runs`` when the caller has them already.

    Returns
    -------
    list of Path
        The files written, ``manifest.json`` last.
    """
    from laya_eval import figures as F
    from laya_eval.figures.mixers import mixer_map_figure

    F.check_style(style)
    fmt = F.check_format(fmt) if fmt is not None else F.default_format(style)
    runs, sanity = _unique_labels(list(runs)), unique_sanity_labels(list(sanity))
    if not runs and not sanity and not mixers:
        raise ResultsError("give at least one result folder of `laya-eval faithfulness`, `laya-eval sanity` or "
                           "`laya-eval mixers`.")
    check_report_output(out_dir, runs, sanity, mixers)
    written: dict[str, bytes] = {}
    if tables is None and runs:
        tables = report_tables(runs)
    as_written = _write_tables(tables, written) if tables is not None else None
    checks = None
    if sanity:
        checks = tuple(_write_csv(name, table, written)
                       for name, table in (("sanity.csv", sanity_table(sanity)),
                                           ("sanity_runs.csv", sanity_runs_table(sanity))))
    figs = _make_figures(runs, tables, max_points=max_points, seed=seed, style=style) if runs else {}
    figs.update(_sanity_figures(sanity, style))
    verdicts = None
    if mixers:
        verdicts = _write_csv("mixers.csv", pd.concat([mixer_verdicts(m) for m in mixers], ignore_index=True),
                              written)
        figs.update({f"mixers_{_slug(m.label)}": mixer_map_figure(m.map, title=f"Mass and effect, {m.label}")
                     for m in mixers})
    files, embeds, captions = _write_figures(figs, written, fmt=fmt, style=style, html_report=html_report)
    blocks = _blocks(runs, as_written, files, title=title, captions=captions, sanity=checks,
                     mixers=(list(mixers), verdicts) if mixers else None,
                     provenance=provenance_table(runs, sanity, mixers))
    written["report.md"] = _markdown(blocks).encode()
    if html_report:
        written["report.html"] = _html(blocks, embeds).encode()
    manifest = {"kind": "report", **provenance(), "runs": [r.label for r in runs],
                "sanity": [s.label for s in sanity], "mixers": [m.label for m in mixers],
                "files": {name: sha256_bytes(data) for name, data in written.items()}}
    written[MANIFEST] = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
    return write_result_folder(out_dir, written)


def check_report_output(out_dir: str | os.PathLike, runs: Sequence[Run] = (), sanity: Sequence[SanityRun] = (),
                        mixers: Sequence[MixerRun] = ()) -> Path:
    """Check, before any work, that a report can be written to ``out_dir``: a folder that can be replaced whole
    (:func:`~laya_eval.output.files.check_output_folder`) and neither a folder the report reads nor one holding it.

    Raises
    ------
    ConfigError
    """
    out = Path(os.path.realpath(out_dir))
    for folder in [r.folder for r in runs] + [s.folder for s in sanity] + [m.folder for m in mixers]:
        if folder is not None and (out == (f := Path(os.path.realpath(folder))) or out in f.parents):
            raise ConfigError(f"--out '{out_dir}' would replace the result folder '{folder}' that the report reads; "
                              "write the report to another folder.")
    return check_output_folder(out_dir)


def report(folders: Sequence[str | os.PathLike], out_dir: str | os.PathLike, **options: Any) -> list[Path]:
    """Report on result folders of ``faithfulness`` and ``sanity`` (each recognised by its files).

    Reads the folders (:func:`~laya_eval.reporting.runs.load_inputs`) and writes the report
    (:func:`write_report`; ``options`` are its keyword arguments). Returns the files written.

    Examples
    --------
    >>> report(["runs/laya", "runs/scalarmix"], "report/")  # doctest: +SKIP
    """
    inputs = load_inputs(folders)
    return write_report(inputs.runs, out_dir, sanity=inputs.sanity, mixers=inputs.mixers, **options)


@dataclass
class ReportRun:
    """What :func:`report_to_folder` did: the folders read, the files written and the tables the CLI prints.

    Attributes
    ----------
    inputs : ReportInputs
        The faithfulness runs, sanity and mixers folders read (``inputs.warnings``: unverified folders).
    files : list of Path
        The files written, ``manifest.json`` last.
    faithfulness : DataFrame or None
        The combined faithfulness table (None without faithfulness runs).
    sanity : DataFrame or None
        The sanity verdicts (None without sanity folders).
    mixers : DataFrame or None
        Per mixer, whether mass predicts effect (None without mixers folders).
    provenance : DataFrame or None
        Per folder read, the code that wrote it
        (:func:`~laya_eval.reporting.provenance_sections.provenance_table`).
    """

    inputs: ReportInputs
    files: list[Path] = field(default_factory=list)
    faithfulness: pd.DataFrame | None = None
    sanity: pd.DataFrame | None = None
    mixers: pd.DataFrame | None = None
    provenance: pd.DataFrame | None = None


def report_to_folder(folders: Sequence[str | os.PathLike], out_dir: str | os.PathLike, *, strict: bool = False,
                     on_warning: Callable[[str], None] | None = None, **options: Any) -> ReportRun:
    """``laya-eval report`` as one call: read ``folders`` (:func:`~laya_eval.reporting.runs.load_inputs`, ``strict``
    refuses unverified ones), check ``out_dir`` before any work (:func:`check_report_output`), pass each unverified
    folder's warning to ``on_warning``, and write the report (:func:`write_report`; ``options`` are its keyword
    arguments)."""
    inputs = load_inputs(folders, strict=strict)
    check_report_output(out_dir, inputs.runs, inputs.sanity, inputs.mixers)
    for warning in inputs.warnings:
        if on_warning is not None:
            on_warning(warning)
    run = ReportRun(inputs=inputs)
    tables = report_tables(inputs.runs) if inputs.runs else None  # computed once: printed and written
    if tables is not None:
        run.faithfulness = tables.faithfulness
    if inputs.sanity:
        run.sanity = sanity_table(inputs.sanity)
    if inputs.mixers:
        run.mixers = pd.concat([mixer_verdicts(m) for m in inputs.mixers], ignore_index=True)
    run.provenance = provenance_table(inputs.runs, inputs.sanity, inputs.mixers)
    run.files = write_report(inputs.runs, out_dir, sanity=inputs.sanity, mixers=inputs.mixers, tables=tables,
                             **options)
    return run


def _write_figures(figs: dict[str, Any], written: dict[str, bytes], *, fmt: str, style: str,
                   html_report: bool) -> tuple[dict[str, str], dict[str, tuple[str, bytes]], dict[str, str]]:
    """Each figure as ``figures/NAME.FMT`` (and its caption file in paper style); the HTML's embeddings."""
    from laya_eval import figures as F

    files, embeds, captions = {}, {}, {}
    for name, fig in figs.items():
        data = F.figure_bytes(fig, fmt)
        files[name] = f"figures/{name}.{fmt}"
        written[files[name]] = data
        captions[name] = F.figure_caption(fig)  # the report prints it under the figure in either style
        if style == "paper":
            written[F.caption_path(Path(files[name])).as_posix()] = (captions[name] + "\n").encode()
        if html_report:
            kind = fmt if fmt in ("png", "svg") else "png"
            embeds[name] = (kind, data if kind == fmt else F.figure_bytes(fig, "png"))
    return files, embeds, captions


def _write_csv(name: str, table: pd.DataFrame, written: dict[str, bytes], *, optional: bool = False) -> pd.DataFrame:
    """Write ``table`` (unless optional and empty) and return it as read back: the report formats what the CSV holds."""
    text = _csv_text(table)
    if not (optional and table.empty):
        written[name] = text.encode()
    return pd.read_csv(io.StringIO(text), keep_default_na=False, na_values=[""])


def _write_tables(tables: ReportTables, written: dict[str, bytes]) -> ReportTables:
    return ReportTables(**{name: _write_csv(f"{name}.csv", getattr(tables, name), written,
                                            optional=name in _OPTIONAL) for name in _TABLES})
