"""``laya-eval sweep``: train and evaluate a grid of models from one TOML config."""

from __future__ import annotations

import click

from laya_eval_cli.options import declared, progress_bar


@click.command()
@click.argument("config", type=click.Path(dir_okay=False))
@declared("sweep")
def sweep(config, out, resume, cache_dir, trust_code, quiet):
    """Run every dataset × backbone × head × seed cell of CONFIG: train (or fit the head on a frozen model),
    write the checkpoint, evaluate, and aggregate across seeds into sweep.csv and sweep_summary.csv.

    The whole config is checked before any work. A stopped sweep continues where it stopped.

    Example: laya-eval sweep benchmarks/reproduce/quick/fashion-mnist.toml --out runs/sweep
    """
    from laya_eval.sweeps.config import load_config

    checked = load_config(config, trust_code=trust_code)  # a bad config ends here, before torch is imported
    cells = checked.cells
    from laya_eval.sweeps.run import sweep as run_sweep

    with progress_bar(quiet, total=len(cells), desc="sweep", unit="cell") as bar:

        def progress(cell, status):
            if status != "start":
                bar.set_postfix_str(cell.name)
                bar.update(1)

        # the file is read once: the sweep takes the checked content (and checks it again, as a dict)
        result = run_sweep(
            checked.raw, out, resume=resume, progress=progress, cache_dir=cache_dir, trust_code=trust_code
        )
    summary = result.tables["sweep_summary"]
    click.echo(f"{len(result.computed)} cell(s) computed, {len(result.reused)} reused -> {out}")
    if len(summary):
        cols = [
            "dataset",
            "backbone",
            "head",
            "ablation",
            "method",
            "n_seeds",
            "faithfulness_mean",
            "faithfulness_std",
            "deletion_at_1_mean",
            "accuracy_mean",
        ]
        click.echo(summary[cols].to_string(index=False, float_format=lambda v: f"{v:.4f}", na_rep="n/a"))
