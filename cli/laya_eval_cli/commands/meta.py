"""``laya-eval meta``: methods, ablations and metrics scored on models whose layer relevance is planted."""

from __future__ import annotations

import time

import click

from laya_eval.catalog import ABLATION_SPECS, fixed_ablation_names, planted_family_names
from laya_eval_cli.options import declared, progress_bar, use_plugins

HEAD_ABLATIONS = [a for a, spec in ABLATION_SPECS.items() if "head" in spec.scopes]
# The default leaves out the ablations drawn per sample (resample, noise): each costs K draws per removal.
DEFAULT_ABLATIONS = [a for a in fixed_ablation_names() if a in HEAD_ABLATIONS]
FAMILY_NAMES = planted_family_names()


def _recovery_table(summary) -> str:
    """Mean AUROC [95% CI] of each method per family (the scores do not depend on the ablation)."""
    scored = summary[summary["kind"] != "effect"].drop_duplicates(["family", "method"])
    families = list(dict.fromkeys(scored["family"]))
    mw = max([13, *(len(str(name)) for name in scored["method"])])  # the method column fits the longest name
    lines = [
        "AUROC of the planted relevance, mean over seeds [95% CI]",
        f"{'method':<{mw}}" + "".join(f"{f:>22}" for f in families),
    ]
    for method in dict.fromkeys(scored["method"]):
        cells = []
        for family in families:
            row = scored[(scored["method"] == method) & (scored["family"] == family)].iloc[0]
            ci = (
                "n/a"
                if row["auroc_ci_low"] != row["auroc_ci_low"]
                else f"{row['auroc_ci_low']:.2f},{row['auroc_ci_high']:.2f}"
            )
            cells.append(f"{row['auroc']:.2f} [{ci}]" if row["auroc"] == row["auroc"] else "undefined")
        lines.append(f"{method:<{mw}}" + "".join(f"{c:>22}" for c in cells))
    return "\n".join(lines)


def _verdict_table(metrics) -> str:
    """One line per (family, ablation): each metric's verdict."""
    names = list(dict.fromkeys(metrics["metric"]))
    verdicts = metrics.groupby("metric")["verdict"]
    w = {m: max(34, verdicts.get_group(m).str.len().max()) for m in names}  # each column fits its longest verdict
    lines = [
        "Does the metric rank the planted attribution above the inverted and layer-index ones?",
        f"{'family':<10} {'ablation':<12}" + "".join(f" {m:<{w[m]}}" for m in names),
    ]
    for (family, ablation), part in metrics.groupby(["family", "ablation"], sort=False):
        verdict = part.set_index("metric")["verdict"]
        lines.append(f"{family:<10} {ablation:<12}" + "".join(f" {verdict[m]:<{w[m]}}" for m in names))
    return "\n".join(lines)


@click.command()
@declared("meta")
def meta(out_dir, data_dir, quiet, **params):
    """Score every method, ablation and metric on models whose layer relevance is planted.

    Each planted family builds, for every seed, a model on the digits training split (scikit-learn's,
    offline) whose relevant layers are known by construction, and evaluates it on the test split at head scope.
    Every method is scored by how well its attributions recover the planted relevance (AUROC, rank
    correlation, intervals over seeds), and every metric (faithfulness, Deletion@1, Deletion@k, AOPC) by
    whether it ranks the planted ranking above an inverted one and one by layer index.

    Families: subset (the head reads half of the layers), graded (planted weights 1 : 2 : 4 ...), noise (noise
    layers read through a shift shared by every class), redundant (exact copies made by identity blocks),
    cancel (a pair whose terms cancel exactly). Their full descriptions are in manifest.json.

    Example: laya-eval meta --seeds 5 --out meta/
    """
    from laya_eval.options import values_for
    from laya_eval.planted.run import MetaOptions
    from laya_eval.planted.run import meta as run_meta

    use_plugins((), trust_code=False)  # installed plug-ins: their methods are choices as in faithfulness
    options = MetaOptions(**values_for("MetaOptions", params))
    start = time.perf_counter()
    with progress_bar(quiet, desc="meta", unit="model") as bar:
        result = run_meta(out_dir, options, data_dir=data_dir, progress=bar)
    wall = time.perf_counter() - start
    click.echo(_recovery_table(result.summary))
    click.echo("")
    click.echo(_verdict_table(result.metrics))
    click.echo(
        f"wrote meta.csv, metrics.csv, seeds.csv, models.csv, meta.{options.fmt} and manifest.json to {out_dir} "
        f"({len(options.families) * options.seeds} planted models, {wall:.1f} s)"
    )
