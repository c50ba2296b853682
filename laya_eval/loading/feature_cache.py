"""An on-disk cache of a frozen backbone's pooled hidden states.

A frozen backbone is encoded once: its hidden states (pooled to (N, d_i), as the heads pool them) are streamed
batch by batch into ``.npy`` files under a folder named by a key over everything that decides them: the
backbone's reference (``backbone.config()``: the model spec, the layers and pooling, the sha256 of the weights
and, for ``hf:`` models, of every config, tokenizer and processor file of the model folder, for ``py:``
factories of the module's source, the callable's source and any extra source files named with ``sources``),
the data's name, split, size and preprocessing, a sha256 of the inputs and labels, the device type the
backbone ran on, the versions of torch (and transformers and tokenizers for ``hf:``) and the rows per backbone
call (text batches are padded to their longest sentence, so the batching decides the last bits). Batches are
padded to a multiple of :data:`~laya_eval.models.layered.MIN_BATCH_ROWS` rows with copies of their own rows,
as the evaluation engine pads them, so a state does not depend on where the split ends. A second request with
the same key reads the files and does not run the backbone; training a head, sanity checks, pruning, and
``faithfulness`` and ``profile`` at head scope reuse them (:func:`backbone_features`).

The cache folder is ``cache_dir``, else ``$LAYA_EVAL_CACHE/features``, else
``~/.cache/laya-eval/features``. A folder is complete once its ``meta.json`` exists
(written last, atomically); a half-written one is rebuilt. ``meta.json`` records the shape,
dtype and sha256 of every array file; a read checks all three (and that each file is a regular
file no larger than its shape allows) before an array is used. An entry that fails any check is
never trusted: it is removed and recomputed with one :class:`~laya_eval.errors.RecomputedWarning`.
Sizes come from the files, never from what ``meta.json`` declares: a file whose size does not fit its recorded
shape is refused before it is read, and an array is read only after its ``.npy`` header matches that shape.

An entry is written into ``<entry>.tmp<PID>`` (holding its writer's owner record) with plain writes, not a
memory map: a full disk is then one :class:`~laya_eval.errors.ConfigError` line (a memory-mapped write would
kill the process with SIGBUS), and the temporary folder is removed. A temporary folder left by a process that
died (killed, or on another version) is removed by the next write into the cache; one whose process still runs
on this host, or that cannot be shown abandoned, is left alone. A cache folder that cannot be made or written
(a file in the way, no permission) is one ``ConfigError`` line before any encoding.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import platform
import re
import shutil
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from torch import Tensor

from laya_eval.errors import ConfigError, DataError, RecomputedWarning
from laya_eval.models.devices import resolve_device
from laya_eval.models.heads import pool_hidden
from laya_eval.models.layered import padded_rows
from laya_eval.output.files import data_content_sha256, file_sha256, json_sha256, sha256_bytes, storage_error
from laya_eval.output.reading import UnsafeFile, read_regular_file
from laya_eval.output.temporaries import owner_alive, owner_record

__all__ = [
    "FEATURE_BATCH_ROWS",
    "Features",
    "backbone_features",
    "cache_root",
    "caches_features",
    "extract_features",
    "feature_key",
    "known_layer_dims",
    "library_versions",
    "remember_layer_dims",
    "usable_cache_root",
]

ENV_VAR = "LAYA_EVAL_CACHE"
#: The largest ``meta.json`` read (the key and one record per array).
MAX_META_BYTES = 4 << 20
#: Bytes an ``.npy`` header may add to its array's data (numpy pads headers to 64 or 4096 bytes).
NPY_HEADER_BYTES = 1 << 16
#: Rows per backbone call of every encoding the library puts in the cache (one batching, so entries are shared).
FEATURE_BATCH_ROWS = 256
_FORMAT = 4
#: An entry being written: ``<entry>.tmp<PID>``, with the writer's owner record inside (host, pid, start time).
_TEMPORARY = re.compile(r"^([0-9a-f]{32})\.tmp([0-9]{1,10})$")
_OWNER = "owner.json"


@dataclass
class Features:
    """One split's cached hidden states.

    Attributes
    ----------
    hidden : list of Tensor, each (N, d_i), float32
    y : Tensor, (N,), int64
    path : Path or None
        The cache folder (None for an in-memory encoding).
    reused : bool
        True when read from the cache without running the backbone.
    key : dict
        What the cache is keyed by.
    """

    hidden: list[Tensor]
    y: Tensor
    path: Path | None = None
    reused: bool = False
    key: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.y.shape[0])


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """The folder feature caches live in (see the module docstring)."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR]).expanduser() / "features"
    return Path.home() / ".cache" / "laya-eval" / "features"


def feature_key(
    backbone_config: dict[str, Any], data: Any, *, device: str = "cpu", batch_rows: int = FEATURE_BATCH_ROWS
) -> dict[str, Any]:
    """The cache key: the backbone's reference (spec, weights hash, layers, pooling), the data split, the
    device type, the rows per backbone call and the versions of the libraries that compute the states.

    Parameters
    ----------
    backbone_config : dict
        ``backbone.config()`` of a by-reference backbone (it carries the weights hash).
    data : Dataset
    device : str
        The device type the backbone runs on (``cpu``, ``cuda``): kernels differ in rounding.
    batch_rows : int
        Rows per backbone call.
    """
    return {
        "backbone": backbone_config,
        "data": data.name,
        "split": data.split,
        "n": len(data),
        "preprocessing": data.preprocessing,
        "content_sha256": _content_sha256(data),
        "device": device,
        "batch_rows": int(batch_rows),
        "versions": library_versions(backbone_config),
        "format": _FORMAT,
    }


def library_versions(backbone_config: dict[str, Any]) -> dict[str, str | None]:
    """The versions of the libraries that compute a backbone's states: torch, and for ``hf`` transformers and
    tokenizers (None where one is not installed). Another version may round or tokenize differently, so it
    keys another cache entry; a cached ``hf`` probe then never stands in for an encoder of another version."""
    import importlib.metadata

    names = ["torch"] + (["transformers", "tokenizers"] if backbone_config.get("name") == "hf" else [])
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def _content_sha256(data: Any) -> str:
    """SHA-256 of the split's inputs and labels, so edited data under the same name gets a new key."""
    return data_content_sha256(data.x, data.y)


def _digest(key: dict[str, Any]) -> str:
    return json_sha256(key)[:32]


class _BadEntry(Exception):
    """A cache entry that exists but fails a check (the message says which)."""


def _read_array(folder: Path, name: str, record: Any, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """One array file, checked against its ``meta.json`` record and the shape the key implies; the file's size is
    checked against that shape before a byte is read, its ``.npy`` header before the array is made."""
    if not isinstance(record, dict) or record.get("dtype") != dtype.str or record.get("shape") != list(shape):
        raise _BadEntry(f"{name}: meta.json records {record!r:.120}, expected {dtype.str} {list(shape)}")
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    try:
        size = os.lstat(folder / name).st_size
    except OSError:
        raise _BadEntry(f"{name}: missing") from None
    if not nbytes < size <= nbytes + NPY_HEADER_BYTES:
        raise _BadEntry(f"{name}: has {size} bytes, but shape {list(shape)} takes {nbytes} and a header")
    try:
        raw = read_regular_file(folder / name, nbytes + NPY_HEADER_BYTES)
    except UnsafeFile as err:
        raise _BadEntry(str(err)) from None
    if sha256_bytes(raw) != record.get("sha256"):
        raise _BadEntry(f"{name}: its sha256 differs from the one recorded (damaged bytes)")
    return _parse_npy(raw, name, dtype, shape)


def _parse_npy(raw: bytes, name: str, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """The array of a ``.npy`` file's bytes whose header must declare ``dtype`` and ``shape`` (C order): nothing
    is allocated from a header's own claims."""
    fmt = np.lib.format
    buffer = io.BytesIO(raw)
    try:
        version = fmt.read_magic(buffer)
        read_header = {(1, 0): fmt.read_array_header_1_0, (2, 0): fmt.read_array_header_2_0}[version]
        got_shape, fortran, got_dtype = read_header(buffer)
    except Exception as err:  # noqa: BLE001 - any failure to parse the header means a damaged file
        raise _BadEntry(f"{name}: not a readable .npy file ({type(err).__name__})") from None
    data = memoryview(raw)[buffer.tell() :]
    if got_dtype != dtype or tuple(got_shape) != shape or fortran or len(data) != got_dtype.itemsize * np.prod(shape):
        raise _BadEntry(f"{name}: holds {got_dtype} {tuple(got_shape)} in {len(data)} bytes, expected {dtype} {shape}")
    return np.frombuffer(data, dtype=dtype).reshape(shape).copy()


def _read(folder: Path, key: dict[str, Any], data: Any) -> Features | None:
    """The entry in ``folder``; None when there is none, :class:`_BadEntry` when it fails a check."""
    if not os.path.lexists(folder):
        return None
    if folder.is_symlink() or not folder.is_dir():
        raise _BadEntry("the entry is not a folder")
    if not os.path.lexists(folder / "meta.json"):
        return None  # half-written: rebuilt without a word
    try:
        meta = json.loads(read_regular_file(folder / "meta.json", MAX_META_BYTES))
    except UnsafeFile as err:
        raise _BadEntry(str(err)) from None
    except (ValueError, RecursionError):
        raise _BadEntry("meta.json is not JSON") from None
    if not isinstance(meta, dict) or meta.get("key") != json.loads(json.dumps(key, sort_keys=True, default=str)):
        raise _BadEntry("meta.json records another key")
    dims, arrays, n = meta.get("layer_dims"), meta.get("arrays"), len(data)
    if not (
        isinstance(dims, list)
        and dims
        and all(isinstance(d, int) and 0 < d < 1 << 24 for d in dims)
        and isinstance(arrays, dict)
    ):
        raise _BadEntry("meta.json lacks valid layer sizes and array records")
    hidden = [
        torch.from_numpy(
            _read_array(folder, f"layer{i}.npy", arrays.get(f"layer{i}.npy"), np.dtype(np.float32), (n, d))
        )
        for i, d in enumerate(dims)
    ]
    y = _read_array(folder, "y.npy", arrays.get("y.npy"), np.dtype(np.int64), (n,))
    if not np.array_equal(y, data.y.numpy()):
        raise _BadEntry("y.npy holds other labels than the data")
    return Features(hidden=hidden, y=torch.from_numpy(y), path=folder, reused=True, key=key)


def _remove(path: Path) -> None:
    """Remove a cache entry whatever it is (a folder, a symlink to one, a FIFO, a file)."""
    if path.is_symlink() or (os.path.lexists(path) and not path.is_dir()):
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


def usable_cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """:func:`cache_root`, made if it does not exist yet.

    Raises
    ------
    ConfigError
        The folder cannot be made or written (a file in the way, no permission): one line, before any work.
    """
    root = cache_root(cache_dir)
    blocked = next((p for p in (root, *root.parents) if os.path.lexists(p) and not p.is_dir()), None)
    why = f"'{blocked}' is in the way and is not a folder" if blocked is not None else ""
    if not why:
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            why = err.strerror or str(err)
    if not why and not os.access(root, os.W_OK | os.X_OK):
        why = "it is not writable"
    if why:
        raise ConfigError(
            f"the feature cache folder '{root}' cannot hold the cache ({why}); choose another with --cache-dir."
        )
    return root


def _remove_stale_temporaries(root: Path) -> None:
    """Remove the ``<entry>.tmp<PID>`` folders of writers that are gone (see the module docstring)."""
    with contextlib.suppress(OSError):
        for entry in list(root.iterdir()):
            match = _TEMPORARY.match(entry.name)
            if not match or entry.is_symlink() or not entry.is_dir():
                continue
            try:
                record = json.loads(read_regular_file(entry / _OWNER, 4096))
            except UnsafeFile:  # none written (killed at once, or an older version): the name's process id
                record = {"host": platform.node(), "pid": int(match.group(2)), "start": None}
            except (ValueError, RecursionError):
                continue
            if isinstance(record, dict) and record.get("pid") == int(match.group(2)) and not owner_alive(record):
                shutil.rmtree(entry, ignore_errors=True)


def extract_features(
    encode_batch: Callable[[Any], list[Tensor]],
    data: Any,
    key: dict[str, Any],
    *,
    cache_dir: str | os.PathLike | None = None,
    batch_size: int = 256,
    progress: Any = None,
) -> Features:
    """Pooled hidden states of ``data``, from the cache when present, else computed and stored.

    Parameters
    ----------
    encode_batch : callable
        Maps one input batch to the hidden states, each (B, d_i) (pooled).
    data : Dataset
    key : dict
        From :func:`feature_key`.
    cache_dir : path, optional
    batch_size : int
    progress : tqdm-like, optional
        ``update(n)`` is called per encoded batch.

    Returns
    -------
    Features
    """
    root = usable_cache_root(cache_dir)
    folder = root / _digest(key)
    try:
        cached = _read(folder, key, data)
    except _BadEntry as err:
        warnings.warn(
            f"the feature cache entry '{folder}' is not trusted ({err}); recomputing it.",
            RecomputedWarning,
            stacklevel=2,
        )
        cached = None
    if cached is not None:
        return cached
    _remove_stale_temporaries(root)
    tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
    try:
        _remove(folder)  # a half-written, damaged or stale entry
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        (tmp / _OWNER).write_text(json.dumps(owner_record()))
        dims = _stream(encode_batch, data, tmp, batch_size, progress)
        np.save(tmp / "y.npy", data.y.numpy().astype(np.int64), allow_pickle=False)
        records = {
            f"layer{i}.npy": {"dtype": np.dtype(np.float32).str, "shape": [len(data), d]} for i, d in enumerate(dims)
        }
        records["y.npy"] = {"dtype": np.dtype(np.int64).str, "shape": [len(data)]}
        for name, record in records.items():
            record["sha256"] = file_sha256(tmp / name)
        meta = {"key": key, "n_layers": len(dims), "layer_dims": dims, "arrays": records, "format": _FORMAT}
        (tmp / "meta.json").write_text(json.dumps(meta, sort_keys=True, default=str))
        (tmp / _OWNER).unlink()
        try:
            os.replace(tmp, folder)
        except OSError:
            if not os.path.lexists(folder):
                raise
            # Another process wrote the same entry meanwhile: its entry is read (and checked) below.
    except OSError as err:  # a full disk, a quota, a read-only cache: one line, and nothing half-written left
        raise storage_error(err, root, 0, intact=False) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    try:
        result = _read(folder, key, data)
    except _BadEntry as err:  # changed between the write and the read: report, do not trust
        result, why = None, str(err)
    else:
        why = "it vanished"
    if result is None:
        raise DataError(
            f"the feature cache entry '{folder}' changed while it was written ({why}); "
            "is another process writing the same cache?"
        )
    result.reused = False
    return result


def _write_rows(fh: Any, rows: np.ndarray) -> None:
    """Append rows to an open ``.npy`` file with a plain write: a full disk raises OSError here, where a store
    into a memory map would kill the process (SIGBUS)."""
    fh.write(np.ascontiguousarray(rows, dtype=np.float32).tobytes())


@torch.no_grad()
def _stream(
    encode_batch: Callable[[Any], list[Tensor]], data: Any, folder: Path, batch_size: int, progress: Any
) -> list[int]:
    """Encode batch by batch, appending each batch to ``layer{i}.npy`` files (header first, for all N rows); a
    batch of fewer runs padded with copies of its own rows to a multiple of MIN_BATCH_ROWS (CPU kernels round tiny
    batches and partial row tiles differently). Returns the layer sizes."""
    dims: list[int] = []
    n = len(data)
    with contextlib.ExitStack() as files:
        handles: list[Any] = []
        for start in range(0, n, batch_size):
            part = data.subset(slice(start, start + batch_size))
            rows = len(part)
            if padded_rows(rows) != rows:
                part = part.subset(torch.arange(padded_rows(rows)) % rows)
            hidden = [h[:rows].detach().float().cpu().numpy() for h in encode_batch(part.x)]
            if not handles:
                dims = [int(h.shape[1]) for h in hidden]
                for i, d in enumerate(dims):
                    handles.append(files.enter_context(open(folder / f"layer{i}.npy", "wb")))
                    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)), "fortran_order": False}
                    np.lib.format.write_array_header_1_0(handles[-1], {**header, "shape": (n, d)})
            if [h.shape for h in hidden] != [(rows, d) for d in dims]:
                raise DataError(
                    f"the backbone gave states of {[h.shape for h in hidden]} for {rows} rows; "
                    f"earlier batches had layer sizes {dims}."
                )
            for fh, h in zip(handles, hidden):
                _write_rows(fh, h)
            if progress is not None:
                progress.update(rows)
    return dims


def caches_features(backbone: Any, *, vector_states: bool = False) -> bool:
    """Whether ``backbone``'s pooled states go through the cache: a frozen backbone stored by reference (its
    ``config()`` names everything that decides them). ``vector_states`` asks also that every state is already
    (B, d_i) before pooling (an evaluation's head-scope methods then see exactly what the cache holds)."""
    if not getattr(backbone, "stored_by_reference", False):
        return False
    return not vector_states or bool(getattr(backbone, "vector_states", False))


def _reference(backbone: Any) -> dict[str, Any]:
    """What identifies the backbone's features: its config, plus a weights hash when stored in full."""
    from laya_eval.models.backbones.modules import state_sha256

    ref = backbone.config()
    if not getattr(backbone, "stored_by_reference", False):
        ref = {**ref, "state_sha256": state_sha256(backbone)}
    return ref


def backbone_features(
    backbone: Any,
    data: Any,
    *,
    device: str = "cpu",
    batch_size: int = FEATURE_BATCH_ROWS,
    cache_dir: str | os.PathLike | None = None,
    progress: Any = None,
) -> Features:
    """The pooled hidden states of ``data`` under a frozen ``backbone``, through the feature cache.

    Parameters
    ----------
    backbone : Backbone
        Frozen; ``backbone.config()`` (plus a weights hash) keys the cache.
    data : Dataset
    device : str
        Runs the backbone; its type joins the key.
    batch_size : int
        Rows per backbone call; joins the key (the library always uses :data:`FEATURE_BATCH_ROWS`).
    cache_dir, progress
        As :func:`extract_features`.

    Returns
    -------
    Features
        ``hidden``: list of (N, d_i) on the CPU.
    """
    dev = resolve_device(device)
    backbone.to(dev).eval()

    def encode_batch(x: Any) -> list[Tensor]:
        x = x.to(dev) if isinstance(x, Tensor) else x
        return [pool_hidden(h) for h in backbone(x)]

    key = feature_key(_reference(backbone), data, device=dev.type, batch_rows=batch_size)
    return extract_features(encode_batch, data, key, cache_dir=cache_dir, batch_size=batch_size, progress=progress)


def _dims_file(reference: dict[str, Any], cache_dir: str | os.PathLike | None) -> Path:
    return cache_root(cache_dir) / "layer-dims" / f"{_digest(reference)}.json"


def known_layer_dims(reference: dict[str, Any], cache_dir: str | os.PathLike | None = None) -> list[int] | None:
    """Layer sizes recorded for a module reference (spec, layer names, pooling, weights hash), or None.

    Lets a cached ``py:`` backbone be rebuilt without a dry run, so a cache hit runs no forward pass.
    """
    path = _dims_file(reference, cache_dir)
    try:
        dims = json.loads(read_regular_file(path, 1 << 16))
    except (UnsafeFile, ValueError, RecursionError):
        return None
    ok = isinstance(dims, list) and dims and all(isinstance(d, int) and d > 0 for d in dims)
    return list(dims) if ok else None


def remember_layer_dims(reference: dict[str, Any], dims: list[int], cache_dir: str | os.PathLike | None = None) -> None:
    """Record the layer sizes of a module reference (see :func:`known_layer_dims`)."""
    usable_cache_root(cache_dir)
    path = _dims_file(reference, cache_dir)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps([int(d) for d in dims]))
        os.replace(tmp, path)
    except OSError as err:
        raise storage_error(err, path.parent, 0, intact=False) from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
