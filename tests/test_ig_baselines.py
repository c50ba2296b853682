"""What the manifest says Integrated Gradients starts from, against the states it starts from."""

from __future__ import annotations

import torch

from laya_eval.engine.ig_baselines import baseline_description
from laya_eval.engine.removals import ablation_fill, removed_states


def test_a_noise_run_says_ig_starts_at_the_mean_it_starts_at():
    states = [torch.arange(6.0).reshape(2, 3), torch.ones(2, 2)]
    statistics = {"hidden_mean": [torch.tensor([7.0, 8.0, 9.0]), torch.tensor([5.0, 6.0])]}
    statistics["hidden_square_mean"] = [m**2 + 1 for m in statistics["hidden_mean"]]
    start = removed_states("noise", states, ablation_fill("noise", statistics))
    for got, mean in zip(start, statistics["hidden_mean"]):
        assert torch.equal(got, mean.expand_as(got))  # the mean itself, no draw
    words = baseline_description("removed", "noise")
    assert "mean of each layer's state over the evaluated data" in words and "expectation" in words
    assert "the state 'noise' puts in" not in words


def test_each_ablation_names_its_own_start():
    assert baseline_description("removed", "mean") == "removed (the state 'mean' puts in place of the layer)"
    assert baseline_description("removed", "resample").startswith("zero ('resample' puts no single state")
    assert baseline_description("removed", "skip").startswith("zero (")
    assert baseline_description("zero", "noise") == "zero"
