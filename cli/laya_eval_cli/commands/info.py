"""``laya-eval info``: what a checkpoint holds."""

from __future__ import annotations

import unicodedata

import click


def printable(text: str) -> str:
    """``text`` with control and format characters (terminal escape sequences, bidi overrides) escaped."""
    return "".join(
        ch.encode("unicode_escape").decode("ascii") if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp")
        else ch for ch in text)


def _format(value) -> str:
    if isinstance(value, float):
        return f"{value:.4f}"
    if isinstance(value, (list, tuple)):
        return ", ".join(_format(v) for v in value)
    return str(value)


@click.command()
@click.argument("checkpoint", type=click.Path(dir_okay=False))
def info(checkpoint):
    """Print a checkpoint's config and stored metrics (without building the model)."""
    from laya_eval.checkpoint import file_sha256, read_checkpoint

    payload = read_checkpoint(checkpoint)
    cfg = payload["config"]
    rows = [
        ("checkpoint", checkpoint),
        ("sha256", file_sha256(checkpoint)),
        ("format", f"{payload['format']} v{payload['format_version']} (laya-eval {payload.get('laya_eval_version', '?')})"),
        ("dataset", cfg.get("dataset")),
        ("classes", f"{cfg['num_classes']}: {_format(cfg.get('class_names') or [])}"),
        ("input shape", cfg.get("input_shape") or "text"),
        ("backbone", f"{cfg['backbone']['name']} {cfg['backbone'].get('kwargs', {})}"),
        ("head", f"{cfg['head']['name']} {cfg['head'].get('kwargs', {})}"),
        ("preprocessing", cfg.get("preprocessing")),
        ("parameters", sum(t.numel() for t in payload["state_dict"].values())),
    ]
    training = {k: v for k, v in (payload.get("training") or {}).items() if k != "history"}
    rows += [(f"training.{k}", v) for k, v in training.items()]
    rows += [(f"metrics.{k}", v) for k, v in (payload.get("metrics") or {}).items()]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        click.echo(printable(f"{key:<{width}}  {_format(value)}"))
