"""``laya-eval faithfulness``: score layer attributions against leave-one-layer-out effects."""

from __future__ import annotations

import time

import click

from laya_eval.catalog import (ABLATION_DRAWS, ABLATIONS, ANGULAR_SPAN, CHUNK_SIZE, MAX_MEMORY_MB, SCOPES, TIE_RTOL,
                               method_names)
from laya_eval_cli.options import (
    attribution_options,
    plugin_option,
    registered_ablations,
    registered_methods,
    use_plugins,
    batch_size_option,
    cache_dir_option,
    no_cache_option,
    bootstrap_option,
    choice_list,
    data_dir_option,
    device_option,
    download_option,
    limit_option,
    methods_option,
    progress_bar,
    quiet_option,
    recorded_data_option,
    seed_option,
    split_option,
    trust_code_option,
    allow_unverified_option,
)

METHOD_NAMES = method_names()


def _scored(row, metric: str, notes) -> str:
    """``+0.9833 [+0.952, +0.991]``, ``+0.9833 [n/a]`` or ``undefined [n/a]`` (the reason in ``notes``)."""
    from laya_eval.stats.intervals import format_estimate, format_interval

    note = row.get(f"{metric}_ci_note", "")
    return (f"{format_estimate(row[metric])} "
            f"{format_interval(row[f'{metric}_ci_low'], row[f'{metric}_ci_high'], note, notes=notes)}")


def _table(summary) -> str:
    """One line per method; an interval that does not exist says n/a, and why under the table."""
    from laya_eval.stats.intervals import IntervalNotes, format_estimate

    notes = IntervalNotes()
    w = max([13, *(len(m) for m in summary["method"])])  # the method column fits the longest name
    lines = [f"{'method':<{w}} {'faithfulness [95% CI]':<26} {'p (null)':>9} {'deletion@1 [95% CI]':<26} "
             f"{'top-1 hit':>9} {'n':>7} {'undef':>6}"]
    for row in summary.to_dict("records"):
        faith, dele = _scored(row, "faithfulness", notes), _scored(row, "deletion_at_1", notes)
        p = row["faithfulness_p_value"]
        p = "undefined" if p != p else "<1e-300" if p == 0 else f"{p:.2g}"  # below the smallest normal double
        lines.append(f"{row['method']:<{w}} {faith:<26} {p:>9} {dele:<26} "
                     f"{format_estimate(row['top1_hit_rate'], digits=3, signed=False):>9} {row['n']:>7} "
                     f"{row['n_undefined']:>6}")
    return "\n".join(lines + notes.lines())


@click.command()
@click.argument("checkpoint", metavar="MODEL")
@trust_code_option
@allow_unverified_option
@plugin_option
@download_option
@recorded_data_option
@split_option
@methods_option
@attribution_options
@click.option("--ablation", default=ABLATIONS[0], show_default=True,
              help=f"How a layer is removed: {', '.join(ABLATIONS)} or a plug-in's (docs/concepts/ablations.md). Several, comma-separated, "
                   "share one pass (attributions are computed once), write one subfolder of --out each and "
                   "operators.csv, how much each method's verdict depends on the operator.")
@click.option("--draws", default=ABLATION_DRAWS, show_default=True, type=click.IntRange(min=1),
              help="Seeded draws per sample of the random ablations (resample: donors; noise: noise draws); "
                   "their effects are averaged.")
@click.option("--angular-span", default=ANGULAR_SPAN, show_default=True, type=click.IntRange(min=1),
              help="n of angular_distance: the number of layers in each block whose angular distance is taken.")
@click.option("--scope", default=SCOPES[0], show_default=True, type=click.Choice(SCOPES),
              help="head: direct effect on cached hidden states; network: replace inside the backbone.")
@limit_option
@batch_size_option
@seed_option
@bootstrap_option
@click.option("--out", "out_dir", default="faithfulness-out", show_default=True, type=click.Path(file_okay=False),
              help="Folder for layers.csv, samples.csv, summary.csv and manifest.json; replaced whole at the end "
                   "(through a symbolic link: the link's target folder).")
@click.option("--resume", is_flag=True,
              help="Continue an interrupted run into the same --out from its completed chunks (same options).")
@click.option("--chunk-size", default=CHUNK_SIZE, show_default=True, type=click.IntRange(min=1),
              help="Samples per resumable chunk kept under --out/.partial (results do not depend on it).")
@click.option("--tie-rtol", default=TIE_RTOL, show_default=True, type=click.FloatRange(min=0, max=1, max_open=True),
              help="Effects of a sample closer than this share of its largest effect are ranked as tied.")
@click.option("--table-format", default="csv", show_default=True, type=click.Choice(["csv", "parquet"]),
              help="Format of the two large tables, layers and samples (parquet needs pyarrow: the parquet extra).")
@click.option("--allow-nonfinite", is_flag=True,
              help="Evaluate inputs holding NaN/inf instead of refusing them (their metrics are then undefined).")
@click.option("--dtype", default="float32", show_default=True, type=click.Choice(["float32", "bfloat16", "float16"]),
              help="Precision of the backbone pass (autocast; effects and metrics stay float32 or better).")
@click.option("--max-memory", "max_memory", default=MAX_MEMORY_MB, show_default=True, type=click.IntRange(min=1),
              help="MB for the working set of network-scope work (block replacements and IG run in row chunks within "
                   "it); a model whose single rows cannot fit is refused before any work. At head scope, the most the "
                   "pooled states kept from the statistics pass for the main pass may take.")
@cache_dir_option
@no_cache_option
@data_dir_option
@device_option
@quiet_option
def faithfulness(checkpoint, trust_code, allow_unverified, plugins, download, data, split, methods, target, ig_steps,
                 ig_baseline, ig_batch_size, ablation, draws, angular_span, scope, limit, batch_size, seed, bootstrap,
                 out_dir, resume, chunk_size, tie_rtol, table_format, allow_nonfinite, dtype, max_memory, cache_dir,
                 no_cache, data_dir, device, quiet):
    """Score layer attributions of MODEL (a checkpoint, hf:DIR or py:MODULE:CALLABLE) against leave-one-layer-out effects.

    For every input, each method's layer scores are compared with the drop of the
    predicted class's probability when each layer is removed: Spearman
    faithfulness, Deletion@1 and the top-1 hit rate, with 95% bootstrap intervals.
    Under torchrun every process evaluates a contiguous shard; rank 0 writes.

    Example: laya-eval faithfulness ckpt.pt --limit 1000 --out results/
    """
    from laya_eval.engine.distributed import world_from_environment
    from laya_eval.engine.evaluation import EvalOptions, evaluate_to_folder

    use_plugins(plugins, trust_code)
    ablations = choice_list(ablation, registered_ablations(), "--ablation")
    names = None if methods is None else choice_list(methods, registered_methods(), "--methods")
    options = EvalOptions(methods=names, ablation=ablations[0], scope=scope, split=split, limit=limit,
                          target=target, n_steps=ig_steps, ig_baseline=ig_baseline, internal_batch_size=ig_batch_size,
                          batch_size=batch_size, seed=seed, bootstrap=bootstrap, device=device, dtype=dtype,
                          chunk_size=chunk_size, tie_rtol=tie_rtol,
                          trust_code=trust_code, download=download, allow_nonfinite=allow_nonfinite,
                          allow_unverified=allow_unverified, max_memory_mb=max_memory, draws=draws,
                          angular_span=angular_span, cache=not no_cache, cache_dir=cache_dir)
    world = world_from_environment(device)
    start = time.perf_counter()
    with progress_bar(quiet or not world.is_main, desc="evaluate", unit="sample") as bar:
        results = evaluate_to_folder(checkpoint, data, ablations, out_dir, options=options, data_dir=data_dir,
                                     progress=bar, world=world, resume=resume, table_format=table_format)
    if results is None:
        return
    elapsed = time.perf_counter() - start
    first = results[ablations[0]]
    for note in first.notes:
        click.echo(f"{note[0].upper()}{note[1:]}")
    for name, result in results.items():
        click.echo(f"{checkpoint}: {result.manifest['head']} head, {result.manifest['dataset']} ({split}), "
                   f"ablation {name}, scope {scope}, n = {result.manifest['n_samples']}")
        click.echo(_table(result.summary))
        for warning in result.warnings:
            click.echo(f"warning: {warning}")
    if len(results) > 1:
        from laya_eval.engine.operators import operator_sensitivity

        sens = operator_sensitivity({a: r.summary for a, r in results.items()}, seed=seed)
        p = "n/a" if sens.p_value != sens.p_value else f"{sens.p_value:.2g}"
        w = "undefined" if sens.kendall_w != sens.kendall_w else f"{sens.kendall_w:.3f}"
        click.echo(f"operators: Kendall's W of the method ranking across {', '.join(results)} = {w} "
                   f"(permutation p = {p}); best method: "
                   + ", ".join(f"{a} {b or 'undefined'}" for a, b in sens.best.items()))
        if sens.warning:
            click.echo(f"warning: {sens.warning}")
    click.echo(f"wrote {out_dir}" + (f" ({', '.join(ablations)} subfolders)" if len(ablations) > 1 else "")
               + (f" from {world.size} processes" if world.size > 1 else ""))
    click.echo(f"done in {elapsed:.1f} s")
