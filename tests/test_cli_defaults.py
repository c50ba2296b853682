"""The CLI's defaults are the library's: every option of a command that stands for a field of the library's
options (or a parameter of its verb) defaults to what a library call without it gets, read here from the option
classes and signatures themselves."""

from __future__ import annotations

import dataclasses
import inspect

import click
import pytest

from laya_eval.engine.plan import EvalOptions
from laya_eval.mixers.audit import MixerOptions
from laya_eval.models.heads import LayaHead, ScalarMixHead
from laya_eval.planted.run import MetaOptions
from laya_eval.pruning.options import PruneOptions
from laya_eval.reporting.write import report
from laya_eval.sanity_checks.options import SanityOptions
from laya_eval.training.trainer import TrainOptions
from laya_eval_cli.main import cli


def _fields(cls, **rename) -> dict:
    """{CLI option name: the field's default}: fields renamed by ``rename`` (CLI name -> field name)."""
    made = cls()
    values = {f.name: getattr(made, f.name) for f in dataclasses.fields(cls)}
    return {**values, **{cli_name: values[field] for cli_name, field in rename.items()}}


def _parameters(fn) -> dict:
    return {n: p.default for n, p in inspect.signature(fn).parameters.items() if p.default is not p.empty}


EVAL = _fields(EvalOptions, ig_steps="n_steps", max_memory="max_memory_mb")
TRAIN = _fields(TrainOptions)
HEAD = {**_parameters(LayaHead.__init__)}
SANITY = {**_fields(SanityOptions), **{k: v for k, v in _fields(TrainOptions).items() if k in ("epochs", "lr")},
          "patience": SanityOptions().train.patience, "train_seed": SanityOptions().train.seed}
PRUNE = {**_fields(PruneOptions, random_rankings="n_random", random_refits="n_random_refit"),
         "epochs": PruneOptions().train.epochs, "patience": PruneOptions().train.patience,
         "lr": PruneOptions().train.lr, "train_seed": PruneOptions().train.seed}

# Command -> (the library's defaults by CLI option name, the options that stand for them).
CASES = {
    "faithfulness": (EVAL, ["split", "target", "ig_steps", "ablation", "draws", "angular_span", "scope", "batch_size",
                            "seed", "bootstrap", "chunk_size", "tie_rtol", "dtype", "max_memory", "device"]),
    "profile": (EVAL, ["split", "target", "ig_steps", "scope", "batch_size", "seed", "bootstrap", "device"]),
    "train": ({**TRAIN, **HEAD}, ["seed", "epochs", "batch_size", "lr", "patience", "d_star", "tau", "scorer_hidden",
                                  "psi", "device"]),
    "fit-head": ({**TRAIN, **HEAD}, ["seed", "epochs", "batch_size", "lr", "patience", "d_star", "tau",
                                     "scorer_hidden", "psi", "device"]),
    "sanity": (SANITY, ["target", "ablation", "similarity", "roar_seeds", "epochs", "patience", "lr", "train_seed",
                        "batch_size", "bootstrap", "seed"]),
    "prune": (PRUNE, ["target", "seeds", "random_rankings", "random_refits", "epochs", "patience", "lr", "train_seed",
                      "batch_size", "bootstrap", "seed"]),
    "meta": (_fields(MetaOptions), ["seeds", "first_seed", "n_layers", "batch_size", "bootstrap", "fmt"]),
    "mixers": (_fields(MixerOptions), ["split", "removal", "draws", "limit", "batch_size", "seed", "bootstrap",
                                       "ig_steps"]),
    "report": (_parameters(report), ["max_points", "html_report", "title", "style", "fmt"]),
}


@pytest.mark.parametrize("command", sorted(CASES))
def test_cli_defaults_are_the_library_defaults(command):
    library, names = CASES[command]
    options = {p.name: p for p in cli.commands[command].params if isinstance(p, click.Option)}
    assert set(names) <= set(options), sorted(set(names) - set(options))
    differ = {n: (options[n].default, library[n]) for n in names if options[n].default != library[n]}
    assert differ == {}, f"{command}: CLI default vs library default: {differ}"


def test_the_heads_share_the_shared_space_size():
    assert _parameters(ScalarMixHead.__init__)["d_star"] == HEAD["d_star"]
