"""The draws of ``resample`` and ``noise`` recomputed from docs/concepts/ablations.md#draws with numpy alone.

The hash, the seed derivation, Box-Muller and the donor rule below are written from that section, not from the
library; the library is only run (``laya_eval.evaluate``) and its written files read.
"""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pytest
import torch

import laya_eval

N, DRAWS = 40, 4
SEED = 2**40 + 7  # above 2**32: the seed's high word takes part too
M = np.uint64(0xFFFFFFFF)


def _mix(x: np.ndarray) -> np.ndarray:
    x = x ^ (x >> np.uint64(16))
    x = (x * np.uint64(0x7FEB352D)) & M
    x = x ^ (x >> np.uint64(15))
    x = (x * np.uint64(0x846CA68B)) & M
    return x ^ (x >> np.uint64(16))


def _u64(v: int) -> np.ndarray:
    return np.array([v], dtype=np.uint64)


def _stream_seed(s: int, *parts: int) -> int:
    hi, lo = (s >> 32) & 0xFFFFFFFF, s & 0xFFFFFFFF
    for k, p in enumerate(parts):
        h = int(_mix(_u64(lo ^ ((p * 0x9E3779B9 + k) % 2**32)))[0])
        lo, hi = int(_mix(_u64(h ^ hi))[0]), h
    return ((hi & 0x7FFFFFFF) << 32) | lo


def _uniform(s: int, g: np.ndarray, n: int) -> np.ndarray:
    g = g.astype(np.uint64)
    h = _mix(np.full(g.shape, (s & 0xFFFFFFFF) ^ 0x9E3779B9, dtype=np.uint64))
    h = _mix(h ^ np.uint64((s >> 32) & 0xFFFFFFFF))
    h = _mix(h ^ (g & M))
    h = _mix(h ^ ((g >> np.uint64(32)) & M))
    m = (np.arange(n, dtype=np.uint64) * np.uint64(0x27D4EB2F)) & M
    high = _mix(h[:, None] ^ m[None, :] ^ np.uint64(0x85EBCA6B))
    low = _mix(high ^ np.uint64(0xC2B2AE35))
    return ((high >> np.uint64(11)).astype(np.float64) * 2.0**32 + low.astype(np.float64)) / 2.0**53


def _normal(s: int, g: np.ndarray, n: int) -> np.ndarray:
    a = (n + 1) // 2
    u = _uniform(s, g, 2 * a)
    r = np.sqrt(-2.0 * np.log(1.0 - u[:, :a]))
    theta = 2.0 * np.pi * u[:, a:]
    return np.concatenate([r * np.cos(theta), r * np.sin(theta)], 1)[:, :n]


def _donors(s: int, g: np.ndarray, n_samples: int, draws: int) -> np.ndarray:
    u = _uniform(_stream_seed(s, 1), g, draws)
    p = np.minimum(np.floor(u * (n_samples - 1)).astype(np.int64), n_samples - 2)
    return p + (p >= g[:, None])


def test_the_recomputed_numbers_are_uniform_and_normal():
    """The oracle itself: uniform numbers in [0, 1) and standard normal ones, independent across streams."""
    g = np.arange(4000)
    u = _uniform(_stream_seed(3, 1), g, 5)
    assert 0.0 <= u.min() and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 0.01 and abs(u.var() - 1 / 12) < 0.002
    eps = _normal(_stream_seed(3, 2, 0, 1), g, 7)
    assert abs(eps.mean()) < 0.03 and abs(eps.std() - 1.0) < 0.03
    other = _normal(_stream_seed(3, 2, 1, 0), g, 7)  # parts in another order: another stream
    assert abs(np.corrcoef(eps.ravel(), other.ravel())[0, 1]) < 0.03
    d = _donors(3, g, 4000, 6)  # never the sample itself, every other one reachable
    assert (d != g[:, None]).all() and d.min() == 0 and d.max() == 3999


def _evaluate(model, data, ablation, out, **kw):
    options = laya_eval.EvalOptions(
        methods=("contribution",), ablation=ablation, scope="head", limit=N, draws=DRAWS, seed=SEED, bootstrap=0, **kw
    )
    return laya_eval.evaluate(model, data, options=options, out=out)


def test_donors_csv_equals_the_documented_rule(digits_models, digits, tmp_path):
    _evaluate(digits_models["concat"], digits["test"], "resample", tmp_path)
    written = pd.read_csv(tmp_path / "donors.csv").sort_values(["sample", "draw"])
    assert len(written) == N * DRAWS
    expected = _donors(SEED, np.arange(N), N, DRAWS)
    np.testing.assert_array_equal(written.donor.to_numpy().reshape(N, DRAWS), expected)
    assert not (tmp_path / "noise_draws.npz").exists()


def test_save_draws_without_a_noise_ablation_is_refused_before_any_work(tmp_path):
    with pytest.raises(laya_eval.ConfigError) as err:
        laya_eval.EvalOptions(ablation="resample", save_draws=True)
    assert str(err.value) == (
        "EvalOptions.save_draws (--save-draws) writes the noise of noise, noise-update; got ablation resample: "
        "add one of them or leave it off."
    )


def test_noise_effects_equal_the_documented_draws(digits_models, digits, tmp_path):
    model = digits_models["scalarmix"]
    # The returned table, not layers.csv: the file keeps 8 significant digits, too few to see a float32 step.
    layers = _evaluate(model, digits["test"], "noise", tmp_path, save_draws=True).layers
    layers = layers.sort_values(["sample", "layer"])
    written = layers.effect.to_numpy().reshape(N, -1)
    head = copy.deepcopy(model.head).double()
    with torch.no_grad():
        hidden = [h.double().numpy() for h in model.hidden_states(digits["test"].x[:N])]
        assert all(h.ndim == 2 for h in hidden)  # the MLP's states are vectors: pooling is the identity
        n_layers = len(hidden)
        fills = []  # fills[j][i]: (N, d_i)
        for j in range(DRAWS):
            per_layer = []
            for i, h in enumerate(hidden):
                mu = h.mean(0).astype(np.float32).astype(np.float64)
                square = (h**2).mean(0).astype(np.float32).astype(np.float64)
                sigma = np.sqrt(np.maximum(square - mu**2, 0.0))
                eps = _normal(_stream_seed(SEED, 2, j, i), np.arange(N), h.shape[1])
                per_layer.append((mu + sigma * eps).astype(np.float32).astype(np.float64))
            fills.append(per_layer)
        states = [torch.from_numpy(h) for h in hidden]
        probs = torch.softmax(head(states), -1).numpy()
        c = probs.argmax(1)
        p_intact = probs[np.arange(N), c]
        expected = np.zeros((N, n_layers))
        for i in range(n_layers):
            removed = np.zeros(N)
            for j in range(DRAWS):
                replaced = list(states)
                replaced[i] = torch.from_numpy(fills[j][i])
                removed += torch.softmax(head(replaced), -1).numpy()[np.arange(N), c]
            expected[:, i] = p_intact - removed / DRAWS
    with np.load(tmp_path / "noise_draws.npz") as saved:
        assert sorted(saved.files) == ["layer_1", "layer_2", "layer_3", "sample"]
        np.testing.assert_array_equal(saved["sample"], np.arange(N))
        for i in range(n_layers):  # (N, draws, d_i), float32: exactly the recomputed states
            assert saved[f"layer_{i + 1}"].dtype == np.float32
            recomputed = np.stack([fills[j][i] for j in range(DRAWS)], 1).astype(np.float32)
            np.testing.assert_array_equal(saved[f"layer_{i + 1}"], recomputed)
    assert np.abs(expected).max() > 1e-3  # the noise moves the probability: the comparison can fail
    np.testing.assert_allclose(written, expected, atol=1e-12, rtol=0)
