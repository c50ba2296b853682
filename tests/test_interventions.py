"""The resample and noise ablations against slow reference loops that re-run the model by hand."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from laya_eval.engine.evaluation import EvalOptions, evaluate
from laya_eval.engine.interventions import NOISE_STREAM, donor_ids, noise_fills
from laya_eval.engine.seeding import derived_seed, per_sample_normal
from laya_eval.errors import ConfigError
from laya_eval.models.heads import pool_hidden

N, DRAWS, SEED = 30, 3, 11


def _run(model, data, ablations, scope, **kw):
    options = EvalOptions(
        methods=("contribution", "random"),
        ablation=ablations[0],
        scope=scope,
        limit=N,
        draws=DRAWS,
        seed=SEED,
        bootstrap=0,
        **kw,
    )
    return evaluate(model, data, options=dataclasses.replace(options, ablation=tuple(ablations)))


def _effects(result):
    part = result.layers[result.layers.method == "contribution"].sort_values(["sample", "layer"])
    return part.effect.to_numpy().reshape(N, -1)


def _donors(result):
    d = result.donors.sort_values(["sample", "draw"])
    return d.donor.to_numpy().reshape(N, DRAWS)


def test_donors_never_the_sample_itself_in_range_and_free_of_batching():
    ids = torch.arange(50)
    d = donor_ids(3, ids, 50, 400)
    assert d.shape == (50, 400) and int(d.min()) >= 0 and int(d.max()) <= 49
    assert not bool((d == ids[:, None]).any())
    # Each sample's donors are a function of (seed, id, draw) alone: any subset in any order gives the same rows.
    sub = torch.tensor([41, 7, 0])
    assert torch.equal(donor_ids(3, sub, 50, 400), d[sub])
    # Uniform over the other 49 samples: each of 50 x 400 draws, about 408 per donor.
    counts = np.bincount(d.reshape(-1).numpy(), minlength=50)
    assert counts.min() > 300 and counts.max() < 520
    with pytest.raises(ConfigError, match="at least 2 samples"):
        donor_ids(0, torch.tensor([0]), 1, 2)


def test_head_scope_resample_equals_a_slow_loop(digits_models, digits):
    model = digits_models["laya"]
    result = _run(model, digits["test"], ["resample"], "head")["resample"]
    donors = _donors(result)
    x = digits["test"].x[:N]
    with torch.no_grad():
        pooled = [pool_hidden(h) for h in model.hidden_states(x)]
        expected = np.zeros((N, 3))
        for b in range(N):
            hb = [p[b : b + 1].double() for p in pooled]
            head = model.head.double()
            probs = torch.softmax(head(hb), -1)[0]
            c = int(probs.argmax())
            for i in range(3):
                got = []
                for j in range(DRAWS):
                    donor = [pool_hidden(h) for h in model.hidden_states(x[donors[b, j]][None])]
                    replaced = list(hb)
                    replaced[i] = donor[i].double()
                    got.append(float(torch.softmax(head(replaced), -1)[0, c]))
                expected[b, i] = float(probs[c]) - np.mean(got)
        model.head.float()
    np.testing.assert_allclose(_effects(result), expected, atol=1e-6, rtol=0)
    assert (donors != np.arange(N)[:, None]).all() and donors.max() < N


def test_network_scope_resample_replaces_the_block_output(digits_models, digits):
    model = digits_models["concat"]
    result = _run(model, digits["test"], ["resample"], "network")["resample"]
    donors = _donors(result)
    x = digits["test"].x[:N]
    with torch.no_grad():
        expected = np.zeros((N, 3))
        for b in range(N):
            probs = torch.softmax(model(x[b : b + 1]), -1)[0]
            c = int(probs.argmax())
            for i in range(3):
                got = []
                for j in range(DRAWS):
                    _, outputs = model.block_outputs(x[donors[b, j]][None])
                    value = outputs[i]
                    logits = model.head(model.hidden_states(x[b : b + 1], {i: lambda t, v=value: v}))
                    got.append(float(torch.softmax(logits.double(), -1)[0, c]))
                expected[b, i] = float(probs[c]) - np.mean(got)
    # The backbone runs in float32 per sample here and per batch in the engine: float32 rounding.
    np.testing.assert_allclose(_effects(result), expected, atol=2e-5, rtol=0)


def test_head_scope_noise_equals_a_slow_loop(digits_models, digits):
    model = digits_models["scalarmix"]
    result = _run(model, digits["test"], ["noise"], "head")["noise"]
    x = digits["test"].x[:N]
    with torch.no_grad():
        pooled = [pool_hidden(h).double() for h in model.hidden_states(x)]
        # The layer's own scale, computed here with numpy over the evaluated samples (population std).
        mu = [p.numpy().mean(0) for p in pooled]
        sd = [p.numpy().std(0) for p in pooled]
        head = model.head.double()
        expected = np.zeros((N, 3))
        for b in range(N):
            hb = [p[b : b + 1] for p in pooled]
            probs = torch.softmax(head(hb), -1)[0]
            c = int(probs.argmax())
            for i in range(3):
                got = []
                for j in range(DRAWS):
                    eps = per_sample_normal(derived_seed(SEED, NOISE_STREAM, j, i), torch.tensor([b]), len(mu[i]))
                    replaced = list(hb)
                    replaced[i] = torch.from_numpy(mu[i] + sd[i] * eps[0].numpy())[None]
                    got.append(float(torch.softmax(head(replaced), -1)[0, c]))
                expected[b, i] = float(probs[c]) - np.mean(got)
        model.head.float()
    np.testing.assert_allclose(_effects(result), expected, atol=1e-5, rtol=0)


def test_noise_draws_have_the_layer_scale():
    mu, sd = torch.tensor([1.0, -2.0, 0.0]), torch.tensor([0.5, 3.0, 0.0])
    fills = noise_fills([mu], [sd**2 + mu**2], torch.arange(20000), seed=4, draws=2)
    for draw in fills.draws:
        v = draw[0].double()
        torch.testing.assert_close(v.mean(0), mu.double(), atol=0.05, rtol=0)
        torch.testing.assert_close(v.std(0), sd.double(), atol=0.05, rtol=0)
    assert not torch.equal(fills.draws[0][0], fills.draws[1][0])  # the draws differ


@pytest.mark.parametrize("scope,ablations", [("head", ["resample", "noise"]), ("network", ["resample", "noise"])])
def test_random_ablations_do_not_depend_on_the_batch_size(digits_models, digits, scope, ablations):
    model = digits_models["laya"]
    small = _run(model, digits["test"], ablations, scope, batch_size=7)
    large = _run(model, digits["test"], ablations, scope, batch_size=64)
    for a in ablations:
        if scope == "head":
            assert small[a].layers.equals(large[a].layers)
        else:
            # Inside the backbone the batch's float32 kernels differ with its size in the last bit, as for the
            # fixed ablations (zero, mean) at network scope; the draws and donors themselves are the same.
            np.testing.assert_allclose(small[a].layers.effect, large[a].layers.effect, atol=1e-12, rtol=0)
    assert small["resample"].donors.equals(large["resample"].donors)


def test_more_draws_change_the_estimate_and_the_run_key(digits_models, digits):
    model = digits_models["laya"]
    a = _run(model, digits["test"], ["noise"], "head")["noise"]
    options = EvalOptions(methods=("contribution",), ablation="noise", limit=N, draws=DRAWS + 2, seed=SEED, bootstrap=0)
    b = evaluate(model, digits["test"], options=dataclasses.replace(options, ablation=("noise",)))["noise"]
    assert not np.allclose(_effects(a), b.layers.effect.to_numpy().reshape(N, -1))
    assert a.manifest["options"]["draws"] == DRAWS and b.manifest["options"]["draws"] == DRAWS + 2


def test_a_single_sample_cannot_resample(digits_models, digits):
    options = EvalOptions(methods=("contribution",), ablation="resample", limit=1, bootstrap=0)
    with pytest.raises(ConfigError, match="draws donors from the other samples"):
        evaluate(digits_models["laya"], digits["test"], options=dataclasses.replace(options, ablation=("resample",)))
