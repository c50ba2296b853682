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
     "checksum": {"algorithm": "sha256", "state_dict": "<hex>", "metadata": {"config": "<hex>", ...}},
     "laya_eval_version": "..."}

``probe`` records the logits of a small fixed probe batch (:func:`probe_inputs`); loading
recomputes them and refuses a model whose logits differ by more than ``PROBE_TOLERANCE``
(a head rebuilt with other code, a changed referenced backbone). A by-reference backbone's
config carries what identifies it: ``hf`` records ``weights_sha256`` of its weight files and
``files_sha256`` of its config, tokenizer and processor files, ``modules`` a ``py:`` ``spec``
plus ``layer_names``, ``layer_dims``, ``pool``, ``state_sha256`` and ``source_sha256`` of its
code; rebuilding a ``modules`` backbone needs ``trust_code=True``.

Every checkpoint laya-eval writes has the probe, the checksum and these hashes, so a file
without them (edited, or written by an older version) is refused: nothing would check that the
model rebuilt from it is the model that was saved. ``allow_unverified=True`` (CLI
``--allow-unverified``) loads it anyway, with that risk named.

``checksum`` covers the tensors' names, dtypes, shapes and bytes (torch checks no CRC and
safetensors has no checksum), so a flipped bit is an error, and, in ``metadata``, the JSON of
every other key (config, probe, training, metrics), so a config edited without a new checksum
(another ``tau``, ``probe`` null) is refused naming the key. A file without the checksum, or
with one of the tensors only, is unverified (see above). Reading refuses FIFOs and devices
before opening them for reading, accepts only the uncompressed zip that
``torch.save`` writes, and validates everything against
:mod:`laya_eval.loading.schema` before a module is built.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import nn

from laya_eval.errors import CheckpointError, LayaEvalError
from laya_eval.loading.checkpoint_files import (
    MAX_CHECKPOINT_TENSORS,
    MAX_SAFETENSORS_HEADER,
    SAFETENSORS_KEY,
    not_a_checkpoint,
    read_payload,
)
from laya_eval.loading.probe import PROBE_TOLERANCE, check_probe, probe_inputs, probe_record, unverified_parts
from laya_eval.loading.references import build_backbone, source_hashes
from laya_eval.loading.schema import STORED_BY_REFERENCE, check_checksum, describe, metadata_sha256, validate_payload
from laya_eval.loading.weights_fit import check_state_shapes
from laya_eval.models.layered import LayeredModel, ModelInfo
from laya_eval.output.files import state_dict_sha256

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "MAX_CHECKPOINT_TENSORS",
    "MAX_SAFETENSORS_HEADER",
    "PROBE_TOLERANCE",
    "check_checkpoint_path",
    "check_probe",
    "load_checkpoint",
    "probe_inputs",
    "probe_record",
    "read_checkpoint",
    "save_checkpoint",
    "unverified_parts",
]

FORMAT = "laya-eval-checkpoint"
FORMAT_VERSION = 1
#: ``laya_eval.mixers.reference.CHECKPOINT_FORMAT`` (that room imports this one): named in the refusal of a mixer
#: model file given where a checkpoint is expected.
MIXER_MODEL_FORMAT = "laya-eval-depth-mixer-model"


def _payload(model: LayeredModel) -> dict[str, Any]:
    from laya_eval.version import __version__

    info = model.info
    state = model.state_dict()
    if getattr(model.backbone, "stored_by_reference", False):
        state = {k: v for k, v in state.items() if not k.startswith("backbone.")}
    # clone: a contiguous tensor would otherwise share (and save) the storage of a larger parameter
    tensors = {k: v.detach().cpu().contiguous().clone() for k, v in state.items()}
    backbone = model.backbone.config()
    if backbone["name"] == "modules" and not backbone["kwargs"].get("source_sha256"):  # built by hand with a spec
        try:
            spec = backbone["kwargs"].get("resolved_spec") or backbone["kwargs"]["spec"]
            backbone["kwargs"]["source_sha256"] = source_hashes(spec[3:])
        except LayaEvalError:
            pass  # not importable from here: the checkpoint loads only with allow_unverified
    payload = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "laya_eval_version": __version__,
        "config": {
            "backbone": backbone,
            "head": model.head.config(),
            "num_classes": info.num_classes,
            "class_names": list(info.class_names),
            "input_shape": None if info.input_shape is None else list(info.input_shape),
            "dataset": info.dataset,
            "preprocessing": dict(info.preprocessing),
        },
        "state_dict": tensors,
        "training": dict(info.training),
        "metrics": dict(info.metrics),
        "probe": probe_record(model),
    }
    # through JSON first: the digests are of what a reader gets back (tuples as lists), in .pt and .safetensors
    payload.update(json.loads(json.dumps({k: v for k, v in payload.items() if k != "state_dict"})))
    payload["checksum"] = {
        "algorithm": "sha256",
        "state_dict": state_dict_sha256(tensors),
        "metadata": metadata_sha256(payload),
    }
    return payload


def check_checkpoint_path(path: str | os.PathLike) -> Path:
    """Check, before any work, that a checkpoint can be written to ``path``.

    Raises
    ------
    CheckpointError
        An empty name, an existing folder, a parent that is a file, or a folder that cannot be written.
    """
    if not str(path):
        raise CheckpointError("the checkpoint path is empty; pass a file name such as ckpt.pt.")
    path = Path(path)
    if path.is_dir():
        raise CheckpointError(f"cannot write the checkpoint to '{path}': it is a folder; pass a file name.")
    if path.exists() and not path.is_file():  # renaming over /dev/full would replace the device itself
        raise CheckpointError(f"cannot write the checkpoint to '{path}': it exists and is not a regular file.")
    parent = next((p for p in (path.parent, *path.parent.parents) if p.exists()), Path("."))
    if not parent.is_dir():
        raise CheckpointError(f"cannot write the checkpoint to '{path}': '{parent}' is a file, not a folder.")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise CheckpointError(f"cannot write the checkpoint to '{path}': folder '{parent}' is not writable.")
    if len(path.name.encode()) > 200:
        raise CheckpointError(
            f"cannot write the checkpoint: the file name is {len(path.name.encode())} bytes long; use at most 200."
        )
    return path


def save_checkpoint(model: LayeredModel, path: str | os.PathLike) -> Path:
    """Write ``model`` to ``path`` (``.pt``, or ``.safetensors`` by suffix).

    The file is written under a temporary name and renamed, so an interrupted
    save never leaves a file that looks complete.

    Returns
    -------
    Path
        The written path.
    """
    path = check_checkpoint_path(path)
    payload = _payload(model)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
    except OSError as exc:
        raise CheckpointError(f"cannot write the checkpoint to '{path}': {exc.strerror or exc}.") from None
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import save_file

            state = payload.pop("state_dict")
            save_file(state, tmp, metadata={SAFETENSORS_KEY: json.dumps(payload, sort_keys=True)})
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
    except OSError as exc:  # a full disk, a quota, a vanished folder: nothing half-written stays
        raise CheckpointError(f"cannot write the checkpoint to '{path}': {exc.strerror or exc}.") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def read_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Read and validate a checkpoint's payload without building the model.

    Everything is checked against :mod:`laya_eval.loading.schema` (types, names,
    sizes, the stored weights against the config, the content checksum when the
    file has one) before a module is built.

    Raises
    ------
    CheckpointError
        If the file is missing, unreadable, unsafe, corrupt or not a laya-eval checkpoint.
    """
    path = Path(path)
    payload, size = read_payload(path)
    if isinstance(payload, dict) and payload.get("format") == MIXER_MODEL_FORMAT:
        raise CheckpointError(
            f"'{path}' is a depth-mixer model file, not a layer-attribution checkpoint: audit its "
            "mixers with `laya-eval mixers`."
        )
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise not_a_checkpoint(path, f"no format '{FORMAT}'")
    version = payload.get("format_version")
    if version != FORMAT_VERSION:
        raise CheckpointError(
            f"'{path}' has checkpoint format version {describe(version)}; this laya-eval reads version "
            f"{FORMAT_VERSION}."
        )
    missing = {"config", "state_dict"} - set(payload)
    if missing:
        raise CheckpointError(f"'{path}' lacks {sorted(missing)}; the file is incomplete.")
    validate_payload(payload, f"'{path}'", size)
    if payload["config"]["backbone"]["name"] not in STORED_BY_REFERENCE:
        check_state_shapes(payload["config"], payload["state_dict"], f"'{path}'")
    check_checksum(payload, f"'{path}'")
    return payload


def load_checkpoint(
    path: str | os.PathLike,
    map_location: str | torch.device = "cpu",
    *,
    trust_code: bool = False,
    download: bool = False,
    allow_unverified: bool = False,
    feature_cache: bool = False,
    cache_dir: str | os.PathLike | None = None,
) -> LayeredModel:
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
    allow_unverified : bool
        Load a checkpoint without the probe, checksum or reference hashes laya-eval writes (CLI
        ``--allow-unverified``): nothing then checks that the rebuilt model is the saved one.
    feature_cache : bool
        A frozen Hugging Face backbone stored by reference is loaded on first use, and the probe check reads the
        probe batch's pooled states through the feature cache (``cache_dir``; its key holds the weight and
        tokenizer file hashes and the library versions): a run whose states are all cached never loads the
        encoder. The check is the same: the head on those states must give the recorded logits.
    cache_dir : path, optional
        The feature cache folder (default: :func:`laya_eval.loading.feature_cache.cache_root`).

    Examples
    --------
    >>> model = load_checkpoint("ckpt.pt")  # doctest: +SKIP
    >>> logits = model(x)                   # doctest: +SKIP
    """
    payload = read_checkpoint(path)
    cfg, state = payload["config"], payload["state_dict"]
    source = f"'{path}'"
    backbone = None
    if cfg["backbone"]["name"] in STORED_BY_REFERENCE:  # hf (weights hashed) or py: modules (--trust-code)
        try:
            backbone = build_backbone(cfg["backbone"], trust_code=trust_code, download=download, lazy=feature_cache)
        except CheckpointError as exc:
            raise CheckpointError(f"{source}: {exc}") from None
        except LayaEvalError as exc:
            raise CheckpointError(f"{source}: cannot rebuild the model: {exc}") from None
    # Built on the meta device and checked against what is stored, then given exactly the stored shapes.
    meta = check_state_shapes(cfg, state, source, backbone)
    info = ModelInfo(
        num_classes=int(cfg["num_classes"]),
        class_names=tuple(cfg.get("class_names") or ()),
        input_shape=None if cfg.get("input_shape") is None else tuple(cfg["input_shape"]),
        dataset=cfg.get("dataset"),
        preprocessing=dict(cfg.get("preprocessing") or {}),
        training=dict(payload.get("training") or {}),
        metrics=dict(payload.get("metrics") or {}),
    )
    head = _allocate(meta.head)
    model = LayeredModel(backbone if backbone is not None else _allocate(meta.backbone), head, info)
    result = model.load_state_dict(state, strict=False)
    missing = [k for k in result.missing_keys if not (backbone is not None and k.startswith("backbone."))]
    if missing or result.unexpected_keys:  # check_state_shapes makes this unreachable; kept as a guard
        raise CheckpointError(
            f"{source}: weights do not fit the config (missing {missing[:3]}, unexpected {result.unexpected_keys[:3]})."
        )
    model.eval()
    missing = unverified_parts(payload, model)
    if missing and not allow_unverified:
        raise CheckpointError(
            f"{source} lacks {', '.join(missing)}: nothing can check that the model rebuilt from it is the one that "
            "was saved (an edited file, or one written by an older laya-eval). Re-save it with this version, or pass "
            "--allow-unverified (allow_unverified=True) to use it unverified."
        )
    check_probe(model, payload.get("probe"), path, feature_cache=feature_cache, cache_dir=cache_dir)
    return model.to(map_location)


def _allocate(module: nn.Module) -> nn.Module:
    """``module.to_empty(device="cpu")`` for a module built on the meta device: uninitialised CPU storage of the
    same sizes, strides and dtypes. ``to_empty`` goes through ``torch.empty_like``, whose meta-to-CPU route
    imports torch's symbolic-shape machinery on first use (about 0.4 s of every command's start-up)."""
    return module._apply(lambda t: torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device="cpu"))
