"""``laya-eval mixers``: audit the depth mixers inside a network."""

from __future__ import annotations

import time

import click

from laya_eval.catalog import ABLATION_DRAWS, BOOTSTRAP_RESAMPLES, MIXER_METHODS, MIXER_REMOVALS
from laya_eval_cli.options import (batch_size_option, choice_list, data_dir_option, progress_bar, quiet_option,
                                   seed_option, split_option, trust_code_option)


def _interval(low, high) -> str:
    return "n/a" if low != low or high != high else f"[{low:.3f}, {high:.3f}]"


def _table(summary) -> str:
    lines = [f"{'mixer':<12} {'method':<14} {'faithfulness':>12} {'95% CI':<18} {'deletion@1':>10} {'95% CI':<18} "
             f"{'n':>5} {'undef':>5}"]
    for row in summary.itertuples():
        faith = "undefined" if row.faithfulness != row.faithfulness else f"{row.faithfulness:.3f}"
        lines.append(f"{row.mixer:<12} {row.method:<14} {faith:>12} "
                     f"{_interval(row.faithfulness_ci_low, row.faithfulness_ci_high):<18} {row.deletion_at_1:>10.4f} "
                     f"{_interval(row.deletion_at_1_ci_low, row.deletion_at_1_ci_high):<18} {row.n:>5} "
                     f"{row.n_undefined:>5}")
    return "\n".join(lines)


@click.command()
@click.argument("model", metavar="MODEL")
@click.option("--data", default="fashion-mnist", show_default=True, help="Dataset name (or npz:PATH).")
@split_option
@click.option("--methods", default=",".join(MIXER_METHODS), show_default=True,
              help=f"Comma-separated, among {', '.join(MIXER_METHODS)}.")
@click.option("--removal", default="weight", show_default=True, type=click.Choice(list(MIXER_REMOVALS)),
              help="weight: the source's weight zeroed (logit -inf before a softmax); mean: the source replaced by "
                   "its mean over the evaluated data; resample: by the same source of another sample (a seeded "
                   "donor), averaged over --draws.")
@click.option("--draws", default=ABLATION_DRAWS, show_default=True, type=click.IntRange(min=1),
              help="Seeded donors per sample with --removal resample; their effects are averaged (donors.csv).")
@click.option("--limit", type=click.IntRange(min=1), default=500, show_default=True,
              help="Use only the first N samples.")
@batch_size_option
@seed_option
@click.option("--bootstrap", default=BOOTSTRAP_RESAMPLES, show_default=True, type=click.IntRange(min=0),
              help="Bootstrap resamples for the 95% intervals.")
@click.option("--ig-steps", default=16, show_default=True, type=click.IntRange(min=1),
              help="Integration steps of ig over the weights.")
@click.option("--out", "out_dir", default="mixers-out", show_default=True, type=click.Path(file_okay=False),
              help="Folder for sources.csv, samples.csv, summary.csv, comparisons.csv, map.csv, map.png, "
                   "manifest.json and, with --removal resample, donors.csv (replaced whole).")
@trust_code_option
@data_dir_option
@quiet_option
def mixers(model, data, split, methods, removal, draws, limit, batch_size, seed, bootstrap, ig_steps, out_dir, trust_code,
           data_dir, quiet):
    """Audit the depth mixers of MODEL (a mixer model file or py:MODULE:CALLABLE): does each mixer's weight over
    its sources predict the effect of removing a source, measured at the output?

    A depth mixer is a module whose output is sum_j w_j(x) s_j over earlier states (see docs/concepts/mixers.md).

    Example: laya-eval mixers benchmarks/results/mixers/attnres.pt --limit 300 --out audit/
    """
    from laya_eval.mixers.audit import MixerOptions, audit_mixers

    options = MixerOptions(removal=removal, methods=choice_list(methods, list(MIXER_METHODS), "--methods"),
                           split=split, limit=limit, batch_size=batch_size, seed=seed, bootstrap=bootstrap,
                           ig_steps=ig_steps, draws=draws, trust_code=trust_code)
    start = time.perf_counter()
    with progress_bar(quiet, desc="mixers", unit="sample") as bar:
        audit = audit_mixers(model, data, out=out_dir, options=options, data_dir=data_dir, progress=bar)
    click.echo(f"{model}: {len(audit.manifest['mixers'])} mixers, {audit.manifest['dataset']} ({split}), removal "
               f"{removal}, n = {audit.manifest['n_samples']}")
    click.echo(_table(audit.summary))
    click.echo(f"wrote {out_dir} ({time.perf_counter() - start:.1f} s)")
