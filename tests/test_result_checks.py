"""Every result folder kind is checked against its manifest and against the ranges of its numbers; a manifest
nested too deeply is one line; a plug-in's function that raises is one line naming the plug-in.

Oracles: the numbers' own definitions (a Spearman rho lies in [-1, 1], an accuracy and a p-value in [0, 1], an
effect on a probability in [-1, 1]), the file names in the messages, and the CLI's exit code and output lines.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from laya_eval.catalog import ABLATION_SPECS, METHOD_SPECS
from laya_eval.engine.methods import METHODS
from laya_eval.engine.removals import ABLATION_REGISTRY
from tests.cli_helpers import assert_one_line_error, run


def _rehash(folder: Path) -> None:
    """Make the manifest list the files' current sha256, as an editor who knows the format would."""
    manifest = json.loads((folder / "manifest.json").read_text())
    for rel in manifest.get("files", {}):
        manifest["files"][rel] = hashlib.sha256((folder / rel).read_bytes()).hexdigest()
    (folder / "manifest.json").write_text(json.dumps(manifest))


def _huge(folder: Path, name: str, column: str) -> None:
    table = pd.read_csv(folder / name)
    table[column] = 1e308
    table.to_csv(folder / name, index=False)


# ------------------------------------------------------------------ plug-in functions that raise
BROKEN_PLUGIN = textwrap.dedent('''
    """A plug-in whose method fails when it is called, not when it is loaded."""
    import laya_eval


    def exploding_scores(trace, model, *, target, context):
        raise ValueError("the scores went wrong")


    laya_eval.register_method(laya_eval.MethodSpec("exploding", "Raises when called."), exploding_scores)
''')


@pytest.fixture
def restored_registry(monkeypatch):
    from laya_eval.engine import plugins

    monkeypatch.setattr(plugins, "_installed_done", plugins._installed_done)
    saved = [(d, dict(d)) for d in (METHOD_SPECS, ABLATION_SPECS, METHODS, ABLATION_REGISTRY, plugins._IDENTITIES)]
    loaded = list(plugins._LOADED)
    yield
    for registry, before in saved:
        registry.clear()
        registry.update(before)
    plugins._LOADED[:] = loaded
    sys.modules.pop("laya_broken_plugin", None)


def _faithfulness(checkpoint, out, *extra):
    return run(
        "faithfulness", checkpoint, "--methods", "exploding,random", "--limit", 20, "--bootstrap", 0, "-q",
        "--out", out, *extra,
    )  # fmt: skip


def test_an_installed_plugin_whose_function_raises_is_one_line_naming_it(
    restored_registry, tmp_path, monkeypatch, digits_checkpoints
):
    from importlib import metadata

    from laya_eval.engine import plugins

    (tmp_path / "site" / "laya_broken_plugin.py").parent.mkdir()
    (tmp_path / "site" / "laya_broken_plugin.py").write_text(BROKEN_PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    entry = metadata.EntryPoint(name="broken", value="laya_broken_plugin", group=plugins.ENTRY_POINT_GROUP)
    every = metadata.entry_points
    monkeypatch.setattr(
        metadata, "entry_points", lambda **kw: [entry] if kw.get("group") == plugins.ENTRY_POINT_GROUP else every(**kw)
    )
    monkeypatch.setattr(plugins, "_installed_done", False)
    result = _faithfulness(digits_checkpoints["laya"], tmp_path / "out")
    assert_one_line_error(
        result,
        r"^Error: plug-in entry point 'broken' \(method 'exploding'\): exploding_scores\(\) raised "
        r"ValueError: the scores went wrong\.$",
    )
    assert not (tmp_path / "out").exists()


def test_a_plugin_named_on_the_command_line_whose_function_raises_is_one_line(
    restored_registry, tmp_path, digits_checkpoints
):
    module = tmp_path / "broken.py"
    module.write_text(BROKEN_PLUGIN)
    result = _faithfulness(digits_checkpoints["laya"], tmp_path / "out", "--plugin", f"py:{module}", "--trust-code")
    assert_one_line_error(
        result, rf"plug-in py:{module} \(method 'exploding'\): exploding_scores\(\) raised ValueError: the scores"
    )


# ------------------------------------------------------------------ every folder kind, checked
@pytest.fixture(scope="module")
def folders(digits_checkpoints, digits, tmp_path_factory):
    """One small folder of each kind `report` reads: faithfulness, sanity, mixers."""
    import numpy as np
    import torch

    import laya_eval
    from laya_eval.mixers.reference import PatchDepthClassifier, save_mixer_model
    from laya_eval.sanity_checks import SanityOptions
    from laya_eval.training.trainer import TrainOptions

    root = tmp_path_factory.mktemp("kinds")
    faith = root / "faith"
    result = run(
        "faithfulness", digits_checkpoints["laya"], "--data", "digits", "--limit", 24, "--methods",
        "laya,contribution,random", "--bootstrap", 100, "--out", faith, "-q",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    options = SanityOptions(
        methods=("laya", "random"), roar_seeds=1, bootstrap=100, train=TrainOptions(epochs=2, seed=0, batch_size=64)
    )
    laya_eval.sanity(digits_checkpoints["laya"], digits, out=root / "sanity", options=options, limit=60)
    torch.manual_seed(0)
    model = PatchDepthClassifier("attnres", image_size=8, patch=4, dim=8, depth=3, heads=2, n_classes=3)
    np.savez(root / "d.npz", x=torch.randn(200, 1, 8, 8).numpy(), y=np.arange(200) % 3)
    result = run(
        "mixers", save_mixer_model(model, root / "m.pt"), "--data", f"npz:{root / 'd.npz'}", "--limit", 30,
        "--bootstrap", 100, "--methods", "mass,random", "--out", root / "mixers", "--quiet",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return {"faithfulness": faith, "sanity": root / "sanity", "mixers": root / "mixers"}


@pytest.mark.parametrize(
    "kind, name, column",
    [
        ("faithfulness", "summary.csv", "faithfulness"),
        ("faithfulness", "summary.csv", "deletion_at_1"),  # within the bounds the manifest's metrics declare
        ("faithfulness", "samples.csv", "spearman"),
        ("faithfulness", "comparisons.csv", "p_value"),
        ("sanity", "randomisation.csv", "similarity"),
        ("sanity", "layer_roar.csv", "accuracy"),
        ("sanity", "roar_agreement.csv", "spearman"),
        ("mixers", "summary.csv", "faithfulness"),
        ("mixers", "map.csv", "mean_effect"),
    ],
)
def test_a_number_outside_its_range_is_refused_in_every_folder_kind(folders, tmp_path, kind, name, column):
    folder = tmp_path / kind
    shutil.copytree(folders[kind], folder)
    _huge(folder, name, column)
    _rehash(folder)  # the manifest still verifies: only the range check can catch it
    result = run("report", folder, "--out", tmp_path / "report", "--no-html")
    assert_one_line_error(result, rf"{folder / name}: column '{column}' must lie in \[-?[01], 1\]; row 1 holds 1e\+308")
    assert not (tmp_path / "report").exists()


@pytest.mark.parametrize("kind", ["faithfulness", "sanity", "mixers"])
def test_every_folder_kind_is_checked_against_its_manifest(folders, tmp_path, kind):
    folder = tmp_path / kind
    shutil.copytree(folders[kind], folder)
    name = {"faithfulness": "summary.csv", "sanity": "roar_agreement.csv", "mixers": "map.csv"}[kind]
    (folder / name).write_text((folder / name).read_text() + "\n")  # edited, the manifest not re-hashed
    assert_one_line_error(
        run("report", folder, "--out", tmp_path / "report", "--no-html"),
        rf"'{folder / name}' is not the file (its run|run \w+) wrote \(files of different runs are mixed\)",
    )


@pytest.mark.parametrize("kind", ["faithfulness", "sanity", "mixers"])
def test_a_manifest_nested_too_deeply_is_one_line(folders, tmp_path, kind):
    folder = tmp_path / kind
    shutil.copytree(folders[kind], folder)
    (folder / "manifest.json").write_text("[" * 100_000 + "]" * 100_000)
    assert_one_line_error(
        run("report", folder, "--out", tmp_path / "report", "--no-html"),
        rf"'{folder / 'manifest.json'}' is unreadable \(JSON nested too deeply\)",
    )


def test_a_manifest_that_lists_a_device_or_a_path_outside_is_refused(folders, tmp_path):
    from laya_eval.errors import ResultsError
    from laya_eval.output.files import verify_result_folder

    folder = tmp_path / "faith"
    shutil.copytree(folders["faithfulness"], folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    for listed in ("/dev/zero", "../faith-copy/summary.csv", "../../etc/hostname"):
        (folder / "manifest.json").write_text(json.dumps({**manifest, "files": {listed: "0" * 64}}))
        with pytest.raises(ResultsError, match="not a file of the folder"):
            verify_result_folder(folder)
    (folder / "zero").symlink_to("/dev/zero")  # a name inside the folder that leads outside it: never read
    os.mkfifo(folder / "fifo")  # inside the folder, but not a regular file: never opened
    for listed, words in (("zero", "not a file of the folder"), ("fifo", "lacks fifo")):
        (folder / "manifest.json").write_text(json.dumps({**manifest, "files": {listed: "0" * 64}}))
        with pytest.raises(ResultsError, match=words):
            verify_result_folder(folder)
