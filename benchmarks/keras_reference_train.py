"""Trains the reference LAYA architecture in Keras 3 (torch backend) on Fashion-MNIST and writes what the
Keras round trip of ``benchmarks/keras_acceptance.sh`` compares against.

``python benchmarks/keras_reference_train.py OUT DATA.npz EPOCHS``: ``DATA.npz`` holds laya-eval's
Fashion-MNIST splits flattened (``x_train, y_train, x_val, y_val, x_test, y_test``). The model is the
subclassed layout of ``tests/keras_reference.py`` (a functional backbone and a subclassed head storing
tau = 1.5) with Keras' default initialisation, trained with the reference protocol's optimiser (Adam,
learning rate 3e-4, batch 128) for EPOCHS epochs. Writes ``laya.keras``, ``laya.weights.h5``,
``logits.npy`` (the reloaded model's logits on the first 1,000 test images) and ``keras.json``
(test accuracy, timings).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import numpy as np  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "keras_reference", Path(__file__).resolve().parents[1] / "tests" / "keras_reference.py"
)
reference = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(reference)


def main(out: str, data: str, epochs: str) -> None:
    arrays = np.load(data)
    keras.utils.set_random_seed(1337)
    model = reference.subclassed_model(arrays["x_train"].shape[1])
    model.compile(optimizer=keras.optimizers.Adam(3e-4), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    start = time.perf_counter()
    history = model.fit(
        arrays["x_train"],
        arrays["y_train"],
        validation_data=(arrays["x_val"], arrays["y_val"]),
        epochs=int(epochs),
        batch_size=128,
        verbose=2,
    )
    train_s = time.perf_counter() - start
    model.save(os.path.join(out, "laya.keras"))
    model.save_weights(os.path.join(out, "laya.weights.h5"))
    reloaded = keras.saving.load_model(os.path.join(out, "laya.keras"))
    logits = reference.logits_of(reloaded, "subclassed", arrays["x_test"][:1000])
    np.save(os.path.join(out, "logits.npy"), logits)
    _, accuracy = reloaded.evaluate(arrays["x_test"], arrays["y_test"], batch_size=500, verbose=0)
    record = {
        "keras": keras.__version__,
        "backend": keras.backend.backend(),
        "epochs": int(epochs),
        "train_seconds": round(train_s, 1),
        "test_accuracy": float(accuracy),
        "val_accuracy": [float(v) for v in history.history["val_accuracy"]],
    }
    Path(out, "keras.json").write_text(json.dumps(record, indent=1))
    print(json.dumps(record))


if __name__ == "__main__":
    main(*sys.argv[1:4])
