"""Layer-level sanity checks: oracles worked out by hand, scipy, and a backbone-forward counter."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import stats as sps
from torch import nn

from laya_eval.errors import ConfigError
from laya_eval.models.heads import make_head
from laya_eval.stats.metrics import spearman_per_sample
from laya_eval.models.layered import LayeredModel
from laya_eval.sanity_checks import (
    LAYER_ROAR_COLUMNS,
    RANDOMISATION_COLUMNS,
    ROAR_AGREEMENT_COLUMNS,
    Features,
    SanityOptions,
    attribute_features,
    attribution_similarity,
    cascading_randomisation,
    data_randomisation,
    encode_features,
    head_parameter_groups,
    layer_roar,
    roar_agreement,
    sanity,
)
from laya_eval.training.trainer import TrainOptions

FAST = TrainOptions(epochs=30, seed=0, batch_size=64, patience=5)


class _Counter:
    """Counts backbone forwards through a forward hook (removed on exit, even after an error)."""

    def __init__(self, module: nn.Module) -> None:
        self.module, self.calls = module, 0

    def __enter__(self):
        self.handle = self.module.register_forward_hook(lambda *_: setattr(self, "calls", self.calls + 1))
        return self

    def __exit__(self, *exc):
        self.handle.remove()


@pytest.fixture(scope="module")
def features(digits_models, digits):
    model = digits_models["laya"]
    return {s: encode_features(model, digits[s]) for s in ("train", "val", "test")}


def test_cascading_randomisation_of_a_lastlayer_head(digits_models, digits):
    model = digits_models["lastlayer"]
    test = encode_features(model, digits["test"])
    with _Counter(model.backbone) as counter:
        table = cascading_randomisation(model, test, SanityOptions(bootstrap=200))
    assert counter.calls == 0  # head steps never run the backbone
    assert list(table.columns) == RANDOMISATION_COLUMNS
    assert sorted(set(table.step)) == [0, 1] and set(table.params) == {"none", "classifier"}
    step0 = table[table.step == 0].set_index("method")
    assert (step0.similarity == 1.0).all()
    after = table[table.step == 1].set_index("method")
    # The classifier is the only parameter of a LastLayer head: with it re-initialised the predicted logit
    # has nothing to do with the trained one (across samples), and random is redrawn (chance level).
    assert abs(after.loc["contribution", "similarity"]) < 0.3
    assert after.loc["contribution", "similarity_ci_low"] < 0.3 < step0.loc["contribution", "similarity"]
    assert abs(after.loc["random", "similarity"]) < 0.15
    assert after.loc["random", "similarity_ci_low"] < 0 < after.loc["random", "similarity_ci_high"]


def test_cascading_randomisation_of_laya_walks_its_groups_top_down(digits_models, features):
    model = digits_models["laya"]
    table = cascading_randomisation(
        model, features["test"], SanityOptions(methods=("laya", "contribution", "random"), bootstrap=0)
    )
    assert table.drop_duplicates("step").params.tolist() == [
        "none",
        "classifier",
        "classifier+scorer",
        "classifier+scorer+adapters",
    ]
    laya = table[table.method == "laya"].set_index("step").similarity
    # alpha is computed by the scorer and adapters, not the classifier: re-initialising the classifier alone
    # leaves it exactly as it was; once the scorer is random it is not
    assert laya[1] == pytest.approx(1.0)
    assert laya[2] < 0.5 and laya[3] < 0.5
    assert abs(table[(table.method == "random") & (table.step > 0)].similarity).max() < 0.15


def test_head_parameter_groups_reinitialise_only_their_parameters(digits_models):
    head = copy.deepcopy(digits_models["laya"].head)
    groups = head_parameter_groups(head)
    assert [g for g, _ in groups] == ["classifier", "scorer", "adapters"]
    before = {k: v.clone() for k, v in head.state_dict().items()}
    from laya_eval.sanity_checks.randomisation import _reinitialise

    _reinitialise(head, "scorer", groups[1][1], seed=3)
    changed = {k for k, v in head.state_dict().items() if not torch.equal(v, before[k])}
    assert changed == {k for k in before if k.startswith("scorer.")}


def test_data_randomisation_destroys_the_laya_weights(digits_models, features):
    model = digits_models["laya"]
    options = SanityOptions(methods=("laya", "contribution", "random"), bootstrap=0, train=FAST)
    with _Counter(model.backbone) as counter:
        table = data_randomisation(model, features["train"], features["val"], features["test"], options)
    assert counter.calls == 0
    after = table[table.step == 1].set_index("method")
    assert set(after.params) == {"labels"}
    assert after.loc["laya", "similarity"] < 0.5
    # trained on shuffled labels the head predicts the real test labels at about chance (10 classes)
    assert table[table.step == 0].accuracy.iloc[0] > 0.5 and after.accuracy.iloc[0] < 0.25


def _one_informative_layer(seed: int = 0, n: int = 600):
    """Three layers; only layer 2 carries the label (a noisy one-hot), layers 1 and 3 are pure noise."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 4, (n,), generator=g)
    informative = nn.functional.one_hot(y, 4).float() * 3 + 0.5 * torch.randn(n, 4, generator=g)
    hidden = [
        torch.randn(n, 5, generator=g),
        torch.cat([informative, torch.randn(n, 2, generator=g)], 1),
        torch.randn(n, 3, generator=g),
    ]
    return Features(hidden=hidden, y=y)


def test_layer_roar_ranks_the_only_informative_layer_first():
    torch.manual_seed(0)
    model = LayeredModel(nn.Identity(), make_head("concat", [5, 6, 3], 4))
    train, val, test = (_one_informative_layer(s) for s in (0, 1, 2))
    quick = TrainOptions(epochs=30, seed=0, batch_size=64, lr=1e-2)
    roar = layer_roar(model, train, val, test, SanityOptions(roar_seeds=2, train=quick))
    assert list(roar.columns) == LAYER_ROAR_COLUMNS
    assert roar.seed.tolist() == [0, 0, 0, 1, 1, 1] and roar.layer.tolist() == [1, 2, 3] * 2
    drops = roar.groupby("layer").accuracy_drop.mean()
    assert drops.idxmax() == 2
    assert drops[2] > 0.5  # nearly every test sample right with layer 2; without it only chance (1/4) is left
    assert drops[[1, 3]].abs().max() < 0.1


def test_retrained_heads_are_the_heads_fit_head_trains(digits_models, digits, tmp_path):
    """A sanity retrain with seed s is ``fit_head`` (the public trainer's route) with seed s, weight for weight."""
    from laya_eval.training.head_fit import fit_head
    from laya_eval.sanity_checks.roar import retrained_head
    from laya_eval.training.trainer import fresh_head

    model = digits_models["laya"]
    options = TrainOptions(epochs=3, seed=5, batch_size=64)
    want = fit_head(
        copy.deepcopy(model.backbone),
        digits,
        head="laya",
        head_kwargs=model.head.config()["kwargs"],
        options=options,
        cache_dir=tmp_path,
    ).model.head
    train_f, val_f = (encode_features(model, digits[s]) for s in ("train", "val"))
    got = retrained_head(model.head, model.head.layer_dims, train_f, val_f, options)
    assert want.state_dict().keys() == got.state_dict().keys()
    for key, value in want.state_dict().items():
        torch.testing.assert_close(got.state_dict()[key], value, rtol=0, atol=0, msg=key)
    # fresh_head leaves the global RNG alone and depends on its seed
    state = torch.random.get_rng_state()
    a, b = fresh_head(model.head, [64, 16], 1), fresh_head(model.head, [64, 16], 2)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert a.layer_dims == [64, 16] and not torch.equal(a.classifier.weight, b.classifier.weight)
    assert torch.equal(a.classifier.weight, fresh_head(model.head, [64, 16], 1).classifier.weight)


def test_roar_agreement_against_scipy_per_seed():
    roar = pd.DataFrame(
        {
            "layer": [1, 2, 3] * 2,
            "seed": [0, 0, 0, 1, 1, 1],
            "accuracy": 0.0,
            "accuracy_drop": [0.0, 0.5, 0.1, 0.02, 0.4, 0.01],
        }
    )
    scores = {"good": np.tile([0.1, 0.8, 0.3], (4, 1)), "bad": np.tile([0.9, 0.1, 0.2], (4, 1))}
    got = roar_agreement(scores, roar, n_resamples=100).set_index("method")
    assert list(got.reset_index().columns) == ROAR_AGREEMENT_COLUMNS
    for name, s in scores.items():
        want = np.mean(
            [sps.spearmanr(s.mean(0), [0.0, 0.5, 0.1]).statistic, sps.spearmanr(s.mean(0), [0.02, 0.4, 0.01]).statistic]
        )
        assert got.loc[name, "spearman"] == pytest.approx(want)
    assert got.loc["good", "spearman"] == pytest.approx(0.75)  # by hand: rho 1 (seed 0) and 0.5 (seed 1)


def test_similarity_against_scipy():
    rng = np.random.default_rng(0)
    a, b = rng.random((50, 3)), rng.random((50, 3))
    b[:, 0] = a[:, 0] + 0.1 * b[:, 0]
    b[:, 2] = 0.0  # constant layer: undefined, excluded
    got = attribution_similarity(a, b, n_resamples=0)
    want = np.mean([sps.spearmanr(a[:, i], b[:, i]).statistic for i in (0, 1)])
    assert got.mean == pytest.approx(want) and got.n_undefined == 1
    per_sample = attribution_similarity(a, b, similarity="per_sample", n_resamples=0)
    assert per_sample.mean == pytest.approx(np.nanmean(spearman_per_sample(a, b)))


def test_similarity_interval_against_a_slow_scipy_loop():
    """The weighted-sums bootstrap equals resampling rows and calling scipy.stats.pearsonr on each resample
    (ranks taken once on the full set, as documented), on the same index draws."""
    from laya_eval.sanity_checks import Resamples

    rng = np.random.default_rng(3)
    a, b = rng.random((40, 3)), rng.random((40, 3))
    b[:, 1] = a[:, 1] + 0.3 * b[:, 1]
    b[:, 2] = np.round(3 * b[:, 2])  # ties
    ra, rb = sps.rankdata(a, axis=0), sps.rankdata(b, axis=0)
    index = np.random.default_rng(11).integers(0, 40, (300, 40))  # one chunk: 2**22 // (40 * 3) > 300
    means = [np.mean([sps.pearsonr(ra[i, k], rb[i, k]).statistic for k in range(3)]) for i in index]
    want = np.quantile(means, [0.025, 0.975])
    got = attribution_similarity(a, b, n_resamples=300, seed=11)
    assert [got.low, got.high] == pytest.approx(want, abs=1e-12)
    shared = Resamples(40, 300, 11)
    assert attribution_similarity(a, b, n_resamples=300, seed=11, resamples=shared) == got
    with pytest.raises(
        ConfigError,
        match=r"resamples were drawn for \(n, n_resamples, seed\) = \(40, 300, 11\); "
        r"got \(40, 300, 12\)",
    ):
        attribution_similarity(a, b, n_resamples=300, seed=12, resamples=shared)


def test_attribute_features_equals_the_engine_on_the_same_samples(digits_models, features, digits):
    from laya_eval.engine.evaluation import EvalOptions, evaluate

    model = digits_models["laya"]
    scores, effects = attribute_features(model, features["test"], ["laya", "contribution"])
    result = evaluate(model, digits["test"], options=EvalOptions(methods=("laya", "contribution"), bootstrap=0))
    layers = result.layers
    for name in ("laya", "contribution"):
        want = layers[layers.method == name].sort_values(["sample", "layer"]).attribution.to_numpy()
        np.testing.assert_allclose(scores[name].ravel(), want, rtol=1e-5, atol=1e-6)
    want_effects = layers[layers.method == "laya"].sort_values(["sample", "layer"]).effect.to_numpy()
    np.testing.assert_allclose(effects.ravel(), want_effects, atol=1e-5)  # float64 here, float32 there


def test_sanity_runs_the_backbone_once_per_split_and_per_block_step(digits_models, digits):
    model = digits_models["concat"]
    options = SanityOptions(
        methods=("contribution", "random"),
        bootstrap=50,
        roar_seeds=1,
        batch_size=10_000,
        train=TrainOptions(epochs=3, seed=0, batch_size=64),
    )
    with _Counter(model.backbone) as counter:
        result = sanity(model, digits, options=options)
    # train, val and test encoded once each (one batch each), then the test split once per block step (by the
    # copy of the backbone the block steps re-initialise; the copy carries the counting hook); head steps: none
    assert counter.calls == 3 + 3
    assert len(result.layer_roar) == 3 and list(result.roar_agreement.method) == ["contribution", "random"]
    assert result.randomisation.params.unique().tolist() == [
        "none",
        "classifier",
        "classifier+block3",
        "classifier+block3+block2",
        "classifier+block3+block2+block1",
    ]
    # the model's state beside the checks, against the model's own forward pass on the test split
    with torch.no_grad():
        by_hand = float((model(digits["test"].x).argmax(-1) == digits["test"].y).double().mean())
    assert result.model_state.accuracy == pytest.approx(by_hand, abs=1e-12) and by_hand > 0.8
    assert result.model_state.n == len(digits["test"]) and result.warnings == []
    assert result.meta["model_state"]["accuracy"] == result.model_state.accuracy


def _reset(modules, seed):
    """The documented re-initialisation of one step: every submodule's reset_parameters under seed."""
    torch.manual_seed(seed)
    for module in modules:
        for sub in module.modules():
            if hasattr(sub, "reset_parameters"):
                sub.reset_parameters()


def test_backbone_block_steps_against_the_engine_on_a_rebuilt_model(digits_models, digits):
    """Slow reference: rebuild the randomised model by hand (head groups, then blocks from the top, step k
    seeded with seed + k), run the full engine on it (backbone pass included) and compare the per-layer
    Spearman similarity (scipy) with the table."""
    from laya_eval.engine.evaluation import EvalOptions, evaluate

    model, test = digits_models["laya"], digits["test"]
    options = SanityOptions(methods=("contribution", "grad_x_act", "random"), bootstrap=0, seed=7, batch_size=10_000)
    features = encode_features(model, test)
    with _Counter(model.backbone) as counter:
        table = cascading_randomisation(model, features, options, data=test)
    assert counter.calls == 3  # one pass (of the re-initialised copy) per block step; none for the 3 head steps
    assert table.drop_duplicates("step").params.tolist()[3:] == [
        "classifier+scorer+adapters",
        "classifier+scorer+adapters+block3",
        "classifier+scorer+adapters+block3+block2",
        "classifier+scorer+adapters+block3+block2+block1",
    ]

    def engine_scores(m):
        layers = evaluate(m, test, options=EvalOptions(methods=("contribution", "grad_x_act"), bootstrap=0)).layers
        return {
            name: layers[layers.method == name]
            .sort_values(["sample", "layer"])
            .attribution.to_numpy()
            .reshape(len(test), -1)
            for name in ("contribution", "grad_x_act")
        }

    base = engine_scores(model)
    for n_blocks, step in ((1, 4), (3, 6)):
        rebuilt = copy.deepcopy(model)
        head = rebuilt.head
        groups = [[head.classifier], [head.scorer, head.psi], [head.adapters]]
        groups += [[block] for block in reversed(rebuilt.backbone.blocks)][:n_blocks]
        with torch.random.fork_rng(devices=[]):
            for k, modules in enumerate(groups, 1):
                _reset(modules, options.seed + k)
        got = table[table.step == step].set_index("method")
        for name, new in engine_scores(rebuilt.eval()).items():
            want = np.mean([sps.spearmanr(base[name][:, i], new[:, i]).statistic for i in range(3)])
            assert got.loc[name, "similarity"] == pytest.approx(want, abs=2e-3), (name, step)
    final = table[table.step == 6].set_index("method")
    # every parameter random: the contribution of a layer no longer tracks the trained one (across samples),
    # and random is redrawn at every step (chance level)
    assert abs(final.loc["contribution", "similarity"]) < 0.2
    assert abs(table[(table.method == "random") & (table.step > 0)].similarity).max() < 0.15


def test_frozen_backbones_get_no_block_steps(digits_models, digits):
    model = copy.deepcopy(digits_models["concat"])
    from laya_eval.sanity_checks import backbone_is_trainable

    assert backbone_is_trainable(model)
    model.info.training = {**model.info.training, "freeze_backbone": True}  # as fit-head records it
    assert not backbone_is_trainable(model)
    by_reference = copy.deepcopy(digits_models["concat"])
    by_reference.backbone.stored_by_reference = True  # as hf: and py: backbones are
    assert not backbone_is_trainable(by_reference)
    options = SanityOptions(methods=("contribution",), bootstrap=0)
    for frozen in (model, by_reference):
        features = encode_features(frozen, digits["test"])
        with _Counter(frozen.backbone) as counter:
            table = cascading_randomisation(frozen, features, options, data=digits["test"])
        assert counter.calls == 0  # no block step
        assert table.params.tolist() == ["none", "classifier"]


def test_options_are_checked():
    with pytest.raises(ConfigError, match="similarity must be one of {across_samples, per_sample}; got 'x'"):
        SanityOptions(similarity="x")
    with pytest.raises(ConfigError, match="roar_seeds must be a positive integer; got 0"):
        SanityOptions(roar_seeds=0)
    with pytest.raises(ConfigError, match="with --scope network|ablation must be one of"):
        SanityOptions(ablation="nope")


def test_sanity_checks_out_before_loading_or_checking_anything(digits_checkpoints, digits, tmp_path, monkeypatch):
    import laya_eval
    from laya_eval import sanity_checks
    from laya_eval.loading import checkpoints

    def work(*args, **kwargs):
        raise AssertionError("the model was loaded or checked before the output was checked")

    monkeypatch.setattr(checkpoints, "load_checkpoint", work)
    monkeypatch.setattr(sanity_checks, "_run_checks", work)
    a_file = tmp_path / "a-file"
    a_file.write_text("keep me")
    with pytest.raises(ConfigError, match=r"^output folder '.*a-file' exists and is not a folder\.$"):
        laya_eval.sanity(digits_checkpoints["laya"], digits, out=a_file)
    with pytest.raises(ConfigError, match=r"^style must be one of \{default, paper\}; got 'poster'\.$"):
        laya_eval.sanity(digits_checkpoints["laya"], digits, out=tmp_path / "new", style="poster")
    assert a_file.read_text() == "keep me" and sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


def test_sanity_cli_end_to_end(digits_checkpoints, tmp_path):
    from laya_eval.output.origin import code_origin
    from tests.cli_helpers import run

    out = tmp_path / "sanity"
    result = run(
        "sanity",
        digits_checkpoints["laya"],
        "--methods",
        "laya,contribution,random",
        "--epochs",
        2,
        "--roar-seeds",
        1,
        "--bootstrap",
        20,
        "--limit",
        100,
        "--out",
        out,
        "--quiet",
    )
    assert result.exit_code == 0, result.output
    data_line = (
        f"{digits_checkpoints['laya']}: digits, heads trained on train, stopped on val, scored on test (n = 100)"
    )
    assert result.output.splitlines()[0] == data_line
    model_line, header = result.output.splitlines()[1:3]
    assert model_line.startswith("model: accuracy ") and " on these 100 samples (chance 0.100, majority " in model_line
    assert header.split() == [
        "method",
        "cascading",
        "(all",
        "groups)",
        "shuffled",
        "labels",
        "ROAR",
        "rho",
        "[95%",
        "CI]",
    ]
    assert {p.name for p in out.iterdir()} == {
        "randomisation.csv",
        "data_randomisation.csv",
        "layer_roar.csv",
        "roar_agreement.csv",
        "sanity.json",
        "sanity.png",
        "manifest.json",
    }
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["kind"] == "sanity" and manifest["code"] == code_origin()
    assert manifest["files"] == {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in out.iterdir() if p.name != "manifest.json"
    }
    table = pd.read_csv(out / "randomisation.csv")
    assert list(table.columns) == RANDOMISATION_COLUMNS and set(table.method) == {"laya", "contribution", "random"}
    assert list(pd.read_csv(out / "layer_roar.csv").columns) == LAYER_ROAR_COLUMNS
    assert list(pd.read_csv(out / "roar_agreement.csv").columns) == ROAR_AGREEMENT_COLUMNS
    data = pd.read_csv(out / "data_randomisation.csv")
    assert list(data.columns) == [*RANDOMISATION_COLUMNS, "accuracy"]
    assert len(data) == 6  # 3 methods x (original, shuffled labels)
    meta = json.loads((out / "sanity.json").read_text())
    assert meta["backbone_steps"] is True  # the digits MLP was trained with its head
    assert table.params.iloc[-1].endswith("+block1")
    # The CLI's retraining protocol is the library's default one: the reference protocol, patience 2.
    assert meta["train"] == {**dataclasses.asdict(SanityOptions().train), "epochs": 2}
    assert SanityOptions().train == TrainOptions(patience=2)


def test_sanity_folder_is_replaced_whole_and_never_over_other_files(digits_checkpoints, tmp_path):
    from tests.cli_helpers import assert_one_line_error, run

    out = tmp_path / "sanity"
    args = (
        "sanity",
        digits_checkpoints["laya"],
        "--methods",
        "contribution,random",
        "--epochs",
        1,
        "--roar-seeds",
        1,
        "--bootstrap",
        0,
        "--limit",
        60,
        "--out",
        out,
        "--quiet",
    )
    assert run(*args).exit_code == 0
    assert run(*args, "--format", "svg").exit_code == 0
    names = {p.name for p in out.iterdir()}
    assert "sanity.svg" in names and "sanity.png" not in names  # nothing of the first run is left
    # A folder that is not a result is refused up front (one line, exit 2) and left as it was.
    other = tmp_path / "notes"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    assert_one_line_error(run(*args[:-3], "--out", other, "--quiet"), "not a laya-eval result")
    assert [p.name for p in other.iterdir()] == ["notes.txt"] and (other / "notes.txt").read_text() == "mine"


def test_sanity_paper_style_writes_pdf_and_caption_without_a_title(digits_checkpoints, tmp_path):
    """--style paper: sanity.pdf and sanity.caption.txt (both in the manifest), no title drawn on the figure."""
    from tests.cli_helpers import run

    out = tmp_path / "paper"
    result = run(
        "sanity",
        digits_checkpoints["laya"],
        "--methods",
        "contribution,random",
        "--epochs",
        1,
        "--roar-seeds",
        1,
        "--bootstrap",
        0,
        "--limit",
        60,
        "--style",
        "paper",
        "--out",
        out,
        "--quiet",
    )
    assert result.exit_code == 0, result.output
    names = {p.name for p in out.iterdir()}
    assert {"sanity.pdf", "sanity.caption.txt"} <= names and "sanity.png" not in names
    assert (out / "sanity.pdf").read_bytes()[:5] == b"%PDF-"
    caption = (out / "sanity.caption.txt").read_text()
    assert caption.endswith(".\n") and len(caption.split()) > 5, caption
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["files"] == {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in out.iterdir() if p.name != "manifest.json"
    }


def test_sanity_cli_errors_are_one_line(digits_checkpoints, tmp_path):
    from tests.cli_helpers import assert_one_line_error, run

    assert_one_line_error(run("sanity", tmp_path / "missing.pt"), r"missing\.pt")
    assert_one_line_error(
        run("sanity", digits_checkpoints["laya"], "--methods", "gi"), r"--methods must be one of \{laya, .*\}; got 'gi'"
    )


def test_a_frozen_backbone_is_encoded_once_across_runs_through_the_feature_cache(digits_models, digits, tmp_path):
    """Stored by reference (as hf: and py: backbones are), the splits go through fit-head's on-disk cache:
    the second sanity run on the same model and data never calls the backbone, and gives the same tables."""
    from laya_eval.training.features import encode

    model = copy.deepcopy(digits_models["concat"])
    model.backbone.stored_by_reference = True
    cached = encode_features(model, digits["val"], cache_dir=tmp_path)
    for got, want in zip(cached.hidden, encode(model, digits["val"])):  # the in-memory route
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    assert torch.equal(cached.y, digits["val"].y)

    options = SanityOptions(
        methods=("contribution", "random"),
        bootstrap=0,
        roar_seeds=1,
        train=TrainOptions(epochs=1, seed=0, batch_size=64),
    )
    with _Counter(model.backbone) as first:
        a = sanity(model, digits, options=options, cache_dir=tmp_path)
    with _Counter(model.backbone) as second:
        b = sanity(model, digits, options=options, cache_dir=tmp_path)
    assert first.calls > 0 and second.calls == 0
    for table in ("randomisation", "data_randomisation", "layer_roar", "roar_agreement"):
        pd.testing.assert_frame_equal(getattr(a, table), getattr(b, table))
    # A backbone trained with its head is encoded in memory: nothing is written to the cache.
    trainable = copy.deepcopy(digits_models["concat"])
    before = sorted(p.name for p in tmp_path.rglob("*"))
    encode_features(trainable, digits["val"], cache_dir=tmp_path)
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
