"""Plug-in methods and ablations: registration, ``--plugin py:`` with and without ``--trust-code``, an installed
entry point used through faithfulness, profile, sanity and prune."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import laya_eval
from laya_eval.catalog import ABLATION_SPECS, METHOD_SPECS, AblationSpec, MethodSpec
from laya_eval.engine.methods import METHODS
from laya_eval.engine.removals import ABLATION_REGISTRY
from laya_eval.errors import ConfigError
from laya_eval.loading.checkpoints import load_checkpoint
from laya_eval.data import load_dataset
from tests.plugin_package import write_module, write_package

ROOT = Path(__file__).resolve().parents[1]


def _env(tmp_path: Path, marker: Path) -> dict:
    env = dict(os.environ)
    env.update(
        PYTHONPATH=f"{ROOT}{os.pathsep}{ROOT / 'cli'}",
        LAYA_EVAL_PLUGIN_MARKER=str(marker),
        LAYA_EVAL_THREADS="1",
        HOME=str(tmp_path / "home"),
    )
    return env


def _cli(python: str, args: list, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [python, "-m", "laya_eval_cli", *map(str, args)], env=env, capture_output=True, text=True, timeout=600
    )


def _oracle_norms(checkpoint: Path, n: int) -> np.ndarray:
    """Per-layer L2 norms of the pooled hidden states of the first ``n`` test samples, from the model directly."""
    model = load_checkpoint(checkpoint)
    x = load_dataset("digits", "test").x[:n]
    with torch.no_grad():
        hidden = model.hidden_states(x)
    return np.stack([h.double().norm(dim=1).numpy() for h in hidden], 1)


def _oracle_ones_effects(checkpoint: Path, n: int) -> np.ndarray:
    """p_c(x) - p_c(x with layer i's state set to ones), head scope, by a slow loop over layers (the backbone in
    float32, the head in float64, as the engine measures effects)."""
    model = load_checkpoint(checkpoint)
    x = load_dataset("digits", "test").x[:n]
    with torch.no_grad():
        hidden = [h.double() for h in model.hidden_states(x)]
        model = model.double()
        probs = torch.softmax(model.head(hidden), -1)
        pred = probs.argmax(1)
        out = []
        for i in range(len(hidden)):
            replaced = [torch.ones_like(h) if j == i else h for j, h in enumerate(hidden)]
            p = torch.softmax(model.head(replaced), -1)
            out.append((probs.gather(1, pred[:, None]) - p.gather(1, pred[:, None])).squeeze(1))
    return torch.stack(out, 1).numpy()


def _layers(folder: Path, method: str) -> pd.DataFrame:
    df = pd.read_csv(folder / "layers.csv")
    return df[df.method == method].sort_values(["sample", "layer"])


def test_a_name_taken_by_a_built_in_is_refused_in_one_line():
    before = (dict(METHOD_SPECS), dict(ABLATION_SPECS), dict(METHODS), dict(ABLATION_REGISTRY))
    with pytest.raises(ConfigError, match=r"^method 'laya' collides with the built-in method of that name"):
        laya_eval.register_method(MethodSpec("laya", "another alpha"), lambda tr, model, *, target, context: None)
    with pytest.raises(ConfigError, match=r"^ablation 'mean' collides with the built-in ablation of that name"):
        laya_eval.register_ablation(AblationSpec("mean", "another mean", scopes=("head",)), head=lambda *a: None)
    with pytest.raises(ConfigError, match=r"give a callable network= exactly when its scopes"):
        laya_eval.register_ablation(AblationSpec("half", "x"), head=lambda *a: None)
    with pytest.raises(ConfigError, match=r"each need must be one of .*got 'gradient'"):
        laya_eval.register_method(MethodSpec("typo", "x", needs=("gradient",)), lambda *a, **k: None)
    # Nothing refused was entered anywhere.
    assert before == (dict(METHOD_SPECS), dict(ABLATION_SPECS), dict(METHODS), dict(ABLATION_REGISTRY))


def test_built_ins_are_registered_through_the_public_path():
    assert laya_eval.register_method.__module__ == "laya_eval.engine.methods"
    assert list(METHODS)[:7] == ["laya", "static", "contribution", "ig", "gradcam", "grad_x_act", "random"]
    assert all(METHODS[n].spec is METHOD_SPECS[n] for n in METHODS)
    assert set(ABLATION_REGISTRY) == set(ABLATION_SPECS)
    # Registering a built-in a second time is refused: each name has one function.
    with pytest.raises(ConfigError, match="already registered"):
        laya_eval.register_method(METHOD_SPECS["random"], METHODS["random"].fn)


def test_py_plugin_needs_trust_code_and_then_runs_as_a_built_in(tmp_path, digits_checkpoints):
    module = write_module(tmp_path / "plug")
    marker = tmp_path / "imported.txt"
    env = _env(tmp_path, marker)
    ckpt = digits_checkpoints["laya"]
    args = [
        "faithfulness",
        ckpt,
        "--plugin",
        f"py:{module}",
        "--methods",
        "state_norm,contribution",
        "--ablation",
        "ones",
        "--limit",
        24,
        "--bootstrap",
        0,
        "--quiet",
    ]
    refused = _cli(sys.executable, [*args, "--out", tmp_path / "refused"], env)
    assert refused.returncode == 2, refused.stderr
    lines = [line for line in (refused.stdout + refused.stderr).splitlines() if line.strip()]
    assert lines == [f"Error: --plugin py:{module} runs that module's code; pass --trust-code if you trust it."]
    assert not marker.exists() and not (tmp_path / "refused").exists()

    ran = _cli(sys.executable, [*args, "--trust-code", "--out", tmp_path / "ran"], env)
    assert ran.returncode == 0, ran.stderr
    assert marker.read_text() == "imported"
    norms = _layers(tmp_path / "ran", "state_norm")
    np.testing.assert_allclose(norms.attribution.to_numpy().reshape(24, -1), _oracle_norms(ckpt, 24), rtol=1e-5)
    np.testing.assert_allclose(norms.effect.to_numpy().reshape(24, -1), _oracle_ones_effects(ckpt, 24), atol=1e-9)
    manifest = json.loads((tmp_path / "ran" / "manifest.json").read_text())
    digest = __import__("hashlib").sha256(module.read_text().encode()).hexdigest()
    assert manifest["plugins"] == {
        "method:state_norm": f"py:{module}@{digest}",
        "ablation:ones": f"py:{module}@{digest}",
    }
    # A name the registry does not know, without the plug-in: one line naming the choices.
    unknown = _cli(sys.executable, [*args[:2], "--methods", "state_norm", "--out", tmp_path / "x"], env)
    assert unknown.returncode == 2 and "Error: --methods must be one of {laya," in unknown.stderr


@pytest.mark.slow
def test_installed_plugin_runs_through_every_command(tmp_path, digits_checkpoints):
    package = write_package(tmp_path / "pkg")
    venv = tmp_path / "venv"
    base = Path(sys.executable)
    # No pip inside the new environment (ensurepip costs seconds): the test environment's pip installs into it.
    subprocess.run(
        [str(base), "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True, timeout=300
    )
    python = str(venv / "bin" / "python")
    # --system-site-packages exposes the base interpreter's packages; a .pth file adds those of the environment
    # running the tests (torch and the rest), so only the plug-in is installed.
    new_site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    import sysconfig

    Path(new_site, "test-environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            python,
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            str(package),
        ],
        check=True,
        timeout=600,
        capture_output=True,
    )
    marker = tmp_path / "imported.txt"
    env = _env(tmp_path, marker)
    ckpt = digits_checkpoints["laya"]

    out = tmp_path / "faith"
    r = _cli(
        python,
        [
            "faithfulness",
            ckpt,
            "--methods",
            "state_norm,laya",
            "--ablation",
            "ones,gate",
            "--limit",
            30,
            "--bootstrap",
            0,
            "--quiet",
            "--out",
            out,
        ],
        env,
    )
    assert r.returncode == 0, r.stderr
    assert marker.exists()  # the entry point was loaded without --plugin
    norms = _layers(out / "ones", "state_norm")
    np.testing.assert_allclose(norms.attribution.to_numpy().reshape(30, -1), _oracle_norms(ckpt, 30), rtol=1e-5)
    np.testing.assert_allclose(norms.effect.to_numpy().reshape(30, -1), _oracle_ones_effects(ckpt, 30), atol=1e-9)
    assert json.loads((out / "ones" / "manifest.json").read_text())["plugins"]["ablation:ones"].startswith(
        "entry-point:example@"
    )

    r = _cli(
        python,
        [
            "profile",
            ckpt,
            "--method",
            "state_norm",
            "--limit",
            60,
            "--bootstrap",
            0,
            "--quiet",
            "--out",
            tmp_path / "profile",
        ],
        env,
    )
    assert r.returncode == 0, r.stderr
    profile = pd.read_csv(tmp_path / "profile" / "profile.csv")
    every = profile[(profile.subset == "all")]
    assert len(every) and every["mean"].gt(0).all()  # norms are positive

    r = _cli(
        python,
        [
            "sanity",
            ckpt,
            "--methods",
            "state_norm,laya",
            "--ablation",
            "ones",
            "--roar-seeds",
            1,
            "--epochs",
            1,
            "--limit",
            60,
            "--bootstrap",
            0,
            "--out",
            tmp_path / "sanity",
        ],
        env,
    )
    assert r.returncode == 0, r.stderr
    assert "state_norm" in set(pd.read_csv(tmp_path / "sanity" / "randomisation.csv").method)

    r = _cli(
        python,
        [
            "prune",
            ckpt,
            "--methods",
            "state_norm",
            "--ablation",
            "ones,gate",
            "--seeds",
            0,
            "--random-rankings",
            2,
            "--random-refits",
            0,
            "--no-timing",
            "--no-early-exit",
            "--limit",
            60,
            "--bootstrap",
            0,
            "--quiet",
            "--out",
            tmp_path / "prune",
        ],
        env,
    )
    assert r.returncode == 0, r.stderr
    pruning = pd.read_csv(tmp_path / "prune" / "pruning.csv")
    assert {"ones", "gate"} <= set(pruning.ablation) and "state_norm" in set(pruning.method)

    # report reads the plug-in's rows as data: through the environment that has it installed, and through one
    # that does not (a result folder needs no code to be reported).
    r = _cli(python, ["report", out / "ones", "--out", tmp_path / "report", "--html"], env)
    assert r.returncode == 0, r.stderr
    summary = pd.read_csv(tmp_path / "report" / "faithfulness.csv")
    assert "state_norm" in set(summary.method), summary
    assert "state\\_norm" in (tmp_path / "report" / "report.md").read_text()  # Markdown-escaped
    from tests.cli_helpers import run

    bare = run("report", out / "ones", "--out", tmp_path / "report-bare")
    assert bare.exit_code == 0, bare.output
    assert (tmp_path / "report-bare" / "faithfulness.csv").read_bytes() == (
        tmp_path / "report" / "faithfulness.csv"
    ).read_bytes()


@pytest.fixture
def restored_registry(monkeypatch):
    """The method and ablation registries and the plug-in loader's records as they were, after the test."""
    from laya_eval.engine import plugins

    monkeypatch.setattr(plugins, "_installed_done", plugins._installed_done)
    saved = [(d, dict(d)) for d in (METHOD_SPECS, ABLATION_SPECS, METHODS, ABLATION_REGISTRY, plugins._IDENTITIES)]
    loaded = list(plugins._LOADED)
    yield
    for registry, before in saved:
        registry.clear()
        registry.update(before)
    plugins._LOADED[:] = loaded
    sys.modules.pop("laya_plugin_example", None)


@pytest.fixture
def installed_example(tmp_path, monkeypatch, restored_registry):
    """The example plug-in as an installed ``laya_eval.plugins`` entry point of this process (not loaded yet)."""
    from importlib import metadata

    from laya_eval.engine import plugins

    module = write_module(tmp_path / "site-packages")
    monkeypatch.syspath_prepend(str(module.parent))
    entry = metadata.EntryPoint(name="example", value=module.stem, group=plugins.ENTRY_POINT_GROUP)
    every = metadata.entry_points
    monkeypatch.setattr(
        metadata, "entry_points", lambda **kw: [entry] if kw.get("group") == plugins.ENTRY_POINT_GROUP else every(**kw)
    )
    monkeypatch.setattr(plugins, "_installed_done", False)
    return module


def test_an_installed_method_is_a_choice_of_meta_and_profile_as_of_faithfulness(
    installed_example, tmp_path, digits_checkpoints
):
    from tests.cli_helpers import run

    ckpt = digits_checkpoints["laya"]
    faith = run(
        "faithfulness",
        ckpt,
        "--methods",
        "state_norm",
        "--limit",
        20,
        "--bootstrap",
        0,
        "--quiet",
        "--out",
        tmp_path / "faith",
    )
    assert faith.exit_code == 0, faith.output
    profile = run(
        "profile",
        ckpt,
        "--method",
        "state_norm",
        "--limit",
        40,
        "--bootstrap",
        0,
        "--quiet",
        "--out",
        tmp_path / "profile",
    )
    assert profile.exit_code == 0, profile.output
    assert json.loads((tmp_path / "profile" / "profile.json").read_text())["method"] == "state_norm"
    meta = run(
        "meta",
        "--methods",
        "state_norm,laya",
        "--families",
        "subset",
        "--seeds",
        1,
        "--limit",
        16,
        "--ablations",
        "gate",
        "--bootstrap",
        0,
        "-q",
        "--out",
        tmp_path / "meta",
    )
    assert meta.exit_code == 0, meta.output
    assert "state_norm" in set(pd.read_csv(tmp_path / "meta" / "meta.csv")["method"])


def test_a_plugin_method_named_with_plugin_is_a_choice_of_profile(restored_registry, tmp_path, digits_checkpoints):
    from tests.cli_helpers import run

    module = write_module(tmp_path / "plug")
    args = ["profile", digits_checkpoints["laya"], "--method", "state_norm", "--limit", 40, "--bootstrap", 0, "--quiet"]
    unknown = run(*args, "--out", tmp_path / "without")
    assert unknown.exit_code == 2 and "got 'state_norm'" in unknown.output
    ran = run(*args, "--plugin", f"py:{module}", "--trust-code", "--out", tmp_path / "with")
    assert ran.exit_code == 0, ran.output
    assert json.loads((tmp_path / "with" / "profile.json").read_text())["method"] == "state_norm"
