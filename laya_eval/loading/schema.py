"""The checkpoint schema: every key of a payload checked before anything is built.

A checkpoint is untrusted data. :func:`validate_payload` checks a payload read by
:func:`laya_eval.loading.checkpoints.read_checkpoint` against one table of keys per section
(payload, config, the backbone's and the head's kwargs): types, required keys,
allowed names and bounded sizes. It then checks the stored tensors (dense, of a
plain dtype, together no larger than the file) and that the weights a config
declares are exactly the weights stored, by building the model on PyTorch's
``meta`` device (no memory). :func:`laya_eval.loading.checkpoints.load_checkpoint` then
materialises exactly those shapes, so what a checkpoint can make laya-eval
allocate is bounded by the checkpoint's own size plus a constant (the Python
modules of at most :data:`MAX_LAYERS` layers; activations scale with the stored
widths and the batch size).

To extend the schema (e.g. a new backbone or a key stored by reference), add a
row to the table of its section; each row is a :class:`Key`.

Every violation raises :class:`~laya_eval.errors.CheckpointError` with one line
naming the key, what was expected and what arrived.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from laya_eval.catalog import HF_POOLS
from laya_eval.checks import MAX_LAYERS, MAX_SIZE, is_int
from laya_eval.errors import CheckpointError
from laya_eval.output.files import json_sha256, state_dict_sha256

__all__ = [
    "BACKBONE_KWARGS",
    "CONFIG_KEYS",
    "HEAD_KWARGS",
    "MAX_CLASSES",
    "MAX_LAYERS",
    "MAX_SIZE",
    "PAYLOAD_KEYS",
    "Key",
    "describe",
    "check_checksum",
    "metadata_sha256",
    "validate_payload",
]

MAX_CLASSES = 1 << 16
MAX_STRING = 4096  # characters of any string stored in a config
MAX_JSON_DEPTH = 8  # nesting of the free-form training / metrics / preprocessing records
_TENSOR_DTYPES = {torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int64}


@dataclass(frozen=True)
class Key:
    """One row of a schema table: a predicate, its wording, whether the key is required."""

    check: Callable[[Any], bool]
    expected: str
    required: bool = False


# --------------------------------------------------------------------------- predicates
# Predicates, not checks: a file's keys are reported together as ``path: expected ...; got ...`` (a
# CheckpointError naming the file), so they answer yes/no and share only the int rule with laya_eval.checks.
def _is_int(value: Any, low: int, high: int) -> bool:
    return is_int(value) and low <= value <= high


def _size(value: Any) -> bool:
    return _is_int(value, 1, MAX_SIZE)


def _sizes(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and 1 <= len(value) <= MAX_LAYERS and all(map(_size, value))


def _string(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= MAX_STRING


def _name(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= MAX_STRING


def _one_of(*choices: Any) -> Callable[[Any], bool]:
    return lambda value: isinstance(value, type(choices[0])) and value in choices


def _number(low: float, high: float) -> Callable[[Any], bool]:
    def check(value: Any) -> bool:
        return (is_int(value) or isinstance(value, float)) and math.isfinite(value) and low < value <= high

    return check


def _json_like(value: Any, depth: int = 0) -> bool:
    """Plain data only: str keys, JSON scalars, lists and dicts, nested at most MAX_JSON_DEPTH."""
    if depth > MAX_JSON_DEPTH:
        return False
    if value is None or isinstance(value, (bool, int, float)):
        return True
    if isinstance(value, str):
        return len(value) <= MAX_STRING
    if isinstance(value, (list, tuple)):
        return all(_json_like(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(_string(k) and _json_like(v, depth + 1) for k, v in value.items())
    return False


def _record(value: Any) -> bool:
    return isinstance(value, dict) and _json_like(value)


def _section(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) for k in value)


def _class_names(value: Any) -> bool:
    return (
        isinstance(value, (list, tuple))
        and len(value) <= MAX_CLASSES
        and all(isinstance(v, str) and len(v) <= 200 for v in value)
    )


def _input_shape(value: Any) -> bool:
    # -1 marks a dimension of any length (e.g. audio samples of a weighted-layer-sum model).
    return value is None or (
        isinstance(value, (list, tuple))
        and 1 <= len(value) <= 8
        and all(_size(v) or (_is_int(v, -1, -1)) for v in value)
    )


def _checksum(value: Any) -> bool:
    if not (
        isinstance(value, dict) and set(value) in ({"algorithm", "state_dict"}, {"algorithm", "state_dict", "metadata"})
    ):
        return False
    metadata = value.get("metadata", {})
    return (
        value["algorithm"] == "sha256"
        and _sha256(value["state_dict"])
        and isinstance(metadata, dict)
        and all(k in PAYLOAD_KEYS and _sha256(v) for k, v in metadata.items())
    )


def _sha256(value: Any) -> bool:
    return isinstance(value, str) and re.fullmatch(r"[0-9a-f]{64}", value) is not None


def _file_hashes(value: Any) -> bool:
    return (
        isinstance(value, dict) and len(value) <= MAX_LAYERS and all(_name(k) and _sha256(v) for k, v in value.items())
    )


def _names(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and 1 <= len(value) <= MAX_LAYERS and all(map(_name, value))


def _probe(value: Any) -> bool:
    """The probe-logit guard's record: at most 64 probe inputs, their logits as plain numbers."""
    if not _record(value) or value.get("kind") not in ("texts", "randn-seed0"):
        return False
    logits = value.get("logits")
    return (
        isinstance(logits, list)
        and len(logits) <= 64
        and all(isinstance(row, list) and len(row) <= MAX_CLASSES for row in logits)
    )


_SIZE = f"an integer in [1, {MAX_SIZE}]"
_SIZES = f"a non-empty list of at most {MAX_LAYERS} integers in [1, {MAX_SIZE}]"

# --------------------------------------------------------------------------- tables
PAYLOAD_KEYS: dict[str, Key] = {
    "format": Key(_string, "a string", required=True),
    "format_version": Key(lambda v: _is_int(v, 0, 1 << 31), "an integer", required=True),
    "laya_eval_version": Key(_string, "a string"),
    "config": Key(_section, "a dict", required=True),
    "state_dict": Key(_section, "a dict of tensors", required=True),
    "training": Key(_record, "a dict of plain values (str, numbers, lists, dicts)"),
    "metrics": Key(_record, "a dict of plain values (str, numbers, lists, dicts)"),
    "checksum": Key(
        _checksum, "{'algorithm': 'sha256', 'state_dict': 64 hex digits, 'metadata': {payload key: 64 hex digits}}"
    ),
    "probe": Key(lambda v: v is None or _probe(v), "null or {'kind', 'n' or 'texts', 'logits'} of plain values"),
}

CONFIG_KEYS: dict[str, Key] = {
    "backbone": Key(_section, "a dict {'name', 'kwargs'}", required=True),
    "head": Key(_section, "a dict {'name', 'kwargs'}", required=True),
    "num_classes": Key(lambda v: _is_int(v, 2, MAX_CLASSES), f"an integer in [2, {MAX_CLASSES}]", required=True),
    "class_names": Key(_class_names, "a list of strings (at most 200 characters each)"),
    "input_shape": Key(_input_shape, f"null (text) or a list of 1 to 8 integers in [1, {MAX_SIZE}]"),
    "dataset": Key(lambda v: v is None or _string(v), "null or a string"),
    "preprocessing": Key(lambda v: v is None or _record(v), "a dict of plain values"),
}

SPEC_KEYS: dict[str, Key] = {
    "name": Key(_name, "a registry name", required=True),
    "kwargs": Key(_section, "a dict of options"),
}

# The backbones a checkpoint may name; 'modules' wraps arbitrary code and has no config.
BACKBONE_KWARGS: dict[str, dict[str, Key]] = {
    "mlp": {
        "in_features": Key(_size, _SIZE),
        "widths": Key(_sizes, _SIZES),
        "layer_norm_eps": Key(_number(0, 1), "a number in (0, 1]"),
    },
    "cnn": {"in_channels": Key(_size, _SIZE), "channels": Key(_sizes, _SIZES)},
    "vit": {
        "image_size": Key(_size, _SIZE),
        "patch_size": Key(_size, _SIZE),
        "in_channels": Key(_size, _SIZE),
        "dim": Key(_size, _SIZE),
        "depth": Key(lambda v: _is_int(v, 1, MAX_LAYERS), f"an integer in [1, {MAX_LAYERS}]"),
        "heads": Key(_size, _SIZE),
        "mlp_ratio": Key(_number(0, 64), "a number in (0, 64]"),
    },
    "hf": {
        # A checkpoint may only name a local model; downloads need an explicit --download.
        "model": Key(lambda v: _name(v) and "\0" not in v, "a non-empty string", required=True),
        # the model as given and, resolved when it was saved, what it is rebuilt from (an absolute directory or an id)
        "resolved_model": Key(lambda v: _name(v) and "\0" not in v, "a non-empty string"),
        "max_length": Key(_size, _SIZE),
        "pooling": Key(_one_of(*HF_POOLS), "one of {" + ", ".join(repr(p) for p in sorted(HF_POOLS)) + "}"),
        "local_files_only": Key(
            lambda v: v is True, "true (a checkpoint cannot allow downloads; download the model yourself)"
        ),
        "weights_sha256": Key(_file_hashes, "a dict {weight file name: 64 hex digits}"),
        "files_sha256": Key(_file_hashes, "a dict {config or tokenizer file name: 64 hex digits}"),
        "layers": Key(lambda v: v is None or _names(v), "null or a list of hidden-state names"),
    },
    # A user's network by reference: imported only with --trust-code (laya_eval.loading.specs.build_backbone).
    "modules": {
        "spec": Key(lambda v: _name(v) and v.startswith("py:"), "a 'py:MODULE:CALLABLE' string", required=True),
        # the spec as given and, resolved when it was saved, what it is rebuilt from (a .py file's absolute path)
        "resolved_spec": Key(
            lambda v: _name(v) and v.startswith("py:") and "\0" not in v, "a 'py:MODULE:CALLABLE' string"
        ),
        "layer_names": Key(_names, "a non-empty list of submodule names", required=True),
        "layer_dims": Key(_sizes, _SIZES, required=True),
        "pool": Key(lambda v: v is None or v in ("avg", "cls", "flatten"), "null or one of {'avg', 'cls', 'flatten'}"),
        "state_sha256": Key(lambda v: v is None or _sha256(v), "null or 64 hex digits"),
        "source_sha256": Key(_file_hashes, "a dict {source label or file: 64 hex digits}"),
    },
}
STORED_BY_REFERENCE = {"hf", "modules"}

HEAD_KWARGS: dict[str, dict[str, Key]] = {
    "lastlayer": {},
    "concat": {},
    "scalarmix": {"d_star": Key(_size, _SIZE)},
    "laya": {
        "d_star": Key(_size, _SIZE),
        "tau": Key(_number(0, 1e6), "a positive finite number"),
        "scorer_hidden": Key(_size, _SIZE),
        "psi": Key(_one_of("identity", "mlp"), "one of {'identity', 'mlp'}"),
    },
}


# --------------------------------------------------------------------------- checks
def describe(value: Any, limit: int = 60) -> str:
    """A short, printable ``repr`` of an untrusted value (control characters escaped)."""
    if isinstance(value, torch.Tensor):
        return f"tensor {str(value.dtype).removeprefix('torch.')} {tuple(value.shape)}"
    if isinstance(value, (dict, list, tuple)) and len(value) > 8:
        return f"{type(value).__name__} of {len(value)} items"
    try:
        text = repr(value)
    except RecursionError:
        text = f"deeply nested {type(value).__name__}"
    text = text.encode("ascii", "backslashreplace").decode("ascii")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _check_table(section: Any, table: Mapping[str, Key], where: str, source: str) -> None:
    unknown = [k for k in section if k not in table]
    if unknown:
        raise CheckpointError(
            f"{source}: {where} has unknown key {describe(unknown[0])}; "
            f"expected keys among {{{', '.join(table) or 'none'}}}."
        )
    for key, rule in table.items():
        if key not in section:
            if rule.required:
                raise CheckpointError(f"{source}: {where}{key} is missing; expected {rule.expected}.")
            continue
        if not rule.check(section[key]):
            raise CheckpointError(f"{source}: {where}{key}: expected {rule.expected}; got {describe(section[key])}.")


def _check_spec(spec: dict, tables: Mapping[str, dict[str, Key]], where: str, source: str) -> None:
    _check_table(spec, SPEC_KEYS, f"{where}.", source)
    if spec["name"] not in tables:
        raise CheckpointError(
            f"{source}: {where}.name: expected one of {{{', '.join(sorted(tables))}}}; got {describe(spec['name'])}."
        )
    _check_table(spec.get("kwargs", {}), tables[spec["name"]], f"{where}.kwargs.", source)


def _check_config(cfg: dict, source: str) -> None:
    _check_table(cfg, CONFIG_KEYS, "config.", source)
    _check_spec(cfg["backbone"], BACKBONE_KWARGS, "config.backbone", source)
    _check_spec(cfg["head"], HEAD_KWARGS, "config.head", source)
    names = cfg.get("class_names") or []
    if names and len(names) != cfg["num_classes"]:
        raise CheckpointError(
            f"{source}: config.class_names: expected {cfg['num_classes']} names (num_classes); got {len(names)}."
        )


def _check_tensors(state: dict, source: str, file_size: int) -> None:
    total = 0
    for key, value in state.items():
        where = f"state_dict[{describe(key)}]"
        if not isinstance(key, str) or len(key) > 200:
            raise CheckpointError(
                f"{source}: state_dict keys must be strings of at most 200 characters; got {describe(key)}."
            )
        if not isinstance(value, torch.Tensor) or value.layout != torch.strided or value.is_quantized:
            raise CheckpointError(f"{source}: {where}: expected a dense tensor; got {describe(value)}.")
        if value.dtype not in _TENSOR_DTYPES:
            raise CheckpointError(f"{source}: {where}: expected a float or int64 tensor; got {describe(value)}.")
        nbytes = value.numel() * value.element_size()
        # A tensor must own the bytes it claims: a stride-0 view of one element could claim petabytes.
        if (
            not value.is_contiguous()
            or value.untyped_storage().nbytes() < value.storage_offset() * value.element_size() + nbytes
        ):
            raise CheckpointError(
                f"{source}: {where}: expected a contiguous tensor backed by its own data; "
                f"got {describe(value)} over {value.untyped_storage().nbytes()} stored bytes."
            )
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise CheckpointError(
                f"{source}: {where}: expected finite weights; got NaN or inf (a diverged or corrupt training run)."
            )
        total += nbytes
    if total > file_size:
        raise CheckpointError(
            f"{source}: state_dict: expected tensors of at most the file's {file_size} bytes; "
            f"got {total} bytes (tensors sharing storage)."
        )


def validate_payload(payload: Any, source: str, file_size: int) -> None:
    """Check a checkpoint payload against the schema (see the module docstring).

    Parameters
    ----------
    payload : Any
        What the file decoded to.
    source : str
        The file's name, for the messages.
    file_size : int
        The file's size in bytes; the stored tensors may not claim more.

    Raises
    ------
    CheckpointError
        The first violation, as one line naming the key, expected and got.
    """
    _check_table(payload, PAYLOAD_KEYS, "", source)
    cfg, state = payload["config"], payload["state_dict"]
    _check_config(cfg, source)
    _check_tensors(state, source, file_size)
    if cfg["backbone"]["name"] in STORED_BY_REFERENCE:
        stored = [k for k in state if k.startswith("backbone.")]
        if stored:
            raise CheckpointError(
                f"{source}: state_dict: a {cfg['backbone']['name']!r} backbone is stored by "
                f"reference; expected no backbone weights, got {describe(stored[:3])}."
            )


#: Payload keys the tensor checksum covers; every other key is covered by ``checksum.metadata``.
_TENSOR_KEYS = ("state_dict", "checksum")


def metadata_sha256(payload: Mapping[str, Any]) -> dict[str, str]:
    """``{key: sha256 of its JSON}`` for every payload key but the tensors and the checksum itself (config, probe,
    training, metrics, format, version): what ``checksum.metadata`` records, so an edited value is caught."""
    return {k: json_sha256(v) for k, v in payload.items() if k not in _TENSOR_KEYS}


def check_checksum(payload: Mapping[str, Any], source: str) -> None:
    """Compare the stored tensors and every other key with the payload's sha256 checksum (files written before a
    part of it existed lack that part: :func:`laya_eval.loading.probe.unverified_parts` names it).

    Raises
    ------
    CheckpointError
        The tensors, or a key such as the config, are not the ones the checksum was made of.
    """
    checksum = payload.get("checksum")
    if checksum is None:
        return
    if state_dict_sha256(payload["state_dict"]) != checksum["state_dict"]:
        raise CheckpointError(
            f"{source}: the stored tensors do not match the checkpoint's sha256 checksum; "
            "the file is corrupt (e.g. a flipped bit). Use an intact copy."
        )
    recorded = checksum.get("metadata")
    if recorded is None:
        return
    try:
        now = metadata_sha256(payload)
    except (TypeError, ValueError, RecursionError):
        raise CheckpointError(f"{source}: its config or records are not plain JSON values.") from None
    changed = sorted(k for k in set(now) | set(recorded) if now.get(k) != recorded.get(k))
    if changed:
        raise CheckpointError(
            f"{source}: {', '.join(changed)} {'does' if len(changed) == 1 else 'do'} not match "
            "the checkpoint's sha256 checksum; the file was edited or is corrupt. Use an intact "
            "copy, or save the model again with laya_eval.save_checkpoint."
        )
