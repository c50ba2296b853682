"""Bounded readers: a small hostile data file cannot make a loader allocate more than it warrants."""

from __future__ import annotations

import gzip
import pickle
import struct
import zipfile

import numpy as np
import pytest
import torch

from laya_eval.data import Dataset, check_finite, load_dataset
from laya_eval.data.images import MAX_GZIP_RATIO
from laya_eval.errors import DataError


def _idx(dtype_code: int, dims, body: bytes) -> bytes:
    return bytes([0, 0, dtype_code, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + body


def _fmnist_dir(tmp_path, images: bytes, labels: bytes):
    folder = tmp_path / "fm"
    folder.mkdir()
    (folder / "t10k-images-idx3-ubyte.gz").write_bytes(gzip.compress(images))
    (folder / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(labels))
    return folder


def test_small_valid_idx_pair_loads(tmp_path):
    pixels = bytes((i * 7) % 256 for i in range(3 * 28 * 28))
    folder = _fmnist_dir(tmp_path, _idx(0x08, (3, 28, 28), pixels), _idx(0x08, (3,), bytes([1, 0, 9])))
    data = load_dataset("fashion-mnist", "test", data_dir=folder)
    assert data.y.tolist() == [1, 0, 9] and data.x.shape == (3, 1, 28, 28)
    assert float(data.x[0, 0, 0, 1]) == pytest.approx(7 / 255)  # pixel 1 is (1 * 7) % 256


def test_idx_gzip_bomb_is_refused_before_inflating(tmp_path):
    # 60,000 zero images: 47 MB of data that gzip squeezes ~1000x, far beyond the ratio cap
    images = _idx(0x08, (60000, 28, 28), bytes(60000 * 28 * 28))
    folder = _fmnist_dir(tmp_path, images, _idx(0x08, (60000,), bytes(60000)))
    compressed = (folder / "t10k-images-idx3-ubyte.gz").stat().st_size
    assert 60000 * 28 * 28 > MAX_GZIP_RATIO * compressed  # control: the file really is a bomb by the rule
    with pytest.raises(
        DataError,
        match=r"declares \(60000, 28, 28\) \(47040000 bytes of data\); at most "
        rf"{MAX_GZIP_RATIO * compressed} bytes",
    ):
        load_dataset("fashion-mnist", "test", data_dir=folder)


def test_idx_dimensions_that_overflow(tmp_path):
    # 3 x (2**32 - 1) uint8 = 2**96 bytes: numpy's int64 product would wrap; Python's does not
    folder = _fmnist_dir(tmp_path, _idx(0x08, (2**32 - 1,) * 3, b"\0" * 64), _idx(0x08, (1,), b"\0"))
    with pytest.raises(DataError, match=r"declares \(4294967295, 4294967295, 4294967295\) \(79228162458"):
        load_dataset("fashion-mnist", "test", data_dir=folder)


def test_idx_shorter_than_its_header(tmp_path):
    folder = _fmnist_dir(tmp_path, _idx(0x08, (2, 28, 28), bytes(28 * 28)), _idx(0x08, (2,), b"\0\1"))
    with pytest.raises(DataError, match=r"800 bytes but the header \(2, 28, 28\) needs 1584"):
        load_dataset("fashion-mnist", "test", data_dir=folder)


# ---------------------------------------------------------------------------- cifar
def _cifar_dir(tmp_path, labels, label_names, data=None):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    data = np.zeros((2, 3072), dtype=np.uint8) if data is None else data
    (folder / "test_batch").write_bytes(pickle.dumps({b"data": data, b"labels": labels}, protocol=4))
    (folder / "batches.meta").write_bytes(pickle.dumps({b"label_names": label_names}, protocol=4))
    return tmp_path


def test_small_valid_cifar_batch_loads(tmp_path):
    root = _cifar_dir(tmp_path, [1, 0], [b"cat", b"dog"])
    data = load_dataset("cifar10", "test", data_dir=root)
    assert data.class_names == ("cat", "dog") and data.y.tolist() == [1, 0]


def test_cifar_label_names_must_be_utf8(tmp_path):
    root = _cifar_dir(tmp_path, [1, 0], [b"cat", b"\xff\xfe"])
    with pytest.raises(DataError, match=r"'label_names' must be UTF-8 text; got bytes b'\\xff\\xfe'"):
        load_dataset("cifar10", "test", data_dir=root)


def test_cifar_label_names_of_other_types(tmp_path):
    root = _cifar_dir(tmp_path, [1, 0], [b"cat", 7])
    with pytest.raises(DataError, match=r"'label_names' must be a list of 2 to 1000 names"):
        load_dataset("cifar10", "test", data_dir=root)


def test_nested_shared_labels_are_refused_without_expanding(tmp_path):
    labels: list = [0]
    for _ in range(40):  # 2**40 leaves when expanded; a few hundred bytes when pickled
        labels = [labels, labels]
    root = _cifar_dir(tmp_path, labels, [b"cat", b"dog"])
    assert (root / "cifar-10-batches-py" / "test_batch").stat().st_size < 10_000
    with pytest.raises(DataError, match=r"'labels' must be 2 integers in 0\.\.1"):
        load_dataset("cifar10", "test", data_dir=root)


class _Marker:
    def __init__(self, target):
        self.target = target

    def __reduce__(self):
        return (open, (self.target, "w"))


def test_cifar_pickle_payload_does_not_run(tmp_path):
    marker = tmp_path / "ran.txt"
    root = _cifar_dir(tmp_path, _Marker(str(marker)), [b"cat", b"dog"])
    with pytest.raises(DataError, match=r"refusing to unpickle (builtins|io)\.open"):
        load_dataset("cifar10", "test", data_dir=root)
    assert not marker.exists()


# ---------------------------------------------------------------------------- npz
def test_npz_label_far_beyond_the_rows_is_refused(tmp_path):
    path = tmp_path / "big.npz"
    np.savez(path, x=np.zeros((2, 3)), y=np.array([0, 60000]))
    with pytest.raises(DataError, match=r"label 60000 but only 2 labelled rows"):
        load_dataset(f"npz:{path}")
    np.savez(path, x=np.zeros((2, 3)), y=np.array([0, 10**9]))
    with pytest.raises(DataError, match=r"'y' must be a 1-D array of non-negative integers below 65536"):
        load_dataset(f"npz:{path}")


def test_npz_uint64_label_does_not_wrap(tmp_path):
    path = tmp_path / "u64.npz"
    np.savez(path, x=np.zeros((2, 3)), y=np.array([0, 2**63], dtype=np.uint64))
    assert np.array([2**63], dtype=np.uint64).astype(np.int64)[0] < 0  # control: the cast would wrap
    with pytest.raises(
        DataError, match=r"below 65536; got uint64 of shape \(2,\) with values 0\.\.9223372036854775808"
    ):
        load_dataset(f"npz:{path}")


def test_npz_deflate_bomb_member(tmp_path):
    path = tmp_path / "bomb.npz"
    np.savez_compressed(path, x=np.zeros((20000, 100)), y=np.zeros(20000, dtype=np.int64))
    with pytest.raises(DataError, match=r"member 'x.npy' expands \d+ bytes to 16000128; at most 100x"):
        load_dataset(f"npz:{path}")


def test_npz_header_claiming_more_than_stored(tmp_path):
    path = tmp_path / "liar.npz"
    np.savez(path, x=np.zeros((2, 3)), y=np.array([0, 1]))
    with zipfile.ZipFile(path) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    members["x.npy"] = members["x.npy"].replace(b"(2, 3)", b"(9, 3)")  # same length: the header stays valid
    with zipfile.ZipFile(path, "w") as zf:
        for name, raw in members.items():
            zf.writestr(name, raw)
    with pytest.raises(DataError, match=r"member 'x.npy' declares float64 \(9, 3\) \(216 bytes\) but stores 176"):
        load_dataset(f"npz:{path}")


def test_npz_garbled_member_is_one_error(tmp_path):
    path = tmp_path / "garbled.npz"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("x.npy", b"\x93NUMPY\x01\x00\x10\x00{'descr': '<f8', ")
        zf.writestr("y.npy", b"junk")
    with pytest.raises(DataError, match=r"garbled.npz: cannot read npz \("):
        load_dataset(f"npz:{path}")


# ---------------------------------------------------------------------------- non-finite inputs
def test_nonfinite_inputs_name_the_first_sample(tmp_path):
    x = np.zeros((6, 4), dtype=np.float32)
    x[3, 2], x[5, 0] = np.nan, np.inf
    path = tmp_path / "nan.npz"
    # the test split is the file's x_test whole, so the sample numbers are the file's rows
    np.savez(path, x_train=x, y_train=np.array([0, 1] * 3), x_test=x, y_test=np.array([0, 1] * 3))
    with pytest.raises(DataError, match=r"sample 3 holds nan at flat feature 2 \(2 of 6 samples are not finite\)"):
        load_dataset(f"npz:{path}")
    kept = load_dataset(f"npz:{path}", allow_nonfinite=True)
    assert torch.isnan(kept.x[3, 2]) and torch.isinf(kept.x[5, 0])


def test_check_finite_accepts_text_and_finite_tensors():
    check_finite(Dataset(["a", "b"], torch.tensor([0, 1]), ("a", "b"), "toy", "test"))
    check_finite(Dataset(torch.ones(2, 3), torch.tensor([0, 1]), ("a", "b"), "toy", "test"))
