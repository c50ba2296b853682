"""One record per option: the CLI, the library's option classes, the sweep and the keys all come from it.

The click options of every command are built from :mod:`laya_eval.options`, the option classes take their defaults
and checks from it, and the resume key takes every field whose role is ``decides`` by that role alone. These tests
walk the records and the fields instead of listing them a second time.
"""

from __future__ import annotations

import dataclasses

import click
import pytest

from laya_eval import catalog
from laya_eval.engine.evaluation import EvalOptions, evaluate, make_plan
from laya_eval.engine.partial import PartialStore
from laya_eval.errors import ConfigError
from laya_eval.mixers.audit import MixerOptions
from laya_eval.options import COMMANDS, OPTIONS, REQUIRED, ROLES, for_command, options_of
from laya_eval.planted.run import MetaOptions
from laya_eval.pruning.options import PruneOptions
from laya_eval.sanity_checks.options import SanityOptions
from laya_eval.training.trainer import TrainOptions
from laya_eval_cli.main import cli

CLASSES = [EvalOptions, TrainOptions, SanityOptions, PruneOptions, MetaOptions, MixerOptions]
#: Fields a library class has without a command-line option, each with the reason.
LIBRARY_ONLY = {
    ("SanityOptions", "train"): "the retraining protocol: its fields are records of SanityOptions.train",
    ("PruneOptions", "train"): "the refit protocol: its fields are records of PruneOptions.train",
    ("PruneOptions", "timing_repeats"): "how often the latency is measured (no flag)",
    ("PruneOptions", "timing_batch"): "the batch of the latency measurement (no flag)",
    ("MetaOptions", "n_steps"): "IG steps of the planted models' evaluations (no flag)",
}


def test_every_command_option_is_built_from_its_record():
    """Flag, parameter, default, help and choices of every click option equal its record's."""
    assert set(COMMANDS) == set(cli.commands)
    for name, command in cli.commands.items():
        options = [p for p in command.params if isinstance(p, click.Option)]
        records = for_command(name)
        assert [o.opts[0] for o in options] == [r.flag for r in records], name
        for opt, record in zip(options, records):
            assert opt.name == (record.param or record.name), record.id
            assert (opt.help or "") == record.help, record.id
            if record.default is REQUIRED:
                assert opt.required, record.id
            elif record.kind == "names" and isinstance(record.default, tuple):
                assert opt.default == ",".join(record.default), record.id
            elif not record.flag.startswith("--no-"):
                assert opt.default == record.default, record.id
            if isinstance(opt.type, click.Choice):
                assert list(opt.type.choices) == record.choice_list(), record.id
        flags = [r.flag for r in records]
        assert len(flags) == len(set(flags)), f"{name}: a flag declared twice"


def test_every_option_has_a_role_and_commands_that_exist():
    for record in OPTIONS.values():
        assert record.role in ROLES, record.id
        assert set(record.commands) <= set(COMMANDS), record.id


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_every_field_of_a_library_option_class_has_its_record(cls):
    """A field is declared once: its default is the record's (the class reads it), or it is library-only."""
    records = options_of(cls.__name__)
    made = cls()
    for field in dataclasses.fields(cls):
        if (cls.__name__, field.name) in LIBRARY_ONLY:
            assert field.name not in records
            continue
        assert field.name in records, f"{cls.__name__}.{field.name} has no option record"
        expected = records[field.name].default
        got = getattr(made, field.name)
        if cls is EvalOptions and field.name == "ablation":
            expected = catalog.DEFAULT_ABLATION["head"]  # None resolves to the scope's default
        assert got == expected, f"{cls.__name__}.{field.name}"
    for nested in ("SanityOptions.train", "PruneOptions.train"):
        owner = nested.split(".")[0]
        if owner == cls.__name__:
            train = made.train
            for name, record in options_of(nested).items():
                assert getattr(train, name) == record.default, f"{nested}.{name}"


def test_an_invalid_value_is_refused_naming_the_field_as_a_caller_knows_it():
    from laya_eval.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^EvalOptions\.draws must be a positive integer; got 0\.$") as err:
        EvalOptions(draws=0)
    assert err.value.parameter == "EvalOptions.draws"
    with pytest.raises(
        ConfigError,
        match=r"^EvalOptions\.dtype must be one of \{float32, bfloat16, float16\}; "
        r"got 'float64'\.$",
    ):
        EvalOptions(dtype="float64")
    with pytest.raises(ConfigError, match=r"^TrainOptions\.lr must be a finite number > 0; got 0\.$"):
        TrainOptions(lr=0)


def test_the_cli_writes_the_flag_where_the_library_names_the_field(tmp_path):
    from tests.cli_helpers import assert_one_line_error, run

    # --tie-rtol's bounds are click's; --ablation's choices are the registry's, checked by EvalOptions
    assert_one_line_error(
        run("faithfulness", tmp_path / "none.pt", "--ablation", "erase", "--out", tmp_path / "o"),
        r"^Error: --ablation must be one of \{gate, gate-renorm, zero, mean, resample, noise, skip, mean-update, resample-update, noise-update\}; "
        r"got 'erase'\.$",
    )


# ------------------------------------------------------------------ roles and keys
#: A second valid value of every EvalOptions field (the test fails for a field left out here).
OTHER = {
    "methods": ("laya",),
    "ablation": "mean",
    "scope": "network",
    "split": "val",
    "limit": 30,
    "context": 64,
    "batch_size": 32,
    "seed": 1,
    "bootstrap": 200,
    "device": "cuda",
    "n_steps": 8,
    "internal_batch_size": 4,
    "ig_baseline": "mean",
    "target": "label",
    "dtype": "bfloat16",
    "chunk_size": 16,
    "tie_rtol": 1e-3,
    "reference": "all",
    "trust_code": True,
    "download": True,
    "allow_nonfinite": True,
    "allow_unverified": True,
    "max_memory_mb": 512,
    "draws": 3,
    "angular_span": 2,
    "cache": False,
    "cache_dir": "elsewhere",
    "table_format": "parquet",
    "save_draws": True,
}


@pytest.fixture(scope="module")
def base_plan(digits_models):
    return make_plan(digits_models["laya"], "digits", options=EvalOptions(limit=40, methods=("laya", "random")))


def test_the_keys_follow_the_roles_of_every_field(base_plan):
    """A deciding field changes the run key; a summary field only the result key; the others neither."""
    fields = {f.name for f in dataclasses.fields(EvalOptions)}
    assert set(OTHER) == fields, "give every EvalOptions field a second value here"
    records = options_of("EvalOptions")
    base = base_plan.options
    for name in sorted(fields):
        other = object.__new__(EvalOptions)  # the value alone changes: no re-planning, no device lookup
        for f in fields:
            object.__setattr__(other, f, getattr(base, f))
        object.__setattr__(other, name, OTHER[name])
        plan = dataclasses.replace(base_plan, options=other)
        role = records[name].role
        changed = (plan.key() != base_plan.key(), plan.result_key() != base_plan.result_key())
        expected = {"decides": (True, True), "summary": (False, True)}.get(role, (False, False))
        assert changed == expected, f"EvalOptions.{name} ({role})"


class _Killed(Exception):
    pass


def _interrupted(ckpt, out, options, monkeypatch):
    """Run until two chunks are saved, then die."""
    saved, real_save = [], PartialStore.save_chunk

    def save_then_die(self, start, stop, records):
        real_save(self, start, stop, records)
        saved.append(start)
        if len(saved) == 2:
            raise _Killed

    monkeypatch.setattr(PartialStore, "save_chunk", save_then_die)
    with pytest.raises(_Killed):
        evaluate(ckpt, "digits", options=options, out=out)
    monkeypatch.setattr(PartialStore, "save_chunk", real_save)


def test_resume_reuses_chunks_across_a_speed_option_and_refuses_a_deciding_one(
    digits_checkpoints, tmp_path, monkeypatch
):
    import laya_eval.engine.evaluation as engine

    ckpt = digits_checkpoints["laya"]
    fast = dict(limit=60, chunk_size=20, bootstrap=100, n_steps=4, methods=("laya", "ig", "random"))
    ref = tmp_path / "ref"
    evaluate(ckpt, "digits", options=EvalOptions(**fast, batch_size=16), out=ref)
    out = tmp_path / "resumed"
    _interrupted(ckpt, out, EvalOptions(**fast, batch_size=16), monkeypatch)
    # a deciding option changed: refused before any work
    with pytest.raises(Exception, match="other options"):
        evaluate(ckpt, "digits", options=EvalOptions(**fast, batch_size=16, seed=5), out=out, resume=True)
    # a speed option changed: the two saved chunks are reused and the result is the uninterrupted run's bytes
    computed = []
    real_batch = engine._batch_records
    monkeypatch.setattr(engine, "_batch_records", lambda *a, **k: computed.append(len(a[3])) or real_batch(*a, **k))
    evaluate(ckpt, "digits", options=EvalOptions(**fast, batch_size=48), out=out, resume=True)
    assert sum(n for n in computed) < 60 and len(computed) == 1  # one batch: the last chunk's 20 rows (padded)
    for name in ("layers.csv", "samples.csv", "summary.csv", "comparisons.csv"):
        assert (out / name).read_bytes() == (ref / name).read_bytes(), name


# ------------------------------------------------------------------ the command pages
def _option_rows(page: str) -> list[tuple[str, str, str]]:
    """(first flag, default cell, meaning) of each row of a page's ``## Options`` table."""
    import re

    text = page.split("## Options", 1)[1]
    rows = []
    for line in text.splitlines()[3:]:
        if not line.startswith("| `-"):
            if rows:
                break
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        rows.append((re.search(r"--[a-z0-9-]+", cells[0]).group(0), cells[1], cells[2]))
    return rows


def _default_cell(record) -> str | None:
    """What the default column must say, or None where it is free text (no plain default)."""
    if record.default is REQUIRED:
        return "required"
    if record.default_text:
        return record.default_text
    if record.kind == "flag":
        return "off" if record.default is False else "on" if record.default is True else None
    if record.default is None or isinstance(record.default, tuple):
        return None
    return f"`{record.default}`"


@pytest.mark.parametrize("command", [c for c in COMMANDS if for_command(c)])
def test_the_command_page_option_table_is_the_records(command):
    """docs/commands/COMMAND.md lists every option once, in the records' order, with the record's default and choices
    (the meaning column may say more than ``--help``)."""
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "commands" / f"{command}.md").read_text()
    rows = _option_rows(page)
    records = for_command(command)
    assert [r[0] for r in rows] == [r.flag for r in records]
    for (flag, default, meaning), record in zip(rows, records):
        expected = _default_cell(record)
        if expected is not None and not (record.flag.startswith("--no-")):
            assert default == expected, f"{command} {flag}: {default!r} != {expected!r}"
        listed = re.search(r"One of ((?:`[^`]+`(?:, | or )?)+)\.", meaning)
        if listed and not callable(record.choices):
            assert re.findall(r"`([^`]+)`", listed.group(1)) == record.choice_list(), f"{command} {flag}"


def test_a_reference_outside_the_run_is_refused_while_planning(digits_models):
    with pytest.raises(
        ConfigError, match=r"^EvalOptions\.reference must be one of \{auto, all, laya, .*\}; got 'gi'\.$"
    ):
        EvalOptions(reference="gi")
    with pytest.raises(
        ConfigError,
        match=r"^reference must be 'auto', 'all' or one of this run's methods \{laya, random\}; got 'ig'\.$",
    ):
        make_plan(
            digits_models["laya"], "digits", options=EvalOptions(limit=40, methods=("laya", "random"), reference="ig")
        )
