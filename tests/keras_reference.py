"""Writes Keras 3 LAYA models of the reference architecture and Keras' own logits for given inputs.

Run as a script (Keras on the torch backend, so no TensorFlow): ``python tests/keras_reference.py OUT
INPUTS.npy``. The architecture is written here from the paper's description (Vessio, 2025, section 3):
an MLP of ``Dense -> LayerNormalization -> GELU`` blocks ``h_1 .. h_L``; adapters ``z_i = g_i(h_i)`` to
``d*``; scores ``s = Dense(L)(GELU(Dense(hidden)([z_1 || ... || z_L])))``; ``alpha = softmax(s / tau)``;
logits ``W sum_i alpha_i z_i + b``. Two layouts of the same function are written:

- ``functional``: every layer in one functional model, the weighting done with ``keras.ops``; its
  temperature lives only in the graph, so the importer is told it (``TAU_FUNCTIONAL``);
- ``softmax_layer``: the same function written the usual functional way, ``Softmax()(s / tau)`` (a
  ``TrueDivide`` node and a ``Softmax`` layer in ``config.json``), its classifier ending in a softmax: the
  importer reads tau from the graph, and Keras' ``predict`` gives the probabilities to compare with;
- ``subclassed``: a functional backbone and a subclassed ``keras.Model`` head (as in the reference
  code) whose ``get_config`` stores ``tau``, so the importer reads it from ``config.json``.

Every variable is drawn at random (biases, LayerNorm scales and shifts included), so a variable mapped to
the wrong place changes the logits. Each model is saved as ``NAME.keras`` and ``NAME.weights.h5`` and
reloaded from the ``.keras`` file; ``NAME.logits.npy`` holds the reloaded model's logits on the inputs
(``softmax_layer.probs.npy`` its probabilities).
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras import layers, ops  # noqa: E402

WIDTHS = (512, 256, 128)
D_STAR, SCORER_HIDDEN, CLASSES = 96, 192, 10
TAU_SUBCLASSED, TAU_FUNCTIONAL = 1.5, 2.0


def backbone(in_features: int) -> tuple[keras.KerasTensor, list]:
    x = inputs = keras.Input((in_features,), name="input")
    hidden = []
    for i, width in enumerate(WIDTHS, start=1):
        x = layers.Dense(width, name=f"dense_{i}")(x)
        x = layers.LayerNormalization(name=f"ln_{i}")(x)
        x = layers.Activation("gelu", name=f"gelu_{i}")(x)
        hidden.append(x)
    return inputs, hidden


def functional_model(in_features: int, softmax_layer: bool = False) -> keras.Model:
    inputs, hidden = backbone(in_features)
    z = [layers.Dense(D_STAR, name=f"adapter_{i + 1}")(h) for i, h in enumerate(hidden)]
    s = layers.Dense(SCORER_HIDDEN, activation="gelu", name="scorer_hidden")(layers.Concatenate(name="z_all")(z))
    s = layers.Dense(len(WIDTHS), name="scores")(s)
    alpha = layers.Softmax(name="alpha")(s / TAU_FUNCTIONAL) if softmax_layer else ops.softmax(s / TAU_FUNCTIONAL, -1)
    mixed = ops.sum(ops.stack(z, axis=1) * ops.expand_dims(alpha, -1), axis=1)
    classifier = layers.Dense(CLASSES, activation="softmax" if softmax_layer else None, name="classifier")
    return keras.Model(inputs, classifier(mixed), name="laya_functional")


def softmax_layer_model(in_features: int) -> keras.Model:
    return functional_model(in_features, softmax_layer=True)


@keras.saving.register_keras_serializable(package="laya_eval_tests")
class LayerAttentionHead(keras.Model):
    """LAYA head: adapters, scorer, softmax(s / tau) over layers, classifier of the alpha-weighted sum."""

    def __init__(self, n_layers: int, classes: int, d_star: int, scorer_hidden: int, tau: float, **kwargs):
        super().__init__(**kwargs)
        self.options = {
            "n_layers": n_layers,
            "classes": classes,
            "d_star": d_star,
            "scorer_hidden": scorer_hidden,
            "tau": tau,
        }
        self.adapters = [layers.Dense(d_star, name=f"g{i + 1}") for i in range(n_layers)]
        self.scorer = keras.Sequential(
            [
                layers.Dense(scorer_hidden, activation="gelu", name="score_hidden"),
                layers.Dense(n_layers, name="score_out"),
            ],
            name="scorer",
        )
        self.classifier = layers.Dense(classes, name="head_classifier")
        self.tau = tau

    def call(self, hidden):
        z = [g(h) for g, h in zip(self.adapters, hidden)]
        alpha = ops.softmax(self.scorer(ops.concatenate(z, axis=-1)) / self.tau, axis=-1)
        return self.classifier(ops.sum(ops.stack(z, axis=1) * ops.expand_dims(alpha, -1), axis=1))

    def get_config(self):
        return {**super().get_config(), **self.options}


def subclassed_model(in_features: int) -> keras.Model:
    inputs, hidden = backbone(in_features)
    head = LayerAttentionHead(len(WIDTHS), CLASSES, D_STAR, SCORER_HIDDEN, TAU_SUBCLASSED, name="laya_head")
    probs = layers.Activation("softmax", name="probs")(head(hidden))
    return keras.Model(inputs, probs, name="laya_subclassed")


def randomise(model: keras.Model, seed: int) -> None:
    """Every variable at random: kernels ~ N(0, 1/fan_in), biases and LayerNorm shifts ~ N(0, 0.1^2),
    LayerNorm scales ~ 1 + N(0, 0.1^2)."""
    rng = np.random.default_rng(seed)
    for var in model.weights:
        shape = tuple(var.shape)
        if len(shape) == 2:
            value = rng.normal(0, 1 / np.sqrt(shape[0]), shape)
        elif "gamma" in var.path:
            value = 1 + rng.normal(0, 0.1, shape)
        else:
            value = rng.normal(0, 0.1, shape)
        var.assign(value.astype("float32"))


def logits_of(reloaded: keras.Model, name: str, x: np.ndarray) -> np.ndarray:
    if name == "subclassed":  # the model ends in a softmax: read its head's output
        reloaded = keras.Model(reloaded.inputs, reloaded.get_layer("laya_head").output)
    return np.asarray(keras.ops.convert_to_numpy(reloaded.predict(x, batch_size=250, verbose=0)), dtype=np.float32)


def main(out: str, inputs: str) -> None:
    x = np.load(inputs).astype("float32")
    builds = (
        ("functional", functional_model),
        ("subclassed", subclassed_model),
        ("softmax_layer", softmax_layer_model),
    )
    for seed, (name, build) in enumerate(builds):
        model = build(x.shape[1])
        randomise(model, seed)
        model.save(os.path.join(out, f"{name}.keras"))
        model.save_weights(os.path.join(out, f"{name}.weights.h5"))
        reloaded = keras.saving.load_model(os.path.join(out, f"{name}.keras"))
        if name == "softmax_layer":
            probs = reloaded.predict(x, batch_size=250, verbose=0)
            np.save(os.path.join(out, f"{name}.probs.npy"), np.asarray(keras.ops.convert_to_numpy(probs), np.float32))
        else:
            np.save(os.path.join(out, f"{name}.logits.npy"), logits_of(reloaded, name, x))
    print("keras", keras.__version__, "backend", keras.backend.backend())


if __name__ == "__main__":
    main(*sys.argv[1:3])
