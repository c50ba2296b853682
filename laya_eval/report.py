"""Reports over one or several ``faithfulness`` result folders: tables, figures, markdown and HTML.

A *run* is one result folder (layers.csv, samples.csv, summary.csv, manifest.json)
or one in-memory :class:`~laya_eval.evaluate.EvaluationResult`. The tables are
computed from the runs' CSVs and written as CSVs first; ``report.md`` and
``report.html`` then format exactly what those CSVs hold (fixed decimals), so
every number in the report can be traced to a file.

Examples
--------
>>> runs = load_runs(["runs/laya", "runs/scalarmix"])  # doctest: +SKIP
>>> write_report(runs, "report/")                      # doctest: +SKIP
"""

from __future__ import annotations

import base64
import html
import io
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from laya_eval.errors import ResultsError
from laya_eval.figures import METHOD_LABELS, RHO_BANDS, method_label

__all__ = [
    "DECIMALS",
    "ReportTables",
    "Run",
    "agreement_matrix",
    "load_run",
    "load_runs",
    "report_tables",
    "run_from_result",
    "write_report",
]

DECIMALS = 4
RHO_ONE_TOL = 1e-9
_REQUIRED = {
    "summary.csv": ["head", "dataset", "method", "ablation", "scope", "n", "n_undefined", "faithfulness",
                    "faithfulness_ci_low", "faithfulness_ci_high", "deletion_at_1", "deletion_at_1_ci_low",
                    "deletion_at_1_ci_high", "top1_hit_rate", "aopc"],
    "samples.csv": ["sample", "label", "pred", "method", "spearman"],
    "layers.csv": ["sample", "method", "layer", "attribution", "effect"],
}


@dataclass(frozen=True)
class Run:
    """One evaluation: its three tables, manifest and display label (the checkpoint's file name)."""

    label: str
    summary: pd.DataFrame
    samples: pd.DataFrame
    layers: pd.DataFrame
    manifest: dict[str, Any] = field(default_factory=dict)
    folder: Path | None = None

    @property
    def methods(self) -> list[str]:
        """Methods evaluated, registry order first."""
        return _ordered(self.summary["method"])

    @property
    def meta(self) -> dict[str, Any]:
        """What a figure title names: label, head, dataset, split, n, ablation, scope."""
        row = self.summary.iloc[0]
        return {"label": self.label, "head": row["head"], "dataset": row["dataset"],
                "split": self.manifest.get("split"), "n": int(row["n"]), "ablation": row["ablation"],
                "scope": row["scope"]}


def _ordered(methods) -> list[str]:
    present = list(dict.fromkeys(methods))
    return [m for m in METHOD_LABELS if m in present] + [m for m in present if m not in METHOD_LABELS]


def _read_csv(path: Path) -> pd.DataFrame:
    try:
        table = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ResultsError(f"{path}: not a readable CSV ({exc}).") from None
    missing = [c for c in _REQUIRED[path.name] if c not in table.columns]
    if missing:
        raise ResultsError(f"{path}: missing column(s) {', '.join(missing)}; is it from `laya-eval faithfulness`?")
    return table


def load_run(folder: str | os.PathLike) -> Run:
    """Read one ``laya-eval faithfulness`` output folder.

    Raises
    ------
    ResultsError
        The folder does not exist, lacks summary.csv / samples.csv / layers.csv,
        or a file is not what ``faithfulness`` writes.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ResultsError(f"result folder '{folder}' does not exist "
                        "(expected the --out folder of `laya-eval faithfulness`).")
    missing = [name for name in _REQUIRED if not (folder / name).is_file()]
    if missing:
        raise ResultsError(f"result folder '{folder}' has no {', '.join(missing)}: expected the output of "
                        "`laya-eval faithfulness` (layers.csv, samples.csv, summary.csv, manifest.json).")
    tables = {name: _read_csv(folder / name) for name in _REQUIRED}
    if tables["summary.csv"].empty:
        raise ResultsError(f"{folder / 'summary.csv'} has no rows.")
    manifest: dict[str, Any] = {}
    if (folder / "manifest.json").is_file():
        try:
            manifest = json.loads((folder / "manifest.json").read_text())
        except json.JSONDecodeError as exc:
            raise ResultsError(f"{folder / 'manifest.json'}: not valid JSON ({exc}).") from None
    ckpt = str(tables["summary.csv"]["checkpoint"].iloc[0]) if "checkpoint" in tables["summary.csv"] else folder.name
    return Run(label=Path(ckpt).name, summary=tables["summary.csv"], samples=tables["samples.csv"],
               layers=tables["layers.csv"], manifest=manifest, folder=folder)


def run_from_result(result, label: str | None = None) -> Run:
    """A :class:`Run` from an in-memory :class:`~laya_eval.evaluate.EvaluationResult`."""
    path = (result.manifest.get("checkpoint") or {}).get("path")
    return Run(label=label or (Path(path).name if path else "<in-memory>"), summary=result.summary,
               samples=result.samples, layers=result.layers, manifest=result.manifest)


def _unique_labels(runs: Sequence[Run]) -> list[Run]:
    counts = pd.Series([r.label for r in runs]).value_counts()
    out = []
    for k, run in enumerate(runs):
        if counts[run.label] > 1:
            suffix = run.folder.name if run.folder is not None else str(k + 1)
            run = Run(f"{run.label} [{suffix}]", run.summary, run.samples, run.layers, run.manifest, run.folder)
        out.append(run)
    if len({r.label for r in out}) < len(out):
        out = [Run(f"{r.label} #{k + 1}", r.summary, r.samples, r.layers, r.manifest, r.folder)
               for k, r in enumerate(out)]
    return out


def load_runs(folders: Sequence[str | os.PathLike]) -> list[Run]:
    """Read several result folders; labels are made unique (the folder name is added to duplicates)."""
    if not folders:
        raise ResultsError("give at least one result folder of `laya-eval faithfulness`.")
    return _unique_labels([load_run(f) for f in folders])


# ---------------------------------------------------------------------------- tables


@dataclass
class ReportTables:
    """Every table of a report (each is also written as ``<name>.csv``)."""

    runs: pd.DataFrame
    faithfulness: pd.DataFrame
    across_runs: pd.DataFrame
    deletion_curves: pd.DataFrame
    spearman_distribution: pd.DataFrame
    agreement: pd.DataFrame


def _runs_table(runs: Sequence[Run]) -> pd.DataFrame:
    rows = []
    for r in runs:
        ckpt = r.manifest.get("checkpoint") or {}
        rows.append({**r.meta, "run": r.label, "checkpoint": ckpt.get("path") or r.summary["checkpoint"].iloc[0],
                     "sha256": ckpt.get("sha256") or "", "seed": r.manifest.get("seed"),
                     "folder": "" if r.folder is None else str(r.folder)})
    cols = ["run", "checkpoint", "head", "dataset", "split", "n", "ablation", "scope", "seed", "sha256", "folder"]
    return pd.DataFrame(rows)[cols]


def _faithfulness_table(runs: Sequence[Run]) -> pd.DataFrame:
    cols = ["head", "dataset", "ablation", "scope", "method", "n", "n_undefined", "faithfulness",
            "faithfulness_ci_low", "faithfulness_ci_high", "deletion_at_1", "deletion_at_1_ci_low",
            "deletion_at_1_ci_high", "top1_hit_rate", "aopc"]
    parts = []
    for r in runs:
        part = r.summary.set_index("method", drop=False).loc[r.methods, cols].reset_index(drop=True)
        parts.append(part.assign(run=r.label))
    return pd.concat(parts, ignore_index=True)[["run", *cols]]


def _across_runs_table(faith: pd.DataFrame) -> pd.DataFrame:
    """Mean ± std (ddof=1) across runs that share head, dataset, ablation and scope; groups of 2+ runs only."""
    keys = ["head", "dataset", "ablation", "scope", "method"]
    grouped = faith.groupby(keys, sort=False)
    out = grouped.agg(n_runs=("run", "size"), faithfulness_mean=("faithfulness", "mean"),
                      faithfulness_std=("faithfulness", "std"), deletion_at_1_mean=("deletion_at_1", "mean"),
                      deletion_at_1_std=("deletion_at_1", "std")).reset_index()
    return out[out["n_runs"] >= 2].reset_index(drop=True)


def _deletion_table(runs: Sequence[Run]) -> pd.DataFrame:
    parts = []
    for r in runs:
        ks = sorted(int(c.rsplit("_", 1)[1]) for c in r.summary.columns if re.fullmatch(r"deletion_at_\d+", c))
        s = r.summary.set_index("method").loc[r.methods]
        for m in r.methods:
            parts.append(pd.DataFrame({"run": r.label, "method": m, "k": ks,
                                       "deletion": [float(s.loc[m, f"deletion_at_{k}"]) for k in ks]}))
    return pd.concat(parts, ignore_index=True)


def _spearman_table(runs: Sequence[Run]) -> pd.DataFrame:
    rows = []
    for r in runs:
        for m in r.methods:
            rho = r.samples.loc[r.samples["method"] == m, "spearman"].to_numpy(dtype=np.float64)
            defined = rho[~np.isnan(rho)]
            one = defined >= 1 - RHO_ONE_TOL
            rows.append({"run": r.label, "method": m, "n": rho.size, "n_rho_one": int(one.sum()),
                         "n_rho_high": int(((defined >= 0.5) & ~one).sum()),
                         "n_rho_low": int(((defined >= 0) & (defined < 0.5)).sum()),
                         "n_rho_negative": int((defined < 0).sum()), "n_undefined": int(rho.size - defined.size),
                         "share_rho_one": float(one.sum() / rho.size) if rho.size else float("nan"),
                         "median_rho": float(np.median(defined)) if defined.size else float("nan")})
    return pd.DataFrame(rows)


def agreement_matrix(layers: pd.DataFrame, methods: Sequence[str] | None = None) -> pd.DataFrame:
    """Mean over samples of Spearman ρ between two methods' layer scores, for every pair.

    Parameters
    ----------
    layers : DataFrame
        ``sample, method, layer, attribution`` (layers.csv).
    methods : sequence of str, optional
        Row / column order; all methods present by default.

    Returns
    -------
    DataFrame
        Long form: ``method_a, method_b, mean_spearman, n_defined, n_undefined``. A sample
        where either vector is constant across layers is undefined and excluded; the mean
        is NaN when no sample is defined.
    """
    from laya_eval.metrics import spearman_per_sample

    methods = list(methods) if methods is not None else _ordered(layers["method"])
    wide = layers.pivot_table(index="sample", columns=["method", "layer"], values="attribution", aggfunc="first")
    scores = {m: wide[m].sort_index(axis=1).to_numpy(dtype=np.float64) for m in methods}
    rows = []
    for a in methods:
        for b in methods:
            rho = spearman_per_sample(scores[a], scores[b])
            ok = ~np.isnan(rho)
            mean = float(rho[ok].mean()) if ok.any() else float("nan")
            rows.append({"method_a": a, "method_b": b, "mean_spearman": mean, "n_defined": int(ok.sum()),
                         "n_undefined": int((~ok).sum())})
    return pd.DataFrame(rows)


def report_tables(runs: Sequence[Run]) -> ReportTables:
    """All tables of a report, computed from the runs' per-run tables."""
    faith = _faithfulness_table(runs)
    agreement = pd.concat([agreement_matrix(r.layers, r.methods).assign(run=r.label) for r in runs], ignore_index=True)
    agreement = agreement[["run", "method_a", "method_b", "mean_spearman", "n_defined", "n_undefined"]]
    return ReportTables(runs=_runs_table(runs), faithfulness=faith, across_runs=_across_runs_table(faith),
                        deletion_curves=_deletion_table(runs), spearman_distribution=_spearman_table(runs),
                        agreement=agreement)


# ---------------------------------------------------------------------------- writing


def _write_bytes(path: Path, data: bytes) -> Path:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return path


def _csv_text(table: pd.DataFrame) -> str:
    return table.to_csv(index=False, float_format="%.8g", lineterminator="\n")


def _scatter_points(run: Run, max_samples: int, seed: int) -> tuple[pd.DataFrame, int]:
    samples = np.sort(run.layers["sample"].unique())
    if samples.size > max_samples:
        samples = np.sort(np.random.default_rng(seed).choice(samples, size=max_samples, replace=False))
    return run.layers[run.layers["sample"].isin(samples)], int(samples.size)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "run"


def _make_figures(runs: Sequence[Run], tables: ReportTables, *, max_points: int, seed: int) -> dict[str, Any]:
    """Figure name (without extension) -> Figure, in report order."""
    from laya_eval import figures as F

    metas = [r.meta for r in runs]
    out = {"faithfulness": F.faithfulness_figure(tables.faithfulness, metas),
           "deletion_curves": F.deletion_curves_figure(tables.deletion_curves, metas),
           "spearman_distribution": F.spearman_distribution_figure(tables.spearman_distribution, metas)}
    for r in runs:
        points, n = _scatter_points(r, max_points, seed)
        out[f"scatter_{_slug(r.label)}"] = F.scatter_figure(points, meta={**r.meta, "n_points": n})
    for r in runs:
        long = tables.agreement[tables.agreement["run"] == r.label]
        matrix = long.pivot(index="method_a", columns="method_b", values="mean_spearman").loc[r.methods, r.methods]
        out[f"agreement_{_slug(r.label)}"] = F.agreement_figure(matrix, meta=r.meta)
    return out


def write_report(runs: Sequence[Run], out_dir: str | os.PathLike, *, fmt: str = "png", html_report: bool = True,
                 title: str | None = None, max_points: int = 300, seed: int = 0) -> list[Path]:
    """Write the report's CSVs, figures (``figures/``), ``report.md`` and ``report.html``.

    Parameters
    ----------
    runs : sequence of Run
    out_dir : path
    fmt : {"png", "svg", "pdf"}
        Figure files' format; the HTML embeds PNG (or SVG) renderings either way.
    html_report : bool
        Also write the self-contained ``report.html``.
    title : str, optional
    max_points : int
        Samples drawn (seeded) for each attribution-vs-effect scatter.
    seed : int

    Returns
    -------
    list of Path
    """
    from laya_eval import figures as F

    F._check_format(fmt)
    runs = _unique_labels(list(runs))
    out = Path(out_dir)
    (out / "figures").mkdir(parents=True, exist_ok=True)
    tables = report_tables(runs)
    written, as_written = [], {}
    for name in ("runs", "faithfulness", "across_runs", "deletion_curves", "spearman_distribution", "agreement"):
        text = _csv_text(getattr(tables, name))
        written.append(_write_bytes(out / f"{name}.csv", text.encode()))
        # The report formats what the CSV holds, not the in-memory floats.
        as_written[name] = pd.read_csv(io.StringIO(text), keep_default_na=False, na_values=[""])
    figs = _make_figures(runs, tables, max_points=max_points, seed=seed)
    files, embeds = {}, {}
    for name, fig in figs.items():
        data = F.figure_bytes(fig, fmt)
        files[name] = f"figures/{name}.{fmt}"
        written.append(_write_bytes(out / files[name], data))
        if html_report:
            kind = fmt if fmt in ("png", "svg") else "png"
            embeds[name] = (kind, data if kind == fmt else F.figure_bytes(fig, "png"))
    blocks = _blocks(runs, ReportTables(**as_written), files, title=title)
    written.append(_write_bytes(out / "report.md", _markdown(blocks).encode()))
    if html_report:
        written.append(_write_bytes(out / "report.html", _html(blocks, embeds).encode()))
    return written


# ---------------------------------------------------------------------------- markdown and HTML
# A report is a list of blocks: ("h1" | "h2" | "h3" | "p", text), ("table", header, rows),
# ("figure", name, caption, relative path).

_INTRO = (
    "Faithfulness is the mean over samples of the Spearman correlation ρ between a method's layer scores and the "
    "leave-one-layer-out effects (the drop of the predicted class's probability when one layer is removed). "
    "Deletion@k is the mean drop after removing the k layers the method ranks highest. Higher is better for both. "
    "Intervals are 95% percentile bootstrap intervals over samples; a sample whose attribution or effect is "
    "constant across layers has an undefined ρ: it is counted ('undefined') and left out of the means."
)


def _num(value: Any) -> str:
    return "n/a" if pd.isna(value) else f"{float(value):.{DECIMALS}f}"


def _ci(low: Any, high: Any) -> str:
    return f"[{_num(low)}, {_num(high)}]"


def _run_blocks(runs, table: pd.DataFrame, header: list[str], row_fn) -> list[tuple]:
    blocks = []
    for r in runs:
        part = table[table["run"] == r.label]
        blocks += [("h3", r.label), ("table", header, [row_fn(row) for row in part.itertuples(index=False)])]
    return blocks


def _blocks(runs: Sequence[Run], t: ReportTables, files: dict[str, str], *, title: str | None) -> list[tuple]:
    from laya_eval import __version__

    described = {}
    for r in runs:
        described.update((r.manifest.get("methods") or {}))
    methods = _ordered(t.faithfulness["method"])

    def figure(name: str, caption: str) -> tuple:
        return ("figure", name, caption, files[name])

    b: list[tuple] = [
        ("h1", title or "Layer-attribution faithfulness report"),
        ("p", f"Generated by laya-eval {__version__} from {len(runs)} result folder(s). " + _INTRO),
        ("h2", "Runs"),
        ("table", ["run", "head", "dataset", "split", "n", "ablation", "scope", "eval seed", "checkpoint sha256"],
         [[r.run, r.head, r.dataset, str(r.split), str(r.n), r.ablation, r.scope, str(r.seed), str(r.sha256)[:12]]
          for r in t.runs.itertuples(index=False)]),
        ("h2", "Methods"),
        ("table", ["method", "name", "description"], [[method_label(m), m, described.get(m, "")] for m in methods]),
        ("h2", "Faithfulness and Deletion@1 (95% bootstrap intervals)"),
    ]
    b += _run_blocks(runs, t.faithfulness,
                     ["method", "faithfulness", "95% CI", "Deletion@1", "95% CI", "top-1 hit rate", "AOPC", "n", "undefined"],
                     lambda r: [method_label(r.method), _num(r.faithfulness), _ci(r.faithfulness_ci_low, r.faithfulness_ci_high),
                                _num(r.deletion_at_1), _ci(r.deletion_at_1_ci_low, r.deletion_at_1_ci_high),
                                _num(r.top1_hit_rate), _num(r.aopc), str(r.n), str(r.n_undefined)])
    b.append(figure("faithfulness", "Faithfulness and Deletion@1 per method and run, with 95% intervals."))
    b.append(("h2", "Across runs (mean ± std over result folders with the same head, dataset, ablation and scope)"))
    if t.across_runs.empty:
        b.append(("p", "Every (head, dataset, ablation, scope) has a single run here: nothing to aggregate."))
    else:
        b.append(("table", ["head", "dataset", "ablation", "scope", "method", "runs", "faithfulness mean", "faithfulness std",
                            "Deletion@1 mean", "Deletion@1 std"],
                  [[r.head, r.dataset, r.ablation, r.scope, method_label(r.method), str(r.n_runs), _num(r.faithfulness_mean),
                    _num(r.faithfulness_std), _num(r.deletion_at_1_mean), _num(r.deletion_at_1_std)]
                   for r in t.across_runs.itertuples(index=False)]))
    b += [("h2", "Deletion@k curves"),
          ("p", "Mean drop of the predicted class's probability after removing the k layers each method ranks highest.")]
    for r in runs:
        part = t.deletion_curves[t.deletion_curves["run"] == r.label]
        wide = part.pivot(index="method", columns="k", values="deletion").loc[_ordered(part["method"])]
        b += [("h3", r.label), ("table", ["method", *[f"k = {k}" for k in wide.columns]],
                                [[method_label(m), *map(_num, wide.loc[m])] for m in wide.index])]
    b.append(figure("deletion_curves", "Deletion@k per method and run."))
    b += [("h2", "Per-sample Spearman ρ"),
          ("p", f"How many samples reach ρ = 1 (within {RHO_ONE_TOL:g}), fall in each band, or are undefined.")]
    b += _run_blocks(runs, t.spearman_distribution,
                     ["method", "n", *[label for _, label, _ in RHO_BANDS], "share ρ = 1", "median ρ"],
                     lambda r: [method_label(r.method), str(r.n), *[str(getattr(r, col)) for col, _, _ in RHO_BANDS],
                                _num(r.share_rho_one), _num(r.median_rho)])
    b.append(figure("spearman_distribution", "Shares of samples per band of per-sample Spearman ρ."))
    b += [("h2", "Attribution vs effect"),
          ("p", "Each dot is one (sample, layer): the method's score against the effect of removing that layer.")]
    b += [figure(f"scatter_{_slug(r.label)}", f"Attribution vs effect, {r.label}.") for r in runs]
    b += [("h2", "Method agreement"),
          ("p", "Mean over samples of the Spearman ρ between two methods' layer scores (undefined samples excluded).")]
    for r in runs:
        long = t.agreement[t.agreement["run"] == r.label]
        order = _ordered(long["method_a"])
        m = long.pivot(index="method_a", columns="method_b", values="mean_spearman").loc[order, order]
        b += [("h3", r.label), ("table", ["method", *map(method_label, order)],
                                [[method_label(a), *map(_num, m.loc[a])] for a in order]),
              figure(f"agreement_{_slug(r.label)}", f"Method agreement, {r.label}.")]
    return b


_NUMERIC = re.compile(r"^(n/a|[-+]?\d+(\.\d+)?|\[[-+]?\d+\.\d+, [-+]?\d+\.\d+\])$")


def _numeric(rows: Sequence[Sequence[str]], column: int) -> bool:
    return bool(rows) and all(_NUMERIC.match(str(row[column])) for row in rows)


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _markdown(blocks: Sequence[tuple]) -> str:
    lines: list[str] = []
    for block in blocks:
        kind = block[0]
        if kind in ("h1", "h2", "h3"):
            lines += ["#" * int(kind[1]) + " " + block[1], ""]
        elif kind == "p":
            lines += [block[1], ""]
        elif kind == "table":
            header, rows = block[1], block[2]
            lines.append("| " + " | ".join(map(_md_cell, header)) + " |")
            lines.append("|" + "|".join("---:" if _numeric(rows, k) else "---" for k in range(len(header))) + "|")
            lines += ["| " + " | ".join(map(_md_cell, row)) + " |" for row in rows]
            lines.append("")
        elif kind == "figure":
            lines += [f"![{block[2]}]({block[3]})", ""]
    return "\n".join(lines)


_STYLE = ("body{font-family:system-ui,sans-serif;max-width:1150px;margin:2em auto;padding:0 1em;color:#222}"
          "table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:.88em}"
          "th,td{border:1px solid #ccc;padding:3px 8px;text-align:left}th{background:#f2f2f2}"
          ".num{text-align:right}img{max-width:100%}figure{margin:1em 0 2em}"
          "figcaption{font-size:.85em;color:#555}")


def _html(blocks: Sequence[tuple], embeds: dict[str, tuple[str, bytes]]) -> str:
    esc = lambda text: html.escape(str(text), quote=True)  # noqa: E731
    title = next((b[1] for b in blocks if b[0] == "h1"), "report")
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">', f"<title>{esc(title)}</title>",
             f"<style>{_STYLE}</style></head><body>"]
    for block in blocks:
        kind = block[0]
        if kind in ("h1", "h2", "h3", "p"):
            parts.append(f"<{kind}>{esc(block[1])}</{kind}>")
        elif kind == "table":
            cls = ['' if not _numeric(block[2], k) else ' class="num"' for k in range(len(block[1]))]
            head = "".join(f"<th{c}>{esc(h)}</th>" for c, h in zip(cls, block[1]))
            body = "".join("<tr>" + "".join(f"<td{c}>{esc(v)}</td>" for c, v in zip(cls, row)) + "</tr>"
                           for row in block[2])
            parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
        elif kind == "figure" and block[1] in embeds:
            mime, data = embeds[block[1]]
            uri = f"data:{'image/png' if mime == 'png' else 'image/svg+xml'};base64,{base64.b64encode(data).decode()}"
            parts.append(f'<figure><img alt="{esc(block[2])}" src="{uri}">'
                         f"<figcaption>{esc(block[2])}</figcaption></figure>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
