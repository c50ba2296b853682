"""What a checkpoint holds, read without building the model (``laya-eval info``)."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["describe_checkpoint"]


def describe_checkpoint(path: str | os.PathLike) -> list[tuple[str, Any]]:
    """``(field, value)`` rows: file, sha256, format, dataset, classes, backbone (or its reference), head,
    preprocessing, stored parameter count, probe guard, training options and test metrics.

    Nothing is imported or built: a ``py:`` backbone reference is only named.
    """
    from laya_eval.loading.checkpoints import read_checkpoint
    from laya_eval.output.files import file_sha256

    payload = read_checkpoint(path)
    cfg = payload["config"]
    backbone = cfg["backbone"]
    rows: list[tuple[str, Any]] = [
        ("checkpoint", str(path)),
        ("sha256", file_sha256(path)),
        (
            "format",
            f"{payload['format']} v{payload['format_version']} (laya-eval {payload.get('laya_eval_version', '?')})",
        ),
        ("dataset", cfg.get("dataset")),
        ("classes", f"{cfg['num_classes']}: {', '.join(map(str, cfg.get('class_names') or []))}"),
        ("input shape", cfg.get("input_shape") or "text"),
        ("backbone", f"{backbone['name']} {_short(backbone.get('kwargs', {}))}"),
        ("head", f"{cfg['head']['name']} {cfg['head'].get('kwargs', {})}"),
        ("preprocessing", cfg.get("preprocessing")),
        ("parameters", sum(t.numel() for t in payload["state_dict"].values())),
    ]
    kwargs = backbone.get("kwargs", {})
    if backbone["name"] == "modules":
        rows.append(("backbone code", f"{kwargs.get('spec')} (loading needs --trust-code)"))
    probe = payload.get("probe")
    rows.append(
        (
            "probe guard",
            "none (written before the guard)"
            if not probe
            else f"{len(probe.get('logits', []))} probe inputs ({probe.get('kind')}), tolerance 1e-4",
        )
    )
    training = {k: v for k, v in (payload.get("training") or {}).items() if k != "history"}
    rows += [(f"training.{k}", v) for k, v in training.items()]
    rows += [(f"metrics.{k}", v) for k, v in (payload.get("metrics") or {}).items()]
    return rows


def _short(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Hashes cut to 12 hex digits for display."""
    out = dict(kwargs)
    if isinstance(out.get("weights_sha256"), dict):
        out["weights_sha256"] = {k: f"{v[:12]}…" for k, v in out["weights_sha256"].items()}
    if isinstance(out.get("state_sha256"), str):
        out["state_sha256"] = out["state_sha256"][:12] + "…"
    return out
