"""Image datasets: digits (bundled with scikit-learn), Fashion-MNIST and CIFAR-10.

Holds the IDX reader for Fashion-MNIST, the numpy-only unpickler for CIFAR-10 batches
and the tar extraction that refuses unsafe members, next to their file names, URLs and
md5 sums.
"""

from __future__ import annotations

import gzip
import io
import math
import pickle
import tarfile
import zlib
from pathlib import Path, PurePosixPath

import numpy as np
import torch

from laya_eval.data.dataset import Dataset
from laya_eval.data.files import (
    _STRATIFIED_RULE,
    _VAL_RULE,
    _cache_dir,
    _download_verified,
    _find_files,
    _md5,
    _not_found,
    _search_dirs,
    _stratified_rows,
    _train_val_rows,
)
from laya_eval.errors import DataError

FASHION_MNIST_CLASSES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
FASHION_MNIST_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
FASHION_MNIST_URL = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
# md5 of the official .gz files (the Debian package recompresses them: other md5, same bytes).
FASHION_MNIST_MD5 = {
    "train-images-idx3-ubyte.gz": "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
    "train-labels-idx1-ubyte.gz": "25c81989df183df01b3e8a0aad5dffbe",
    "t10k-images-idx3-ubyte.gz": "bef4ecab320f06d8554ea6380940ec79",
    "t10k-labels-idx1-ubyte.gz": "bb300cfdad3c16e7a12a480ee83cd310",
}
FASHION_MNIST_SYSTEM_DIRS = (Path("/usr/share/datasets/fashion-mnist"),)

CIFAR10_FOLDER = "cifar-10-batches-py"
CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CIFAR10_MD5 = "c58f30108f718f92721af3b95e74349a"
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)


# ---------------------------------------------------------------------------- digits


def _load_digits(split: str, data_dir, download: bool) -> Dataset:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    rows = _stratified_rows(bunch.target, split)
    x = torch.from_numpy((bunch.data[rows] / 16.0).astype(np.float32))
    return Dataset(
        x,
        torch.from_numpy(bunch.target[rows].astype(np.int64)),
        tuple(str(c) for c in range(10)),
        "digits",
        split,
        {"source": "sklearn.datasets.load_digits", "scale": 1 / 16, "layout": "N,64", "split_rule": _STRATIFIED_RULE},
    )


# ---------------------------------------------------------------------------- fashion-mnist

_IDX_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


# What an IDX file may make the reader allocate: its declared payload, at most MAX_IDX_BYTES
# (Fashion-MNIST's largest file holds 47 MB), and for a .gz at most MAX_GZIP_RATIO times the
# compressed size (the official files compress ~1.2-5x; a gzip bomb of zeros ~1000x).
MAX_IDX_BYTES = 1 << 30
MAX_GZIP_RATIO = 100


def _idx_stream(path: Path, raw: bytes):
    return gzip.GzipFile(fileobj=io.BytesIO(raw)) if path.suffix == ".gz" else io.BytesIO(raw)


def _read_idx(path: Path, ndim: int) -> np.ndarray:
    """Parse an IDX file (optionally gzipped): magic 0x0000 <dtype> <ndim>, big-endian dims, data.

    The header is read first; the payload it declares is checked against
    :data:`MAX_IDX_BYTES` and the gzip ratio cap before anything is decompressed.
    """
    try:
        raw = path.read_bytes()
        with _idx_stream(path, raw) as stream:
            head = stream.read(4 + 4 * ndim)
            if len(head) < 4 + 4 * ndim or head[:2] != b"\0\0" or head[2] not in _IDX_DTYPES or head[3] != ndim:
                raise DataError(
                    f"{path}: bad IDX magic number {head[:4].hex() or 'empty'} "
                    f"(expected 0000080{ndim}); the file is garbled or not this dataset"
                )
            dims = tuple(int.from_bytes(head[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
            dtype = np.dtype(_IDX_DTYPES[head[2]])
            needed = math.prod(dims) * dtype.itemsize  # Python ints: no overflow
            cap = min(MAX_IDX_BYTES, MAX_GZIP_RATIO * len(raw) if path.suffix == ".gz" else len(raw))
            if needed > cap:
                raise DataError(
                    f"{path}: the header declares {dims} ({needed} bytes of data); at most {cap} "
                    "bytes are allowed for this file (size cap / gzip ratio); the file is garbled "
                    "or hostile"
                )
            body = stream.read(needed + 1)
    except (OSError, EOFError, zlib.error) as exc:
        raise DataError(f"{path}: cannot read ({exc}); the file is truncated or not gzip") from exc
    if len(body) != needed:
        raise DataError(
            f"{path}: {len(head) + len(body)}{'+' if len(body) > needed else ''} bytes but the "
            f"header {dims} needs {len(head) + needed}; the file is truncated or garbled"
        )
    return np.frombuffer(body, dtype).reshape(dims)


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
    return Dataset(
        x,
        torch.from_numpy(labels[rows].astype(np.int64)),
        FASHION_MNIST_CLASSES,
        "fashion-mnist",
        split,
        {
            "source": str(found[0].parent),
            "scale": 1 / 255,
            "layout": "N,1,28,28",
            "split_rule": "test = official t10k files; " + _VAL_RULE,
        },
    )


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
        raise DataError(
            f"{self.path}: refusing to unpickle {module}.{name}; a CIFAR-10 batch "
            "holds only numpy arrays, lists and bytes (the file may be malicious)"
        )


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
    # repr only short str/bytes keys: the repr of a self-sharing tuple key grows exponentially
    shown = [repr(k)[:40] if isinstance(k, (str, bytes)) else type(k).__name__ for k in list(d)[:10]]
    raise DataError(f"{path}: key {key!r} missing; found {', '.join(shown) or 'no keys'}{', …' if len(d) > 10 else ''}")


MAX_CIFAR_CLASSES = 1000
MAX_LABEL_NAME = 100  # bytes of one CIFAR class name


def _cifar_labels(labels: object, n_rows: int, n_classes: int, path: Path) -> np.ndarray:
    """A flat list of ints or a 1-D integer array, checked before numpy sees it.

    ``np.asarray`` on nested lists that share themselves (cheap in a pickle's memo)
    would materialise every element: a 6.5 KB file could grow to gigabytes.
    """
    message = f"{path}: 'labels' must be {n_rows} integers in 0..{n_classes - 1}"
    if isinstance(labels, list):
        if len(labels) != n_rows or not all(type(v) is int and 0 <= v < n_classes for v in labels):
            raise DataError(message)
        return np.array(labels, dtype=np.int64)
    if not isinstance(labels, np.ndarray) or labels.shape != (n_rows,) or labels.dtype.kind not in "iu":
        raise DataError(message)
    if labels.size and (int(labels.min()) < 0 or int(labels.max()) >= n_classes):
        raise DataError(message)
    return labels.astype(np.int64)


def _cifar_batch(path: Path, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    d = _unpickle_numpy_only(path)
    if not isinstance(d, dict):
        raise DataError(f"{path}: expected a dict, got {type(d).__name__}")
    data = _key(d, "data", path)
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        raise DataError(f"{path}: 'data' must be a uint8 array of shape (n, 3072)")
    return data, _cifar_labels(_key(d, "labels", path), len(data), n_classes, path)


def _cifar_class_names(meta: object, path: Path) -> tuple[str, ...]:
    label_names = _key(meta, "label_names", path) if isinstance(meta, dict) else None
    if (
        not isinstance(label_names, list)
        or not 2 <= len(label_names) <= MAX_CIFAR_CLASSES
        or not all(isinstance(n, (bytes, str)) and 0 < len(n) <= MAX_LABEL_NAME for n in label_names)
    ):
        raise DataError(
            f"{path}: 'label_names' must be a list of 2 to {MAX_CIFAR_CLASSES} names "
            f"(bytes or str of 1 to {MAX_LABEL_NAME} characters)"
        )
    try:
        return tuple(n.decode("utf-8") if isinstance(n, bytes) else n for n in label_names)
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: 'label_names' must be UTF-8 text; got bytes {exc.object[:20]!r}") from None


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
    class_names = _cifar_class_names(_unpickle_numpy_only(found[-1]), found[-1])
    parts = [_cifar_batch(p, len(class_names)) for p in found[:-1]]
    data, labels = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    rows = slice(None) if split == "test" else _train_val_rows(len(labels), split)
    x = torch.from_numpy(data[rows].reshape(-1, 3, 32, 32).astype(np.float32) / 255)
    mean, std = torch.tensor(CIFAR10_MEAN).view(3, 1, 1), torch.tensor(CIFAR10_STD).view(3, 1, 1)
    return Dataset(
        (x - mean) / std,
        torch.from_numpy(labels[rows].astype(np.int64)),
        class_names,
        "cifar10",
        split,
        {
            "source": str(found[0].parent),
            "scale": 1 / 255,
            "layout": "N,3,32,32",
            "normalize": {"mean": list(CIFAR10_MEAN), "std": list(CIFAR10_STD)},
            "split_rule": "test = official test_batch; " + _VAL_RULE,
        },
    )
