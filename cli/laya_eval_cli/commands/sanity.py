"""``laya-eval sanity``: do a method's layer attributions depend on the model at all?"""

from __future__ import annotations

import click

from laya_eval_cli.options import declared, use_plugins


def _table(result) -> str:
    """Similarity after the last step of each check and the ROAR agreement, one line per method."""
    casc, data = result.randomisation, result.data_randomisation
    last = casc[casc["step"] == casc["step"].max()].set_index("method")
    shuffled = data[data["step"] == 1].set_index("method")
    roar = result.roar_agreement.set_index("method")
    from laya_eval.stats.intervals import IntervalNotes, format_estimate, format_interval

    notes = IntervalNotes()
    mw = max([13, *(len(str(name)) for name in roar.index)])  # the method column fits the longest name
    lines = [f"{'method':<{mw}} {'cascading (all groups)':>24} {'shuffled labels':>18} {'ROAR rho [95% CI]':>24}"]
    for method in roar.index:
        c, s, r = last.loc[method], shuffled.loc[method], roar.loc[method]
        casc = format_interval(
            c.similarity_ci_low, c.similarity_ci_high, c.get("similarity_ci_note", ""), digits=2, notes=notes
        )
        agree = format_interval(r.ci_low, r.ci_high, r.get("ci_note", ""), digits=2, notes=notes)
        lines.append(
            f"{method:<{mw}} {format_estimate(c.similarity, digits=3):>11} {casc:<12}"
            f" {format_estimate(s.similarity, digits=3):>18} {format_estimate(r.spearman, digits=3):>11} {agree}"
        )
    return "\n".join(lines + notes.lines())


@click.command()
@click.argument("checkpoint", type=click.Path(dir_okay=False))
@declared("sanity")
def sanity(
    checkpoint,
    trust_code,
    allow_unverified,
    plugins,
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
    """Layer-level sanity checks of CHECKPOINT's attribution methods.

    Cascading randomisation of the head's parameters (classifier, scorer, adapters) and then, for a
    backbone trained with the head, of its blocks from the top; a head retrained on shuffled labels; and
    layer-ROAR (a head retrained without each layer). The backbone encodes the train, val and test splits
    once (and the test split once per backbone block step); every other step runs the head only. --limit
    applies to the test split.

    Example: laya-eval sanity ckpt.pt --roar-seeds 3 --out sanity/
    """
    import laya_eval
    from laya_eval.options import values_for

    use_plugins(plugins, trust_code)
    train = laya_eval.TrainOptions(**values_for("SanityOptions.train", params), device=device)
    options = laya_eval.SanityOptions(**values_for("SanityOptions", params), train=train)
    checked = laya_eval.sanity(
        checkpoint,
        data,
        out=out_dir,
        options=options,
        data_dir=data_dir,
        limit=limit,
        cache_dir=cache_dir,
        device=device,
        fmt=fmt,
        style=style,
        trust_code=trust_code,
        allow_unverified=allow_unverified,
        on_start=None if quiet else (lambda line: click.echo(line, err=True)),
    )
    m = checked.meta
    click.echo(
        f"{m['label']}: {m['dataset']}, heads trained on train, stopped on val, scored on {m['split']} (n = {m['n']})"
    )
    if checked.model_state is not None:
        click.echo(f"model: {checked.model_state.describe()}")
    click.echo(_table(checked))
    for warning in checked.warnings:
        click.echo(f"warning: {warning}")
    click.echo(f"wrote {', '.join(p.name for p in checked.files)} to {out_dir} ({checked.meta['wall_time_s']:.1f} s)")
