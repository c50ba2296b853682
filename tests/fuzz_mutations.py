"""Seed files and a seeded mutator over laya-eval's file formats (used by ``tests/fuzzing.py``).

Seed files are generated here, small and valid: ``.pt`` and ``.safetensors`` checkpoints,
an ``.npz`` dataset, a Fashion-MNIST IDX ``.gz`` pair and a CIFAR-10 batch with its meta
file. Mutations are byte-level (bit flips, truncation, insertion, deletion, duplication,
header overwrites, huge integers) and structural (config edits and type swaps, state-dict
edits, safetensors metadata edits, array and label edits, IDX header edits and gzip bombs,
planted pickle payloads that would write a marker file if they ever ran).
"""

from __future__ import annotations

import copy
import gzip
import io
import json
import pickle
import random
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

KINDS = ("pt", "safetensors", "npz", "idx", "cifar")
MARKER = "MARKER-payload-ran"
_POOL = [
    None,
    -1,
    0,
    1,
    2,
    10**9,
    2**63,
    1e300,
    float("nan"),
    float("inf"),
    -0.5,
    "ten",
    "",
    "\x1b[2J",
    "this",
    "../../etc",
    [],
    [1, 2, 3],
    [[[]]],
    {"a": 1},
    {},
    True,
    "mlp",
    "laya",
    [10**9],
    [-4],
]


class PlantedPayload:
    """Unpickled without restriction, this writes the marker file: proof that code ran."""

    def __init__(self, target: str) -> None:
        self.target = target

    def __reduce__(self):
        return (open, (self.target, "w"))


# --------------------------------------------------------------------------- seed files
def _tiny_model(in_features: int, input_shape: tuple[int, ...], dataset: str, head: str = "laya"):
    from laya_eval.models.backbones import make_backbone
    from laya_eval.models.heads import make_head
    from laya_eval.models.layered import LayeredModel, ModelInfo

    torch.manual_seed(0)
    backbone = make_backbone("mlp", in_features=in_features, widths=[8, 4])
    kwargs = {"d_star": 4, "scorer_hidden": 4} if head == "laya" else {}
    info = ModelInfo(
        num_classes=10,
        class_names=tuple(str(i) for i in range(10)),
        input_shape=input_shape,
        dataset=dataset,
        training={"epochs": 1},
        metrics={"test_accuracy": 0.5},
    )
    return LayeredModel(backbone, make_head(head, backbone.layer_dims, 10, **kwargs), info)


def _checkpoint_bytes(model, suffix: str, folder: Path) -> bytes:
    from laya_eval.loading.checkpoints import save_checkpoint

    return save_checkpoint(model, folder / f"seed{suffix}").read_bytes()


def _idx(dtype_code: int, dims: tuple[int, ...], body: bytes) -> bytes:
    return bytes([0, 0, dtype_code, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + body


@dataclass
class Seeds:
    """Valid seed files (bytes) and the checkpoints that consume each data format."""

    files: dict[str, bytes]
    models: dict[str, Path]
    extra: dict[str, bytes] = field(default_factory=dict)


def make_seeds(folder: Path) -> Seeds:
    """Write the valid seed files and the consuming checkpoints under ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    digits = _tiny_model(64, (64,), "digits")
    rng = np.random.default_rng(0)
    npz = io.BytesIO()
    np.savez(
        npz,
        # 50 rows, 5 per class: the stratified test split (10 rows) holds every class once
        x=rng.random((50, 64), dtype=np.float32),
        y=np.arange(50) % 10,
        class_names=np.array([str(i) for i in range(10)]),
    )
    images = (np.arange(8 * 28 * 28) * 7 % 256).astype(np.uint8).tobytes()
    cifar = {b"data": (np.arange(6 * 3072) % 251).astype(np.uint8).reshape(6, 3072), b"labels": [0, 1, 2, 3, 4, 5]}
    meta = {
        b"label_names": [
            n.encode() for n in ("plane", "car", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
        ]
    }
    files = {
        "pt": _checkpoint_bytes(digits, ".pt", folder),
        "safetensors": _checkpoint_bytes(digits, ".safetensors", folder),
        "npz": npz.getvalue(),
        "idx": gzip.compress(_idx(0x08, (8, 28, 28), images), mtime=0),
        "cifar": pickle.dumps(cifar, protocol=4),
    }
    extra = {
        "idx_labels": gzip.compress(_idx(0x08, (8,), bytes(range(8))), mtime=0),
        "cifar_meta": pickle.dumps(meta, protocol=4),
    }
    models = {"digits": folder / "seed.pt"}
    for name, size, shape, dataset in (
        ("fmnist", 784, (1, 28, 28), "fashion-mnist"),
        ("cifar", 3072, (3, 32, 32), "cifar10"),
    ):
        from laya_eval.loading.checkpoints import save_checkpoint

        models[name] = save_checkpoint(_tiny_model(size, shape, dataset, head="concat"), folder / f"{name}.pt")
    return Seeds(files, models, extra)


# --------------------------------------------------------------------------- mutations
def _flip(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        if out:
            out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
    return bytes(out)


def _truncate(rng: random.Random, data: bytes) -> bytes:
    return data[: rng.randrange(len(data))] if data else data


def _insert(rng: random.Random, data: bytes) -> bytes:
    at = rng.randrange(len(data) + 1)
    return data[:at] + rng.randbytes(rng.randint(1, 64)) + data[at:]


def _delete(rng: random.Random, data: bytes) -> bytes:
    at = rng.randrange(len(data) + 1)
    return data[:at] + data[at + rng.randint(1, 256) :]


def _duplicate(rng: random.Random, data: bytes) -> bytes:
    at = rng.randrange(len(data) + 1)
    return data[:at] + data[at : at + rng.randint(1, 512)] * rng.randint(2, 8) + data[at:]


def _header(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 6)):
        if out:
            out[rng.randrange(min(64, len(out)))] = rng.randrange(256)
    return bytes(out)


def _huge_int(rng: random.Random, data: bytes) -> bytes:
    if len(data) < 8:
        return data
    at = rng.randrange(len(data) - 7)
    value = rng.choice([b"\xff" * 8, b"\xff\xff\xff\x7f" * 2, struct.pack("<Q", 2**40), struct.pack(">I", 2**31) * 2])
    return data[:at] + value + data[at + 8 :]


BYTE_MUTATIONS: dict[str, Callable[[random.Random, bytes], bytes]] = {
    "bit_flip": _flip,
    "truncate": _truncate,
    "insert": _insert,
    "delete": _delete,
    "duplicate": _duplicate,
    "header": _header,
    "huge_int": _huge_int,
}


def _paths(node, prefix=()) -> list[tuple]:
    """Every key path into nested dicts / lists (for structured edits)."""
    out = []
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
    for k, v in items:
        out.append(prefix + (k,))
        out.extend(_paths(v, prefix + (k,)))
    return out


def edit_tree(rng: random.Random, tree, extra_keys, pool, adjust=None):
    """One to three edits of a copy of ``tree``: a value swapped from ``pool`` (through ``adjust(rng, key, value)``
    where given), a key deleted, or one of ``extra_keys`` added."""
    tree = copy.deepcopy(tree)
    for _ in range(rng.randint(1, 3)):
        paths = _paths(tree)
        if not paths:
            break
        path = rng.choice(paths)
        parent = tree
        for k in path[:-1]:
            parent = parent[k]
        action = rng.random()
        if action < 0.15 and isinstance(parent, dict):
            del parent[path[-1]]
        elif action < 0.25 and isinstance(parent, dict):
            parent[rng.choice(list(extra_keys))] = copy.deepcopy(rng.choice(pool))
        else:
            value = copy.deepcopy(rng.choice(pool))
            parent[path[-1]] = value if adjust is None else adjust(rng, path[-1], value)
    return tree


def _edit_tree(rng: random.Random, tree: dict) -> dict:
    return edit_tree(rng, tree, ["evil", "local_files_only", "model", "depth", "kwargs"], _POOL)


def _edit_state(rng: random.Random, state: dict) -> dict:
    state = dict(state)
    key = rng.choice(sorted(state))
    t = state[key]
    choice = rng.randrange(6)
    if choice == 0:
        del state[key]
    elif choice == 1:
        state[key] = torch.zeros(*(s + 1 for s in t.shape)) if t.ndim else torch.zeros(2)
    elif choice == 2:
        state[key] = t.to(rng.choice([torch.float64, torch.int32, torch.bool, torch.complex64]))
    elif choice == 3:
        state[key] = torch.ones(1).expand(10**6, 10**6)
    elif choice == 4:
        state[key + ".extra"] = t.clone()
    else:
        state[key] = torch.full_like(t, float("nan"))
    return state


def _pt_structured(rng: random.Random, data: bytes, marker: str) -> bytes:
    payload = torch.load(io.BytesIO(data), weights_only=True)
    choice = rng.randrange(4)
    if choice == 0:
        payload["config"] = _edit_tree(rng, payload["config"])
    elif choice == 1:
        payload["state_dict"] = _edit_state(rng, payload["state_dict"])
    elif choice == 2:
        payload = _edit_tree(rng, {k: v for k, v in payload.items() if k != "state_dict"}) | {
            "state_dict": payload["state_dict"]
        }
    else:
        payload[rng.choice(["config", "training", "metrics", "payload"])] = PlantedPayload(marker)
    buf = io.BytesIO()
    torch.save(payload, buf)
    return buf.getvalue()


def _safetensors_structured(rng: random.Random, data: bytes, marker: str) -> bytes:
    from safetensors.torch import load, save

    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + n])
    meta = json.loads(header["__metadata__"]["laya_eval"])
    state = load(data)
    choice = rng.randrange(4)
    if choice == 0:
        text = json.dumps(_edit_tree(rng, meta))
    elif choice == 1:
        text = rng.choice(["[1, 2]", "null", "7", '"x"', "[" * 5000 + "]" * 5000, "{", "NaN"])
    elif choice == 2:
        state = {k: v for k, v in _edit_state(rng, state).items() if v.is_contiguous() and v.numel() < 10**7}
        text = json.dumps(meta)
    else:
        return save(state, metadata={"other": "x"})
    try:
        return save(state, metadata={"laya_eval": text})
    except Exception:  # noqa: BLE001 - e.g. a dtype safetensors cannot store: keep the plain seed
        return data


def _npz_structured(rng: random.Random, data: bytes, marker: str) -> bytes:
    with np.load(io.BytesIO(data)) as archive:
        arrays = {k: archive[k] for k in archive.files}
    key = rng.choice(sorted(arrays))
    choice = rng.randrange(7)
    if choice == 0:
        del arrays[key]
    elif choice == 1:
        arrays["y"] = np.array([0, 2**63] * 6, dtype=np.uint64)
    elif choice == 2:
        arrays["y"] = rng.choice([np.arange(12) * 10**8, -np.arange(12), np.arange(12) + 0.5, np.zeros((12, 2))])
    elif choice == 3:
        x = arrays["x"].copy()
        x[rng.randrange(12), rng.randrange(64)] = rng.choice([np.nan, np.inf])
        arrays["x"] = x
    elif choice == 4:
        arrays[key] = np.array([PlantedPayload(marker), 1], dtype=object)
    elif choice == 5:
        arrays["class_names"] = rng.choice([np.arange(3), np.array(["a"] * 3), np.array(["\x1b[2J"] * 10)])
    else:
        arrays[key] = arrays[key].reshape(-1)[: rng.randrange(1, 20)]
    buf = io.BytesIO()
    (np.savez_compressed if rng.random() < 0.3 else np.savez)(buf, **arrays)
    return buf.getvalue()


def _cifar_structured(rng: random.Random, data: bytes, marker: str) -> bytes:
    batch = pickle.loads(data)
    choice = rng.randrange(5)
    if choice == 0:
        labels: list = [0]
        for _ in range(rng.randint(20, 60)):
            labels = [labels, labels]
        batch[b"labels"] = labels
    elif choice == 1:
        batch[b"labels"] = copy.deepcopy(rng.choice(_POOL))
    elif choice == 2:
        batch[b"data"] = batch[b"data"].astype(rng.choice([np.float32, np.int64]))
    elif choice == 3:
        batch[b"labels"] = PlantedPayload(marker)
    else:
        batch = rng.choice([[1, 2], b"bytes", {b"data": batch[b"data"]}, {b"label_names": [b"\xff\xfe"]}])
    return pickle.dumps(batch, protocol=rng.choice([2, 4]))


def _idx_structured(rng: random.Random, data: bytes, marker: str) -> bytes:
    """Edit the IDX header: dims (huge, zero, overflowing), dtype code, ndim; or build a gzip bomb."""
    zipped = data[:2] == b"\x1f\x8b"
    raw = bytearray(gzip.decompress(data) if zipped else data)
    choice = rng.randrange(4)
    if choice == 0:
        raw[4 + 4 * rng.randrange(3) : 8 + 4 * rng.randrange(1, 3)] = struct.pack(
            ">I", rng.choice([0, 2**32 - 1, 60000])
        )
    elif choice == 1:
        raw[2] = rng.choice([0x08, 0x09, 0x0B, 0x0C, 0x0D, 0x0E, 0x00, 0xFF])
    elif choice == 2:
        raw[3] = rng.choice([0, 1, 2, 4, 255])
    else:
        raw = bytearray(_idx(0x08, (rng.choice([60000, 10**6]), 28, 28), bytes(60000 * 28 * 28)))
    return gzip.compress(bytes(raw), mtime=0) if zipped else bytes(raw)


STRUCTURED: dict[str, Callable[[random.Random, bytes, str], bytes]] = {
    "pt": _pt_structured,
    "safetensors": _safetensors_structured,
    "npz": _npz_structured,
    "idx": lambda rng, data, marker: _idx_structured(rng, data, marker),
    "cifar": _cifar_structured,
}


def mutants(seeds: Seeds, n: int, seed: int, marker: str) -> Iterator[tuple[int, str, str, bytes]]:
    """``n`` mutants ``(index, kind, mutation, bytes)``, the same for the same ``seed``."""
    rng = random.Random(seed)
    for i in range(n):
        kind = KINDS[i % len(KINDS)]
        data = seeds.files[kind]
        if kind == "idx" and rng.random() < 0.5:
            data = gzip_decompress_or_same(data)  # mutate the raw IDX too (the loader reads plain files)
            kind_data = ("idx_raw", data)
        else:
            kind_data = (kind, data)
        if rng.random() < 0.4:
            mutation = "structured"
            out = STRUCTURED[kind](rng, kind_data[1], marker)
        else:
            mutation = rng.choice(sorted(BYTE_MUTATIONS))
            out = BYTE_MUTATIONS[mutation](rng, kind_data[1])
            if rng.random() < 0.2:
                out = BYTE_MUTATIONS[rng.choice(sorted(BYTE_MUTATIONS))](rng, out)
        yield i, kind_data[0], mutation, out


def gzip_decompress_or_same(data: bytes) -> bytes:
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
