"""``laya-eval prune``: prune layers by each method's ranking; the early-exit what-if."""

from __future__ import annotations


import click

from laya_eval_cli.options import declared, progress_bar, use_plugins


def _table(result) -> str:
    """Area under the accuracy-vs-fraction-removed curve per method (accuracy units): no retraining (first
    ablation) and refit."""
    from laya_eval.stats.intervals import IntervalNotes, format_estimate, format_interval

    notes = IntervalNotes()
    s = result.summary
    first = s["ablation"].iloc[0]
    part = s[(s["ablation"] == first)]
    mw = max([13, *(len(str(name)) for name in part["method"])])  # the method column fits the longest name
    lines = [
        f"area under test accuracy vs fraction of layers removed, in accuracy units (a model that loses "
        f"nothing keeps its unpruned accuracy); no retraining: {first}",
        f"{'method':<{mw}} {'ranking':<8} {'no retraining [95% CI]':>26} {'head refit [95% CI]':>26}",
    ]
    for (method, ranking), rows in part.groupby(["method", "ranking"], sort=False):
        cells = []
        for curve in ("accuracy", "refit"):
            r = rows[rows["curve"] == curve]
            if r.empty:
                cells.append("")
                continue
            interval = format_interval(
                r.ci_low.iloc[0], r.ci_high.iloc[0], r.ci_note.iloc[0], digits=4, signed=False, notes=notes
            )
            cells.append(f"{format_estimate(r.auc.iloc[0], signed=False)} {interval}")
        lines.append(f"{method:<{mw}} {ranking:<8} {cells[0]:>26} {cells[1]:>26}")
    return "\n".join(lines + notes.lines())


def _next_token_table(pruned) -> str:
    """Held-out perplexity after k blocks removed per ranking, then the area under each loss curve."""
    from laya_eval.stats.intervals import IntervalNotes, format_estimate, format_interval

    notes = IntervalNotes()
    m = pruned.manifest
    table = pruned.table
    ks = sorted(table["k_removed"].unique())
    w = max([13, *(len(str(name)) for name in table["method"])])
    lines = [
        f"{m['checkpoint']['spec']}: {m['dataset']}, scores and oracle on {m['n_val']} validation windows, "
        f"perplexity on {m['n_test']} test windows; blocks removed with skip",
        f"{'ranking':<{w}} " + " ".join(f"{'k=' + str(k):>9}" for k in ks) + f" {'area (nats) [95% CI]':>26}",
    ]
    for name, rows in table.groupby("method", sort=False):
        row = pruned.summary[pruned.summary["method"] == name].iloc[0]
        interval = format_interval(row.ci_low, row.ci_high, row.ci_note, digits=4, signed=False, notes=notes)
        cells = " ".join(f"{p:>9.4g}" for p in rows.sort_values("k_removed")["perplexity"])
        lines.append(f"{name:<{w}} {cells} {format_estimate(row.auc, signed=False) + ' ' + interval:>26}")
    return "\n".join(lines + notes.lines())


@click.command()
@click.argument("checkpoint", metavar="MODEL")
@declared("prune")
def prune(
    checkpoint,
    trust_code,
    allow_unverified,
    plugins,
    download,
    data,
    limit,
    out_dir,
    fmt,
    style,
    cache_dir,
    data_dir,
    device,
    quiet,
    **params,
):
    """Prune MODEL's layers by each attribution method's ranking.

    For k = 0 … L-1 the k least important layers are removed: test accuracy without retraining (each
    --ablation), with the head retrained on the kept layers (--seeds), the depth needed and its latency
    (chain backbones), against an oracle (greedy on the validation split) and random orders. Then the
    early-exit what-if. The backbone encodes each split once; --limit applies to the test split.

    With --target next-token, MODEL is a causal LM (hf:DIR) and --data text:FILE: blocks are skipped in each
    score's order (ShortGPT) and the held-out perplexity is reported after each removal.

    Example: laya-eval prune ckpt.pt --seeds 3 --out prune/
    """
    import laya_eval
    from laya_eval.options import values_for

    use_plugins(plugins, trust_code)
    train = laya_eval.TrainOptions(**values_for("PruneOptions.train", params), device=device)
    options = laya_eval.PruneOptions(**values_for("PruneOptions", params), train=train)
    if options.target == "next-token":
        pruned = laya_eval.prune_next_token(
            checkpoint,
            data,
            options=options,
            limit=limit,
            out=out_dir,
            data_dir=data_dir,
            device=device,
            download=download,
            fmt=fmt,
            style=style,
        )
        click.echo(_next_token_table(pruned))
        click.echo(f"wrote {', '.join(p.name for p in pruned.files)} to {out_dir}")
        return
    with progress_bar(quiet, desc="refit heads", unit="head") as bar:
        pruned = laya_eval.prune(
            checkpoint,
            data,
            out=out_dir,
            options=options,
            data_dir=data_dir,
            limit=limit,
            cache_dir=cache_dir,
            device=device,
            trust_code=trust_code,
            download=download,
            fmt=fmt,
            style=style,
            on_start=None if quiet else (lambda line: click.echo(line, err=True)),
            on_head=lambda kept, s: bar.update(1),
            allow_unverified=allow_unverified,
        )
    m = pruned.meta
    click.echo(
        f"{m['label']}: {m['dataset']}, heads trained on train, stopped on val, oracle on val, scored on {m['split']} "
        f"(n = {m['n_test']})"
    )
    if pruned.model_state is not None:
        click.echo(f"model: {pruned.model_state.describe()}")
    click.echo(_table(pruned))
    for warning in pruned.warnings:
        click.echo(f"warning: {warning}")
    click.echo(f"wrote {', '.join(p.name for p in pruned.files)} to {out_dir} ({pruned.wall_time_s:.1f} s)")
