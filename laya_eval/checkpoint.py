"""Saving and safely loading laya-eval checkpoints.

A checkpoint is data, never code: ``.pt`` files are read with
``torch.load(weights_only=True)`` and ``.safetensors`` files with safetensors,
whose metadata carries the JSON config. A frozen pretrained backbone
(``backbone.stored_by_reference``) is saved as its reference, not its weights.

The ``.pt`` payload is a dict::

    {"format": "laya-eval-checkpoint", "format_version": 1,
     "config": {"backbone": {"name", "kwargs"}, "head": {"name", "kwargs"},
                "num_classes", "class_names", "input_shape", "dataset",
                "preprocessing"},
     "state_dict": {...}, "training": {...}, "metrics": {...},
     "probe": {"kind", "n" | "texts", "logits"},        # optional (checkpoints since BYOM)
     "laya_eval_version": "..."}

``probe`` records the logits of a small fixed probe batch (:func:`probe_inputs`); loading
recomputes them and refuses a model whose logits differ by more than ``PROBE_TOLERANCE``
(a head rebuilt with other code, a changed referenced backbone). A by-reference backbone's
config carries what identifies it: ``hf`` records ``weights_sha256`` of its weight files,
``modules`` a ``py:`` ``spec`` plus ``layer_names``, ``layer_dims``, ``pool`` and
``state_sha256``; rebuilding a ``modules`` backbone needs ``trust_code=True``.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import tempfile
from pathlib import Path
from typing import Any

import torch

from laya_eval.errors import CheckpointError, LayaEvalError
from laya_eval.model import LayeredModel, ModelInfo

__all__ = ["FORMAT", "FORMAT_VERSION", "PROBE_TOLERANCE", "check_probe", "file_sha256", "load_checkpoint",
           "probe_inputs", "probe_record", "read_checkpoint", "save_checkpoint"]

FORMAT = "laya-eval-checkpoint"
FORMAT_VERSION = 1
_SAFETENSORS_KEY = "laya_eval"
PROBE_TOLERANCE = 1e-4
_PROBE_N = 4
_PROBE_TEXTS = ("a quiet, moving film", "dull and far too long", "the cast is great but the plot is thin",
                "I would not watch it again")


def file_sha256(path: str | os.PathLike) -> str:
    """Hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _payload(model: LayeredModel) -> dict[str, Any]:
    from laya_eval import __version__

    info = model.info
    state = model.state_dict()
    if getattr(model.backbone, "stored_by_reference", False):
        state = {k: v for k, v in state.items() if not k.startswith("backbone.")}
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "laya_eval_version": __version__,
        "config": {
            "backbone": model.backbone.config(),
            "head": model.head.config(),
            "num_classes": info.num_classes,
            "class_names": list(info.class_names),
            "input_shape": None if info.input_shape is None else list(info.input_shape),
            "dataset": info.dataset,
            "preprocessing": dict(info.preprocessing),
        },
        "state_dict": {k: v.detach().cpu().contiguous() for k, v in state.items()},
        "training": dict(info.training),
        "metrics": dict(info.metrics),
        "probe": probe_record(model),
    }


def save_checkpoint(model: LayeredModel, path: str | os.PathLike) -> Path:
    """Write ``model`` to ``path`` (``.pt``, or ``.safetensors`` by suffix).

    The file is written under a temporary name and renamed, so an interrupted
    save never leaves a file that looks complete.

    Returns
    -------
    Path
        The written path.
    """
    path = Path(path)
    payload = _payload(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import save_file

            state = payload.pop("state_dict")
            save_file(state, tmp, metadata={_SAFETENSORS_KEY: json.dumps(payload, sort_keys=True)})
        else:
            # Through a buffer: torch.save names the archive after a path's stem,
            # and the temporary name would make the bytes differ run to run.
            buffer = io.BytesIO()
            torch.save(payload, buffer)
            Path(tmp).write_bytes(buffer.getvalue())
        # mkstemp creates the file private (0600); give it the permissions a plain open() would.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def _read_pt(path: Path) -> dict[str, Any]:
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(
            f"refused to load '{path}': it holds Python objects beyond weights, which could run code "
            f"when unpickled ({first}). Re-save it with laya_eval.save_checkpoint."
        ) from None
    except Exception as exc:  # noqa: BLE001 - any failure to parse untrusted bytes means 'unreadable'
        raise CheckpointError(
            f"'{path}' is not a readable checkpoint (truncated or not a PyTorch file: {type(exc).__name__})."
        ) from None
    return payload


def _read_safetensors(path: Path) -> dict[str, Any]:
    from safetensors import SafetensorError, safe_open
    from safetensors.torch import load_file

    try:
        with safe_open(str(path), framework="pt") as fh:
            meta = fh.metadata() or {}
        state = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f"'{path}' is not a readable safetensors file ({exc}).") from None
    if _SAFETENSORS_KEY not in meta:
        raise CheckpointError(
            f"'{path}' has no laya-eval config in its safetensors metadata (key '{_SAFETENSORS_KEY}')."
        )
    try:
        payload = json.loads(meta[_SAFETENSORS_KEY])
    except json.JSONDecodeError:
        raise CheckpointError(f"'{path}' has a corrupt laya-eval config in its metadata.") from None
    payload["state_dict"] = state
    return payload


def read_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Read and validate a checkpoint's payload without building the model.

    Raises
    ------
    CheckpointError
        If the file is missing, unreadable, unsafe or not a laya-eval checkpoint.
    """
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"checkpoint '{path}' does not exist.")
    if path.is_dir():
        raise CheckpointError(f"checkpoint '{path}' is a directory, not a file.")
    payload = _read_safetensors(path) if path.suffix == ".safetensors" else _read_pt(path)
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(
            f"'{path}' is not a laya-eval checkpoint (no format '{FORMAT}'); "
            "create one with `laya-eval train` or laya_eval.save_checkpoint."
        )
    version = payload.get("format_version")
    if version != FORMAT_VERSION:
        raise CheckpointError(
            f"'{path}' has checkpoint format version {version}; this laya-eval reads version {FORMAT_VERSION}."
        )
    missing = {"config", "state_dict"} - set(payload)
    if missing:
        raise CheckpointError(f"'{path}' lacks {sorted(missing)}; the file is incomplete.")
    return payload


def load_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu", *,
                    trust_code: bool = False, download: bool = False) -> LayeredModel:
    """Load a checkpoint into a :class:`LayeredModel` in eval mode.

    Parameters
    ----------
    path : str or PathLike
        A ``.pt`` or ``.safetensors`` file written by :func:`save_checkpoint`.
    map_location : str or torch.device
    trust_code : bool
        Allow importing a backbone stored as a ``py:`` reference (CLI ``--trust-code``).
    download : bool
        Allow a Hugging Face backbone reference to be downloaded.

    Examples
    --------
    >>> model = load_checkpoint("ckpt.pt")  # doctest: +SKIP
    >>> logits = model(x)                   # doctest: +SKIP
    """
    from laya_eval.heads import make_head
    from laya_eval.specs import build_backbone

    payload = read_checkpoint(path)
    cfg = payload["config"]
    try:
        backbone = build_backbone(cfg["backbone"], trust_code=trust_code, download=download)
        head = make_head(cfg["head"]["name"], backbone.layer_dims, cfg["num_classes"], **cfg["head"].get("kwargs", {}))
    except CheckpointError as exc:
        raise CheckpointError(f"'{path}': {exc}") from None
    except LayaEvalError as exc:
        raise CheckpointError(f"'{path}': cannot rebuild the model: {exc}") from None
    except (KeyError, TypeError) as exc:
        raise CheckpointError(f"'{path}': the config is malformed ({type(exc).__name__}: {exc}).") from None
    info = ModelInfo(
        num_classes=int(cfg["num_classes"]),
        class_names=tuple(cfg.get("class_names") or ()),
        input_shape=None if cfg.get("input_shape") is None else tuple(cfg["input_shape"]),
        dataset=cfg.get("dataset"),
        preprocessing=dict(cfg.get("preprocessing") or {}),
        training=dict(payload.get("training") or {}),
        metrics=dict(payload.get("metrics") or {}),
    )
    model = LayeredModel(backbone, head, info)
    by_reference = getattr(backbone, "stored_by_reference", False)
    result = model.load_state_dict(payload["state_dict"], strict=False)
    missing = [k for k in result.missing_keys if not (by_reference and k.startswith("backbone."))]
    if missing or result.unexpected_keys:
        raise CheckpointError(
            f"'{path}': weights do not fit the config (missing {missing[:3]}, unexpected {result.unexpected_keys[:3]})."
        )
    model.eval()
    check_probe(model, payload.get("probe"), path)
    return model.to(map_location)


# --------------------------------------------------------------------------- probe-logit guard
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
