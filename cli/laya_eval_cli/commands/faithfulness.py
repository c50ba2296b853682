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


def next_token_defaults(params) -> dict:
    """``--target next-token`` removes blocks inside the model: network scope and ``skip`` unless given."""
    ctx = click.get_current_context()
    given = {name: ctx.get_parameter_source(name) != click.core.ParameterSource.DEFAULT for name in params}
    out = dict(params)
    if not given.get("scope"):
        out["scope"] = "network"
    if not given.get("ablation") and out["scope"] == "network":  # at head scope the library names the scope
        out["ablation"] = ("skip",)
    return out


def _next_token(checkpoint, data, out_dir, data_dir, quiet, resume, params) -> None:
    import laya_eval
    from laya_eval.options import values_for

    from laya_eval.engine.distributed import world_from_environment

    options = laya_eval.EvalOptions(**values_for("EvalOptions", next_token_defaults(params)))
    world = world_from_environment(options.device)
    start = time.perf_counter()
    with progress_bar(quiet or not world.is_main, desc="evaluate", unit="window") as bar:
        evaluation = laya_eval.evaluate_next_token(
            checkpoint, data, options=options, out=out_dir, data_dir=data_dir, progress=bar, resume=resume, world=world
        )
    if evaluation is None:
        return
    for name, result in evaluation.items():
        m = result.manifest
        click.echo(
            f"{checkpoint}: next-token loss of its own LM head, {m['dataset']} ({options.split}), "
            f"{m['n_samples']} windows of <= {options.context} tokens, ablation {name}, scope network"
        )
        state = m["model"]
        click.echo(
            f"model: mean next-token loss {state['loss']:.4f} nats (perplexity {state['perplexity']:.4g}); "
            f"unigram baseline {state['unigram_loss']:.4f}, uniform {state['uniform_loss']:.4f}"
        )
        click.echo(_table(result.summary))
        for warning in result.warnings:
            click.echo(f"warning: {warning}")
    click.echo(f"wrote {out_dir}" + (f" ({', '.join(evaluation)} subfolders)" if len(evaluation) > 1 else ""))
    click.echo(f"done in {time.perf_counter() - start:.1f} s")


@click.command()
@click.argument("checkpoint", metavar="MODEL")
@declared("faithfulness")
def faithfulness(checkpoint, plugins, data, out_dir, resume, data_dir, quiet, **params):
    """Score layer attributions of MODEL (a checkpoint, hf:DIR or py:MODULE:CALLABLE) against leave-one-layer-out effects.

    For every input, each method's layer scores are compared with the drop of the
    predicted class's probability when each layer is removed: Spearman
    faithfulness, Deletion@1 and the top-1 hit rate, with 95% bootstrap intervals.
    Under torchrun every process evaluates a contiguous shard; rank 0 writes.

    With --target next-token, MODEL is a causal LM (hf:DIR) and --data text:FILE: each window's effect of
    removing a block is the rise of its mean next-token loss (nats); no fitted head is needed.

    Example: laya-eval faithfulness ckpt.pt --limit 1000 --out results/
    """
    import laya_eval
    from laya_eval.engine.distributed import world_from_environment
    from laya_eval.options import values_for

    use_plugins(plugins, params["trust_code"])
    if params["target"] == "next-token":
        _next_token(checkpoint, data, out_dir, data_dir, quiet, resume, params)
        return
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
