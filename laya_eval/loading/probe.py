"""The probe-logit guard: a checkpoint records its model's logits on a small fixed probe batch.

Loading recomputes them and refuses a model whose logits differ by more than
:data:`PROBE_TOLERANCE` (a head rebuilt with other code, a changed referenced backbone)
instead of silently giving other numbers.

Image-like models are probed with seeded N(0, 1) inputs. Text models are probed with four fixed
sentences and with texts built from the tokenizer's own vocabulary when the checkpoint is
written: up to :data:`PROBE_VOCAB_IDS` token ids spread evenly over the vocabulary (all of a
vocabulary that small), decoded in runs of :data:`PROBE_IDS_PER_TEXT`, so a tokenizer whose
vocabulary changed (two words swapped, an entry edited) gives other token ids on the stored
texts and so other logits. The texts are stored in the record: the check re-tokenizes them
with the tokenizer it finds. A checkpoint without a record is refused by
:func:`laya_eval.loading.checkpoints.load_checkpoint` unless ``allow_unverified`` is given.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from laya_eval.errors import CheckpointError
from laya_eval.loading.feature_cache import backbone_features, caches_features
from laya_eval.models.layered import LayeredModel

__all__ = ["PROBE_TOLERANCE", "check_probe", "probe_inputs", "probe_record", "unverified_parts"]

PROBE_TOLERANCE = 1e-4
_PROBE_N = 4
#: At most this many probe inputs (the schema's bound on the stored logits).
PROBE_MAX = 64
#: Token ids of the vocabulary a text probe covers at most, and per text: 16 texts of 32 ids, about a
#: second of a MiniLM-sized encoder on one CPU thread at every load (the file hashes of the reference are
#: the complete check of the tokenizer; the probe is the independent one).
PROBE_IDS_PER_TEXT = 32
PROBE_VOCAB_IDS = 512
_PROBE_TEXTS = (
    "a quiet, moving film",
    "dull and far too long",
    "the cast is great but the plot is thin",
    "I would not watch it again",
)


def probe_inputs(model: LayeredModel, record: dict[str, Any] | None = None) -> Any:
    """The fixed probe batch: ``_PROBE_N`` seeded N(0, 1) inputs of the model's input shape, or fixed
    sentences for text models; ``None`` when the model declares no input shape and reads no text."""
    if record is not None and "texts" in record:
        return [str(t) for t in list(record["texts"])[:PROBE_MAX]]
    shape = model.info.input_shape
    if shape is None:
        tokenizer = getattr(model.backbone, "tokenizer", None)
        return None if tokenizer is None else [*_PROBE_TEXTS, *vocabulary_texts(tokenizer)]
    if any(int(s) < 1 for s in shape):
        return None
    gen = torch.Generator().manual_seed(0)
    return torch.randn((_PROBE_N, *shape), generator=gen)


def vocabulary_texts(tokenizer: Any) -> list[str]:
    """Deterministic texts over the tokenizer's vocabulary (see the module docstring); [] when the tokenizer
    exposes no vocabulary."""
    try:
        vocab = tokenizer.get_vocab()
        special = set(getattr(tokenizer, "all_special_ids", ()) or ())
        ids = sorted({int(i) for i in vocab.values()} - special)
    except (AttributeError, TypeError, ValueError, NotImplementedError):
        return []
    if len(ids) > PROBE_VOCAB_IDS:  # evenly spread, first and last id included
        ids = [ids[(k * (len(ids) - 1)) // (PROBE_VOCAB_IDS - 1)] for k in range(PROBE_VOCAB_IDS)]
    texts = []
    for start in range(0, len(ids), PROBE_IDS_PER_TEXT):
        text = tokenizer.decode(ids[start : start + PROBE_IDS_PER_TEXT], skip_special_tokens=True)
        if text.strip():
            texts.append(text)
    return texts


@torch.no_grad()
def _probe_logits(
    model: LayeredModel, inputs: Any, *, cached: bool = False, cache_dir: str | os.PathLike | None = None
) -> torch.Tensor:
    """The model's logits on the probe batch, in eval mode; ``cached``: the head on the batch's pooled states read
    through the feature cache (computed by the backbone and stored on a miss)."""
    device = next(model.parameters()).device
    was_training = model.training
    try:
        model.eval()
        if cached:
            features = backbone_features(model.backbone, _ProbeBatch(inputs), device=str(device), cache_dir=cache_dir)
            logits = model.head([h.to(device) for h in features.hidden])
        else:
            logits = model(inputs.to(device) if isinstance(inputs, torch.Tensor) else inputs)
        return logits.detach().double().cpu()
    finally:
        model.train(was_training)


def probe_record(model: LayeredModel) -> dict[str, Any] | None:
    """``{"kind", "n" | "texts", "logits"}``: the model's logits on :func:`probe_inputs` (JSON-serialisable)."""
    inputs = probe_inputs(model)
    if inputs is None:
        return None
    record: dict[str, Any] = (
        {"kind": "texts", "texts": list(inputs)}
        if isinstance(inputs, list)
        else {"kind": "randn-seed0", "n": int(inputs.shape[0])}
    )
    record["logits"] = _probe_logits(model, inputs).tolist()
    return record


class _ProbeBatch:
    """The probe inputs as the feature cache reads a dataset: inputs, labels (zeros), a name, a split."""

    name = split = "probe"

    def __init__(self, x: Any) -> None:
        self.x, self.y, self.preprocessing = x, torch.zeros(len(x), dtype=torch.long), {}

    def __len__(self) -> int:
        return len(self.y)

    def subset(self, index: Any) -> _ProbeBatch:
        if isinstance(self.x, torch.Tensor) or isinstance(index, slice):
            return _ProbeBatch(self.x[index])
        return _ProbeBatch([self.x[int(i)] for i in index])


def check_probe(
    model: LayeredModel,
    record: Any,
    path: str | os.PathLike,
    *,
    feature_cache: bool = False,
    cache_dir: str | os.PathLike | None = None,
) -> None:
    """Recompute the probe logits and raise CheckpointError if they differ from ``record``.

    ``record`` None checks nothing (whether that is allowed is the caller's decision). ``feature_cache``: a frozen
    backbone stored by reference with vector states reads the probe batch's pooled states through the feature
    cache (``cache_dir``), so a cached probe needs no backbone pass.
    """
    if record is None:
        return
    try:
        expected = torch.tensor(record["logits"], dtype=torch.float64)
    except (KeyError, TypeError, ValueError):
        raise CheckpointError(f"'{path}': the probe record is malformed; re-save the checkpoint.") from None
    inputs = probe_inputs(model, record)
    if inputs is None:
        got = None
    else:
        got = _probe_logits(
            model,
            inputs,
            cached=feature_cache and caches_features(model.backbone, vector_states=True),
            cache_dir=cache_dir,
        )
    if got is None or got.shape != expected.shape:
        raise CheckpointError(
            f"'{path}': the probe logits have shape {tuple(expected.shape)}; the rebuilt model "
            f"gives {None if got is None else tuple(got.shape)}."
        )
    diff = float((got - expected).abs().max()) if got.numel() else 0.0
    if not diff <= PROBE_TOLERANCE:
        raise CheckpointError(
            f"'{path}': the rebuilt model gives other logits on the probe batch (max difference {diff:.3g} > "
            f"{PROBE_TOLERANCE:g}): the head's code or the referenced backbone changed since it was saved, or a "
            "py: factory does not return the same network on every call (it must load its weights)."
        )


def unverified_parts(payload: dict[str, Any], model: LayeredModel) -> list[str]:
    """What a checkpoint lacks of the identity laya-eval records (probe, checksum, reference hashes)."""
    missing = []
    if payload.get("probe") is None and probe_inputs(model) is not None:
        missing.append("probe")
    if payload.get("checksum") is None:
        missing.append("checksum")
    elif "metadata" not in payload["checksum"]:
        missing.append("checksum.metadata (of the config)")
    backbone = payload["config"]["backbone"]
    kwargs = backbone.get("kwargs") or {}
    needed = {"hf": ("weights_sha256", "files_sha256"), "modules": ("state_sha256", "source_sha256")}
    missing += [f"config.backbone.kwargs.{k}" for k in needed.get(backbone["name"], ()) if not kwargs.get(k)]
    return missing
