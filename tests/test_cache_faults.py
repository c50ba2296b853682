"""The feature cache under faults: a full disk, dead writers' temporaries, declared sizes that the bytes do not
back, a cache folder that cannot be made, and helper modules a ``py:`` factory imports.

Oracles: the files on disk (what is left in the cache folder), tracemalloc's count of the bytes allocated, a
direct encoding without the cache, and a child process that has exited (a process id no one runs).
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import tracemalloc
import warnings

import numpy as np
import pytest
import torch

from laya_eval.data.dataset import Dataset
from laya_eval.errors import CheckpointError, ConfigError, RecomputedWarning
from laya_eval.loading import feature_cache
from laya_eval.loading.feature_cache import extract_features, feature_key
from laya_eval.output.files import file_sha256
from laya_eval.output.reading import read_regular_file
from tests.cli_helpers import assert_one_line_error, run


def _data(n=23, d=6):
    g = torch.Generator().manual_seed(0)
    return Dataset(
        x=torch.randn(n, d, generator=g), y=torch.arange(n) % 3, class_names=("a", "b", "c"), name="toy", split="train"
    )


def _encode(x):
    w = torch.linspace(-1, 1, 6 * 3).reshape(6, 3)
    return [x @ w, torch.tanh(x @ w)]


def _features(cache, data):
    return extract_features(_encode, data, feature_key({"name": "toy"}, data), cache_dir=cache, batch_size=7)


def _full_disk(fh, rows):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


# ------------------------------------------------------------------ a full disk
def test_a_full_disk_is_one_line_and_leaves_no_temporary(tmp_path, monkeypatch):
    cache, data = tmp_path / "cache", _data()
    monkeypatch.setattr(feature_cache, "_write_rows", _full_disk)
    with pytest.raises(ConfigError) as info:
        _features(cache, data)
    message = str(info.value)
    assert message.startswith(f"cannot write to '{cache}': no space left on the device") and "\n" not in message
    assert list(cache.iterdir()) == []  # no entry, no <entry>.tmp<PID>
    monkeypatch.undo()
    feats = _features(cache, data)  # space again: the entry is written and holds the direct encoding
    assert not feats.reused
    for got, want in zip(feats.hidden, _encode(data.x)):
        torch.testing.assert_close(got, want)
    assert _features(cache, data).reused


NET = """
import torch
from torch import nn
{imports}

def make():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 5), {act}(), nn.Linear(5, 4), {act}())
"""


def _fit_head(path, cache, out):
    return run(
        "fit-head",
        "--model",
        f"py:{path}:make",
        "--layers",
        "1,3",
        "--head",
        "concat",
        "--data",
        "digits",
        "--limit",
        40,
        "--epochs",
        1,
        "--cache-dir",
        cache,
        "--out",
        out,
        "-q",
    )


def test_fit_head_on_a_full_disk_is_one_line_exit_2(tmp_path, monkeypatch):
    path, cache = tmp_path / "net.py", tmp_path / "cache"
    path.write_text(NET.format(imports="", act="nn.ReLU"))
    monkeypatch.setattr(feature_cache, "_write_rows", _full_disk)
    assert_one_line_error(_fit_head(path, cache, tmp_path / "h.pt"), r"no space left on the device")
    assert not (tmp_path / "h.pt").exists()
    assert [p.name for p in cache.iterdir()] == ["layer-dims"]  # the recorded layer sizes; no entry, no temporary


# ------------------------------------------------------------------ temporaries of dead writers
def _dead_pid():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_temporaries_of_dead_writers_are_removed_and_live_ones_kept(tmp_path):
    cache, data = tmp_path / "cache", _data()
    cache.mkdir()
    dead = cache / f"{'a' * 32}.tmp{_dead_pid()}"  # a writer killed mid-way (SIGBUS, kill -9): no owner record
    live = cache / f"{'b' * 32}.tmp{os.getpid()}"  # a writer still running (this process)
    elsewhere = cache / f"{'c' * 32}.tmp{_dead_pid()}"  # written from another machine on a shared folder
    for folder in (dead, live, elsewhere):
        folder.mkdir()
        (folder / "layer0.npy").write_bytes(b"half")
    (elsewhere / "owner.json").write_text(json.dumps({"host": "another-host", "pid": int(elsewhere.name[36:])}))
    not_ours = cache / "notes.tmp1"  # not a cache entry's name: never touched
    not_ours.mkdir()
    feats = _features(cache, data)
    assert sorted(p.name for p in cache.iterdir()) == sorted([feats.path.name, live.name, elsewhere.name, "notes.tmp1"])


# ------------------------------------------------------------------ sizes from the bytes, not from declarations
def test_a_huge_bound_allocates_only_what_the_file_holds(tmp_path):
    path = tmp_path / "small"
    path.write_bytes(b"abc" * 1000)
    tracemalloc.start()
    try:
        assert read_regular_file(path, 1 << 50) == b"abc" * 1000  # a bound of 1 PiB, a file of 3 kB
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak


def _rehash(folder, name):
    meta = json.loads((folder / "meta.json").read_text())
    meta["arrays"][name]["sha256"] = file_sha256(folder / name)
    (folder / "meta.json").write_text(json.dumps(meta))


def _declare_wide_layer(folder):
    """meta.json declares layer 0 as 2**23 wide (a 770 MB read for 23 rows); the file keeps its 3 columns."""
    meta = json.loads((folder / "meta.json").read_text())
    meta["layer_dims"][0] = 1 << 23
    meta["arrays"]["layer0.npy"]["shape"] = [23, 1 << 23]
    (folder / "meta.json").write_text(json.dumps(meta))


def _header_declares_wide_layer(folder):
    """layer0.npy's own header claims 2**30 columns; its size, its bytes and meta.json's record are consistent."""
    raw = (folder / "layer0.npy").read_bytes()
    end = raw.index(b"\n")  # the header is padded with spaces up to its newline: the file keeps its length
    header = raw[:end].replace(b"(23, 3)", b"(23, 1073741824)", 1).rstrip(b" ")
    assert b"1073741824" in header and len(header) <= end
    (folder / "layer0.npy").write_bytes(header.ljust(end, b" ") + raw[end:])
    _rehash(folder, "layer0.npy")


@pytest.mark.parametrize("declare", [_declare_wide_layer, _header_declares_wide_layer])
def test_a_declared_size_is_not_allocated_before_the_bytes_are_there(tmp_path, declare):
    cache, data = tmp_path / "cache", _data()
    folder = _features(cache, data).path
    declare(folder)
    tracemalloc.start()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            feats = _features(cache, data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 << 20, peak  # the declared layer alone would be 770 MB (or 100 GB from the header)
    assert [w for w in caught if issubclass(w.category, RecomputedWarning)], caught
    assert not feats.reused
    for got, want in zip(feats.hidden, _encode(data.x)):
        torch.testing.assert_close(got, want)


# ------------------------------------------------------------------ a cache folder that cannot be made
def test_a_cache_dir_behind_a_file_is_one_line_before_any_encoding(tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a folder")
    calls = []

    def encode(x):
        calls.append(1)
        return _encode(x)

    data = _data()
    for cache in (blocker, blocker / "features"):
        with pytest.raises(ConfigError, match=rf"feature cache folder '{cache}' cannot hold the cache \('{blocker}'"):
            extract_features(encode, data, feature_key({"name": "toy"}, data), cache_dir=cache)
    assert not calls and blocker.read_text() == "a file, not a folder"
    path = tmp_path / "net.py"
    path.write_text(NET.format(imports="", act="nn.ReLU"))
    assert_one_line_error(
        _fit_head(path, blocker / "features", tmp_path / "h.pt"),
        r"feature cache folder '.*blocker/features' cannot hold the cache .* is in the way and is not a folder\); "
        r"choose another with --cache-dir\.$",
    )


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write into any folder")
def test_a_cache_dir_without_permission_is_one_line(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    data = _data()
    with pytest.raises(ConfigError, match=r"cannot hold the cache \((Permission denied|it is not writable)\)"):
        extract_features(_encode, data, feature_key({"name": "toy"}, data), cache_dir=locked / "features")


# ------------------------------------------------------------------ code a py: factory imports
def _net_with_helper(tmp_path, monkeypatch, act):
    name = "laya_cache_test_blocks"
    (tmp_path / f"{name}.py").write_text(f"from torch import nn\n\nACT = nn.{act}\n")
    (tmp_path / "net.py").write_text(NET.format(imports=f"from {name} import ACT", act="ACT"))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    return tmp_path / "net.py"


def _py_features(path, data, cache):
    from laya_eval.loading.specs import load_backbone
    from laya_eval.loading.feature_cache import backbone_features

    backbone = load_backbone(f"py:{path}:make", layers=["1", "3"], example_input=data.x[:2], cache_dir=cache)
    return backbone, backbone_features(backbone, data, cache_dir=cache)


def test_a_helper_module_the_factory_imports_keys_the_cache(tmp_path, monkeypatch):
    data = Dataset(x=torch.randn(20, 64), y=torch.arange(20) % 2, class_names=("a", "b"), name="toy", split="train")
    path, cache = _net_with_helper(tmp_path, monkeypatch, "ReLU"), tmp_path / "cache"
    backbone, first = _py_features(path, data, cache)
    assert not first.reused
    assert backbone.source_sha256["imported:laya_cache_test_blocks.py"] == file_sha256(
        tmp_path / "laya_cache_test_blocks.py"
    )
    assert _py_features(path, data, cache)[1].reused  # the same code: a hit
    (tmp_path / "laya_cache_test_blocks.py").write_text("from torch import nn\n\nACT = nn.Tanh\n")
    assert not _py_features(path, data, cache)[1].reused  # the helper changed, the factory's file did not: a miss


def test_a_checkpoint_whose_imported_helper_changed_is_refused(tmp_path, monkeypatch):
    from laya_eval.loading.checkpoints import load_checkpoint, save_checkpoint
    from laya_eval.loading.specs import load_backbone
    from laya_eval.models.heads import make_head
    from laya_eval.models.layered import LayeredModel, ModelInfo

    path = _net_with_helper(tmp_path, monkeypatch, "ReLU")
    backbone = load_backbone(f"py:{path}:make", layers=["1", "3"], example_input=torch.zeros(2, 64))
    info = ModelInfo(num_classes=2, class_names=("a", "b"), input_shape=(64,), dataset=None)
    save_checkpoint(LayeredModel(backbone, make_head("concat", backbone.layer_dims, 2), info), tmp_path / "c.pt")
    load_checkpoint(tmp_path / "c.pt", trust_code=True)  # unchanged: loads
    (tmp_path / "laya_cache_test_blocks.py").write_text("from torch import nn\n\nACT = nn.Tanh\n")
    with pytest.raises(CheckpointError, match=r"changed since the head was made \(imported:laya_cache_test_blocks"):
        load_checkpoint(tmp_path / "c.pt", trust_code=True)


def test_library_folders_are_not_keyed_as_a_factorys_code():
    from laya_eval.loading.references import _library_roots, source_hashes

    hashes = source_hashes("tests.byom_models:small_cnn")
    imported = [k for k in hashes if k.startswith("imported:")]
    assert imported and all(not k.startswith("imported:..") for k in imported)
    # everything keyed lies in the tests package; nothing of torch, numpy or the standard library
    assert np.all([not any(part in k for part in ("torch/", "numpy/", "site-packages")) for k in imported])
    assert _library_roots()
