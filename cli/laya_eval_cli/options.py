"""Options shared by several commands, defined once."""

from __future__ import annotations

import json

import click

device_option = click.option(
    "--device", default="cpu", show_default=True, help="Where to run: cpu, cuda or cuda:N."
)
quiet_option = click.option("--quiet", "-q", is_flag=True, help="No progress bars.")
# numpy and torch take seeds in [0, 2**32 - 1] (torch more, numpy not); one range for every command.
SEED_RANGE = click.IntRange(0, 2**32 - 1)
seed_option = click.option("--seed", default=0, show_default=True, type=SEED_RANGE, help="Random seed (0 to 2**32 - 1).")
data_dir_option = click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=str),
    default=None,
    help="Folder with the dataset files (else $LAYA_EVAL_DATA, then system folders).",
)
split_option = click.option("--split", default="test", show_default=True, type=click.Choice(["train", "val", "test"]))
limit_option = click.option("--limit", type=click.IntRange(min=1), default=None, help="Use only the first N samples.")
batch_size_option = click.option("--batch-size", default=256, show_default=True, type=click.IntRange(min=1))
download_option = click.option(
    "--download", is_flag=True, help="Download the dataset from its official source if it is not found."
)


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
