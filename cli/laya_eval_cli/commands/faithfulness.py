"""``laya-eval faithfulness``: score layer attributions against leave-one-layer-out effects."""

from __future__ import annotations

import time

import click

from laya_eval_cli.options import declared, progress_bar, use_plugins


def _scored(row, metric: str, notes) -> str:
    """``+0.9833 [+0.952, +0.991]``, ``+0.9833 [n/a]`` or ``undefined [n/a]`` (the reason in ``notes``)."""
    from laya_eval.stats.intervals import format_estimate, format_interval

    note = row.get(f"{metric}_ci_note", "")
    return (
        f"{format_estimate(row[metric])} "
        f"{format_interval(row[f'{metric}_ci_low'], row[f'{metric}_ci_high'], note, notes=notes)}"
    )


def _table(summary) -> str:
    """One line per method; an interval that does not exist says n/a, and why under the table."""
    from laya_eval.stats.intervals import IntervalNotes, format_estimate

    notes = IntervalNotes()
    w = max([13, *(len(m) for m in summary["method"])])  # the method column fits the longest name
    lines = [
        f"{'method':<{w}} {'faithfulness [95% CI]':<26} {'p (null)':>9} {'deletion@1 [95% CI]':<26} "
        f"{'top-1 hit':>9} {'n':>7} {'undef':>6}"
    ]
    for row in summary.to_dict("records"):
        faith, dele = _scored(row, "faithfulness", notes), _scored(row, "deletion_at_1", notes)
        p = row["faithfulness_p_value"]
        p = "undefined" if p != p else "<1e-300" if p == 0 else f"{p:.2g}"  # below the smallest normal double
        lines.append(
            f"{row['method']:<{w}} {faith:<26} {p:>9} {dele:<26} "
            f"{format_estimate(row['top1_hit_rate'], digits=3, signed=False):>9} {row['n']:>7} "
            f"{row['n_undefined']:>6}"
        )
    return "\n".join(lines + notes.lines())


@click.command()
@click.argument("checkpoint", metavar="MODEL")
@declared("faithfulness")
def faithfulness(checkpoint, plugins, data, out_dir, resume, data_dir, quiet, **params):
    """Score layer attributions of MODEL (a checkpoint, hf:DIR or py:MODULE:CALLABLE) against leave-one-layer-out effects.

    For every input, each method's layer scores are compared with the drop of the
    predicted class's probability when each layer is removed: Spearman
    faithfulness, Deletion@1 and the top-1 hit rate, with 95% bootstrap intervals.
    Under torchrun every process evaluates a contiguous shard; rank 0 writes.

    Example: laya-eval faithfulness ckpt.pt --limit 1000 --out results/
    """
    import laya_eval
    from laya_eval.engine.distributed import world_from_environment
    from laya_eval.options import values_for

    use_plugins(plugins, params["trust_code"])
    options = laya_eval.EvalOptions(**values_for("EvalOptions", params))
    world = world_from_environment(options.device)
    start = time.perf_counter()
    with progress_bar(quiet or not world.is_main, desc="evaluate", unit="sample") as bar:
        evaluation = laya_eval.evaluate(
            checkpoint, data, options=options, out=out_dir, resume=resume, data_dir=data_dir, progress=bar, world=world
        )
    if evaluation is None:
        return
    elapsed = time.perf_counter() - start
    for note in evaluation.notes:
        click.echo(f"{note[0].upper()}{note[1:]}")
    for name, result in evaluation.items():
        click.echo(
            f"{checkpoint}: {result.manifest['head']} head, {result.manifest['dataset']} ({options.split}), "
            f"ablation {name}, scope {options.scope}, n = {result.manifest['n_samples']}"
        )
        click.echo(f"model: {result.model_state.describe()}")
        click.echo(_table(result.summary))
        for warning in result.warnings:
            click.echo(f"warning: {warning}")
    sens = evaluation.operators
    if sens is not None:
        p = "n/a" if sens.p_value != sens.p_value else f"{sens.p_value:.2g}"
        w = "undefined" if sens.kendall_w != sens.kendall_w else f"{sens.kendall_w:.3f}"
        click.echo(
            f"operators: Kendall's W of the method ranking across {', '.join(evaluation)} = {w} "
            f"(permutation p = {p}); best method: " + ", ".join(f"{a} {b or 'undefined'}" for a, b in sens.best.items())
        )
        if sens.warning:
            click.echo(f"warning: {sens.warning}")
    click.echo(
        f"wrote {out_dir}"
        + (f" ({', '.join(evaluation)} subfolders)" if len(evaluation) > 1 else "")
        + (f" from {world.size} processes" if world.size > 1 else "")
    )
    click.echo(f"done in {elapsed:.1f} s")
