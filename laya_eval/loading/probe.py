"""The probe-logit guard: a checkpoint records its model's logits on a small fixed probe batch.

Loading recomputes them and refuses a model whose logits differ by more than
:data:`PROBE_TOLERANCE` (a head rebuilt with other code, a changed referenced backbone)
instead of silently giving other numbers. Checkpoints written before the guard have no
record and load without the check.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from laya_eval.errors import CheckpointError
from laya_eval.models.layered import LayeredModel

__all__ = ["PROBE_TOLERANCE", "check_probe", "probe_inputs", "probe_record"]

PROBE_TOLERANCE = 1e-4
_PROBE_N = 4
_PROBE_TEXTS = ("a quiet, moving film", "dull and far too long", "the cast is great but the plot is thin",
                "I would not watch it again")


def probe_inputs(model: LayeredModel, record: dict[str, Any] | None = None) -> Any:
    """The fixed probe batch: ``_PROBE_N`` seeded N(0, 1) inputs of the model's input shape, or fixed
    sentences for text models; ``None`` when the model declares no input shape and reads no text."""
    if record is not None and "texts" in record:
        return [str(t) for t in list(record["texts"])[:_PROBE_N]]
    shape = model.info.input_shape
    if shape is None:
        return list(_PROBE_TEXTS) if getattr(model.backbone, "tokenizer", None) is not None else None
    if any(int(s) < 1 for s in shape):
        return None
    gen = torch.Generator().manual_seed(0)
    return torch.randn((_PROBE_N, *shape), generator=gen)


@torch.no_grad()
def _probe_logits(model: LayeredModel, inputs: Any) -> torch.Tensor:
    device = next(model.parameters()).device
    x = inputs.to(device) if isinstance(inputs, torch.Tensor) else inputs
    was_training = model.training
    try:
        return model.eval()(x).detach().double().cpu()
    finally:
        model.train(was_training)


def probe_record(model: LayeredModel) -> dict[str, Any] | None:
    """``{"kind", "n" | "texts", "logits"}``: the model's logits on :func:`probe_inputs` (JSON-serialisable)."""
    inputs = probe_inputs(model)
    if inputs is None:
        return None
    record: dict[str, Any] = {"kind": "texts", "texts": list(inputs)} if isinstance(inputs, list) else {
        "kind": "randn-seed0", "n": int(inputs.shape[0])}
    record["logits"] = _probe_logits(model, inputs).tolist()
    return record


def check_probe(model: LayeredModel, record: Any, path: str | os.PathLike) -> None:
    """Recompute the probe logits and raise CheckpointError if they differ from ``record``.

    A checkpoint without a probe record (written before the guard existed) is not checked.
    """
    if record is None:
        return
    try:
        expected = torch.tensor(record["logits"], dtype=torch.float64)
    except (KeyError, TypeError, ValueError):
        raise CheckpointError(f"'{path}': the probe record is malformed; re-save the checkpoint.") from None
    inputs = probe_inputs(model, record)
    got = None if inputs is None else _probe_logits(model, inputs)
    if got is None or got.shape != expected.shape:
        raise CheckpointError(f"'{path}': the probe logits have shape {tuple(expected.shape)}; the rebuilt model "
                              f"gives {None if got is None else tuple(got.shape)}.")
    diff = float((got - expected).abs().max()) if got.numel() else 0.0
    if not diff <= PROBE_TOLERANCE:
        raise CheckpointError(
            f"'{path}': the rebuilt model gives other logits on the probe batch (max difference {diff:.3g} > "
            f"{PROBE_TOLERANCE:g}): the head's code or the referenced backbone changed since it was saved, or a "
            "py: factory does not return the same network on every call (it must load its weights)."
        )
