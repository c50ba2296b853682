"""``laya-eval info``: what a checkpoint holds."""

from __future__ import annotations

import unicodedata

import click


def printable(text: str) -> str:
    """``text`` with control and format characters (terminal escape sequences, bidi overrides) escaped."""
    return "".join(
        ch.encode("unicode_escape").decode("ascii")
        if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp")
        else ch
        for ch in text
    )


def _format(value) -> str:
    if isinstance(value, float):
        return f"{value:.4f}"
    if isinstance(value, (list, tuple)):
        return ", ".join(_format(v) for v in value)
    return str(value)


@click.command()
@click.argument("checkpoint", type=click.Path(dir_okay=False))
def info(checkpoint):
    """Print a checkpoint's config and stored metrics (without building the model or importing its code)."""
    from laya_eval.loading.describe import describe_checkpoint

    rows = describe_checkpoint(checkpoint)
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        click.echo(printable(f"{key:<{width}}  {_format(value)}"))
