"""Damaged and re-packed Keras files: one line or the same model, never a traceback.

A corpus is built from one valid ``.weights.h5`` and one valid ``.keras``: bytes flipped at offsets spread over
each file, and archive members crafted with a bad CRC, the encryption flag, an unknown compression method or a
declared size smaller than their data. A flipped byte in HDF5 weight data changes a weight without any
checksum to show it, so such a file imports; a ``.keras`` member carries a CRC, so a flip there is refused or
(in a header field zipfile does not read, such as the time) changes nothing.
"""

from __future__ import annotations

import io
import struct
import subprocess
import zipfile

import numpy as np
import pytest
import torch

from laya_eval import import_keras
from laya_eval.errors import CheckpointError
from tests.cli_helpers import assert_one_line_error, run
from tests.test_keras_import import _archive, _config, numpy_logits, tiny_layers, write_weights

MEMBERS = ("config.json", "metadata.json", "model.weights.h5")


def _valid(tmp_path):
    layers = tiny_layers(np.random.default_rng(1))
    h5 = write_weights(tmp_path / "valid.weights.h5", layers)
    return layers, h5, _archive(tmp_path / "valid.keras", _config(), h5.read_bytes())


def _flipped(data: bytes, offset: int) -> bytes:
    damaged = bytearray(data)
    damaged[offset] ^= 0xFF
    return bytes(damaged)


def _patched(data: bytes, member: str, central: int, local: int, value: bytes) -> bytes:
    """``data`` with a field of ``member``'s central directory entry and local header replaced by ``value``
    (offsets from the ``PK\\1\\2`` and ``PK\\3\\4`` signatures, as in the zip specification)."""
    out = bytearray(data)
    info = zipfile.ZipFile(io.BytesIO(data)).getinfo(member)
    out[info.header_offset + local : info.header_offset + local + len(value)] = value
    start = 0
    while (start := data.find(b"PK\x01\x02", start + 1)) >= 0:
        (length,) = struct.unpack("<H", data[start + 28 : start + 30])
        if data[start + 46 : start + 46 + length] == member.encode():
            out[start + central : start + central + len(value)] = value
    return bytes(out)


CRAFTED = {  # (central offset, local offset, value) -> the refusal
    "a bad CRC": (16, 14, b"\x00\x00\x00\x00", r"is damaged \(BadZipFile: Bad CRC-32"),
    "the encryption flag": (8, 6, b"\x01\x00", r"is encrypted"),
    "compression method 99": (10, 8, b"\x63\x00", r"uses compression method 99"),
    "a declared size below its data": (24, 22, b"\x05\x00\x00\x00", r"is damaged \(BadZipFile: Bad CRC-32"),
}


def _corpus(tmp_path):
    """``(name, path)`` of every damaged file: flips in both files, crafted members in the archive."""
    _, h5, keras = _valid(tmp_path)
    files = []
    for source in (h5, keras):
        data = source.read_bytes()
        offsets = sorted({*range(0, 2048, 64), *np.linspace(2048, len(data) - 1, 12).astype(int).tolist()})
        for offset in offsets:
            path = tmp_path / f"flip-{offset}-{source.name}"
            path.write_bytes(_flipped(data, offset))
            files.append((f"{source.name} byte {offset}", path))
    for kind, (central, local, value, _) in CRAFTED.items():
        for member in MEMBERS:
            path = tmp_path / f"{kind.replace(' ', '-')}-{member}.keras"
            path.write_bytes(_patched(keras.read_bytes(), member, central, local, value))
            files.append((f"{kind} in {member}", path))
    return files


def test_a_damaged_file_is_refused_in_one_line_or_imports_without_a_traceback(tmp_path):
    layers, _, _ = _valid(tmp_path)
    x = np.random.default_rng(2).normal(0, 1, (8, 6)).astype(np.float32)
    expected = numpy_logits(layers, x)
    outcome = {"refused": 0, "imported": 0}
    for name, path in _corpus(tmp_path):
        out = tmp_path / "out.pt"
        result = run("import-keras", path, "--out", out)
        if result.exit_code == 0:
            outcome["imported"] += 1
            if path.suffix == ".keras":  # a CRC guards every member: an accepted archive is the valid model
                with torch.no_grad():
                    got = import_keras(path)(torch.from_numpy(x)).numpy()
                np.testing.assert_allclose(got, expected, atol=1e-5, err_msg=name)
            out.unlink()
        else:
            assert_one_line_error(result, rf"'{path}'")
            outcome["refused"] += 1
            assert not out.exists(), name
    assert outcome["refused"] >= 40 and outcome["imported"] >= 10, outcome


@pytest.mark.parametrize("kind", list(CRAFTED))
@pytest.mark.parametrize("member", MEMBERS)
def test_a_crafted_archive_member_is_refused_naming_it(kind, member, tmp_path):
    *_, keras = _valid(tmp_path)
    central, local, value, message = CRAFTED[kind]
    path = tmp_path / "crafted.keras"
    path.write_bytes(_patched(keras.read_bytes(), member, central, local, value))
    with pytest.raises(CheckpointError, match=rf"archive member '{member}' {message}"):
        import_keras(path)


def test_non_finite_weights_are_refused_naming_the_weight(tmp_path):
    layers = tiny_layers(np.random.default_rng(1))
    for bad in (np.nan, np.inf):
        layers[4][2][0][1, 2] = bad  # layers[4] is the first adapter g1, stored as layers/dense_2; [0] its kernel
        path = write_weights(tmp_path / "nan.weights.h5", layers)
        with pytest.raises(CheckpointError, match=r"weight layers/dense_2/vars/0 of layer 'g1' holds NaN or infinite"):
            import_keras(path)
        assert_one_line_error(run("import-keras", path, "--out", tmp_path / "c.pt"), r"'g1' holds NaN or infinite")


def _rezipped(source, target, tmp_path):
    """``source`` unpacked and packed again by ``zip -r`` (deflate), as a user re-packing the archive would."""
    folder = tmp_path / "unpacked"
    with zipfile.ZipFile(source) as archive:
        archive.extractall(folder)
    subprocess.run(["zip", "-q", "-r", "-9", str(target), "."], cwd=folder, check=True)
    return target


def test_an_ordinarily_deflated_archive_is_read_and_a_bomb_is_not(tmp_path):
    layers, _, keras = _valid(tmp_path)
    deflated = _rezipped(keras, tmp_path / "rezipped.keras", tmp_path)
    with zipfile.ZipFile(deflated) as archive:  # really deflated, and smaller than its weights
        info = archive.getinfo("model.weights.h5")
        assert info.compress_type == zipfile.ZIP_DEFLATED and info.file_size > deflated.stat().st_size
    x = np.random.default_rng(2).normal(0, 1, (8, 6)).astype(np.float32)
    with torch.no_grad():
        got = import_keras(deflated)(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, numpy_logits(layers, x), atol=1e-5)
    bomb = _archive(tmp_path / "bomb.keras", _config(), bytes(64 << 20), compress=zipfile.ZIP_DEFLATED)
    assert bomb.stat().st_size < 1 << 20  # 64 MiB of zeros in under 1 MiB
    assert_one_line_error(
        run("import-keras", bomb, "--out", tmp_path / "c.pt"),
        r"'model\.weights\.h5' declares 67108864 bytes from \d+ compressed",
    )
