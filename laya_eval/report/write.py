"""Writing a report: its CSVs, figures, ``report.md`` and ``report.html``, each file atomically."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from laya_eval.report.render import _html, _markdown, _slug
from laya_eval.report.sections import _blocks
from laya_eval.fileio import atomic_write_bytes
from laya_eval.report.runs import Run, _unique_labels
from laya_eval.report.tables import ReportTables, report_tables

__all__ = ["write_report"]


def _write_bytes(path: Path, data: bytes) -> Path:
    return atomic_write_bytes(path, data)


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
    return out


_TABLES = ("runs", "faithfulness", "across_runs", "deletion_curves", "spearman_distribution", "agreement",
           "comparisons")


def write_report(runs: Sequence[Run], out_dir: str | os.PathLike, *, fmt: str | None = None,
                 html_report: bool = True, title: str | None = None, max_points: int = 300, seed: int = 0,
                 style: str = "default") -> list[Path]:
    """Write the report's CSVs, figures (``figures/``), ``report.md`` and ``report.html``.

    Parameters
    ----------
    runs : sequence of Run
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

    Returns
    -------
    list of Path
    """
    from laya_eval import figures as F

    F.check_style(style)
    fmt = F.check_format(fmt) if fmt is not None else F.default_format(style)
    runs = _unique_labels(list(runs))
    out = Path(out_dir)
    (out / "figures").mkdir(parents=True, exist_ok=True)
    tables = report_tables(runs)
    written, as_written = [], {}
    for name in _TABLES:
        text = _csv_text(getattr(tables, name))
        if name != "comparisons" or not tables.comparisons.empty:
            written.append(_write_bytes(out / f"{name}.csv", text.encode()))
        # The report formats what the CSV holds, not the in-memory floats.
        as_written[name] = pd.read_csv(io.StringIO(text), keep_default_na=False, na_values=[""])
    figs = _make_figures(runs, tables, max_points=max_points, seed=seed, style=style)
    files, embeds, captions = {}, {}, {}
    for name, fig in figs.items():
        data = F.figure_bytes(fig, fmt)
        files[name] = f"figures/{name}.{fmt}"
        written.append(_write_bytes(out / files[name], data))
        if style == "paper":
            captions[name] = F.figure_caption(fig)
            written.append(_write_bytes(F.caption_path(out / files[name]), (captions[name] + "\n").encode()))
        if html_report:
            kind = fmt if fmt in ("png", "svg") else "png"
            embeds[name] = (kind, data if kind == fmt else F.figure_bytes(fig, "png"))
    blocks = _blocks(runs, ReportTables(**as_written), files, title=title, captions=captions)
    written.append(_write_bytes(out / "report.md", _markdown(blocks).encode()))
    if html_report:
        written.append(_write_bytes(out / "report.html", _html(blocks, embeds).encode()))
    return written
