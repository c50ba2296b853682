"""Keras 3 LAYA models read as data: against Keras' own logits, a numpy forward pass, and hostile files.

The round trip (``slow``) runs ``tests/keras_reference.py`` in a subprocess — Keras on the torch backend,
kept out of this process so that its global state and import time stay there — on the first 1,000
Fashion-MNIST test images (generated images where the dataset is not installed). The fast tests write
Keras 3's HDF5 layout with h5py and compare with a forward pass written here in numpy.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from scipy.special import erf

from laya_eval import import_keras, load_model
from laya_eval.data import load_dataset
from laya_eval.errors import CheckpointError, ConfigError, DataError
from tests.cli_helpers import assert_one_line_error, run

ROOT = Path(__file__).resolve().parents[1]
N_IMAGES = 1000


# --------------------------------------------------------------------------- Keras 3's layout, by hand
def write_weights(path, layers) -> Path:
    """A Keras 3 weights file: ``layers`` is ``[(group path, layer name, [arrays])]``."""
    with h5py.File(path, "w") as f:
        for where, name, arrays in layers:
            group = f.require_group(where).require_group("vars")
            group.attrs["name"] = name
            for i, a in enumerate(arrays):
                group.create_dataset(str(i), data=np.asarray(a, dtype=np.float32))
    return Path(path)


def tiny_layers(rng, in_features=6, widths=(5, 4), d_star=3, hidden=7, classes=3):
    """A flat functional model's weight tree: backbone blocks, adapters, scorer, classifier (kernels (in, out))."""

    def dense(i, o):
        return [rng.normal(0, 1 / np.sqrt(i), (i, o)), rng.normal(0, 0.3, o)]

    out, sizes = [], [in_features, *widths]
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        out.append((f"layers/dense{'_' + str(i) if i else ''}", f"dense_{i + 1}", dense(a, b)))
        out.append(
            (
                f"layers/layer_normalization{'_' + str(i) if i else ''}",
                f"ln_{i + 1}",
                [1 + rng.normal(0, 0.2, b), rng.normal(0, 0.2, b)],
            )
        )
    head = [dense(w, d_star) for w in widths] + [
        dense(len(widths) * d_star, hidden),
        dense(hidden, len(widths)),
        dense(d_star, classes),
    ]
    names = [f"g{i + 1}" for i in range(len(widths))] + ["score_1", "score_2", "clf"]
    for j, (name, arrays) in enumerate(zip(names, head), start=len(widths)):
        out.append((f"layers/dense_{j}", name, arrays))
    return out


def numpy_logits(layers, x, tau=1.5, eps=1e-3):
    """The reference forward pass in float64: GELU(v) = v/2 (1 + erf(v / sqrt 2)), LayerNorm with Keras' eps."""
    gelu = lambda v: 0.5 * v * (1 + erf(v / np.sqrt(2)))  # noqa: E731
    arrays = [np.asarray(a, np.float64) for _, _, arrs in layers for a in arrs]
    n_blocks = sum(1 for _, name, _ in layers if name.startswith("ln_"))
    h, hidden, k = x.astype(np.float64), [], 0
    for _ in range(n_blocks):
        kernel, bias, gamma, beta = arrays[k : k + 4]
        k += 4
        v = h @ kernel + bias
        v = (v - v.mean(1, keepdims=True)) / np.sqrt(v.var(1, keepdims=True) + eps) * gamma + beta
        h = gelu(v)
        hidden.append(h)
    z = [hh @ arrays[k + 2 * i] + arrays[k + 2 * i + 1] for i, hh in enumerate(hidden)]
    k += 2 * n_blocks
    s = gelu(np.concatenate(z, 1) @ arrays[k] + arrays[k + 1]) @ arrays[k + 2] + arrays[k + 3]
    alpha = np.exp(s / tau - (s / tau).max(1, keepdims=True))
    alpha /= alpha.sum(1, keepdims=True)
    return (alpha[:, :, None] * np.stack(z, 1)).sum(1) @ arrays[k + 4] + arrays[k + 5]


def test_a_weights_file_gives_the_numpy_forward_pass(tmp_path):
    rng = np.random.default_rng(0)
    layers = tiny_layers(rng)
    x = rng.normal(0, 1, (32, 6)).astype(np.float32)
    path = write_weights(tmp_path / "m.weights.h5", layers)
    with h5py.File(path, "a") as f:  # a compiled model's optimizer state: an int32 step count, Adam's moments
        f.require_group("optimizer/vars").create_dataset("0", data=np.int32(7))
        f["optimizer/vars"].create_dataset("1", data=np.zeros((6, 5), np.float32))
    model = import_keras(path)
    with torch.no_grad():
        got = model(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, numpy_logits(layers, x), atol=1e-5, rtol=0)
    assert model.backbone.layer_norm_eps == 1e-3 and model.head.tau == 1.5
    assert model.info.training["imported_from"]["tau_from"] == "reference default"
    # tau matters: told the wrong one, the logits are those of another function
    other = import_keras(tmp_path / "m.weights.h5", tau=0.25)
    with torch.no_grad():
        assert np.abs(other(torch.from_numpy(x)).numpy() - numpy_logits(layers, x)).max() > 1e-2
    np.testing.assert_allclose(
        other(torch.from_numpy(x)).detach().numpy(), numpy_logits(layers, x, tau=0.25), atol=1e-5, rtol=0
    )


def _archive(path, config, weights: bytes, compress=zipfile.ZIP_STORED, extra=()):
    with zipfile.ZipFile(path, "w", compression=compress) as z:
        z.writestr("metadata.json", json.dumps({"keras_version": "3.15.1"}))
        z.writestr("config.json", json.dumps(config))
        z.writestr("model.weights.h5", weights)
        for name, data in extra:
            z.writestr(name, data)
    return path


def _layer(cls, name, **config):
    return {"module": "keras.layers", "class_name": cls, "config": {"name": name, **config}}


def _config(extra=()):
    layers = [_layer("InputLayer", "input", batch_shape=[None, 6])]
    for i in (1, 2):
        layers += [
            _layer("Dense", f"dense_{i}", activation="linear"),
            _layer("LayerNormalization", f"ln_{i}", epsilon=0.001),
            _layer("Activation", f"gelu_{i}", activation="gelu"),
        ]
    layers += [_layer("Dense", "score_1", activation="gelu"), *extra]
    return {"module": "keras.src.models.functional", "class_name": "Functional", "config": {"layers": layers}}


def _weights_bytes(tmp_path, layers=None) -> bytes:
    return write_weights(tmp_path / "w.h5", layers or tiny_layers(np.random.default_rng(1))).read_bytes()


def _hostile(kind: str, tmp_path: Path) -> Path:
    layers = tiny_layers(np.random.default_rng(1))
    if kind == "a conv kernel":
        return write_weights(tmp_path / "c.weights.h5", layers + [("layers/conv2d", "conv", [np.zeros((3, 3, 1, 2))])])
    if kind == "no classifier":
        return write_weights(tmp_path / "c.weights.h5", layers[:-1])
    if kind == "a Rescaling layer":
        return _archive(
            tmp_path / "r.keras", _config([_layer("Rescaling", "scale", scale=1 / 255)]), _weights_bytes(tmp_path)
        )
    if kind == "an approximate GELU scorer":
        config = _config()
        config["config"]["layers"][-1]["config"]["activation"] = {"class_name": "function", "config": "approx"}
        return _archive(tmp_path / "g.keras", config, _weights_bytes(tmp_path))
    if kind == "a zip bomb":
        return _archive(
            tmp_path / "b.keras", _config(), _weights_bytes(tmp_path) + bytes(50 << 20), compress=zipfile.ZIP_DEFLATED
        )
    if kind == "an external link":
        path = write_weights(tmp_path / "l.weights.h5", layers)
        with h5py.File(path, "a") as f:
            f["layers/elsewhere"] = h5py.ExternalLink("/etc/passwd.h5", "/")
        return path
    if kind == "a dataset larger than the file":
        path = write_weights(tmp_path / "big.weights.h5", layers)
        with h5py.File(path, "a") as f:
            f.require_group("layers/huge/vars").create_dataset("0", shape=(1 << 16, 1 << 14), dtype="f4")
        return path
    if kind == "a Keras 2 file":
        with h5py.File(tmp_path / "k2.h5", "w") as f:
            f.attrs["layer_names"] = [b"dense"]
            f.create_group("model_weights")
        return tmp_path / "k2.h5"
    raise AssertionError(kind)


HOSTILE = {
    # the layers are listed in Keras' storage order: each container's members by name, dense before dense_1
    "a conv kernel": r"layer 'conv' holds variables of shapes \[\(3, 3, 1, 2\)\].*layers with weights: conv 3x3x1x2, "
    r"dense_1 6x5/5, dense_2 5x4/4, g1 5x3/3, g2 4x3/3, score_1 6x7/7, score_2 7x2/2, clf 3x3/3, "
    r"ln_1 5/5, ln_2 4/4\.$",
    "no classifier": r"2 Dense layers remain \(\['score_1', 'score_2'\]\); the head has a scorer of two and a "
    r"classifier; layers",
    "a Rescaling layer": r"built-in layer Rescaling 'scale' has no counterpart",
    "an approximate GELU scorer": r"Dense layer 'score_1' has activation .*must be gelu",
    "a zip bomb": r"'model\.weights\.h5' declares \d+ bytes from \d+ compressed \(at most \d+ bytes and 100 times",
    "an external link": r"layers/elsewhere is an HDF5 ExternalLink",
    "a dataset larger than the file": r"declare more bytes than the file's",
    "a Keras 2 file": r"a Keras 2 \(TF-Keras\) HDF5 file",
}


@pytest.mark.parametrize("kind", list(HOSTILE))
def test_a_file_it_cannot_reproduce_is_refused_in_one_line(kind, tmp_path):
    path = _hostile(kind, tmp_path)
    with pytest.raises(CheckpointError, match=HOSTILE[kind]):
        import_keras(path)
    out = tmp_path / "out" / "ckpt.pt"
    result = run("import-keras", path, "--out", out)
    assert_one_line_error(result, HOSTILE[kind])
    assert not out.exists()


def test_a_tau_against_the_stored_one_and_a_wrong_input_shape_are_refused(tmp_path):
    config = _config([{"module": None, "class_name": "Head", "config": {"name": "head", "tau": 2.0}}])
    path = _archive(tmp_path / "t.keras", config, _weights_bytes(tmp_path))
    assert import_keras(path).head.tau == 2.0  # read from the config
    assert_one_line_error(
        run("import-keras", path, "--tau", 1.5, "--out", tmp_path / "c.pt"),
        r"tau 1\.5 contradicts the temperature 2\.0 stored",
    )
    assert_one_line_error(
        run("import-keras", path, "--input-shape", "1,28,28", "--out", tmp_path / "c.pt"),
        r"input_shape must be .* product is the backbone's 6 input features; got \[1, 28, 28\]",
    )
    assert not (tmp_path / "c.pt").exists()


def _tensor(name):
    return {"class_name": "__keras_tensor__", "config": {"shape": [None, 2], "keras_history": [name, 0, 0]}}


def _graph_config(between, softmax=("keras.layers", "Softmax", {"axis": -1})):
    """A functional config in which the scores of ``score_2`` reach ``softmax`` through ``between``:
    ``[(module, class, name, args with None for the incoming tensor)]`` (Keras' layout of ``inbound_nodes``)."""

    def node(module, cls, name, source, args=(None,), **config):
        args = [_tensor(source) if a is None else a for a in args]
        return {
            "module": module,
            "class_name": cls,
            "config": {"name": name, **config},
            "name": name,
            "inbound_nodes": [{"args": args, "kwargs": {}}],
        }

    layers, source = [node("keras.layers", "Dense", "score_2", "score_1", activation="linear")], "score_2"
    for module, cls, name, args in between:
        layers.append(node(module, cls, name, source, args))
        source = name
    layers.append(node(softmax[0], softmax[1], "alpha", source, **softmax[2]))
    config = _config()
    config["config"]["layers"] += layers
    config["config"]["output_layers"] = [["clf", 0, 0]]
    return config


OPS = "keras.src.ops.numpy"
GRAPHS = {  # the graph between the scores and the softmax -> the temperature it computes
    "s / 2.0": ([(OPS, "TrueDivide", "true_divide", [None, 2.0])], 2.0),
    "ops.divide(s, 4)": ([(OPS, "Divide", "divide", [None, 4])], 4.0),
    "0.5 * s": ([(OPS, "Multiply", "multiply", [0.5, None])], 2.0),
    "(s / 2) * 0.25": ([(OPS, "TrueDivide", "t", [None, 2]), (OPS, "Multiply", "m", [None, 0.25])], 8.0),
    "s": ([], 1.0),
}


@pytest.mark.parametrize("graph", list(GRAPHS))
def test_the_temperature_is_read_from_the_graph(graph, tmp_path):
    between, tau = GRAPHS[graph]
    layers = tiny_layers(np.random.default_rng(1))
    path = _archive(tmp_path / "g.keras", _graph_config(between), _weights_bytes(tmp_path, layers))
    model = import_keras(path)
    assert model.head.tau == tau and model.info.training["imported_from"]["tau_from"].startswith("graph")
    x = np.random.default_rng(2).normal(0, 1, (16, 6)).astype(np.float32)
    with torch.no_grad():
        np.testing.assert_allclose(model(torch.from_numpy(x)).numpy(), numpy_logits(layers, x, tau=tau), atol=1e-5)
    if tau != 1.5:
        assert_one_line_error(
            run("import-keras", path, "--tau", 1.5, "--out", tmp_path / "c.pt"), rf"contradicts the temperature {tau}"
        )


UNREAD = {  # a node on the path that is not a constant scale: refused, named
    "s - 1.0": (
        [(OPS, "Subtract", "subtract", [None, 1.0])],
        None,
        r"node 'subtract' \(keras\.src\.ops\.numpy\.Subtract\)",
    ),
    "s / -2.0": (
        [(OPS, "TrueDivide", "neg", [None, -2.0])],
        None,
        r"node 'neg' \(keras\.src\.ops\.numpy\.TrueDivide\)",
    ),
    "Dropout": ([("keras.layers", "Dropout", "drop", [None])], None, r"node 'drop' \(keras\.layers\.Dropout\)"),
    "a custom layer": (
        [("my.module", "Temperature", "temp", [None])],
        None,
        r"node 'temp' \(my\.module\.Temperature\)",
    ),
    "softmax over axis 0": ([], ("keras.layers", "Softmax", {"axis": 0}), r"node 'alpha' \(keras\.layers\.Softmax\)"),
    "log_softmax": ([], ("keras.src.ops.nn", "LogSoftmax", {}), r"node 'alpha' \(keras\.src\.ops\.nn\.LogSoftmax\)"),
}


@pytest.mark.parametrize("kind", list(UNREAD))
def test_an_unread_node_between_the_scorer_and_the_softmax_is_refused(kind, tmp_path):
    between, softmax, message = UNREAD[kind]
    config = _graph_config(between, *(softmax,) if softmax else ())
    path = _archive(tmp_path / "u.keras", config, _weights_bytes(tmp_path))
    with pytest.raises(CheckpointError, match=message + r" lies between the scorer 'score_2' and the softmax"):
        import_keras(path)
    assert_one_line_error(run("import-keras", path, "--out", tmp_path / "c.pt"), message)
    assert not (tmp_path / "c.pt").exists()


# --------------------------------------------------------------------------- the round trip through Keras itself
def _images():
    """The first 1,000 Fashion-MNIST test images and their labels, or seeded generated images where it is absent."""
    try:
        test = load_dataset("fashion-mnist", "test")
        return test.x[:N_IMAGES].numpy(), test.y[:N_IMAGES].numpy(), "fashion-mnist"
    except DataError:
        rng = np.random.default_rng(0)
        return rng.random((N_IMAGES, 1, 28, 28), dtype=np.float32), rng.integers(0, 10, N_IMAGES), "generated"


@pytest.fixture(scope="module")
def keras_models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("keras")
    x, y, source = _images()
    np.save(folder / "x.npy", x.reshape(len(x), -1))
    np.savez(folder / "data.npz", x=x, y=y.astype(np.int64))
    env = {**os.environ, "KERAS_BACKEND": "torch", "KERAS_HOME": str(folder / "keras-home")}
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "keras_reference.py"), str(folder), str(folder / "x.npy")],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return folder, torch.from_numpy(x), source


@pytest.mark.slow
@pytest.mark.parametrize("layout, tau", [("functional", 2.0), ("subclassed", None)])
@pytest.mark.parametrize("suffix", [".keras", ".weights.h5"])
def test_the_import_gives_keras_logits_on_1000_images(keras_models, layout, tau, suffix):
    folder, x, _ = keras_models
    expected = np.load(folder / f"{layout}.logits.npy")
    model = import_keras(folder / f"{layout}{suffix}", tau=tau, input_shape=(1, 28, 28))
    with torch.no_grad():
        got = model(x).numpy()
    assert got.shape == expected.shape == (N_IMAGES, 10)
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)
    assert model.backbone.layer_norm_eps == 1e-3 and model.head.tau == (tau or 1.5)
    if layout == "functional" and suffix == ".keras":  # the graph's s / 2.0 is read: another tau is refused
        assert import_keras(folder / f"{layout}{suffix}").head.tau == 2.0
        with pytest.raises(ConfigError, match=r"tau 1\.5 contradicts the temperature 2\.0"):
            import_keras(folder / f"{layout}{suffix}", tau=1.5)
    if layout == "functional" and suffix == ".weights.h5":  # told the subclassed model's tau: another function
        wrong = import_keras(folder / f"{layout}{suffix}", tau=1.5, input_shape=(1, 28, 28))
        with torch.no_grad():
            assert np.abs(wrong(x).numpy() - expected).max() > 1e-3


@pytest.mark.slow
def test_a_softmax_layer_after_a_division_gives_keras_predict(keras_models, tmp_path):
    """``Softmax()(s / 2.0)``: tau is read from the TrueDivide node, the probabilities are Keras' predict's."""
    folder, x, _ = keras_models
    result = run("import-keras", folder / "softmax_layer.keras", "--input-shape", "1,28,28", "--out", tmp_path / "s.pt")
    assert result.exit_code == 0, result.output
    assert re.search(r"tau 2 \(graph: true_divide(_\d+)?\)", result.output), result.output
    model = load_model(tmp_path / "s.pt").model
    with torch.no_grad():
        probs = torch.softmax(model(x), -1).numpy()
    np.testing.assert_allclose(probs, np.load(folder / "softmax_layer.probs.npy"), atol=1e-5, rtol=0)
    # unpacked and packed again by zip -r (deflate, smaller than its weights): the same model
    with zipfile.ZipFile(folder / "softmax_layer.keras") as archive:
        archive.extractall(tmp_path / "unpacked")
    subprocess.run(["zip", "-q", "-r", str(tmp_path / "re.keras"), "."], cwd=tmp_path / "unpacked", check=True)
    assert (tmp_path / "re.keras").stat().st_size < (tmp_path / "unpacked" / "model.weights.h5").stat().st_size
    with torch.no_grad():
        torch.testing.assert_close(import_keras(tmp_path / "re.keras", input_shape=(1, 28, 28))(x), model(x))


@pytest.mark.slow
def test_faithfulness_runs_on_the_imported_checkpoint(keras_models, tmp_path):
    folder, x, source = keras_models
    ckpt = tmp_path / "laya.pt"
    result = run("import-keras", folder / "subclassed.keras", "--input-shape", "1,28,28", "--out", ckpt)
    assert result.exit_code == 0, result.output
    assert "tau 1.5 (config), LayerNorm eps 0.001 (config)" in result.output
    loaded = load_model(ckpt).model  # the checkpoint keeps the import exactly (eps, tau, every weight)
    with torch.no_grad():
        np.testing.assert_allclose(
            loaded(x[:200]).numpy(), np.load(folder / "subclassed.logits.npy")[:200], atol=1e-5, rtol=0
        )
    data = "fashion-mnist" if source == "fashion-mnist" else f"npz:{folder / 'data.npz'}"
    out = tmp_path / "faith"
    result = run("faithfulness", ckpt, "--data", data, "--limit", 200, "--bootstrap", 50, "--out", out, "-q")
    assert result.exit_code == 0, result.output
    import pandas as pd

    summary = pd.read_csv(out / "summary.csv")
    assert {"laya", "contribution", "ig"} <= set(summary["method"]) and set(summary["n"]) == {200}
