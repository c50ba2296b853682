"""``laya-eval profile``: class-wise layer profiles of one attribution method."""

from __future__ import annotations


import click

from laya_eval.catalog import DISTANCE_SPECS
from laya_eval_cli.options import declared, progress_bar, use_plugins


def _table(profile) -> str:
    """The 'all' subset as a class x layer grid of means; columns named as on the figures (the model's layers)."""
    from laya_eval.figures import layer_names

    part = profile.table[profile.table["subset"] == "all"]
    grid = part.pivot(index="class_name", columns="layer", values="mean")
    grid = grid.reindex([c for c in dict.fromkeys(part["class_name"])])
    n_layers = int(profile.meta.get("n_layers") or profile.table["layer"].max())
    names = layer_names(profile.meta, n_layers)
    width = max(len("class"), *(len(str(c)) for c in grid.index))
    cell = max(10, *(len(n) + 1 for n in names))
    lines = [f"{'class':<{width}} " + " ".join(f"{names[int(k) - 1]:>{cell}}" for k in grid.columns)]
    for name, row in grid.iterrows():
        lines.append(f"{name:<{width}} " + " ".join(f"{v:>{cell}.4f}" for v in row))
    return "\n".join(lines)


def _diagnosis_line(diag) -> str:
    """One line: the overall ROC AUC of the distance as an error signal, with what it was computed from."""
    from laya_eval.stats.intervals import interval_note

    row, meta = diag.overall, diag.meta
    who = "predicted" if meta["reference_by"] == "pred" else "true"
    what = (
        f"{DISTANCE_SPECS[meta['distance']].label} to the {who} class's correct-prediction profile "
        f"(leave-one-out), {row['n_incorrect']} incorrect vs {row['n_correct']} correct, "
        f"{row['n_undefined']} undefined"
    )
    if row["auc"] != row["auc"]:  # NaN
        return f"error signal: ROC AUC undefined (needs correct and incorrect predictions); {what}"
    why = (
        interval_note(row["n_correct"] + row["n_incorrect"], meta["n_resamples"])
        or "the percentile interval excludes the estimate"
    )
    interval = (
        f"no interval ({why})"
        if row["ci_low"] != row["ci_low"]
        else f"95% CI [{row['ci_low']:.3f}, {row['ci_high']:.3f}], {meta['n_resamples']} bootstrap resamples "
        "stratified by correctness"
    )
    return f"error signal: ROC AUC {row['auc']:.3f}, {interval}; {what}"


@click.command()
@click.argument("checkpoint", metavar="MODEL")
@declared("profile")
def profile(
    checkpoint,
    plugins,
    data,
    method,
    by,
    reference_by,
    distance,
    n_resamples,
    out_dir,
    fmt,
    style,
    data_dir,
    quiet,
    **params,
):
    """Class-wise layer profile of MODEL (a checkpoint, hf:DIR or py:MODULE:CALLABLE): mean and std of a method's layer scores per class and layer.

    Computed separately for all, correct and incorrect predictions; writes
    profile.csv (subset, class, class_name, layer, mean, std, n), one annotated
    class x layer heatmap per subset and violins of the per-sample scores per
    layer (correct and incorrect predictions side by side). --style paper drops
    the titles into NAME.caption.txt files and writes PDF at paper column widths.

    Diagnosis from attention shift: each input's distance to the mean profile of
    the correct predictions of its class (the predicted class by default; leave-one-out,
    so no input is in its own reference) and how well it separates incorrect from
    correct predictions (ROC AUC, stratified bootstrap interval): diagnosis.csv,
    diagnosis_summary.csv and the figure diagnosis.<format>.

    Example: laya-eval profile ckpt.pt --method laya --out profile/
    """
    import laya_eval
    from laya_eval.engine.distributed import world_from_environment
    from laya_eval.options import check_option, option, values_for
    from laya_eval.profiling.diagnosis import DiagnosisOptions

    use_plugins(plugins, params["trust_code"])
    check_option(option("profile.method"), method)
    # The ablation does not touch the scores (the scope's default ablation); the profile has no intervals of its own.
    options = laya_eval.EvalOptions(**values_for("EvalOptions", params), bootstrap=0)
    world = world_from_environment(options.device)
    with progress_bar(quiet or not world.is_main, desc="profile", unit="sample") as bar:
        prof = laya_eval.profile(
            checkpoint,
            data,
            out=out_dir,
            method=method,
            by=by,
            options=options,
            data_dir=data_dir,
            progress=bar,
            world=world,
            fmt=fmt,
            style=style,
            diagnosis=DiagnosisOptions(by=reference_by, distance=distance, n_resamples=n_resamples),
        )
    if prof is None:  # ranks other than 0 under torchrun
        return
    meta = prof.meta
    click.echo(
        f"{checkpoint}: {meta['head']} head, {meta['dataset']} ({options.split}), method {method}, scope {options.scope}, "
        f"classes by {'true label' if by == 'label' else 'prediction'}, n = {meta['n']}"
    )
    if prof.model_state is not None:
        click.echo(f"model: {prof.model_state.describe()}")
    click.echo(_table(prof))
    click.echo(_diagnosis_line(prof.diagnosis))
    for warning in prof.warnings:
        click.echo(f"warning: {warning}")
    click.echo(f"wrote {', '.join(p.name for p in prof.files)} to {out_dir} ({prof.wall_time_s:.1f} s)")
