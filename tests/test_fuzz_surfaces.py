"""A few seeded mutants of each new surface (sweep configs, Keras files, feature-cache metadata, ``py:`` models)
through the real CLI: each ends in success or one clean ``Error:`` line, and no module named by an input runs
without ``--trust-code``. ``benchmarks/fuzz_surfaces.py`` runs the same mutator over more than a thousand mutants
(``benchmarks/results/fuzz_surfaces.md``). The failures that benchmark found have their own tests here."""

from __future__ import annotations

import random

import pytest

from tests import fuzz_surface_seeds as seeds_module
from tests import fuzz_surfaces as fs
from tests.cli_helpers import assert_one_line_error, run

PER_SURFACE = 6


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    return fs.make_seeds(tmp_path_factory.mktemp("fuzz-surfaces"))


def test_the_outcome_classes_can_each_be_reached():
    assert fs.classify(0, "done\n") == "exit0"
    assert fs.classify(2, "Warning: something\nError: bad value.\n") == "exit2"
    assert fs.classify(2, "Error: bad value.\nand a second line\n") == "unclear"
    assert fs.classify(2, "Error: one.\nError: two.\n") == "unclear"
    assert fs.classify(1, "") == "traceback"
    assert fs.classify(2, "Traceback (most recent call last):\nError: x\n") == "traceback"
    assert fs.classify(0, "", ValueError("escaped")) == "traceback"


@pytest.mark.parametrize("surface", fs.SURFACES)
def test_mutants_end_in_success_or_one_clean_line(surface, seeds, tmp_path):
    rng = random.Random(f"{surface}-7")
    for i in range(PER_SURFACE):
        work = tmp_path / str(i)
        work.mkdir()
        case = fs.MAKERS[surface](rng, seeds, work)
        outcome, detail = fs.run_case(case, seeds, timeout=120)
        assert outcome in ("exit0", "exit2"), (case.mutation, case.args, detail)


def test_a_py_spec_in_a_sweep_config_runs_nothing_without_trust(tmp_path):
    marker, evil = tmp_path / "marker", tmp_path / "evil.py"
    evil.write_text(seeds_module.EVIL_SOURCE.format(marker=str(marker)))
    config = tmp_path / "sweep.toml"
    config.write_text(
        '[grid]\ndatasets = ["digits"]\nheads = ["laya"]\nseeds = [0]\n'
        f'backbones = [{{model = "py:{evil}:make", label = "evil"}}]\n'
    )
    result = run("sweep", config, "--out", tmp_path / "out")
    assert_one_line_error(result, r"is Python code: a sweep imports it only with --trust-code")
    assert not marker.exists()
    # control: the same spec named on the command line does import the module, which writes the marker
    result = run("fit-head", "--model", f"py:{evil}:make", "--layers", "0,2", "--out", tmp_path / "o.pt", *fs.FIT)
    assert result.exit_code == 0 and marker.exists(), result.output


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("scorer_hidden = nan", r"head_kwargs\.laya\.scorer_hidden must be an integer in \[1, \d+\]; got nan\."),
        ('d_star = "py:os:system"', r"head_kwargs\.laya\.d_star must be an integer .*; got 'py:os:system'\."),
        ("d_star = 100000000000", r"head_kwargs\.laya\.d_star must be an integer in \[1, \d+\]"),
        ('psi = "mlp2"', r"head_kwargs\.laya\.psi must be one of \{'identity', 'mlp'\}; got 'mlp2'\."),
        ("bogus = 1", r"head_kwargs\.laya: unknown key 'bogus'; expected among \{d_star, psi, scorer_hidden, tau\}"),
    ],
)
def test_a_wrong_head_option_in_a_sweep_config_is_one_line_before_any_work(line, message, tmp_path):
    config = tmp_path / "sweep.toml"
    config.write_text(
        '[grid]\ndatasets = ["digits"]\nheads = ["laya"]\nseeds = [0]\nbackbones = [{name = "mlp"}]\n'
        f"[head_kwargs.laya]\n{line}\n"
    )
    assert_one_line_error(run("sweep", config, "--out", tmp_path / "out"), message)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("source", "message"),
    [
        # an exception class of the module's own that derives from BaseException, not Exception
        ("class Stop(BaseException):\n    pass\nraise Stop('odd')\n", r"importing module .* raised Stop: odd\."),
        (
            "class Stop(BaseException):\n    pass\ndef make():\n    raise Stop('late')\n",
            r"calling make\(\) .* Stop: late",
        ),
        # an exception whose own __str__ fails
        (
            "class E(Exception):\n    def __str__(self):\n        raise TypeError('no')\nraise E()\n",
            r"importing module .* raised E: \(its message cannot be shown\)\.",
        ),
    ],
)
def test_any_exception_a_py_module_raises_is_one_line(source, message, tmp_path):
    module = tmp_path / "mine.py"
    module.write_text(source)
    result = run(
        "fit-head", "--model", f"py:{module}:make", "--data", "digits", "--out", tmp_path / "o.pt", "--epochs", "1"
    )
    assert_one_line_error(result, message)


@pytest.mark.parametrize("damage", ["huge", "folder"])
def test_a_damaged_layer_size_record_is_inferred_again(damage, seeds, tmp_path):
    import shutil

    cache = tmp_path / "cache"
    shutil.copytree(seeds.paths["cache"], cache)
    (record,) = (cache / "layer-dims").glob("*.json")
    if damage == "huge":
        record.write_text("[4611686018427387904, 6]")  # a head on it would allocate exabytes
    else:
        record.unlink()
        record.mkdir()
    args = ["fit-head", "--model", f"py:{seeds.paths['tiny']}:make", "--layers", "0,2", "--out", tmp_path / "o.pt"]
    result = run(*args, "--cache-dir", cache, *fs.FIT)
    assert result.exit_code == 0, result.output
    from laya_eval import load_model

    assert load_model(tmp_path / "o.pt", trust_code=True).model.backbone.layer_dims == [8, 6]


def test_an_archive_with_two_members_of_one_name_is_refused(tmp_path):
    import json
    import warnings
    import zipfile

    import numpy as np

    from tests.test_keras_import import _config, tiny_layers, write_weights

    weights = write_weights(tmp_path / "w.h5", tiny_layers(np.random.default_rng(1))).read_bytes()
    path = tmp_path / "twice.keras"
    with zipfile.ZipFile(path, "w") as z, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns of the duplicate name it writes
        z.writestr("config.json", json.dumps(_config()))
        z.writestr("model.weights.h5", weights)
        z.writestr("config.json", "{}")
    result = run("import-keras", path, "--input-shape", "6", "--out", tmp_path / "o.pt")
    assert_one_line_error(result, r"the archive holds more than one member named 'config.json'\.")
