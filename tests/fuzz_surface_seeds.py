"""Seed files and seeded mutations for the newest input surfaces (used by ``tests/fuzz_surfaces.py``).

Four surfaces, each with small valid seeds written here:

- ``sweep``: a TOML sweep config of one tiny cell (digits, an 8-6 MLP, one epoch on 64 rows);
- ``keras``: a Keras 3 LAYA ``.keras`` archive and its ``.weights.h5`` (the layout of ``tests/test_keras_import.py``);
- ``cache``: the feature-cache entries (``meta.json``) and the layer-size record that ``fit-head`` wrote for a
  ``py:`` model;
- ``py``: a ``py:`` model module and its spec.

Mutations are byte-level (``tests/fuzz_mutations.BYTE_MUTATIONS``: flips, truncation, insertion, deletion,
duplication, header overwrites, huge integers) and structural: type swaps and deleted or unknown keys in the parsed
tree, huge numbers, deep nesting, long strings, special files (a FIFO, ``/dev/zero``, a folder) named by a path, a
``py:`` spec or a ``trust_code`` key slipped into a sweep config, damaged archive members, non-finite or re-typed
weights, and ``py:`` modules that fail in every way a user's module can (a syntax error, an exception at import or
in the factory, a factory that returns something else than a module).
"""

from __future__ import annotations

import copy
import json
import math
import random
from collections.abc import Callable
from pathlib import Path

from tests.fuzz_mutations import BYTE_MUTATIONS
from tests.fuzz_mutations import edit_tree as fuzz_edit_tree

MARKER = "MARKER-code-ran"

#: Values a type swap puts in place of a config value.
POOL = [
    None,
    -1,
    0,
    1,
    2**63 - 1,
    -(2**63),
    10**12,
    1e308,
    float("nan"),
    float("inf"),
    -0.5,
    "",
    "ten",
    "\x1b[2J",
    "../../etc/passwd",
    "x" * 300,
    "py:os:system",
    [],
    [1, 2, 3],
    [[[]]],
    ["a", 1],
    {},
    {"a": 1},
    True,
    False,
    "digits",
    "laya",
]
#: Keys whose large values ask for more work, not for a fault: a type swap never makes them huge.
WORK_KEYS = {"epochs", "patience", "bootstrap", "n_steps", "draws", "max_memory_mb", "internal_batch_size"}

SWEEP_SEED = {
    "grid": {
        "datasets": ["digits"],
        "heads": ["laya"],
        "seeds": [0],
        "backbones": [{"name": "mlp", "label": "m", "kwargs": {"widths": [8, 6]}}],
    },
    "head_kwargs": {"laya": {"d_star": 4, "scorer_hidden": 4}},
    "data": {"train_limit": 64, "val_limit": 32, "test_limit": 32},
    "training": {"epochs": 1, "batch_size": 32},
    "evaluation": {"methods": ["contribution", "random"], "ablation": ["gate"], "limit": 16, "bootstrap": 0},
}

PY_SEED = (
    "import torch\nfrom torch import nn\n\n\ndef make():\n    torch.manual_seed(0)\n"
    "    return nn.Sequential(nn.Linear(64, 8), nn.ReLU(), nn.Linear(8, 6), nn.Tanh()).eval()\n"
)
#: A module whose import writes the marker: proof that code ran (``{marker}`` is filled in).
EVIL_SOURCE = "open({marker!r}, 'w').close()\n" + PY_SEED


# --------------------------------------------------------------------------- text forms of trees
def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a JSON string is a TOML basic string (same escapes)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v if x is not None) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {_toml_value(x)}" for k, x in v.items() if x is not None) + "}"
    return '"None"'


def toml_text(tree: dict) -> str:
    """A TOML document for ``tree``: top-level tables as sections, everything below inline (``None`` left out)."""
    lines = []
    for key, value in tree.items():
        if isinstance(value, dict):
            lines.append(f"[{json.dumps(str(key))}]")
            lines += [f"{json.dumps(str(k))} = {_toml_value(v)}" for k, v in value.items() if v is not None]
        elif value is not None:
            lines.insert(0, f"{json.dumps(str(key))} = {_toml_value(value)}")
    return "\n".join(lines) + "\n"


def json_text(tree) -> str:
    """``tree`` as JSON text (``NaN``/``Infinity`` as Python's json writes them)."""
    return json.dumps(tree)


def _work_value(rng: random.Random, key, value):
    """A value that only asks for more work (epochs, steps, draws) is made wrong, never huge."""
    if key in WORK_KEYS and isinstance(value, (int, float)) and not isinstance(value, bool):
        return rng.choice([0, -1, 1.5, "x"])
    return value


def edit_tree(rng: random.Random, tree, extra_keys=("evil", "trust_code", "model", "kwargs", "label")):
    """One to three edits of a copy of ``tree``: a value swapped from :data:`POOL`, a key deleted or added."""
    return fuzz_edit_tree(rng, tree, extra_keys, POOL, adjust=_work_value)


def deep(rng: random.Random) -> str:
    depth = rng.choice([50, 1000, 50_000, 200_000])
    return "[" * depth + "]" * depth


def long_string(rng: random.Random) -> str:
    return json.dumps("é" * rng.choice([100, 101, 256, 10_000, 600_000]))


def byte_mutation(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    name = rng.choice(sorted(BYTE_MUTATIONS))
    return name, BYTE_MUTATIONS[name](rng, data)


# --------------------------------------------------------------------------- sweep configs
def sweep_mutant(rng: random.Random, paths: dict[str, Path]) -> tuple[str, bytes]:
    """One mutated sweep config: ``(mutation, bytes)``. ``paths``: ``fifo``, ``folder``, ``evil`` (a module that
    writes the marker), ``evil_ckpt`` (a checkpoint whose backbone is a ``py:`` reference to it)."""
    seed = copy.deepcopy(SWEEP_SEED)
    r = rng.random()
    if r < 0.3:
        name, data = byte_mutation(rng, toml_text(seed).encode())
        return f"bytes:{name}", data
    if r < 0.6:
        return "type_swap", toml_text(edit_tree(rng, seed)).encode()
    what = rng.choice(["deep", "long", "huge", "code", "code", "path", "dup"])
    text = toml_text(seed)
    if what == "deep":
        key = rng.choice(["seeds", "datasets", "heads", "widths", "methods"])
        text = text.replace(f'"{key}" = [', f'"{key}" = [{deep(rng)}, ', 1)
    elif what == "long":
        text = text.replace('"label" = "m"', f'"label" = {long_string(rng)}')
    elif what == "huge":
        key = rng.choice(["train_limit", "limit", "d_star", "batch_size", "seeds", "widths"])
        number = rng.choice(["9" * 30, "1e999", "-1e999", "0x7fffffffffffffff", "1_000_000_000_000"])
        text = text.replace(f'"{key}" = ', f'"{key}" = {number} #', 1)
    elif what == "code":
        entry = rng.choice(
            [
                {"model": f"py:{paths['evil']}:make", "label": "evil"},
                {"model": f"py:{paths['evil']}:make", "label": "evil", "trust_code": True},
                {"model": str(paths["evil_ckpt"]), "label": "evil", "trust_code": True},
                {"model": str(paths["evil_ckpt"]), "label": "evil"},
                {"model": f"py:{paths['evil'].stem}:make", "label": "evil"},
            ]
        )
        seed["grid"]["backbones"].append(entry)
        text = toml_text(seed)
    elif what == "path":
        special = rng.choice([str(paths["fifo"]), "/dev/zero", str(paths["folder"]), "/nonexistent/x", "/dev/null"])
        target = rng.choice(["dataset", "data_dir", "cache_dir", "model"])
        if target == "dataset":
            seed["grid"]["datasets"] = [f"npz:{special}"]
        elif target == "data_dir":
            seed["data"]["data_dir"] = special
        elif target == "cache_dir":
            seed["cache_dir"] = special
        else:
            seed["grid"]["backbones"] = [{"model": special, "label": "x"}]
        text = toml_text(seed)
        what = f"path:{target}"
    else:
        text = text + text.splitlines()[-1] + "\n"  # a key defined twice
    return what, text.encode()


# --------------------------------------------------------------------------- py: modules
#: Module sources, each a way a user's module can fail (or, for a few, work).
PY_BEHAVIOURS: dict[str, str] = {
    "valid": PY_SEED,
    "syntax": "def make(:\n",
    "indent": "def make():\nreturn 1\n",
    "import_value_error": "raise ValueError('bad weights path')\n",
    "import_missing_module": "import a_module_that_is_not_installed\n",
    "import_system_exit": "import sys\nsys.exit(3)\n",
    "import_system_exit_text": "raise SystemExit('stop\\nnow')\n",
    "import_memory": "raise MemoryError\n",
    "import_recursion": "def f():\n    return f()\nf()\n",
    "import_long_message": "raise RuntimeError('x' * 100000)\n",
    "import_bad_str": "class E(Exception):\n    def __str__(self):\n        raise TypeError('no str')\nraise E()\n",
    "import_newlines": "raise ValueError('line one\\nline two\\n\\x1b[2J')\n",
    "import_base_exception": "class Stop(BaseException):\n    pass\nraise Stop('odd')\n",
    "no_callable": "x = 1\n",
    "not_callable": "make = 5\n",
    "factory_raises": "def make():\n    raise RuntimeError('cannot build')\n",
    "factory_needs_args": "def make(path):\n    return path\n",
    "factory_system_exit": "def make():\n    raise SystemExit(0)\n",
    "factory_recursion": "def make():\n    return make()\n",
    "returns_none": "def make():\n    return None\n",
    "returns_int": "def make():\n    return 5\n",
    "returns_class": "from torch import nn\ndef make():\n    return nn.Linear\n",
    "returns_list": "from torch import nn\ndef make():\n    return [nn.Linear(64, 3)]\n",
    "returns_tensor": "import torch\ndef make():\n    return torch.zeros(3)\n",
    "returns_empty_module": "from torch import nn\ndef make():\n    return nn.Module()\n",
    "forward_raises": (
        "from torch import nn\nclass M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.a = nn.Linear(64, 4)\n    def forward(self, x):\n        raise RuntimeError('forward')\n"
        "def make():\n    return M()\n"
    ),
    "forward_wrong_width": "from torch import nn\ndef make():\n    return nn.Sequential(nn.Linear(63, 4), nn.ReLU())\n",
    "forward_nan": (
        "import torch\nfrom torch import nn\ndef make():\n    m = nn.Sequential(nn.Linear(64, 4), nn.ReLU())\n"
        "    torch.nn.init.constant_(m[0].weight, float('nan'))\n    return m\n"
    ),
    "forward_scalar": (
        "import torch\nfrom torch import nn\nclass M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.a = nn.Identity()\n        self.b = nn.Identity()\n    def forward(self, x):\n"
        "        return self.b(self.a(x).sum())\ndef make():\n    return M()\n"
    ),
}
LAYERS = ["0,2", "0,1,2,3", "a,b", "", "*", "0,0", "nope", "99", "0," * 200, "é" * 300]


def py_mutant(rng: random.Random) -> tuple[str, str, bytes | None, str]:
    """``(mutation, spec tail, module bytes, layers)``: the module to write as ``m.py`` and the spec's ending
    (``m.py:make``, or a damaged spec); ``None`` bytes: the spec names a special file instead."""
    r = rng.random()
    layers = "0,2" if rng.random() < 0.6 else rng.choice(LAYERS)
    if r < 0.45:
        name = rng.choice(sorted(PY_BEHAVIOURS))
        if name.startswith(("returns", "forward", "factory", "no_", "not_", "valid")) and "a,b" in layers:
            layers = "a,b"
        return f"module:{name}", "m.py:make", PY_BEHAVIOURS[name].encode(), layers
    if r < 0.8:
        name, data = byte_mutation(rng, PY_SEED.encode())
        return f"source:{name}", "m.py:make", data, layers
    spec = rng.choice(
        [
            "m.py",
            "m.py:",
            ":make",
            "m.py:make:extra",
            "m.py:__class__",
            "m.py:make.__globals__",
            "m.py:" + "a" * 5000,
            "missing.py:make",
            "FOLDER:make",
            "FIFO:make",
            "/dev/zero:make",
            "HUGE:make",
            "m.pyc:make",
            "os:system",
            "m:make",
            "\x00:make",
        ]
    )
    return f"spec:{spec[:20]}", spec, PY_SEED.encode(), "0,2"


# --------------------------------------------------------------------------- keras files
def keras_edits() -> dict[str, Callable]:
    """Weight-tree edits of the ``tiny_layers`` list ``[(group, name, [arrays])]`` -> a new list."""
    import numpy as np

    def one_array(rng, layers, f):
        layers = copy.deepcopy(layers)
        k = rng.randrange(len(layers))
        arrays = list(layers[k][2])
        j = rng.randrange(len(arrays))
        arrays[j] = f(np.asarray(arrays[j]))
        layers[k] = (layers[k][0], layers[k][1], arrays)
        return layers

    return {
        "nan": lambda rng, ls: one_array(
            rng, ls, lambda a: np.where(np.arange(a.size).reshape(a.shape) == 0, np.nan, a)
        ),
        "inf": lambda rng, ls: one_array(rng, ls, lambda a: np.full_like(a, np.inf)),
        "shape": lambda rng, ls: one_array(rng, ls, lambda a: np.zeros(tuple(s + 1 for s in a.shape) or (2,))),
        "transpose": lambda rng, ls: one_array(rng, ls, lambda a: a.T.copy() if a.ndim == 2 else a[:-1]),
        "scalar": lambda rng, ls: one_array(rng, ls, lambda a: np.float32(1.0)),
        "rank3": lambda rng, ls: one_array(rng, ls, lambda a: a.reshape(1, *a.shape, 1)),
        "drop_layer": lambda rng, ls: [x for i, x in enumerate(ls) if i != rng.randrange(len(ls))],
        "drop_array": lambda rng, ls: one_array(rng, ls, lambda a: a.reshape(-1)[:0]),
        "rename": lambda rng, ls: [
            (g, rng.choice(["", "x" * 5000, "dense_1", "é", "../../x"]) if i == 0 else n, a)
            for i, (g, n, a) in enumerate(ls)
        ],
        "duplicate_layer": lambda rng, ls: ls + [(ls[0][0] + "_copy", ls[0][1], ls[0][2])],
        "huge_width": lambda rng, ls: ls + [("layers/dense_99", "extra", [np.zeros((1, 1))])],
    }
