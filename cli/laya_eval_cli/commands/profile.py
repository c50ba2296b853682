"""``laya-eval profile``: class-wise layer profiles of one attribution method."""

from __future__ import annotations

import time

import click

from laya_eval_cli.commands.faithfulness import METHOD_NAMES
from laya_eval_cli.options import (
    download_option,
    trust_code_option,
    batch_size_option,
    data_dir_option,
    device_option,
    figure_format_option,
    figure_style_option,
    limit_option,
    progress_bar,
    quiet_option,
    seed_option,
    split_option,
)


def _table(profile) -> str:
    """The 'all' subset as a class x layer grid of means."""
    part = profile.table[profile.table["subset"] == "all"]
    grid = part.pivot(index="class_name", columns="layer", values="mean")
    grid = grid.reindex([c for c in dict.fromkeys(part["class_name"])])
    width = max(len("class"), *(len(str(c)) for c in grid.index))
    lines = [f"{'class':<{width}} " + " ".join(f"{'layer ' + str(k):>10}" for k in grid.columns)]
    for name, row in grid.iterrows():
        lines.append(f"{name:<{width}} " + " ".join(f"{v:>10.4f}" for v in row))
    return "\n".join(lines)


@click.command()
@click.argument("checkpoint", metavar="MODEL")
@trust_code_option
@download_option
@click.option("--data", default=None, help="Dataset name or npz:PATH (default: the one recorded in the checkpoint).")
@split_option
@click.option("--method", default="laya", show_default=True,
              help=f"Whose layer scores to profile: {', '.join(METHOD_NAMES)}.")
@click.option("--by", default="label", show_default=True, type=click.Choice(["label", "pred"]),
              help="Group samples by their true (label) or predicted (pred) class.")
@click.option("--scope", default="head", show_default=True, type=click.Choice(["head", "network"]),
              help="For gradient methods: head (direct effect) or network (total effect).")
@limit_option
@batch_size_option
@seed_option
@click.option("--out", "out_dir", default="profile-out", show_default=True, type=click.Path(file_okay=False),
              help="Folder for profile.csv, profile_layers.csv, profile.json and the figures.")
@figure_format_option
@figure_style_option
@data_dir_option
@device_option
@quiet_option
def profile(checkpoint, trust_code, download, data, split, method, by, scope, limit, batch_size, seed, out_dir, fmt, style, data_dir,
            device, quiet):
    """Class-wise layer profile of MODEL (a checkpoint, hf:DIR or py:MODULE:CALLABLE): mean and std of a method's layer scores per class and layer.

    Computed separately for all, correct and incorrect predictions; writes
    profile.csv (subset, class, class_name, layer, mean, std, n), one annotated
    class x layer heatmap per subset and violins of the per-sample scores per
    layer (correct and incorrect predictions side by side). --style paper drops
    the titles into NAME.caption.txt files and writes PDF at paper column widths.

    Example: laya-eval profile ckpt.pt --method laya --out profile/
    """
    from laya_eval.distributed import world_from_environment
    from laya_eval.evaluate import EvalOptions
    from laya_eval.profile import layer_profile, write_profile

    # The ablation does not touch the scores; network scope only admits replacement ablations.
    options = EvalOptions(ablation="gate" if scope == "head" else "zero", scope=scope, split=split, limit=limit,
                          batch_size=batch_size, seed=seed, bootstrap=0, device=device, trust_code=trust_code,
                          download=download)
    world = world_from_environment(device)
    start = time.perf_counter()
    with progress_bar(quiet or not world.is_main, desc="profile", unit="sample") as bar:
        prof = layer_profile(checkpoint, data, method=method, by=by, options=options, data_dir=data_dir, progress=bar,
                             world=world)
    if prof is None:  # ranks other than 0 under torchrun
        return
    meta = prof.meta
    click.echo(f"{checkpoint}: {meta['head']} head, {meta['dataset']} ({split}), method {method}, scope {scope}, "
               f"classes by {'true label' if by == 'label' else 'prediction'}, n = {meta['n']}")
    click.echo(_table(prof))
    paths = write_profile(prof, out_dir, fmt=fmt, style=style)
    click.echo(f"wrote {', '.join(p.name for p in paths)} to {out_dir} ({time.perf_counter() - start:.1f} s)")
