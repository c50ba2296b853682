"""``report``: read result folders (or in-memory evaluations) and write a report's CSVs, figures, ``report.md``,
``report.html`` and ``manifest.json`` as one folder.

Every file is made in memory first and the folder is then written whole by
:func:`laya_eval.output.files.write_result_folder` (the writer of every result folder): a failed write (a full
disk) leaves the previous report as it was.
"""

from __future__ import annotations

import io
import json
import os
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
from laya_eval.reporting.runs import ReportInputs, Run, _expand, _unique_labels, load_inputs
from laya_eval.reporting.sanity_verdicts import SanityRun, sanity_runs_table, sanity_table, unique_sanity_labels
from laya_eval.reporting.tables import ReportTables, report_tables

__all__ = ["ReportResult", "report", "report_figures"]


def _csv_text(table: pd.DataFrame) -> str:
    return table.to_csv(index=False, float_format="%.8g", lineterminator="\n")


def _scatter_points(run: Run, max_samples: int, seed: int) -> tuple[pd.DataFrame, int]:
    samples = np.sort(run.layers["sample"].unique())
    if samples.size > max_samples:
        samples = np.sort(np.random.default_rng(seed).choice(samples, size=max_samples, replace=False))
    return run.layers[run.layers["sample"].isin(samples)], int(samples.size)


def _make_figures(
    runs: Sequence[Run], tables: ReportTables, *, max_points: int, seed: int, style: str
) -> dict[str, Any]:
    """Figure name (without extension) -> Figure, in report order."""
    from laya_eval import figures as F

    metas = [r.meta for r in runs]
    comparisons = tables.comparisons if not tables.comparisons.empty else None
    out = {
        "faithfulness": F.faithfulness_figure(tables.faithfulness, metas, comparisons=comparisons, style=style),
        "deletion_curves": F.deletion_curves_figure(tables.deletion_curves, metas, style=style),
        "spearman_distribution": F.spearman_distribution_figure(tables.spearman_distribution, metas, style=style),
    }
    for r in runs:
        points, n = _scatter_points(r, max_points, seed)
        out[f"scatter_{_slug(r.label)}"] = F.scatter_figure(
            points, meta={**r.meta, "n_points": n}, style=style, seed=seed
        )
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
    from laya_eval.reporting.significance import holm_family_text, matrix_cells, signed_log_p

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
            meta = {
                "label": f"across seeds ({long['n'].max()} runs)",
                "head": head,
                "dataset": dataset,
                "ablation": ablation,
                "scope": scope,
            }
            test = "over runs (seeds)"
        panels.append(
            {
                "meta": meta,
                "test": f"Wilcoxon {test}, {holm_family_text(long)}",
                "values": pd.DataFrame(signed_log_p(long, methods), index=methods, columns=methods),
                "cells": pd.DataFrame(matrix_cells(long, methods), index=methods, columns=methods),
            }
        )
    return panels


def _sanity_figures(sanity: Sequence[SanityRun], style: str = "default") -> dict[str, Any]:
    from laya_eval.figures.sanity_checks import randomisation_figure

    return {
        f"sanity_{_slug(s.label)}": randomisation_figure(
            pd.concat([s.randomisation, s.data_randomisation]), meta={**s.meta, "label": s.label}, style=style
        )
        for s in sanity
    }


def report_figures(
    runs: Sequence[Run],
    *,
    sanity: Sequence[SanityRun] = (),
    max_points: int = 300,
    seed: int = 0,
    style: str = "default",
) -> dict[str, Any]:
    """Every figure of a report, by file name without extension (``faithfulness``, ``scatter_<run>``, ...).

    The arguments are those of :func:`report`; the figures are :class:`matplotlib.figure.Figure` objects.
    """
    runs, sanity = _unique_labels(list(runs)), unique_sanity_labels(list(sanity))
    figs = _make_figures(runs, report_tables(runs), max_points=max_points, seed=seed, style=style) if runs else {}
    figs.update(_sanity_figures(sanity, style))
    return figs


_TABLES = (
    "runs",
    "faithfulness",
    "across_runs",
    "deletion_curves",
    "spearman_distribution",
    "agreement",
    "comparisons",
    "across_seeds",
    "seed_ranks",
    "seed_comparisons",
    "significance",
)
# Written only when they have rows (a run without comparisons.csv, a report without seed groups).
_OPTIONAL = {"comparisons", "across_seeds", "seed_ranks", "seed_comparisons", "significance"}


def _write_report(
    runs: Sequence[Run],
    out: str | os.PathLike,
    *,
    fmt: str,
    html_report: bool,
    title: str | None,
    max_points: int,
    seed: int,
    style: str,
    sanity: Sequence[SanityRun],
    mixers: Sequence[MixerRun],
    tables: ReportTables | None,
) -> list[Path]:
    """Write the report (its inputs and options checked by :func:`report`) as the whole content of ``out``."""
    from laya_eval.figures.mixers import mixer_map_figure

    written: dict[str, bytes] = {}
    as_written = _write_tables(tables, written) if tables is not None else None
    checks = None
    if sanity:
        checks = tuple(
            _write_csv(name, table, written)
            for name, table in (("sanity.csv", sanity_table(sanity)), ("sanity_runs.csv", sanity_runs_table(sanity)))
        )
    figs = _make_figures(runs, tables, max_points=max_points, seed=seed, style=style) if runs else {}
    figs.update(_sanity_figures(sanity, style))
    verdicts = None
    if mixers:
        verdicts = _write_csv("mixers.csv", pd.concat([mixer_verdicts(m) for m in mixers], ignore_index=True), written)
        figs.update(
            {f"mixers_{_slug(m.label)}": mixer_map_figure(m.map, title=f"Mass and effect, {m.label}") for m in mixers}
        )
    files, embeds, captions = _write_figures(figs, written, fmt=fmt, style=style, html_report=html_report)
    blocks = _blocks(
        runs,
        as_written,
        files,
        title=title,
        captions=captions,
        sanity=checks,
        mixers=(list(mixers), verdicts) if mixers else None,
        provenance=provenance_table(runs, sanity, mixers),
    )
    written["report.md"] = _markdown(blocks).encode()
    if html_report:
        written["report.html"] = _html(blocks, embeds).encode()
    manifest = {
        "kind": "report",
        **provenance(),
        "runs": [r.label for r in runs],
        "sanity": [s.label for s in sanity],
        "mixers": [m.label for m in mixers],
        "files": {name: sha256_bytes(data) for name, data in written.items()},
    }
    written[MANIFEST] = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
    return write_result_folder(out, written)


def _check_output(out: str | os.PathLike, folders: Sequence[str | os.PathLike]) -> Path:
    """``out`` can be written as a result folder (:func:`~laya_eval.output.files.check_output_folder`) and is
    neither a folder the report reads nor one holding it."""
    target = Path(os.path.realpath(out))
    for folder in [f for given in folders for f in dict.fromkeys([Path(given), *_expand(Path(given))])]:
        if target == (f := Path(os.path.realpath(folder))) or target in f.parents:
            raise ConfigError(
                f"--out '{out}' would replace the result folder '{folder}' that the report reads; "
                "write the report to another folder."
            )
    return check_output_folder(out)


@dataclass
class ReportResult:
    """What :func:`report` read and wrote, and the tables ``laya-eval report`` prints.

    Attributes
    ----------
    inputs : ReportInputs
        The faithfulness runs, sanity and mixers folders read.
    files : list of Path
        The files written, ``manifest.json`` last.
    warnings : list of str
        One line per input folder read unverified (an edited file, a file its manifest does not list, no
        manifest): the lines ``laya-eval report`` prints after ``warning:``.
    tables : ReportTables or None
        The tables computed over the faithfulness runs (:func:`~laya_eval.reporting.tables.report_tables`;
        ``tables.faithfulness`` is the combined table); None without faithfulness runs.
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
    warnings: list[str] = field(default_factory=list)
    tables: ReportTables | None = None
    sanity: pd.DataFrame | None = None
    mixers: pd.DataFrame | None = None
    provenance: pd.DataFrame | None = None


def report(
    inputs: Sequence[Any],
    *,
    out: str | os.PathLike,
    strict: bool = False,
    fmt: str | None = None,
    html_report: bool = True,
    title: str | None = None,
    max_points: int = 300,
    seed: int = 0,
    style: str = "default",
) -> ReportResult:
    """Report on result folders of ``faithfulness``, ``sanity`` and ``mixers`` (each recognised by its files) and
    on in-memory evaluations, written as the whole content of ``out`` (``laya-eval report``).

    ``out``, ``fmt`` and ``style`` are checked before any folder is read: ``out`` must be a folder that can be
    replaced whole (a new or empty folder, or an earlier result) and neither a folder the report reads nor one
    holding it. The folder is written into a temporary folder and swapped in: a failed write leaves the previous
    report as it was.

    Parameters
    ----------
    inputs : sequence of path or EvaluationResult
        Result folders (a folder without ``summary.csv`` stands for the result folders below it, as written by
        ``faithfulness --ablation a,b`` or ``sweep``) and :class:`~laya_eval.engine.results.EvaluationResult`
        objects (reported as runs labelled by their checkpoint's file name).
    out : path
        The report folder: the CSVs, ``figures/``, ``report.md``, ``report.html`` and ``manifest.json`` (the
        sha256 of every file).
    strict : bool
        Refuse a result folder whose ``manifest.json`` is missing or does not list a file read, or whose files
        changed since; otherwise such a folder is reported, with one line in :attr:`ReportResult.warnings`.
    fmt : {"png", "svg", "pdf"}, optional
        Figure files' format (default png, or pdf in paper style); the HTML embeds PNG (or SVG) renderings either
        way.
    html_report : bool
        Also write the self-contained ``report.html``.
    title : str, optional
    max_points : int
        Samples drawn (seeded) for each attribution-vs-effect scatter.
    seed : int
    style : {"default", "paper"}
        Paper style: figures without titles at paper column widths; each figure's caption is written beside it
        (``figures/NAME.caption.txt``) and under it in the report.

    Returns
    -------
    ReportResult

    Raises
    ------
    ConfigError
        ``out``, ``fmt`` or ``style`` cannot be used (before anything is read).
    ResultsError
        No inputs, or an input folder that cannot be read (or, with ``strict``, is unverified).

    Examples
    --------
    >>> done = report(["runs/laya", "runs/scalarmix"], out="report/")  # doctest: +SKIP
    >>> done.warnings, done.tables.faithfulness  # doctest: +SKIP
    """
    from laya_eval import figures as F

    F.check_style(style)
    fmt = F.check_format(fmt) if fmt is not None else F.default_format(style)
    if isinstance(inputs, (str, os.PathLike)) or not inputs:
        raise ResultsError(
            "give at least one result folder of `laya-eval faithfulness`, `laya-eval sanity` or "
            f"`laya-eval mixers` (a list of them); got {inputs!r}."
        )
    _check_output(out, [f for f in inputs if isinstance(f, (str, os.PathLike))])
    read = load_inputs(inputs, strict=strict)
    done = ReportResult(inputs=read, warnings=list(read.warnings))
    done.tables = report_tables(read.runs) if read.runs else None  # computed once: returned and written
    if read.sanity:
        done.sanity = sanity_table(read.sanity)
    if read.mixers:
        done.mixers = pd.concat([mixer_verdicts(m) for m in read.mixers], ignore_index=True)
    done.provenance = provenance_table(read.runs, read.sanity, read.mixers)
    done.files = _write_report(
        read.runs,
        out,
        fmt=fmt,
        html_report=html_report,
        title=title,
        max_points=max_points,
        seed=seed,
        style=style,
        sanity=read.sanity,
        mixers=read.mixers,
        tables=done.tables,
    )
    return done


def _write_figures(
    figs: dict[str, Any], written: dict[str, bytes], *, fmt: str, style: str, html_report: bool
) -> tuple[dict[str, str], dict[str, tuple[str, bytes]], dict[str, str]]:
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
    return ReportTables(
        **{
            name: _write_csv(f"{name}.csv", getattr(tables, name), written, optional=name in _OPTIONAL)
            for name in _TABLES
        }
    )
