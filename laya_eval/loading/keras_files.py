"""Reading Keras 3 model files as data: a ``.keras`` archive or a ``.weights.h5`` file, through h5py.

Nothing in the file is executed and Keras is never imported: the ``.keras`` zip's ``config.json`` and
``metadata.json`` are parsed as JSON only, and the weights are read from the HDF5 tree Keras 3 writes
(``<layer path>/vars/0``, ``vars/1``, ...; the ``vars`` group's ``name`` attribute holds the layer's name).

What the file can make laya-eval allocate is bounded by the file's size: a zip member is decompressed
only where its declared size is at most :data:`MAX_RATIO` times its compressed size (Keras stores
members uncompressed; ``zip -r`` deflates them about 1.1 to 1) and never beyond that declared size, HDF5
datasets must be uncompressed, in the file itself (no external or virtual storage) and together no larger
than the file, and only hard links are followed (an external link could name any other file on the
machine). A damaged file (a bad CRC, an encrypted member, garbled HDF5 structures) and non-finite weights
are refused in one line.
The training state Keras saves with a compiled model (``optimizer/``, metric variables) is skipped.
A Keras 2 (TF-Keras) ``.h5`` file has another layout and is refused with a line saying so.

See ``docs/commands/import-keras.md``.
"""

from __future__ import annotations

import io
import json
import os
import re
import stat
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from laya_eval.errors import CheckpointError
from laya_eval.output.files import sha256_bytes

__all__ = ["KerasFile", "KerasLayer", "read_keras_file"]

MAX_CONFIG_BYTES = 16 << 20  # config.json of a model with thousands of layers stays far below this
MAX_METADATA_BYTES = 64 << 10
MAX_GROUPS = 100_000  # HDF5 groups walked (bounds the Python objects made from the tree)
MAX_DEPTH = 32
MAX_RATIO = 100  # declared size / compressed size of a zip member; deflate reaches ~1000 on zeros (a bomb)
_ARCHIVE_MEMBERS = {"config.json", "metadata.json", "model.weights.h5"}
_FLOAT_KINDS = {np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)}
# Training state Keras stores beside the model at the top of the tree (Adam's moments, metric totals): not
# part of the function, so never walked or read.
_TRAINING_STATE = {"optimizer", "compile_metrics", "compile_loss", "metrics"}


@dataclass(frozen=True)
class KerasLayer:
    """One Keras layer that holds variables.

    Attributes
    ----------
    path : str
        Its group in the HDF5 tree, e.g. ``layers/dense_1``.
    name : str
        The layer's own name (the ``vars`` group's ``name`` attribute; the last part of ``path`` in files
        that lack it).
    shapes : tuple of tuple of int
        Shapes of its variables ``vars/0``, ``vars/1``, ... in that order.
    arrays : tuple of numpy.ndarray
        The variables, float32, in the same order.
    """

    path: str
    name: str
    shapes: tuple[tuple[int, ...], ...]
    arrays: tuple[np.ndarray, ...]

    @property
    def parent(self) -> str:
        """The group holding this layer's group (the container it was stored in)."""
        return self.path.rpartition("/")[0]


@dataclass(frozen=True)
class KerasFile:
    """What a Keras 3 file holds: its variable-holding layers in storage order, and its config if it has one."""

    path: Path
    kind: str  # "keras" (a .keras archive) or "weights.h5"
    layers: tuple[KerasLayer, ...]
    config: dict | None
    metadata: dict | None
    sha256: str


def _read_regular(path: Path) -> bytes:
    """The bytes of a regular file; folders, FIFOs and devices are refused before any read."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise CheckpointError(f"Keras file '{path}' does not exist.") from None
    except OSError as exc:
        raise CheckpointError(f"cannot open Keras file '{path}': {exc.strerror or exc}.") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise CheckpointError(f"Keras file '{path}' is not a regular file.")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read()
    except OSError as exc:
        raise CheckpointError(f"cannot read Keras file '{path}': {exc.strerror or exc}.") from None
    finally:
        os.close(fd)


def _read_member(archive: zipfile.ZipFile, name: str, limit: int, path: Path) -> bytes:
    """A member's bytes: its declared size is checked against ``limit`` and :data:`MAX_RATIO` times its
    compressed size before anything is decompressed, and no more than the declared size is read."""
    info = archive.getinfo(name)
    if info.flag_bits & 0x1:
        raise CheckpointError(f"'{path}': archive member {name!r} is encrypted; a Keras archive is not.")
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise CheckpointError(
            f"'{path}': archive member {name!r} uses compression method {info.compress_type}; "
            "laya-eval reads stored or deflated members."
        )
    declared = info.file_size
    if declared > limit or declared > MAX_RATIO * max(info.compress_size, 1):
        raise CheckpointError(
            f"'{path}': archive member {name!r} declares {declared} bytes from {info.compress_size} compressed "
            f"(at most {limit} bytes and {MAX_RATIO} times the compressed size are read); not a Keras archive."
        )
    try:
        with archive.open(info) as fh:
            data = fh.read(declared + 1)  # zipfile stops at the declared size and checks the CRC at its end
    except Exception as exc:  # noqa: BLE001 - a damaged member fails as BadZipFile, zlib.error, EOFError, ...
        raise CheckpointError(
            f"'{path}': archive member {name!r} is damaged ({type(exc).__name__}: {str(exc)[:100]})."
        ) from None
    if len(data) != declared:
        raise CheckpointError(
            f"'{path}': archive member {name!r} holds {len(data)} bytes, not the declared {declared}."
        )
    return data


def _json(data: bytes, what: str, path: Path) -> dict:
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise CheckpointError(f"'{path}': {what} is not valid JSON.") from None
    if not isinstance(value, dict):
        raise CheckpointError(f"'{path}': {what} must be a JSON object; got {type(value).__name__}.")
    return value


def _unpack_archive(path: Path, data: bytes) -> tuple[bytes, dict, dict | None]:
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        names = archive.namelist()
    except Exception as exc:  # noqa: BLE001 - zipfile fails on garbled bytes in many ways
        raise CheckpointError(f"'{path}' is not a readable .keras archive ({type(exc).__name__}).") from None
    with archive:
        if "model.weights.h5" not in names or "config.json" not in names:
            what = (
                "model.weights.npz (save with the default weights format)"
                if "model.weights.npz" in names
                else f"members {sorted(names)[:6]}"
            )
            raise CheckpointError(
                f"'{path}' is not a Keras 3 archive with HDF5 weights: it has {what}; expected "
                "config.json and model.weights.h5."
            )
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:  # zipfile reads the last of them; Keras, another tool, may read the first: which model is it?
            raise CheckpointError(f"'{path}': the archive holds more than one member named {twice[0][:80]!r}.")
        unknown = sorted(n for n in names if n not in _ARCHIVE_MEMBERS and not n.startswith("assets/"))
        if unknown:
            raise CheckpointError(
                f"'{path}': unexpected archive member {unknown[0][:80]!r}; a Keras 3 archive "
                f"holds {sorted(_ARCHIVE_MEMBERS)} (and assets/)."
            )
        config = _json(_read_member(archive, "config.json", MAX_CONFIG_BYTES, path), "config.json", path)
        metadata = None
        if "metadata.json" in names:
            metadata = _json(_read_member(archive, "metadata.json", MAX_METADATA_BYTES, path), "metadata.json", path)
        weights = _read_member(archive, "model.weights.h5", MAX_RATIO * len(data), path)
    return weights, config, metadata


def _natural_key(name: str) -> tuple[str, int]:
    """Keras names the members of a container ``dense``, ``dense_1``, ``dense_2``, ...: sort them in that order."""
    found = re.fullmatch(r"(.*?)_(\d{1,9})", name)
    return (found.group(1), int(found.group(2)) + 1) if found else (name, 0)


def _hard_children(group: Any, path: Path, where: str) -> list[tuple[str, Any]]:
    import h5py

    children = []
    for key in sorted(group.keys(), key=_natural_key):
        link = group.get(key, getlink=True)
        if not isinstance(link, h5py.HardLink):
            raise CheckpointError(
                f"'{path}': {where}/{key} is an HDF5 {type(link).__name__}; a Keras weights file "
                "holds only plain groups and datasets (a link could read another file)."
            )
        children.append((key, group[key]))
    return children


def _layer_name(vars_group: Any, fallback: str) -> str:
    attrs = vars_group.attrs
    if "name" not in attrs or attrs.get_id("name").get_storage_size() > 4096:  # a name, not a payload
        return fallback
    name = attrs["name"]
    if isinstance(name, bytes):
        name = name.decode("utf-8", "replace")
    return name[:200] if isinstance(name, str) and name else fallback


def _check_dataset(ds: Any, where: str, path: Path) -> tuple[int, ...]:
    if ds.is_virtual or ds.external or ds.compression is not None or ds.id.get_create_plist().get_nfilters():
        raise CheckpointError(
            f"'{path}': {where} is compressed, virtual or stored outside the file; Keras writes "
            "plain datasets, and laya-eval reads no more than a file holds."
        )
    if ds.dtype not in _FLOAT_KINDS or not 1 <= ds.ndim <= 4:
        raise CheckpointError(
            f"'{path}': {where} is {ds.dtype} of shape {tuple(ds.shape)}; expected float weights of 1 to 4 dimensions."
        )
    return tuple(int(s) for s in ds.shape)


def _walk(root: Any, path: Path) -> list[tuple[str, str, list[tuple[str, Any]]]]:
    """Every layer with variables: ``(group path, name, [(var key, dataset)])`` in Keras' storage order."""
    import h5py

    found, seen = [], 0
    stack: list[tuple[str, Any, int]] = [("", root, 0)]
    while stack:
        where, group, depth = stack.pop()
        seen += 1
        if seen > MAX_GROUPS or depth > MAX_DEPTH:
            raise CheckpointError(
                f"'{path}': the HDF5 tree is deeper than {MAX_DEPTH} or has more than "
                f"{MAX_GROUPS} groups; not a Keras weights file."
            )
        children = _hard_children(group, path, where or "/")
        subgroups = []
        for key, child in children:
            if not where and key in _TRAINING_STATE:
                continue
            here = f"{where}/{key}" if where else key
            if key == "vars" and isinstance(child, h5py.Group):
                entries = _hard_children(child, path, here)
                if any(not k.isdigit() or not isinstance(v, h5py.Dataset) for k, v in entries):
                    raise CheckpointError(
                        f"'{path}': {here} holds {[k for k, _ in entries][:4]}; Keras 3 stores a "
                        "layer's variables as vars/0, vars/1, ..."
                    )
                if entries:
                    found.append(
                        (
                            where,
                            _layer_name(child, where.rpartition("/")[2] or "model"),
                            sorted(entries, key=lambda kv: int(kv[0])),
                        )
                    )
            elif isinstance(child, h5py.Group):
                subgroups.append((here, child, depth + 1))
            else:
                raise CheckpointError(
                    f"'{path}': {here} is a dataset outside a vars group; not a Keras 3 weights file."
                )
        stack.extend(reversed(subgroups))
    return found


def _read_weights(path: Path, weights: bytes) -> tuple[KerasLayer, ...]:
    import h5py

    try:
        handle = h5py.File(io.BytesIO(weights), "r")
    except Exception as exc:  # noqa: BLE001 - h5py reports garbled superblocks in many ways
        raise CheckpointError(f"'{path}' is not a readable HDF5 weights file ({str(exc)[:120]}).") from None
    try:
        with handle:
            return _read_layers(handle, path, len(weights))
    except CheckpointError:
        raise
    except Exception as exc:  # noqa: BLE001 - a damaged tree fails as OSError, KeyError, RuntimeError, ...
        raise CheckpointError(
            f"'{path}': the HDF5 weights are damaged ({type(exc).__name__}: {str(exc)[:100]})."
        ) from None


def _read_layers(handle: Any, path: Path, size: int) -> tuple[KerasLayer, ...]:
    if "model_weights" in handle or "layer_names" in handle.attrs:
        raise CheckpointError(
            f"'{path}' is a Keras 2 (TF-Keras) HDF5 file; laya-eval reads Keras 3 files: "
            "save the model with Keras 3 as name.keras or name.weights.h5."
        )
    walked = _walk(handle, path)
    layers, total = [], 0
    for where, name, entries in walked:
        shapes = tuple(_check_dataset(ds, f"{where}/vars/{key}", path) for key, ds in entries)
        total += sum(int(np.prod(s, dtype=np.int64)) * ds.dtype.itemsize for s, (_, ds) in zip(shapes, entries))
        if total > size:
            raise CheckpointError(
                f"'{path}': the datasets declare more bytes than the file's {size}; "
                "the file is truncated or not a Keras weights file."
            )
        layers.append((where, name, shapes, entries))
    read = []
    for where, name, shapes, entries in layers:
        arrays = tuple(np.asarray(ds[()], dtype=np.float32) for _, ds in entries)
        for (key, _), array in zip(entries, arrays):
            if not np.isfinite(array).all():
                raise CheckpointError(
                    f"'{path}': weight {where}/vars/{key} of layer {name!r} holds NaN or infinite values "
                    f"({int(np.count_nonzero(~np.isfinite(array)))} of {array.size}); no model computes with it."
                )
        read.append(KerasLayer(where, name, shapes, arrays))
    return tuple(read)


def read_keras_file(path: str | os.PathLike) -> KerasFile:
    """Read a Keras 3 ``.keras`` archive or ``.weights.h5`` file without running anything in it.

    Parameters
    ----------
    path : str or PathLike

    Returns
    -------
    KerasFile
        The variable-holding layers in Keras' storage order, the config (``None`` for a weights file)
        and the file's sha256.

    Raises
    ------
    CheckpointError
        A missing, unreadable or unsafe file, or one in another layout (Keras 2, npz weights).
    """
    path = Path(path)
    data = _read_regular(path)
    if data.startswith(b"PK\x03\x04"):
        kind, (weights, config, metadata) = "keras", _unpack_archive(path, data)
    elif data.startswith(b"\x89HDF\r\n\x1a\n"):
        kind, weights, config, metadata = "weights.h5", data, None, None
    else:
        what = "an empty file" if not data else f"it starts with {data[:8]!r}"
        raise CheckpointError(f"'{path}' is neither a .keras archive nor an HDF5 .weights.h5 file ({what}).")
    return KerasFile(path, kind, _read_weights(path, weights), config, metadata, sha256_bytes(data))
