"""Plug-in ablations drawn per sample: registered with a sample fill, run by the engine like ``resample`` and
``noise`` (checked against slow loops that call the model directly), refused at registration without one."""

from __future__ import annotations

import dataclasses

import copy
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import laya_eval
from laya_eval.catalog import ABLATION_SPECS, AblationSpec
from laya_eval.engine import plugins
from laya_eval.engine.evaluation import EvalOptions, evaluate
from laya_eval.engine.removals import ABLATION_REGISTRY, batch_fill
from laya_eval.errors import ConfigError
from laya_eval.models.heads import pool_hidden
from tests.cli_helpers import assert_one_line_error, run
from tests.doc_blocks import ROOT, read_blocks

N, DRAWS, SEED = 30, 3, 11
#: The first part of the derived seeds of docs/plugins.md's ``isonoise`` (its ``STREAM``) and of the built-in noise.
ISONOISE_STREAM, NOISE_STREAM = 7, 2


@pytest.fixture
def registry():
    """The ablation registries and the plug-in records as they were before the test (they are process-wide)."""
    saved = dict(ABLATION_SPECS), dict(ABLATION_REGISTRY), dict(plugins._IDENTITIES), list(plugins._LOADED)
    yield
    for live, before in zip((ABLATION_SPECS, ABLATION_REGISTRY, plugins._IDENTITIES), saved):
        live.clear()
        live.update(before)
    plugins._LOADED[:] = saved[3]


def _doc_module(folder: Path) -> Path:
    """docs/plugins.md's ``laya_drawn_example.py``, written as the page shows it."""
    block = next(
        b for b in read_blocks(ROOT / "docs" / "plugins.md") if b.directives.get("file") == "laya_drawn_example.py"
    )
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "laya_drawn_example.py"
    path.write_text(block.body)
    return path


def _effects(layers: pd.DataFrame, n: int) -> np.ndarray:
    part = layers[layers.method == "contribution"].sort_values(["sample", "layer"])
    return part.effect.to_numpy().reshape(n, -1)


def _noise_effects(
    model, x: torch.Tensor, *, seed: int, draws: int, stream: int = ISONOISE_STREAM, isotropic: bool = True
) -> np.ndarray:
    """p_c(x) - mean_j p_c(x with layer i's pooled state := mu_i + s_i * eps_bji), head scope, by a slow loop over
    samples, layers and draws. mu_i and s_i by numpy over the evaluated samples: s_i^2 the population variance
    averaged over the features (``isotropic``, docs/plugins.md's isonoise) or per feature (the built-in noise); eps
    from the seed derivation docs/plugins.md gives: per_sample_normal(derived_seed(seed, stream, j, i), sample
    index)."""
    head = copy.deepcopy(model.head).double()
    with torch.no_grad():
        pooled = [pool_hidden(h).double() for h in model.hidden_states(x)]
        mu = [p.numpy().mean(0) for p in pooled]
        s = [np.sqrt(p.numpy().var(0).mean()) if isotropic else p.numpy().std(0) for p in pooled]
        out = np.zeros((len(x), len(pooled)))
        for b in range(len(x)):
            hb = [p[b : b + 1] for p in pooled]
            probs = torch.softmax(head(hb), -1)[0]
            c = int(probs.argmax())
            for i in range(len(pooled)):
                got = []
                for j in range(draws):
                    seed_ji = laya_eval.derived_seed(seed, stream, j, i)
                    eps = laya_eval.per_sample_normal(seed_ji, torch.tensor([b]), len(mu[i]))[0].numpy()
                    replaced = list(hb)
                    replaced[i] = torch.from_numpy(mu[i] + s[i] * eps)[None]
                    got.append(float(torch.softmax(head(replaced), -1)[0, c]))
                out[b, i] = float(probs[c]) - np.mean(got)
    return out


def test_a_drawn_plugin_ablation_equals_a_slow_loop_at_head_scope(digits_models, digits, registry, tmp_path):
    added = laya_eval.load_plugins([f"py:{_doc_module(tmp_path)}"], trust_code=True)
    assert added == ["ablation:isonoise"]
    model = digits_models["laya"]
    # batch_size 7: batches padded with rows of sample id -1, which the sample fill must leave harmless.
    options = EvalOptions(
        methods=("contribution", "random"),
        ablation="isonoise",
        scope="head",
        limit=N,
        draws=DRAWS,
        seed=SEED,
        bootstrap=0,
        batch_size=7,
    )
    results = evaluate(model, digits["test"], options=dataclasses.replace(options, ablation=("isonoise", "noise")))
    x = digits["test"].x[:N]
    # The oracle is checked first on the built-in noise, then judges the plug-in.
    builtin = _noise_effects(model, x, seed=SEED, draws=DRAWS, stream=NOISE_STREAM, isotropic=False)
    np.testing.assert_allclose(_effects(results["noise"].layers, N), builtin, atol=1e-5, rtol=0)
    expected = _noise_effects(model, x, seed=SEED, draws=DRAWS)
    np.testing.assert_allclose(_effects(results["isonoise"].layers, N), expected, atol=1e-5, rtol=0)
    assert np.abs(expected - builtin).max() > 1e-3  # two different ablations, told apart


def _shrunk_donor(statistics, sample_ids, *, seed, draws, donor_states, donors):
    """Half of a donor's state plus half of the layer's mean, per draw."""
    batch = donors.shape[0]
    return laya_eval.SampleFills(
        tuple(
            [0.5 * s[j * batch : (j + 1) * batch] + 0.5 * m for s, m in zip(donor_states, statistics["hidden_mean"])]
            for j in range(draws)
        ),
        donors,
    )


def _donor_effects(model, x: torch.Tensor, donors: np.ndarray, weight: float) -> np.ndarray:
    """p_c(x) - mean_j p_c(x with block i's output := weight * donor_j's + (1 - weight) * its mean), network scope,
    by a slow loop over samples, layers and draws that runs the model on one sample at a time."""
    with torch.no_grad():
        _, outputs = model.block_outputs(x)
        # The layer's mean over the evaluated samples, summed in float64 and rounded to float32 as a statistic is.
        means = [o.double().mean(0).float() for o in outputs]
        expected = np.zeros((N, len(outputs)))
        for b in range(N):
            probs = torch.softmax(model(x[b : b + 1]), -1)[0]
            c = int(probs.argmax())
            for i in range(len(outputs)):
                got = []
                for j in range(DRAWS):
                    _, donor = model.block_outputs(x[donors[b, j]][None])
                    value = weight * donor[i] + (1 - weight) * means[i]
                    logits = model.head(model.hidden_states(x[b : b + 1], {i: lambda t, v=value: v}))
                    got.append(float(torch.softmax(logits.double(), -1)[0, c]))
                expected[b, i] = float(probs[c]) - np.mean(got)
    return expected


def test_a_donor_plugin_ablation_equals_a_slow_loop_at_network_scope(digits_models, digits, registry):
    laya_eval.register_ablation(
        AblationSpec(
            "shrunk-donor",
            "Half of a donor's state plus half of the layer's mean.",
            needs=("stat:hidden_mean", "donors", "draws", "tensor_inputs"),
        ),
        sample_fill=_shrunk_donor,
    )
    model = digits_models["concat"]
    options = EvalOptions(
        methods=("contribution", "random"),
        ablation="shrunk-donor",
        scope="network",
        limit=N,
        draws=DRAWS,
        seed=SEED,
        bootstrap=0,
        batch_size=7,
    )
    results = evaluate(
        model, digits["test"], options=dataclasses.replace(options, ablation=("shrunk-donor", "resample"))
    )
    result = results["shrunk-donor"]
    donors = result.donors.sort_values(["sample", "draw"]).donor.to_numpy().reshape(N, DRAWS)
    assert (donors != np.arange(N)[:, None]).all() and donors.max() < N
    assert result.donors.donor.tolist() == results["resample"].donors.donor.tolist()  # drawn from (seed, id, draw)
    x = digits["test"].x[:N]
    # The backbone runs in float32 per sample here and per batch in the engine: float32 rounding. The oracle is
    # checked first on the built-in resample (weight 1: the donor's state itself), then judges the plug-in.
    np.testing.assert_allclose(
        _effects(results["resample"].layers, N), _donor_effects(model, x, donors, 1.0), atol=2e-5, rtol=0
    )
    expected = _donor_effects(model, x, donors, 0.5)
    np.testing.assert_allclose(_effects(result.layers, N), expected, atol=2e-5, rtol=0)
    # The run key and the manifest name the module whose sample fill decides the effects.
    assert result.manifest["plugins"]["ablation:shrunk-donor"].startswith("module:tests.test_drawn_plugins@")


def test_a_drawn_spec_without_its_sample_fill_is_refused_in_one_line(registry):
    before = dict(ABLATION_SPECS), dict(ABLATION_REGISTRY)

    def fill(statistics, sample_ids, *, seed, draws, donor_states, donors):
        return None

    cases = [
        (
            dict(spec=AblationSpec("mydraws", "x", needs=("draws",))),
            "ablation 'mydraws' needs ('draws',): register it with sample_fill=, the callable that draws each batch's "
            "replacement states; got none.",
        ),
        (
            dict(
                spec=AblationSpec("mydonors", "x", scopes=("head",), needs=("donors", "tensor_inputs")),
                head=lambda *a: None,
            ),
            "ablation 'mydonors' needs ('donors',): register it with sample_fill=, the callable that draws each batch's "
            "replacement states; got none.",
        ),
        (
            dict(
                spec=AblationSpec("myfixed", "x", scopes=("head",), needs=("stat:hidden_mean",)),
                head=lambda *a: None,
                sample_fill=fill,
            ),
            "ablation 'myfixed': sample_fill= is for an ablation drawn per sample (needs 'draws' or 'donors'); its needs "
            "are ('stat:hidden_mean',).",
        ),
        (
            dict(spec=AblationSpec("myboth", "x", needs=("draws",)), sample_fill=fill, head=fill),
            "ablation 'myboth' is drawn per sample: the engine puts its sample_fill's states in place at every scope, so "
            "it takes no head=; got 'fill'.",
        ),
        (
            dict(spec=AblationSpec("mystring", "x", needs=("draws",)), sample_fill="fill"),
            "ablation 'mystring': sample_fill must be callable; got str.",
        ),
    ]
    for kwargs, message in cases:
        with pytest.raises(ConfigError) as err:
            laya_eval.register_ablation(**kwargs)
        assert str(err.value) == message
    # Nothing refused was entered anywhere.
    assert before == (dict(ABLATION_SPECS), dict(ABLATION_REGISTRY))


def test_the_built_in_drawn_ablations_register_their_sample_fill():
    drawn = {name for name, entry in ABLATION_REGISTRY.items() if entry.sample_fill is not None}
    assert {"resample", "noise"} <= drawn
    assert all(ABLATION_SPECS[name].drawn_per_sample == (name in drawn) for name in ABLATION_REGISTRY)


def test_a_sample_fill_returning_the_wrong_thing_is_refused_in_one_line(registry):
    def as_list(statistics, sample_ids, *, seed, draws, donor_states, donors):
        return [[torch.zeros(len(sample_ids), 2)]] * draws

    def one_short(statistics, sample_ids, *, seed, draws, donor_states, donors):
        return laya_eval.SampleFills(tuple([torch.zeros(len(sample_ids), 2)] for _ in range(draws - 1)))

    for name, fn in (("as-list", as_list), ("one-short", one_short)):
        laya_eval.register_ablation(AblationSpec(name, "x", scopes=("head",), needs=("draws",)), sample_fill=fn)
    ids = torch.arange(4)
    with pytest.raises(
        ConfigError,
        match=r"^ablation 'as-list': its sample_fill must return a SampleFills; got "
        r"list\.$",
    ):
        batch_fill("as-list", {}, ids, seed=0, draws=3)
    with pytest.raises(
        ConfigError,
        match=r"^ablation 'one-short': its sample_fill must return 3 draws \(--draws\); "
        r"got 2\.$",
    ):
        batch_fill("one-short", {}, ids, seed=0, draws=3)


REFUSED_PLUGIN = """
import laya_eval

laya_eval.register_ablation(laya_eval.AblationSpec("halfdrawn", "x", needs=("draws",)),
                            head=lambda *a: None, network=lambda *a, **k: None)
"""


def test_faithfulness_runs_a_drawn_plugin_and_refuses_one_without_sample_fill(digits_checkpoints, registry, tmp_path):
    module = _doc_module(tmp_path / "plug")
    out = tmp_path / "runs" / "isonoise"
    ran = run(
        "faithfulness",
        digits_checkpoints["laya"],
        "--plugin",
        f"py:{module}",
        "--trust-code",
        "--ablation",
        "isonoise,noise",
        "--draws",
        DRAWS,
        "--limit",
        N,
        "--seed",
        SEED,
        "--bootstrap",
        0,
        "--out",
        out,
        "-q",
    )
    assert ran.exit_code == 0, ran.output
    layers = pd.read_csv(out / "isonoise" / "layers.csv")
    expected = _noise_effects(
        laya_eval.load_model(digits_checkpoints["laya"]).model,
        laya_eval.load_dataset("digits", "test").x[:N],
        seed=SEED,
        draws=DRAWS,
    )
    np.testing.assert_allclose(_effects(layers, N), expected, atol=1e-5, rtol=0)
    manifest = json.loads((out / "isonoise" / "manifest.json").read_text())
    assert manifest["plugins"]["ablation:isonoise"].startswith(f"py:{module}@")

    refused = tmp_path / "refused.py"
    refused.write_text(REFUSED_PLUGIN)
    result = run(
        "faithfulness",
        digits_checkpoints["laya"],
        "--plugin",
        f"py:{refused}",
        "--trust-code",
        "--ablation",
        "halfdrawn",
        "--limit",
        N,
        "--out",
        tmp_path / "refused-out",
    )
    assert_one_line_error(
        result,
        r"^Error: ablation 'halfdrawn' needs \('draws',\): register it with sample_fill=, "
        r"the callable that draws each batch's replacement states; got none\.$",
    )
    assert not (tmp_path / "refused-out").exists()
