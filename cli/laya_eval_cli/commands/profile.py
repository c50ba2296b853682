"""``laya-eval profile``: class-wise layer profiles of one attribution method."""

from __future__ import annotations


import click

from laya_eval.catalog import BOOTSTRAP_RESAMPLES, DISTANCE_SPECS, SCOPES, distance_names, method_names
from laya_eval_cli.options import (
    attribution_options,
    choice_list,
    plugin_option,
    registered_methods,
    use_plugins,
    batch_size_option,
    cache_dir_option,
    no_cache_option,
    data_dir_option,
    device_option,
    download_option,
    figure_format_option,
    figure_style_option,
    limit_option,
    progress_bar,
    quiet_option,
    recorded_data_option,
    seed_option,
    split_option,
    trust_code_option,
    allow_unverified_option,
)

#: The built-in methods, named in --method's help; --method is checked against the registry after plug-ins load.
METHOD_NAMES = method_names()


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
    what = (f"{DISTANCE_SPECS[meta['distance']].label} to the {who} class's correct-prediction profile "
            f"(leave-one-out), {row['n_incorrect']} incorrect vs {row['n_correct']} correct, "
            f"{row['n_undefined']} undefined")
    if row["auc"] != row["auc"]:  # NaN
        return f"error signal: ROC AUC undefined (needs correct and incorrect predictions); {what}"
    why = (interval_note(row["n_correct"] + row["n_incorrect"], meta["n_resamples"])
           or "the percentile interval excludes the estimate")
    interval = (f"no interval ({why})" if row["ci_low"] != row["ci_low"] else
                f"95% CI [{row['ci_low']:.3f}, {row['ci_high']:.3f}], {meta['n_resamples']} bootstrap resamples "
                "stratified by correctness")
    return f"error signal: ROC AUC {row['auc']:.3f}, {interval}; {what}"


@click.command()
@click.argument("checkpoint", metavar="MODEL")
@trust_code_option
@allow_unverified_option
@plugin_option
@download_option
@recorded_data_option
@split_option
@attribution_options
@click.option("--method", default="laya", show_default=True,
              help=f"Whose layer scores to profile: {', '.join(METHOD_NAMES)}.")
@click.option("--by", default="label", show_default=True, type=click.Choice(["label", "pred"]),
              help="Group samples by their true (label) or predicted (pred) class.")
@click.option("--reference-by", default="pred", show_default=True, type=click.Choice(["pred", "label"]),
              help="Diagnosis: compare each input with the correct-prediction profile of its predicted class (pred, "
                   "the only class known at deployment) or of its true class (label).")
@click.option("--distance", default="auto", show_default=True, type=click.Choice(["auto", *distance_names()]),
              help="Diagnosis distance; auto: jensen_shannon for scores that are weights summing to one "
                   "(laya, static), cosine_minmax otherwise.")
@click.option("--bootstrap", default=BOOTSTRAP_RESAMPLES, show_default=True, type=click.IntRange(min=0),
              help="Bootstrap resamples for the 95% interval of the diagnosis AUC.")
@click.option("--scope", default=SCOPES[0], show_default=True, type=click.Choice(SCOPES),
              help="For gradient methods: head (direct effect) or network (total effect).")
@limit_option
@batch_size_option
@seed_option
@click.option("--out", "out_dir", default="profile-out", show_default=True, type=click.Path(file_okay=False),
              help="Folder for profile.csv, profile_layers.csv, profile.json, diagnosis.csv, diagnosis_summary.csv, "
                   "the figures and manifest.json (replaced whole).")
@figure_format_option
@figure_style_option
@cache_dir_option
@no_cache_option
@data_dir_option
@device_option
@quiet_option
def profile(checkpoint, trust_code, allow_unverified, plugins, download, data, split, target, ig_steps, ig_baseline, ig_batch_size, method, by, reference_by, distance, bootstrap, scope, limit,
            batch_size, seed, out_dir, fmt, style, cache_dir, no_cache, data_dir, device, quiet):
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
    from laya_eval.profiling.diagnosis import DiagnosisOptions
    from laya_eval.engine.distributed import world_from_environment
    from laya_eval.engine.evaluation import EvalOptions
    from laya_eval.profiling.run import profile as run_profile

    use_plugins(plugins, trust_code)
    choice_list(method, registered_methods(), "--method")
    # The ablation does not touch the scores; network scope only admits replacement ablations.
    options = EvalOptions(ablation="gate" if scope == "head" else "zero", scope=scope, split=split, limit=limit,
                          target=target, n_steps=ig_steps, ig_baseline=ig_baseline, internal_batch_size=ig_batch_size,
                          batch_size=batch_size, seed=seed, bootstrap=0, device=device, trust_code=trust_code,
                          download=download, cache=not no_cache, cache_dir=cache_dir,
                          allow_unverified=allow_unverified)
    world = world_from_environment(device)
    with progress_bar(quiet or not world.is_main, desc="profile", unit="sample") as bar:
        prof = run_profile(checkpoint, data, out=out_dir, method=method, by=by, options=options, data_dir=data_dir,
                           progress=bar, world=world, fmt=fmt, style=style,
                           diagnosis=DiagnosisOptions(by=reference_by, distance=distance, n_resamples=bootstrap))
    if prof is None:  # ranks other than 0 under torchrun
        return
    meta = prof.meta
    click.echo(f"{checkpoint}: {meta['head']} head, {meta['dataset']} ({split}), method {method}, scope {scope}, "
               f"classes by {'true label' if by == 'label' else 'prediction'}, n = {meta['n']}")
    click.echo(_table(prof))
    click.echo(_diagnosis_line(prof.diagnosis))
    click.echo(f"wrote {', '.join(p.name for p in prof.files)} to {out_dir} ({prof.wall_time_s:.1f} s)")
