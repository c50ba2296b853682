"""Depth-mixer classifiers as backbones of ``laya-eval train``: images and texts, model files, audits of them."""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pandas as pd
import pytest
import torch

from laya_eval.data import Dataset
from laya_eval.mixers.audit import MixerOptions, audit_mixers
from laya_eval.mixers.reference import TokenDepthClassifier, load_mixer_model, save_mixer_model
from laya_eval.mixers.training import train_mixer_model
from laya_eval.mixers.vocabulary import build_vocabulary, encode_texts
from laya_eval.training.trainer import TrainOptions
from tests.cli_helpers import assert_one_line_error, run

POSITIVE = ["good", "great", "fine", "nice", "superb"]
NEGATIVE = ["bad", "awful", "dull", "poor", "weak"]


def _texts(n: int, seed: int) -> Dataset:
    """Sentences of 3 to 6 words; label 0 when a positive word occurs, 1 when a negative one does."""
    rng = np.random.default_rng(seed)
    texts, labels = [], []
    for i in range(n):
        label = i % 2
        cue = rng.choice(NEGATIVE if label else POSITIVE)
        filler = list(rng.choice(["the", "film", "was", "plot", "and", "a", "!"], size=int(rng.integers(2, 6))))
        filler.insert(int(rng.integers(0, len(filler) + 1)), str(cue))
        texts.append(" ".join(filler).capitalize())
        labels.append(label)
    return Dataset(texts, torch.tensor(labels), ("positive", "negative"), "generated-text", "train")


def test_vocabulary_counts_words_as_worked_out_by_hand():
    texts = ["A good film, a GOOD plot!", "a bad film", "Isn't it good?"]
    # words (lower case; letters/digits/apostrophes, or one punctuation mark):
    # a x3, good x3, film x2, then once each: ",", "plot", "!", "bad", "isn't", "it", "?"
    assert build_vocabulary(texts, min_count=2) == ["a", "good", "film"]  # ties alphabetical: a < good
    assert build_vocabulary(texts, min_count=1, max_size=4) == ["a", "good", "film", "!"]  # '!' sorts first
    ids = encode_texts(["good film zebra", ""], ["a", "good", "film"], 4)
    # good -> 1 + 2 = 3, film -> 2 + 2 = 4, zebra unknown -> 1, padding 0
    assert ids.tolist() == [[3, 4, 1, 0], [0, 0, 0, 0]]


def test_text_model_trains_round_trips_and_is_audited(tmp_path):
    data = {"train": _texts(120, 0), "val": _texts(30, 1), "test": _texts(40, 2)}
    fit = train_mixer_model(
        "attnres",
        data,
        config={"dim": 8, "depth": 2, "max_len": 8, "min_count": 1},
        options=TrainOptions(epochs=3, batch_size=16, lr=3e-3, patience=3, seed=0),
    )
    counts = Counter(w for t in data["train"].x for w in re.findall(r"[a-z0-9']+|[^\sa-z0-9']", t.lower()))
    assert fit.model.config["vocabulary"] == sorted(counts, key=lambda w: (-counts[w], w))
    path = save_mixer_model(fit.model, tmp_path / "text.pt", info=fit.info)
    loaded, info = load_mixer_model(path)
    assert isinstance(loaded, TokenDepthClassifier) and info["n_test"] == 40
    ids = loaded.encode_texts(data["test"].x)
    with torch.no_grad():
        assert torch.equal(loaded(ids), fit.model(fit.model.encode_texts(data["test"].x)))
    audit = audit_mixers(
        str(path),
        data["test"],
        options=MixerOptions(limit=None, batch_size=16, bootstrap=0, methods=("mass", "random")),
    )
    assert list(audit.summary["mixer"].unique()) == ["mixers.0", "mixers.1"]
    assert (audit.summary["n"] == 40).all() and audit.summary["faithfulness"].notna().all()


def _image_npz(path, n=96):
    gen = torch.Generator().manual_seed(3)
    y = torch.arange(n) % 3
    x = torch.randn(n, 1, 8, 8, generator=gen) * 0.3
    x[:, 0, :4, :4] += (y == 0).float()[:, None, None]  # each class lights one quarter of the image
    x[:, 0, 4:, 4:] += (y == 1).float()[:, None, None]
    np.savez(path, x_train=x[:72].numpy(), y_train=y[:72].numpy(), x_test=x[72:].numpy(), y_test=y[72:].numpy())
    return path


def test_train_cli_writes_a_mixer_file_that_mixers_audits_without_trust_code(tmp_path):
    data = f"npz:{_image_npz(tmp_path / 'd.npz')}"
    ckpt = tmp_path / "dense.pt"
    args = (
        "train",
        "--dataset",
        data,
        "--backbone",
        "denseformer",
        "--epochs",
        2,
        "--batch-size",
        16,
        "--lr",
        0.003,
        "--backbone-arg",
        "patch=4",
        "--backbone-arg",
        "dim=8",
        "--backbone-arg",
        "depth=2",
        "--quiet",
    )
    result = run(*args, "--out", ckpt)
    assert result.exit_code == 0, result.output
    assert "denseformer seed 1337: test accuracy" in result.output
    again = tmp_path / "again.pt"
    assert run(*args, "--out", again).exit_code == 0
    assert ckpt.read_bytes() == again.read_bytes()  # same seed, same bytes
    model, info = load_mixer_model(ckpt)
    assert model.config["patch"] == 4 and info["dataset"] == data and info["epochs_run"] == 2
    out = tmp_path / "audit"
    result = run(
        "mixers",
        ckpt,
        "--data",
        data,
        "--limit",
        24,
        "--bootstrap",
        0,
        "--methods",
        "mass,norm_mass",
        "--out",
        out,
        "--quiet",
    )
    assert result.exit_code == 0, result.output
    summary = pd.read_csv(out / "summary.csv")
    assert list(summary.mixer.unique()) == ["mixers.0", "mixers.1"] and (summary.n == 24).all()
    assert set(pd.read_csv(out / "map.csv").mixer) == {"mixers.0", "mixers.1"}


def test_mixers_defaults_to_the_data_the_model_file_records(tmp_path):
    """A model trained on an npz of one set of rows is audited on that file's held-out test rows, and says so."""
    import json

    arrays = tmp_path / "one-set.npz"
    gen = torch.Generator().manual_seed(3)
    y = torch.arange(120) % 3
    x = torch.randn(120, 1, 8, 8, generator=gen) * 0.3 + y.float()[:, None, None, None]
    np.savez(arrays, x=x.numpy(), y=y.numpy())
    ckpt = tmp_path / "dense.pt"
    trained = run(
        *("train", "--dataset", f"npz:{arrays}", "--backbone", "denseformer", "--epochs", 1, "--batch-size", 16),
        *("--backbone-arg", "patch=4", "--backbone-arg", "dim=8", "--backbone-arg", "depth=2", "-q", "--out", ckpt),
    )
    assert trained.exit_code == 0, trained.output
    # by hand: ceil(0.2 * 120) = 24 test rows, floor(96 / 10) = 9 val rows, 87 train rows
    assert "on 24 held-out rows (train 87, val 9;" in trained.output
    out = tmp_path / "audit"
    result = run("mixers", ckpt, "--bootstrap", 0, "--methods", "mass", "--out", out, "--quiet")
    assert result.exit_code == 0, result.output
    name = f"npz:{arrays.resolve()}"
    assert f": 2 mixers, {name} (test), removal weight, n = 24" in result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["dataset"] == name and manifest["split"] == "test" and manifest["n_samples"] == 24
    assert manifest["split_rule"].startswith("test = stratified 20%")
    # a model that records no dataset is refused before the work, naming the fix
    from laya_eval.mixers.reference import save_mixer_model

    bare = save_mixer_model(load_mixer_model(ckpt)[0], tmp_path / "bare.pt")
    assert_one_line_error(run("mixers", bare, "--out", tmp_path / "a2"), r"records no dataset; name one with --data")


def test_a_limit_keeps_the_first_rows_of_each_split():
    data = {"train": _texts(60, 0), "val": _texts(30, 1), "test": _texts(40, 2)}
    options = TrainOptions(epochs=1, batch_size=16, seed=0)
    fit = train_mixer_model("attnres", data, config={"dim": 8, "depth": 1, "max_len": 8}, options=options, limit=20)
    assert (fit.metrics["n_train"], fit.metrics["n_val"], fit.metrics["n_test"]) == (20, 20, 20)


def test_train_cli_refuses_head_options_and_bad_files_for_mixer_backbones(tmp_path):
    data = f"npz:{_image_npz(tmp_path / 'd.npz')}"
    base = ("train", "--dataset", data, "--backbone", "attnres", "--epochs", 1)
    assert_one_line_error(
        run(*base, "--head", "laya", "--out", tmp_path / "m.pt"), r"--head does not apply to --backbone attnres"
    )
    assert_one_line_error(run(*base, "--out", tmp_path / "m.safetensors"), r"--out: .* \.pt file")
    assert_one_line_error(
        run(*base, "--backbone-arg", "widths=[4]", "--out", tmp_path / "m.pt"),
        r"--backbone-arg 'widths' is not an option of --backbone attnres",
    )
    assert not (tmp_path / "m.pt").exists()


@pytest.mark.parametrize("command", ["info", "faithfulness"])
def test_a_mixer_model_file_given_as_a_checkpoint_points_to_the_mixers_command(tmp_path, command):
    from laya_eval.mixers.reference import CHECKPOINT_FORMAT
    from laya_eval.loading.checkpoints import MIXER_MODEL_FORMAT
    from tests.cli_helpers import assert_one_line_error, run

    assert MIXER_MODEL_FORMAT == CHECKPOINT_FORMAT
    data = {"train": _texts(40, 0), "val": _texts(10, 1), "test": _texts(10, 2)}
    fit = train_mixer_model(
        "attnres",
        data,
        config={"dim": 8, "depth": 2, "max_len": 8, "min_count": 1},
        options=TrainOptions(epochs=1, batch_size=16, seed=0),
    )
    path = save_mixer_model(fit.model, tmp_path / "mixer.pt", info=fit.info)
    assert_one_line_error(
        run(command, path),
        r"is a depth-mixer model file, not a layer-attribution checkpoint: audit its mixers with "
        r"`laya-eval mixers`\.",
    )
