"""``npz:PATH`` datasets: arrays read from an ``.npz`` file without pickle."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import torch

from laya_eval.data.dataset import Dataset
from laya_eval.data.files import _VAL_RULE, _train_val_rows
from laya_eval.errors import DataError


def _npz_labels(arr: np.ndarray, key: str, path: Path) -> np.ndarray:
    if arr.ndim != 1 or arr.dtype.kind not in "iub" or (arr.size and arr.min() < 0):
        raise DataError(f"{path}: {key!r} must be a 1-D array of non-negative integers; "
                        f"got {arr.dtype} of shape {arr.shape}")
    return arr.astype(np.int64)


def _load_npz(path_text: str, split: str) -> Dataset:
    path = Path(path_text).expanduser().resolve()
    try:
        archive = np.load(path, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise DataError(f"{path}: cannot read npz ({exc})") from exc
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise DataError(f"{path}: expected an .npz archive with arrays 'x' and 'y', got a single array")
    with archive:
        keys = set(archive.files)
        if {"x_train", "y_train", "x_test", "y_test"} <= keys:
            own_val = {"x_val", "y_val"} <= keys
            part = {"test": "test", "val": "val" if own_val else "train", "train": "train"}[split]
            cut = split != "test" and not own_val
            splits = "x_train/x_test, " + ("x_val/y_val" if own_val else _VAL_RULE)
        elif {"x", "y"} <= keys:
            part, cut, splits = None, False, "none"
        else:
            raise DataError(f"{path}: needs arrays 'x' and 'y' (or x_train, y_train, x_test, y_test); "
                            f"found {sorted(keys) or 'none'}")
        xk, yk = ("x", "y") if part is None else (f"x_{part}", f"y_{part}")
        try:
            y = _npz_labels(archive[yk], yk, path)
            rows = _train_val_rows(len(y), split) if cut else slice(None)
            x, y = archive[xk][rows], y[rows]
            names = archive["class_names"] if "class_names" in keys else None
            # every split gets the same class list, even when its own labels miss a class
            n_classes = max(int(_npz_labels(archive[k], k, path).max(initial=-1)) + 1
                            for k in keys & {"y", "y_train", "y_val", "y_test"})
        except ValueError as exc:  # object arrays need pickle, which is refused
            raise DataError(f"{path}: cannot load arrays ({exc})") from exc
    if names is not None and (names.ndim != 1 or names.dtype.kind not in "US"):
        raise DataError(f"{path}: 'class_names' must be a 1-D array of str")
    class_names = tuple(str(n) for n in names) if names is not None else tuple(map(str, range(n_classes)))
    if n_classes > len(class_names):
        raise DataError(f"{path}: label {n_classes - 1} but only {len(class_names)} class names")
    if x.dtype.kind not in "biufUS" or x.ndim == 0 or len(x) != len(y):
        raise DataError(f"{path}: {xk!r} must be a numeric or str array with {len(y)} rows; "
                        f"got {x.dtype} of shape {x.shape}")
    info = {"source": str(path), "splits": splits, "x_dtype": str(x.dtype)}
    if x.dtype.kind in "US":
        return Dataset([str(t) for t in x], torch.from_numpy(y), class_names, f"npz:{path}", split, info)
    return Dataset(torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)), torch.from_numpy(y),
                   class_names, f"npz:{path}", split, info)
