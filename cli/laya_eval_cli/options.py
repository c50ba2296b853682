"""The CLI's side of the option records: click options built from :mod:`laya_eval.options`, the flag spelling of
a library error, and the small helpers the commands share (progress bars, plug-ins)."""

from __future__ import annotations

import json

import click

from laya_eval.checks import SEED_MAX


def head_kwargs(head: str, d_star: int, tau: float, scorer_hidden: int, psi: str) -> dict:
    """The options of :func:`head_options` that ``head`` takes."""
    kwargs: dict = {"d_star": d_star} if head in ("scalarmix", "laya") else {}
    if head == "laya":
        kwargs.update(tau=tau, scorer_hidden=scorer_hidden, psi=psi)
    return kwargs


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


def epoch_bar(quiet: bool, epochs: int, desc: str):
    """A progress bar over epochs and the ``on_epoch`` callback that advances it."""
    bar = progress_bar(quiet, total=epochs, desc=desc, unit="epoch")

    def on_epoch(rec):
        bar.update(1)
        bar.set_postfix(loss=f"{rec['train_loss']:.4f}", val_acc=f"{rec['val_accuracy']:.4f}")

    return bar, on_epoch


figure_format_option = click.option(
    "--format",
    "fmt",
    default=None,
    type=click.Choice(["png", "svg", "pdf"]),
    help="Figure file format [default: png; pdf with --style paper].",
)
figure_style_option = click.option(
    "--style",
    default="default",
    show_default=True,
    type=click.Choice(["default", "paper"]),
    help="paper: no titles on the figures (each caption goes to NAME.caption.txt and into the report), "
    "paper column widths (3.3 / 6.9 in), vector output by default, fonts embedded.",
)


def use_plugins(plugins: tuple[str, ...], trust_code: bool) -> None:
    """Load the ``--plugin`` modules (refused without ``--trust-code``, before any import) and the installed
    entry points; the method and ablation choices are read from the registry after this."""
    from laya_eval.engine.plugins import check_plugin_specs, load_installed_plugins, load_plugins

    check_plugin_specs(plugins, trust_code=trust_code)
    load_plugins(plugins, trust_code=trust_code)
    load_installed_plugins()


def _target(ctx, param, value):
    if value in ("pred", "label", "next-token"):
        return value
    try:
        number = int(value)
    except ValueError:
        raise click.BadParameter(
            f"must be pred, label, a class index (an integer >= 0) or next-token; got {value!r}."
        ) from None
    if number < 0:
        raise click.BadParameter(f"must be pred, label, a class index (an integer >= 0) or next-token; got {value!r}.")
    return number


# ---------------------------------------------------------------------------------------------- declared options
def _split_names(ctx, param, value):
    """A comma-separated list as a tuple (duplicates dropped, order kept); the library checks the names against
    the registry as it stands once plug-ins are loaded."""
    if value is None or isinstance(value, tuple):
        return value
    names = tuple(dict.fromkeys(n.strip() for n in value.split(",") if n.strip()))
    if not names:
        raise click.BadParameter(f"must name at least one; got {value!r}.")
    return names


def _click_option(record):
    """The click option a :class:`laya_eval.options.Option` record stands for."""
    from laya_eval.options import REQUIRED

    decls = [record.flag + (f"/{record.secondary}" if record.secondary else "")]
    if record.short:
        decls.append(record.short)
    decls.append(record.param or record.name)
    kw: dict = {"help": record.help or None, "metavar": record.metavar, "multiple": record.multiple}
    if record.default is REQUIRED:
        kw["required"] = True
    elif record.kind == "flag" and record.flag.startswith("--no-") and record.default is True:
        kw.update(is_flag=True, flag_value=False, default=True)
    else:
        default = record.default
        if record.kind == "names" and isinstance(default, tuple):
            default = ",".join(default)
        kw["default"] = default
        if (default not in (None, (), False) and record.kind != "flag") or (record.secondary and default is not None):
            kw["show_default"] = True
    if record.kind == "flag" and not kw.get("is_flag"):
        kw["is_flag"] = True
    elif record.kind in ("int", "seed"):
        low = 0 if record.kind == "seed" else record.low
        high = SEED_MAX if record.kind == "seed" else record.high
        kw["type"] = click.IntRange(low, high)
    elif record.kind == "float":
        kw["type"] = click.FloatRange(record.low, record.high, min_open=record.low_open, max_open=record.high_open)
    elif record.kind == "choice" and not callable(record.choices):  # a registry's names are checked by the library
        kw["type"] = click.Choice(record.choice_list())
    elif record.kind == "names":
        kw["callback"] = _split_names
    elif record.kind == "target":
        kw["callback"] = _target
        kw["show_default"] = True
    elif record.kind in ("path", "dir", "file"):
        kw["type"] = click.Path(file_okay=record.kind != "dir", dir_okay=record.kind != "file")
    if record.default_text:
        kw["show_default"] = record.default_text
    kw.update(CLICK_DETAILS.get(record.id, {}))
    return click.option(*decls, **kw)


def _shape(ctx, param, value):
    """``--input-shape 1,28,28`` -> (1, 28, 28)."""
    if value is None:
        return None
    try:
        sizes = tuple(int(part) for part in value.split(","))
    except ValueError:
        raise click.BadParameter(f"expected sizes separated by commas, e.g. 1,28,28; got {value!r}.") from None
    if not sizes or min(sizes) < 1:
        raise click.BadParameter(f"expected positive sizes, e.g. 1,28,28; got {value!r}.")
    return sizes


#: What click needs beyond a record for a few options: a parser of their text, a path that must exist.
CLICK_DETAILS = {
    "fit_head.sources": {"type": click.Path(exists=True)},
    "import_keras.input_shape": {"callback": _shape},
}


def declared(command: str):
    """Every option ``command`` takes, from its records (:mod:`laya_eval.options`), in declaration order."""
    from laya_eval.options import for_command

    def decorate(func):
        for record in reversed(for_command(command)):
            func = _click_option(record)(func)
        return func

    return decorate


def flag_spelling(error: Exception, command: str | None) -> str:
    """``error``'s message with the option it names as a Python caller knows it (``EvalOptions.seed``) written as
    ``command``'s flag (``--seed``), where the command has that option."""
    from laya_eval.options import for_command

    message, parameter = str(error), getattr(error, "parameter", None)
    if not parameter or not command:
        return message
    owner, _, name = parameter.rpartition(".")
    for record in for_command(command):
        if (record.id == parameter or (owner in record.also and record.name == name)) and message.startswith(parameter):
            return record.flag + message[len(parameter) :]
    return message
