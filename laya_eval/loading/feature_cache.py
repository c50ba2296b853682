"""An on-disk cache of a frozen backbone's pooled hidden states.

A frozen backbone is encoded once: its hidden states (pooled to (N, d_i), as the heads pool
them) are streamed batch by batch into ``.npy`` files under a folder named by a key over
(model spec, weights hash, layers, pooling, data name, split, size, preprocessing and a sha256
of the inputs and labels). A second request with the
same key reads the files and does not run the backbone; training a head, sanity checks and
pruning reuse them (:func:`laya_eval.training.trainer.train_head`).

The cache folder is ``cache_dir``, else ``$LAYA_EVAL_CACHE/features``, else
``~/.cache/laya-eval/features``. A folder is complete once its ``meta.json`` exists
(written last, atomically); a half-written one is rebuilt.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from torch import Tensor

from laya_eval.errors import DataError
from laya_eval.output.files import data_content_sha256, json_sha256

__all__ = ["Features", "cache_root", "extract_features", "feature_key", "known_layer_dims", "remember_layer_dims"]

ENV_VAR = "LAYA_EVAL_CACHE"


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


def feature_key(backbone_config: dict[str, Any], data: Any) -> dict[str, Any]:
    """The cache key: the backbone's reference (spec, weights hash, layers, pooling) and the data split.

    Parameters
    ----------
    backbone_config : dict
        ``backbone.config()`` of a by-reference backbone (it carries the weights hash).
    data : Dataset
    """
    return {"backbone": backbone_config, "data": data.name, "split": data.split, "n": len(data),
            "preprocessing": data.preprocessing, "content_sha256": _content_sha256(data), "format": 1}


def _content_sha256(data: Any) -> str:
    """SHA-256 of the split's inputs and labels, so edited data under the same name gets a new key."""
    return data_content_sha256(data.x, data.y)


def _digest(key: dict[str, Any]) -> str:
    return json_sha256(key)[:32]


def _read(folder: Path, key: dict[str, Any]) -> Features | None:
    meta_path = folder / "meta.json"
    if not meta_path.is_file():
        return None
    try:
        meta = json.loads(meta_path.read_text())
        if meta.get("key") != json.loads(json.dumps(key, sort_keys=True, default=str)):
            return None
        hidden = [torch.from_numpy(np.load(folder / f"layer{i}.npy", mmap_mode="r", allow_pickle=False).copy())
                  for i in range(int(meta["n_layers"]))]
        y = torch.from_numpy(np.load(folder / "y.npy", allow_pickle=False).copy())
    except (OSError, ValueError, KeyError) as err:
        raise DataError(f"the feature cache '{folder}' is unreadable ({err}); "
                        "delete the folder to rebuild it.") from None
    return Features(hidden=hidden, y=y, path=folder, reused=True, key=key)


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
    folder = cache_root(cache_dir) / _digest(key)
    cached = _read(folder, key)
    if cached is not None:
        return cached
    if folder.exists():
        shutil.rmtree(folder)  # a half-written or stale folder
    tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        arrays = _stream(encode_batch, data, tmp, batch_size, progress)
        np.save(tmp / "y.npy", data.y.numpy(), allow_pickle=False)
        meta = {"key": key, "n_layers": len(arrays), "layer_dims": [int(a.shape[1]) for a in arrays]}
        (tmp / "meta.json").write_text(json.dumps(meta, sort_keys=True, default=str))
        del arrays
        os.replace(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result = _read(folder, key)
    result.reused = False
    return result


@torch.no_grad()
def _stream(encode_batch: Callable[[Any], list[Tensor]], data: Any, folder: Path, batch_size: int,
            progress: Any) -> list[np.ndarray]:
    """Encode batch by batch, writing each batch into memory-mapped ``layer{i}.npy`` files."""
    arrays: list[np.ndarray] = []
    n = len(data)
    for start in range(0, n, batch_size):
        part = data.subset(slice(start, start + batch_size))
        hidden = encode_batch(part.x)
        if not arrays:
            arrays = [np.lib.format.open_memmap(folder / f"layer{i}.npy", mode="w+", dtype=np.float32,
                                                shape=(n, int(h.shape[1]))) for i, h in enumerate(hidden)]
        for array, h in zip(arrays, hidden):
            array[start:start + len(part)] = h.detach().float().cpu().numpy()
        if progress is not None:
            progress.update(len(part))
    for array in arrays:
        array.flush()
    return arrays


def _dims_file(reference: dict[str, Any], cache_dir: str | os.PathLike | None) -> Path:
    return cache_root(cache_dir) / "layer-dims" / f"{_digest(reference)}.json"


def known_layer_dims(reference: dict[str, Any], cache_dir: str | os.PathLike | None = None) -> list[int] | None:
    """Layer sizes recorded for a module reference (spec, layer names, pooling, weights hash), or None.

    Lets a cached ``py:`` backbone be rebuilt without a dry run, so a cache hit runs no forward pass.
    """
    path = _dims_file(reference, cache_dir)
    try:
        dims = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(dims, list) and dims and all(isinstance(d, int) and d > 0 for d in dims)
    return list(dims) if ok else None


def remember_layer_dims(reference: dict[str, Any], dims: list[int], cache_dir: str | os.PathLike | None = None) -> None:
    """Record the layer sizes of a module reference (see :func:`known_layer_dims`)."""
    path = _dims_file(reference, cache_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps([int(d) for d in dims]))
    os.replace(tmp, path)
