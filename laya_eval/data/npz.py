"""``npz:PATH`` datasets: arrays read from an ``.npz`` file without pickle."""

from __future__ import annotations

import math
import tokenize
import zipfile
import zlib
from pathlib import Path

import numpy as np
import torch

from laya_eval.data.dataset import Dataset
from laya_eval.data.files import _STRATIFIED_RULE, _VAL_RULE, _stratified_rows, _train_val_rows
from laya_eval.errors import DataError


# What an npz may make the reader allocate: each member's declared array must fit in its
# stored bytes, a deflated member may expand at most MAX_NPZ_RATIO times, and without
# class_names the classes are bounded by the labelled rows (a label 10**9 in a 1 KB file
# would otherwise build a billion class names).
MAX_NPZ_RATIO = 100
MAX_CLASSES = 1 << 16
_READ_ERRORS = (
    OSError,
    ValueError,
    EOFError,
    zipfile.BadZipFile,
    zlib.error,
    tokenize.TokenError,
    SyntaxError,
    KeyError,
    TypeError,
    RecursionError,
    NotImplementedError,
    OverflowError,
)


def _check_members(path: Path) -> None:
    """Read every member's .npy header (not its data) and bound what loading it allocates."""
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            if info.file_size > MAX_NPZ_RATIO * max(info.compress_size, 1 << 10):
                raise DataError(
                    f"{path}: member {info.filename[:60]!r} expands {info.compress_size} bytes to "
                    f"{info.file_size}; at most {MAX_NPZ_RATIO}x is allowed (a zip bomb?)"
                )
            with archive.open(info) as fh:
                version = np.lib.format.read_magic(fh)
                if version not in ((1, 0), (2, 0)):
                    raise DataError(
                        f"{path}: member {info.filename[:60]!r} has .npy format {version}; expected 1.0 or 2.0"
                    )
                read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
                shape, _, dtype = read(fh)
            if dtype.hasobject:
                raise DataError(
                    f"{path}: cannot load arrays: member {info.filename[:60]!r} holds Python objects "
                    "(dtype object), which need pickle (refused); store numeric or str arrays"
                )
            needed = math.prod(shape) * dtype.itemsize
            if needed > info.file_size:
                raise DataError(
                    f"{path}: member {info.filename[:60]!r} declares {dtype} {shape} ({needed} bytes) "
                    f"but stores {info.file_size}; the file is garbled or hostile"
                )


def _npz_labels(arr: np.ndarray, key: str, path: Path) -> np.ndarray:
    # compare in the stored dtype: astype(int64) would wrap a uint64 label 2**63 to a negative number
    if arr.ndim != 1 or arr.dtype.kind not in "iub" or (arr.size and (arr.min() < 0 or arr.max() >= MAX_CLASSES)):
        raise DataError(
            f"{path}: {key!r} must be a 1-D array of non-negative integers below {MAX_CLASSES}; "
            f"got {arr.dtype} of shape {arr.shape}"
            + (f" with values {arr.min()}..{arr.max()}" if arr.ndim == 1 and arr.size else "")
        )
    return arr.astype(np.int64)


def _split_rows(x: np.ndarray, y: np.ndarray, split: str, cut: bool, stratify: bool, path: Path):
    """The rows of ``split``: the stratified split of the bundled datasets for one set of rows (``x``, ``y``),
    the last 10% of a given training set for ``val`` (``cut``), else all rows."""
    if stratify:
        try:
            rows = _stratified_rows(y, split)
        except DataError as exc:
            raise DataError(
                f"{path}: {exc}; give each class more rows, or store the split yourself "
                "(x_train, y_train, x_test, y_test)"
            ) from None
    else:
        rows = _train_val_rows(len(y), split) if cut else slice(None)
    return x[rows], y[rows]


def _load_npz(path_text: str, split: str) -> Dataset:
    path = Path(path_text).expanduser().resolve()
    if not path.is_file():
        raise DataError(f"{path}: no such npz file" if not path.exists() else f"{path}: not a regular file")
    try:
        if zipfile.is_zipfile(path):
            _check_members(path)
        archive = np.load(path, allow_pickle=False)
    except _READ_ERRORS as exc:
        raise DataError(f"{path}: cannot read npz ({type(exc).__name__}: {str(exc)[:200]})") from None
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
            # one set of rows: split it like the bundled digits, so that "test" is held out
            part, cut, splits = None, False, _STRATIFIED_RULE
        else:
            raise DataError(
                f"{path}: needs arrays 'x' and 'y' (or x_train, y_train, x_test, y_test); "
                f"found {sorted(keys) or 'none'}"
            )
        xk, yk = ("x", "y") if part is None else (f"x_{part}", f"y_{part}")
        try:
            y = _npz_labels(archive[yk], yk, path)
            x = archive[xk]
            names = archive["class_names"] if "class_names" in keys else None
            # every split gets the same class list, even when its own labels miss a class
            labels = [_npz_labels(archive[k], k, path) for k in sorted(keys & {"y", "y_train", "y_val", "y_test"})]
            n_classes = max(int(a.max(initial=-1)) + 1 for a in labels)
            n_rows = sum(len(a) for a in labels)
        except _READ_ERRORS as exc:  # object arrays need pickle, which is refused; members may be garbled
            raise DataError(f"{path}: cannot load arrays ({type(exc).__name__}: {str(exc)[:200]})") from None
    if names is not None and (names.ndim != 1 or names.dtype.kind not in "US" or len(names) > MAX_CLASSES):
        raise DataError(f"{path}: 'class_names' must be a 1-D array of at most {MAX_CLASSES} str")
    if names is None and n_classes > max(n_rows, 2):
        raise DataError(
            f"{path}: label {n_classes - 1} but only {n_rows} labelled rows; labels must be class "
            "indices 0..C-1, or store the names in 'class_names'"
        )
    class_names = tuple(str(n) for n in names) if names is not None else tuple(map(str, range(n_classes)))
    if n_classes > len(class_names):
        raise DataError(f"{path}: label {n_classes - 1} but only {len(class_names)} class names")
    if x.ndim > 0 and len(x) == len(y):
        x, y = _split_rows(x, y, split, cut, part is None, path)
    if x.dtype.kind not in "biufUS" or x.ndim == 0 or len(x) != len(y):
        raise DataError(
            f"{path}: {xk!r} must be a numeric or str array with {len(y)} rows; got {x.dtype} of shape {x.shape}"
        )
    info = {"source": str(path), "split_rule": splits, "x_dtype": str(x.dtype)}
    if x.dtype.kind in "US":
        return Dataset([str(t) for t in x], torch.from_numpy(y), class_names, f"npz:{path}", split, info)
    return Dataset(
        torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)),
        torch.from_numpy(y),
        class_names,
        f"npz:{path}",
        split,
        info,
    )
