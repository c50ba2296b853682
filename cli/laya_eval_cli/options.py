"""Options shared by several commands, defined once."""

from __future__ import annotations

import json

import click

from laya_eval import catalog
from laya_eval.checks import SEED_MAX

device_option = click.option(
    "--device", default="cpu", show_default=True, help="Where to run: cpu, cuda or cuda:N."
)
quiet_option = click.option("--quiet", "-q", is_flag=True, help="No progress bars.")
# The library's seed range (laya_eval.checks.SEED_MAX), one range for every command.
SEED_RANGE = click.IntRange(0, SEED_MAX)
seed_option = click.option("--seed", default=0, show_default=True, type=SEED_RANGE,
                           help="Random seed (0 to 2**63 - 1).")
data_dir_option = click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=str),
    default=None,
    help="Folder with the dataset files (else $LAYA_EVAL_DATA, then system folders).",
)
split_option = click.option("--split", default="test", show_default=True, type=click.Choice(["train", "val", "test"]))
limit_option = click.option("--limit", type=click.IntRange(min=1), default=None, help="Use only the first N samples.")
batch_size_option = click.option("--batch-size", default=catalog.EVAL_BATCH_SIZE, show_default=True, type=click.IntRange(min=1))
download_option = click.option(
    "--download", is_flag=True,
    help="Allow downloads: the dataset from its official source if it is not found, an hf: model from the "
         "Hugging Face Hub. Nothing is downloaded without it.",
)
trust_code_option = click.option(
    "--trust-code", is_flag=True,
    help="Allow a checkpoint whose backbone is a py:MODULE:CALLABLE reference to import that module "
         "(a checkpoint is data: without this flag it never makes laya-eval run code).",
)
# Every command that loads a checkpoint takes it; it maps to the library's ``allow_unverified=True``.
allow_unverified_option = click.option(
    "--allow-unverified", is_flag=True,
    help="Load a checkpoint that lacks the probe logits, checksum or model hashes laya-eval writes (an edited "
         "or old file): nothing then checks that the rebuilt model is the one that was saved.",
)
HEAD_NAMES = list(catalog.HEAD_NAMES)


def head_options(func):
    """``--d-star``, ``--tau``, ``--scorer-hidden``, ``--psi``: the hyper-parameters of the standard heads."""
    for option in reversed([
        click.option("--d-star", default=catalog.D_STAR, show_default=True, type=click.IntRange(min=1),
                     help="Shared space size (ScalarMix, LAYA)."),
        click.option("--tau", default=catalog.LAYA_TAU, show_default=True, type=click.FloatRange(min=0, min_open=True),
                     help="LAYA softmax temperature."),
        click.option("--scorer-hidden", default=catalog.SCORER_HIDDEN, show_default=True, type=click.IntRange(min=1),
                     help="LAYA scorer width."),
        click.option("--psi", default="identity", show_default=True, type=click.Choice(["identity", "mlp"]),
                     help="LAYA psi."),
    ]):
        func = option(func)
    return func


def head_kwargs(head: str, d_star: int, tau: float, scorer_hidden: int, psi: str) -> dict:
    """The options of :func:`head_options` that ``head`` takes."""
    kwargs: dict = {"d_star": d_star} if head in ("scalarmix", "laya") else {}
    if head == "laya":
        kwargs.update(tau=tau, scorer_hidden=scorer_hidden, psi=psi)
    return kwargs


def training_options(func):
    """``--epochs``, ``--batch-size``, ``--lr``, ``--patience``: the reference protocol."""
    for option in reversed([
        click.option("--epochs", default=catalog.TRAIN_EPOCHS, show_default=True, type=click.IntRange(min=1)),
        click.option("--batch-size", default=catalog.TRAIN_BATCH_SIZE, show_default=True, type=click.IntRange(min=1)),
        click.option("--lr", default=catalog.TRAIN_LR, show_default=True, type=click.FloatRange(min=0, min_open=True)),
        click.option("--patience", default=catalog.TRAIN_PATIENCE, show_default=True, type=click.IntRange(min=1),
                     help="Early-stopping patience (epochs)."),
    ]):
        func = option(func)
    return func


#: ``--data`` of the commands that evaluate a trained model: the dataset recorded in it unless named.
recorded_data_option = click.option(
    "--data", default=None, help="Dataset name or npz:PATH (default: the one recorded in the checkpoint).")
#: ``--methods``: a comma-separated subset of the registered attribution methods.
methods_option = click.option(
    "--methods", default=None,
    help=f"Comma-separated methods (default: all): {', '.join(catalog.method_names())}.")
#: ``--format`` of the commands without a paper style (one figure format, png by default).
png_format_option = click.option("--format", "fmt", default="png", show_default=True,
                                 type=click.Choice(["png", "svg", "pdf"]), help="Figure file format.")


def retrain_options(what: str, patience: int = catalog.TRAIN_PATIENCE):
    """``--epochs``, ``--patience``, ``--lr``, ``--train-seed``: the protocol of the heads a command retrains on
    cached features (``sanity``, ``prune``); ``what`` names those heads in the help; ``patience`` is the
    command's default (the reference protocol's is 5)."""
    def decorate(func):
        for option in reversed([
            click.option("--epochs", default=catalog.TRAIN_EPOCHS, show_default=True, type=click.IntRange(min=1),
                         help=f"Most epochs of every {what} (early stopping on validation accuracy)."),
            click.option("--patience", default=patience, show_default=True, type=click.IntRange(min=1),
                         help=f"Early-stopping patience (epochs) of the {what}s."),
            click.option("--lr", default=catalog.TRAIN_LR, show_default=True, type=click.FloatRange(min=0, min_open=True),
                         help=f"Adam learning rate of the {what}s."),
            click.option("--train-seed", default=catalog.TRAIN_SEED, show_default=True, type=SEED_RANGE,
                         help=f"Seed of the first {what} (then +1, +2, ...)."),
        ]):
            func = option(func)
        return func

    return decorate


cache_dir_option = click.option(
    "--cache-dir", default=None, type=click.Path(file_okay=False),
    help="Feature cache of frozen pretrained backbones, shared by fit-head, prune, sanity, and faithfulness and "
         "profile at head scope (default: $LAYA_EVAL_CACHE/features or ~/.cache/laya-eval/features).")
no_cache_option = click.option(
    "--no-cache", "no_cache", is_flag=True,
    help="Run the backbone batch by batch at head scope instead of reading (and filling) the feature cache; "
         "the results are the same bytes.")

bootstrap_option = click.option("--bootstrap", default=catalog.BOOTSTRAP_RESAMPLES, show_default=True, type=click.IntRange(min=0),
                                help=f"Bootstrap resamples for the 95% intervals (below {catalog.MIN_BOOTSTRAP_RESAMPLES}, "
                                     "no interval is reported: n/a).")


def epoch_bar(quiet: bool, epochs: int, desc: str):
    """A progress bar over epochs and the ``on_epoch`` callback that advances it."""
    bar = progress_bar(quiet, total=epochs, desc=desc, unit="epoch")

    def on_epoch(rec):
        bar.update(1)
        bar.set_postfix(loss=f"{rec['train_loss']:.4f}", val_acc=f"{rec['val_accuracy']:.4f}")

    return bar, on_epoch

figure_format_option = click.option(
    "--format", "fmt", default=None, type=click.Choice(["png", "svg", "pdf"]),
    help="Figure file format [default: png; pdf with --style paper].")
figure_style_option = click.option(
    "--style", default="default", show_default=True, type=click.Choice(["default", "paper"]),
    help="paper: no titles on the figures (each caption goes to NAME.caption.txt and into the report), "
         "paper column widths (3.3 / 6.9 in), vector output by default, fonts embedded.")


def choice_list(value: str, choices: list[str], option: str) -> tuple[str, ...]:
    """Split a comma-separated ``value`` into names from ``choices`` (duplicates dropped, order kept)."""
    names = tuple(dict.fromkeys(n.strip() for n in value.split(",") if n.strip()))
    unknown = [n for n in names if n not in choices]
    if unknown or not names:
        raise click.BadParameter(
            f"must be among {{{', '.join(choices)}}}; got {unknown[0] if unknown else value!r}.", param_hint=option)
    return names


def parse_key_values(pairs: tuple[str, ...], option: str) -> dict:
    """Turn ``("k=v", ...)`` into a dict; values are read as JSON when they parse, else kept as strings."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE; got {pair!r}.", param_hint=option)
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def progress_bar(quiet: bool, **kwargs):
    """A tqdm bar on stderr, off with ``--quiet`` or when stderr is not a terminal."""
    import sys

    from tqdm.auto import tqdm

    return tqdm(disable=True if quiet else None, file=sys.stderr, dynamic_ncols=True, **kwargs)


#: ``--plugin``: modules that register methods and ablations (their code runs only with --trust-code).
plugin_option = click.option(
    "--plugin", "plugins", multiple=True, metavar="py:MODULE",
    help="Load methods and ablations a Python module registers (a dotted module or a .py file; repeatable). It "
         "runs that module's code, so it needs --trust-code. Installed laya_eval.plugins entry points load "
         "without it (see docs/plugins.md).")


def use_plugins(plugins: tuple[str, ...], trust_code: bool) -> None:
    """Load the ``--plugin`` modules (refused without ``--trust-code``, before any import) and the installed
    entry points; the method and ablation choices are read from the registry after this."""
    from laya_eval.engine.plugins import check_plugin_specs, load_installed_plugins, load_plugins

    check_plugin_specs(plugins, trust_code=trust_code)
    load_plugins(plugins, trust_code=trust_code)
    load_installed_plugins()


def registered_methods() -> list[str]:
    """The method names of the registry as it stands (built-ins, then loaded plug-ins)."""
    return catalog.method_names()


def registered_ablations() -> list[str]:
    """The ablation names of the registry as it stands (built-ins, then loaded plug-ins)."""
    return catalog.ablation_names()


def _target(ctx, param, value):
    if value in ("pred", "label"):
        return value
    try:
        number = int(value)
    except ValueError:
        raise click.BadParameter(f"must be pred, label or a class index (an integer >= 0); got {value!r}.") from None
    if number < 0:
        raise click.BadParameter(f"must be pred, label or a class index (an integer >= 0); got {value!r}.")
    return number


#: ``--target``: the class the attributions explain and whose probability the effects measure.
target_option = click.option(
    "--target", default="pred", show_default=True, callback=_target, metavar="pred|label|INT",
    help="The class whose logit the attributions explain and whose probability the effects measure: the "
         "predicted class, the true label, or a fixed class index.")


def attribution_options(func):
    """``--target``, ``--ig-steps``, ``--ig-baseline``, ``--ig-batch-size``: which class is explained and how
    Integrated Gradients integrates."""
    for option in reversed([
        target_option,
        click.option("--ig-steps", default=catalog.IG_STEPS, show_default=True, type=click.IntRange(min=1),
                     help="Integrated Gradients steps (Gauss-Legendre)."),
        click.option("--ig-baseline", default=None, type=click.Choice(list(catalog.IG_BASELINES)),
                     help="Where Integrated Gradients starts: zero states, the dataset mean, or the state the "
                          "ablation puts in (each ablation its own) [default: zero at head scope, removed at "
                          "network scope]."),
        click.option("--ig-batch-size", default=None, type=click.IntRange(min=1),
                     help="Rows per internal Integrated Gradients batch (bounds memory; Captum's "
                          "internal_batch_size) [default: all steps at once]."),
    ]):
        func = option(func)
    return func
