"""Reading checkpoint files as untrusted bytes: regular files only, bounded, no code run.

Owns the byte-level checks that come before any parsing: the file kind (FIFOs, devices and
folders refused before a read), the uncompressed zip ``torch.save`` writes (entries counted
before torch parses the archive), ``torch.load(weights_only=True)`` and the safetensors header
(its length and tensor count read and bounded before the file is read whole). Returns the
payload dict; :mod:`laya_eval.loading.checkpoints` validates it.

May import: ``laya_eval.errors``.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import re
import stat
import zipfile
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO, Callable

import torch

from laya_eval.errors import CheckpointError

__all__ = ["MAX_CHECKPOINT_TENSORS", "MAX_SAFETENSORS_HEADER", "SAFETENSORS_KEY", "not_a_checkpoint", "read_payload"]

SAFETENSORS_KEY = "laya_eval"
#: Tensors a laya-eval checkpoint holds at most (a head, or a backbone of MAX_LAYERS blocks stored in full,
#: has far fewer); a file listing more is refused before its header or archive directory is parsed.
MAX_CHECKPOINT_TENSORS = 1 << 15
#: Bytes of a safetensors header at most: the tensor table and the JSON config (class names included).
MAX_SAFETENSORS_HEADER = 32 << 20


def read_payload(path: Path) -> tuple[Any, int]:
    """The payload stored in the ``.pt`` or ``.safetensors`` file at ``path`` (not yet validated), and the
    file's size in bytes."""
    if path.suffix == ".safetensors":
        data = _read_file(path, partial(_check_safetensors_start, path))
        return _read_safetensors(path, data), len(data)
    data = _read_file(path)
    return _read_pt(path, data), len(data)


_FILE_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _read_file(path: Path, check_start: Callable[[BinaryIO, int], None] | None = None) -> bytes:
    """The bytes of a regular file; FIFOs, devices and folders are refused before any read (no hang).

    ``check_start(fh, size)`` may read the file's first bytes and refuse it before the whole file is read."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint '{path}' does not exist.") from None
    except IsADirectoryError:
        raise CheckpointError(f"checkpoint '{path}' is a directory, not a file.") from None
    except OSError as exc:
        raise CheckpointError(f"cannot open checkpoint '{path}': {exc.strerror or exc}.") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((what for test, what in _FILE_KINDS if test(mode)), "not a regular file")
            raise CheckpointError(f"checkpoint '{path}' is {kind}, not a file.")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            if check_start is not None:
                check_start(fh, os.fstat(fd).st_size)
                fh.seek(0)
            return fh.read()
    except OSError as exc:
        raise CheckpointError(f"cannot read checkpoint '{path}': {exc.strerror or exc}.") from None
    finally:
        os.close(fd)


def not_a_checkpoint(path: Path, why: str) -> CheckpointError:
    return CheckpointError(
        f"'{path}' is not a laya-eval checkpoint ({why}); create one with "
        "`laya-eval train` or laya_eval.save_checkpoint."
    )


def _check_torch_zip(path: Path, data: bytes) -> None:
    """torch.save writes an uncompressed zip: refuse anything else before torch parses it.

    Stored (uncompressed) members cannot decompress to more than the file holds, so
    a small file cannot make torch allocate gigabytes.
    """
    if not data.startswith(b"PK\x03\x04"):
        what = "an empty file" if not data else f"it starts with {data[:8]!r}, not a PyTorch zip archive"
        raise not_a_checkpoint(path, what)
    # every member has one central-directory signature: an upper bound on the entries, counted without parsing
    entries = data.count(b"PK\x01\x02")
    if entries > MAX_CHECKPOINT_TENSORS + 16:
        raise CheckpointError(
            f"'{path}' is not a readable checkpoint: its archive lists up to {entries} members; "
            f"a laya-eval checkpoint holds at most {MAX_CHECKPOINT_TENSORS} tensors."
        )
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            infos = archive.infolist()
    except Exception as exc:  # noqa: BLE001 - zipfile fails on garbled bytes in many ways (even NotImplementedError)
        raise CheckpointError(
            f"'{path}' is not a readable checkpoint (truncated or not a PyTorch file: {type(exc).__name__})."
        ) from None
    for info in infos:
        if info.compress_type != zipfile.ZIP_STORED or info.file_size > len(data):
            raise CheckpointError(
                f"'{path}' is not a readable checkpoint: member {info.filename[:80]!r} is "
                "compressed or larger than the file; torch.save never writes such members."
            )
    if not any(i.filename.endswith("data.pkl") for i in infos):
        raise not_a_checkpoint(path, "a zip archive without the data.pkl of a PyTorch file")


def _read_pt(path: Path, data: bytes) -> Any:
    _check_torch_zip(path, data)
    try:
        return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        # torch names the first global its restricted unpickler refused; only that means "unsafe".
        found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(exc))
        if found:
            raise CheckpointError(
                f"refused to load '{path}': it holds Python objects beyond weights ({found.group(1)[:120]}), "
                "which could run code when unpickled. A laya-eval checkpoint holds only tensors and plain "
                "values; re-create it with laya_eval.save_checkpoint from trusted code."
            ) from None
        raise CheckpointError(f"'{path}' is not a readable checkpoint (its pickle is corrupt).") from None
    except Exception as exc:  # noqa: BLE001 - any failure to parse untrusted bytes means 'unreadable'
        raise CheckpointError(
            f"'{path}' is not a readable checkpoint (truncated or not a PyTorch file: {type(exc).__name__})."
        ) from None


def _check_safetensors_start(path: Path, fh: BinaryIO, file_size: int) -> None:
    """Refuse a safetensors file by its header length and tensor count, reading at most the header's bytes.

    Runs before the file is read whole, so a small file cannot make the reader hold more than its header
    (bounded by MAX_SAFETENSORS_HEADER) beside it."""
    start = fh.read(8)
    size = int.from_bytes(start, "little") if len(start) == 8 else -1
    if not 2 <= size <= file_size - 8:
        raise CheckpointError(
            f"'{path}' is not a readable safetensors file (header length {size} does not fit its {file_size} bytes)."
        )
    if size > MAX_SAFETENSORS_HEADER:
        raise CheckpointError(
            f"'{path}' is not a laya-eval checkpoint: its safetensors header has {size} bytes; "
            f"at most {MAX_SAFETENSORS_HEADER} are expected."
        )
    entries = fh.read(size).count(b'"data_offsets"')  # one per tensor, counted before the JSON is parsed
    if entries > MAX_CHECKPOINT_TENSORS:
        raise CheckpointError(
            f"'{path}' is not a laya-eval checkpoint: its safetensors header lists {entries} "
            f"tensors; a laya-eval checkpoint holds at most {MAX_CHECKPOINT_TENSORS}."
        )


def _read_safetensors(path: Path, data: bytes) -> Any:
    from safetensors import SafetensorError
    from safetensors.torch import load

    size = int.from_bytes(data[:8], "little")  # checked by _check_safetensors_start before the file was read
    try:
        header = json.loads(data[8 : 8 + size].decode("utf-8"))
        state = load(data)
    except (SafetensorError, UnicodeDecodeError, ValueError, RecursionError, OSError) as exc:
        why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)[:200]
        raise CheckpointError(f"'{path}' is not a readable safetensors file ({why}).") from None
    meta = header.get("__metadata__") if isinstance(header, dict) else None
    if not isinstance(meta, dict) or SAFETENSORS_KEY not in meta:
        raise CheckpointError(
            f"'{path}' has no laya-eval config in its safetensors metadata (key '{SAFETENSORS_KEY}')."
        )
    try:
        payload = json.loads(meta[SAFETENSORS_KEY])
    except (TypeError, ValueError, RecursionError):
        raise CheckpointError(f"'{path}' has a corrupt laya-eval config in its metadata (not JSON).") from None
    if not isinstance(payload, dict):
        raise CheckpointError(
            f"'{path}': the laya-eval config in its metadata must be a JSON object; got {type(payload).__name__}."
        )
    payload["state_dict"] = state
    return payload
