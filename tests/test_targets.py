"""--target pred|label|INT and the Integrated Gradients options (--ig-steps, --ig-baseline, --ig-batch-size)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import torch

from laya_eval.data import load_dataset
from laya_eval.loading.checkpoints import load_checkpoint
from tests.cli_helpers import assert_one_line_error, run

N = 24


def _layers(folder, method):
    df = pd.read_csv(folder / "layers.csv")
    df = df[df.method == method].sort_values(["sample", "layer"])
    return df.attribution.to_numpy().reshape(N, -1), df.effect.to_numpy().reshape(N, -1)


def _model_and_hidden(ckpt):
    model = load_checkpoint(ckpt)
    data = load_dataset("digits", "test")
    with torch.no_grad():
        hidden = [h.double() for h in model.hidden_states(data.x[:N])]
    return model.double(), hidden, data.y[:N]


def test_several_network_ablations_each_match_their_single_run(tmp_path, digits_checkpoints):
    ckpt = digits_checkpoints["laya"]
    common = [ckpt, "--scope", "network", "--methods", "ig,contribution", "--limit", N, "--bootstrap", 0, "--quiet"]
    assert run("faithfulness", *common, "--ablation", "zero,mean", "--out", tmp_path / "both").exit_code == 0
    assert run("faithfulness", *common, "--ablation", "mean", "--out", tmp_path / "mean").exit_code == 0
    for name in ("layers.csv", "samples.csv", "summary.csv", "comparisons.csv"):
        assert (tmp_path / "both" / "mean" / name).read_bytes() == (tmp_path / "mean" / name).read_bytes(), name
    # The two subfolders' IG differ: each starts from its own removed state (zeros vs the dataset mean).
    zero_ig, _ = _layers(tmp_path / "both" / "zero", "ig")
    mean_ig, _ = _layers(tmp_path / "both" / "mean", "ig")
    assert np.abs(zero_ig - mean_ig).max() > 1e-3
    manifest = json.loads((tmp_path / "both" / "mean" / "manifest.json").read_text())
    assert manifest["integrated_gradients"]["baseline"] == "removed"
    assert manifest["diagnostics"]["ig"]["mean_abs"] < 1e-3  # completeness against the mean-removed state


def test_target_label_and_a_fixed_class_follow_the_gate_effects_by_hand(tmp_path, digits_checkpoints):
    ckpt = digits_checkpoints["laya"]
    model, hidden, labels = _model_and_hidden(ckpt)
    with torch.no_grad():
        terms = model.head.terms(hidden).detach()  # (N, L, C)
        bias = model.head.bias.detach()
    full = torch.softmax(terms.sum(1) + bias, -1)
    for target, classes in (("label", labels), (3, torch.full((N,), 3))):
        out = tmp_path / f"t{target}"
        r = run(
            "faithfulness",
            ckpt,
            "--methods",
            "contribution",
            "--target",
            target,
            "--limit",
            N,
            "--bootstrap",
            0,
            "--quiet",
            "--out",
            out,
        )
        assert r.exit_code == 0, r.output
        attribution, effect = _layers(out, "contribution")
        idx = classes.long()
        # gate: removing layer i drops its term t_i; the effect is p_t(all terms) - p_t(all but t_i).
        removed = torch.softmax(terms.sum(1, keepdim=True) - terms + bias, -1)  # (N, L, C)
        expect = (
            full.gather(1, idx[:, None]) - removed.gather(2, idx[:, None, None].expand(-1, terms.shape[1], 1))[..., 0]
        )
        np.testing.assert_allclose(effect, expect.numpy(), atol=1e-9)
        np.testing.assert_allclose(
            attribution,
            terms.gather(2, idx[:, None, None].expand(-1, terms.shape[1], 1))[..., 0].numpy(),
            rtol=1e-5,
            atol=1e-6,
        )
        assert json.loads((out / "manifest.json").read_text())["target"]["option"] == target


def test_a_class_the_model_lacks_is_refused_in_one_line(tmp_path, digits_checkpoints):
    r = run("faithfulness", digits_checkpoints["laya"], "--target", 10, "--limit", N, "--out", tmp_path / "x")
    assert_one_line_error(r, r"target must be 'pred', 'label' or a class index below 10 .*got 10\.$")
    assert not (tmp_path / "x").exists()
    r = run("faithfulness", digits_checkpoints["laya"], "--target", "best", "--out", tmp_path / "x")
    assert_one_line_error(r, r"--target.*must be pred, label, a class index .* or next-token; got 'best'")


def test_ig_from_the_mean_is_complete_and_the_batch_size_changes_nothing(tmp_path, digits_checkpoints):
    ckpt = digits_checkpoints["laya"]
    common = [
        ckpt,
        "--methods",
        "ig",
        "--ig-baseline",
        "mean",
        "--ig-steps",
        64,
        "--limit",
        N,
        "--bootstrap",
        0,
        "--quiet",
    ]
    assert run("faithfulness", *common, "--out", tmp_path / "a").exit_code == 0
    assert run("faithfulness", *common, "--ig-batch-size", 7, "--out", tmp_path / "b").exit_code == 0
    ig_a, _ = _layers(tmp_path / "a", "ig")
    ig_b, _ = _layers(tmp_path / "b", "ig")
    np.testing.assert_allclose(ig_a, ig_b, rtol=1e-5, atol=1e-6)
    # Completeness (an axiom of IG, checked against the head directly): sum_i a_i = f_c(h) - f_c(mean of h), the
    # mean over the evaluated samples.
    model, hidden, _ = _model_and_hidden(ckpt)
    means = [h.mean(0, keepdim=True).expand(N, -1) for h in hidden]
    with torch.no_grad():
        logits, base = model.head(hidden).detach(), model.head(means).detach()
    pred = logits.argmax(1, keepdim=True)
    np.testing.assert_allclose(ig_a.sum(1), (logits.gather(1, pred) - base.gather(1, pred))[:, 0].numpy(), atol=1e-3)
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert manifest["integrated_gradients"] == {
        "n_steps": 64,
        "method": "gausslegendre",
        "baseline": "mean",
        "baseline_state": "mean of each layer's state over the evaluated data",
        "internal_batch_size": 7,
    }
    assert manifest["diagnostics"]["ig"]["mean_abs"] < 1e-3


def test_cached_feature_attributions_follow_the_target_by_hand(digits_checkpoints):
    """sanity and prune score methods on cached features (attribute_features); with --target label or a fixed
    class, the contribution scores and gate effects are those of that class, worked out from the head's terms."""
    from laya_eval.loading.feature_cache import Features
    from laya_eval.sanity_checks.cached import attribute_features

    ckpt = digits_checkpoints["laya"]
    model64, hidden, labels = _model_and_hidden(ckpt)
    model = load_checkpoint(ckpt)
    features = Features(hidden=[h.float() for h in hidden], y=labels, path=None, reused=False, key={})
    with torch.no_grad():
        terms = model64.head.terms(hidden).detach()  # (N, L, C), float64
        bias = model64.head.bias.detach()
    full = torch.softmax(terms.sum(1) + bias, -1)
    removed = torch.softmax(terms.sum(1, keepdim=True) - terms + bias, -1)  # gate: term i dropped, (N, L, C)
    pred = full.argmax(-1)
    for target, classes in (("pred", pred), ("label", labels), (3, torch.full((N,), 3))):
        scores, effects = attribute_features(
            model, features, ["contribution"], ablation="gate", batch_size=7, target=target
        )
        idx = classes.long()[:, None, None].expand(-1, terms.shape[1], 1)
        expect = full.gather(1, classes.long()[:, None]) - removed.gather(2, idx)[..., 0]
        np.testing.assert_allclose(effects, expect.numpy(), atol=1e-9)
        np.testing.assert_allclose(scores["contribution"], terms.gather(2, idx)[..., 0].numpy(), rtol=1e-5, atol=1e-6)
    assert (labels != pred).any() and (pred != 3).any()  # the three targets differ on these samples


def test_sanity_and_prune_take_the_target_and_record_it(tmp_path, digits_checkpoints):
    ckpt = digits_checkpoints["laya"]
    r = run(
        "sanity",
        ckpt,
        "--methods",
        "contribution,random",
        "--target",
        "label",
        "--epochs",
        1,
        "--roar-seeds",
        1,
        "--bootstrap",
        0,
        "--limit",
        40,
        "--out",
        tmp_path / "s",
        "--quiet",
    )
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "s" / "sanity.json").read_text())["target"] == "label"
    r = run(
        "prune",
        ckpt,
        "--methods",
        "contribution",
        "--target",
        2,
        "--seeds",
        0,
        "--random-rankings",
        2,
        "--no-timing",
        "--no-early-exit",
        "--bootstrap",
        0,
        "--limit",
        40,
        "--out",
        tmp_path / "p",
        "--quiet",
    )
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "p" / "manifest.json").read_text())["target"] == 2
    for command in ("sanity", "prune"):
        r = run(command, ckpt, "--target", 10, "--out", tmp_path / "x", "--quiet")
        assert_one_line_error(r, r"target must be 'pred', 'label' or a class index below 10 .*got 10\.$")
        assert not (tmp_path / "x").exists()
