"""``laya-eval report``: tables, figures, markdown and HTML from ``faithfulness``, ``sanity`` and ``mixers``
folders."""

from __future__ import annotations

import click

from laya_eval_cli.options import declared


def _table(faithfulness) -> str:
    from laya_eval.stats.intervals import format_estimate

    w = max(3, *(len(r) for r in faithfulness["run"]))
    m = max([13, *(len(name) for name in faithfulness["method"])])
    lines = [f"{'run':<{w}} {'method':<{m}} {'faithfulness':>12} {'deletion@1':>11} {'n':>7} {'undef':>6}"]
    for row in faithfulness.itertuples(index=False):
        lines.append(
            f"{row.run:<{w}} {row.method:<{m}} {format_estimate(row.faithfulness):>12} "
            f"{format_estimate(row.deletion_at_1):>11} {row.n:>7} {row.n_undefined:>6}"
        )
    return "\n".join(lines)


def _sanity_lines(table) -> str:
    w = max(12, *(len(r) for r in table["sanity_run"]))
    mw = max([13, *(len(str(name)) for name in table["method"])])  # the method column fits the longest name
    # Words, left-aligned two spaces apart: a ROAR verdict beside the method's verdict ("uninformative", "passes")
    # must not read as one phrase.
    rw = max([4, *(len(str(v)) for v in table["roar_verdict"])])
    lines = [f"{'sanity run':<{w}} {'method':<{mw}} {'cascading':<9}  {'labels':<9}  {'ROAR':<{rw}}  verdict"]
    for row in table.itertuples(index=False):
        lines.append(
            f"{row.sanity_run:<{w}} {row.method:<{mw}} {row.cascading_verdict:<9}  {row.data_verdict:<9}  "
            f"{row.roar_verdict:<{rw}}  {row.verdict}"
        )
    return "\n".join(lines)


def _mixer_lines(table) -> str:
    from laya_eval.stats.intervals import format_estimate

    w = max(10, *(len(r) for r in table["run"]))
    lines = [f"{'mixers run':<{w}} {'mixer':<12} {'mass faithfulness':>17} {'95% CI':<18} verdict"]
    for row in table.itertuples(index=False):
        interval = "n/a" if row.ci_low != row.ci_low else f"[{row.ci_low:.3f}, {row.ci_high:.3f}]"
        lines.append(
            f"{row.run:<{w}} {row.mixer:<12} {format_estimate(row.faithfulness):>17} {interval:<18} {row.verdict}"
        )
    return "\n".join(lines)


def _provenance_lines(table) -> str:
    w = max(3, *(len(r) for r in table["run"]))
    v = max(9, *(len(r) for r in table["laya_eval"]))
    c = max(11, *(len(r) for r in table["code"]))
    lines = [f"{'run':<{w}} {'kind':<12} {'laya-eval':<{v}} {'code sha256':<{c}} commit"]
    lines += [
        f"{row.run:<{w}} {row.kind:<12} {row.laya_eval:<{v}} {row.code:<{c}} {row.commit}"
        for row in table.itertuples(index=False)
    ]
    return "\n".join(lines)


@click.command()
@click.argument("result_dirs", nargs=-1, required=True, type=click.Path(file_okay=False))
@declared("report")
def report(result_dirs, out_dir, fmt, style, title, html_report, strict, max_points, quiet):
    """Report on one or several RESULT_DIRS written by `laya-eval faithfulness`, `laya-eval sanity` or
    `laya-eval mixers`.

    One combined table across runs (head x method: mean +- std over folders
    sharing head, dataset, ablation and scope, with 95% intervals),
    Faithfulness and Deletion@1 with 95% intervals (and the paired tests of
    comparisons.csv where the folders have it), deletion@k curves, the
    distribution of per-sample Spearman rho, attribution-vs-effect scatters and
    a method agreement matrix, as report.md (with a table of contents, per-run
    details collapsed), a self-contained report.html, CSVs and figures.
    Folders may hold layers/samples as CSV or Parquet.

    Runs that share head, dataset, ablation and scope (e.g. training seeds)
    also get a paired test across runs (Wilcoxon signed-rank; with 5 runs its
    smallest p is 0.0625) and each method's rank per run. A significance
    matrix (methods x methods, Holm-adjusted paired tests) per run and across
    seeds. Folders of `laya-eval sanity` (recognised by their files) add a
    "Sanity checks" section: similarity after randomisation, ROAR agreement
    and a pass/fail verdict per method; a report of sanity folders alone works.
    Folders of `laya-eval mixers` (recognised by map.csv and sources.csv) add a
    "Depth mixers" section: the mixer x source map of mass and effect side by
    side, and per mixer whether mass predicts effect (the faithfulness of mass
    with its 95% interval).

    Each folder's laya-eval version, the sha256 of its code (first 12 hex
    digits) and its git commit are printed after the tables and shown in the
    report's "Provenance" section. With --quiet only warnings and the line
    naming the files written are printed.

    Example: laya-eval report runs/laya runs/scalarmix --out report/
    """
    from laya_eval.reporting.write import report as run_report

    done = run_report(
        result_dirs,
        out=out_dir,
        strict=strict,
        fmt=fmt,
        html_report=html_report,
        title=title,
        max_points=max_points,
        style=style,
    )
    for line in done.warnings:
        click.echo(f"warning: {line}", err=True)
    if not quiet:
        _echo_tables(done)
    click.echo(f"wrote {len(done.files)} files to {out_dir}: report.md" + (", report.html" if html_report else ""))


def _echo_tables(done) -> None:
    """The tables of ``report.md`` in short, then each folder's provenance (left out with ``--quiet``)."""
    if done.tables is not None:
        click.echo(_table(done.tables.faithfulness))
    if done.sanity is not None:
        click.echo(_sanity_lines(done.sanity))
    if done.mixers is not None:
        click.echo(_mixer_lines(done.mixers))
    if done.provenance is not None and not done.provenance.empty:
        click.echo(_provenance_lines(done.provenance))
