"""``laya-eval mixers``: audit the depth mixers inside a network."""

from __future__ import annotations

import time

import click

from laya_eval_cli.options import declared, progress_bar


def _interval(low, high) -> str:
    return "n/a" if low != low or high != high else f"[{low:.3f}, {high:.3f}]"


def _table(summary) -> str:
    lines = [
        f"{'mixer':<12} {'method':<14} {'faithfulness':>12} {'95% CI':<18} {'deletion@1':>10} {'95% CI':<18} "
        f"{'n':>5} {'undef':>5}"
    ]
    for row in summary.itertuples():
        faith = "undefined" if row.faithfulness != row.faithfulness else f"{row.faithfulness:.3f}"
        lines.append(
            f"{row.mixer:<12} {row.method:<14} {faith:>12} "
            f"{_interval(row.faithfulness_ci_low, row.faithfulness_ci_high):<18} {row.deletion_at_1:>10.4f} "
            f"{_interval(row.deletion_at_1_ci_low, row.deletion_at_1_ci_high):<18} {row.n:>5} "
            f"{row.n_undefined:>5}"
        )
    return "\n".join(lines)


@click.command()
@click.argument("model", metavar="MODEL")
@declared("mixers")
def mixers(model, data, out_dir, data_dir, quiet, **params):
    """Audit the depth mixers of MODEL (a mixer model file or py:MODULE:CALLABLE): does each mixer's weight over
    its sources predict the effect of removing a source, measured at the output?

    A depth mixer is a module whose output is sum_j w_j(x) s_j over earlier states (see docs/concepts/mixers.md).

    Example: laya-eval mixers benchmarks/results/mixers/attnres.pt --limit 300 --out audit/
    """
    import laya_eval
    from laya_eval.options import values_for

    options = laya_eval.MixerOptions(**values_for("MixerOptions", params))
    start = time.perf_counter()
    with progress_bar(quiet, desc="mixers", unit="sample") as bar:
        audit = laya_eval.audit_mixers(model, data, out=out_dir, options=options, data_dir=data_dir, progress=bar)
    click.echo(
        f"{model}: {len(audit.manifest['mixers'])} mixers, {audit.manifest['dataset']} ({options.split}), removal "
        f"{options.removal}, n = {audit.manifest['n_samples']}"
    )
    click.echo(_table(audit.summary))
    click.echo(f"wrote {out_dir} ({time.perf_counter() - start:.1f} s)")
