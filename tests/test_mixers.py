"""Depth mixers: the audit's masses and effects against independent re-runs of the model set by hand."""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pytest
import torch

from laya_eval.data import Dataset
from laya_eval.errors import CheckpointError, ConfigError
from laya_eval.mixers.audit import MixerOptions, audit_mixers
from laya_eval.mixers.protocol import capture_mixers, find_mixers, removed_sources
from laya_eval.mixers.reference import PatchDepthClassifier, load_mixer_model, save_mixer_model

N = 20


def _model(kind: str, seed: int = 0) -> PatchDepthClassifier:
    torch.manual_seed(seed)
    model = PatchDepthClassifier(kind, image_size=8, patch=4, dim=8, depth=3, heads=2, n_classes=3)
    with torch.no_grad():  # trained-looking weights: non-uniform depth weights, confident predictions
        for p in model.parameters():
            p.normal_(0, 0.5)
    return model.eval()


@pytest.fixture(scope="module")
def data() -> Dataset:
    gen = torch.Generator().manual_seed(1)
    return Dataset(
        torch.randn(N, 1, 8, 8, generator=gen),
        torch.randint(0, 3, (N,), generator=gen),
        ("a", "b", "c"),
        "random",
        "test",
    )


def _audit(model, data, **kw):
    options = dict(limit=None, batch_size=N, bootstrap=0, ig_steps=8, **kw)
    return audit_mixers(model, data, options=MixerOptions(**options))


def _values(audit, mixer, method, column):
    part = audit.sources[(audit.sources.mixer == mixer) & (audit.sources.method == method)]
    return part.pivot(index="sample", columns="source", values=column).to_numpy()


def _pred_conf(model, x):
    with torch.no_grad():
        probs = torch.softmax(model(x), -1)
    pred = probs.argmax(-1)
    return pred, probs.gather(1, pred[:, None]).squeeze(1)


@pytest.mark.parametrize("kind", ["denseformer", "attnres"])
def test_mass_equals_the_weights_a_forward_hook_reads(kind, data):
    model = _model(kind)
    seen = {}
    handles = []
    for k, mixer in enumerate(model.mixers):
        if kind == "denseformer":  # static weights: the parameter the module multiplies by
            handles.append(
                mixer.register_forward_hook(
                    lambda m, a, o, k=k: seen.__setitem__(k, m.weight.detach().expand(len(a[0][0]), -1).clone())
                )
            )
        else:  # the logits the module's own scorer returns, through a softmax worked out here
            handles.append(
                mixer.score.register_forward_hook(
                    lambda m, a, o, k=k: seen.__setitem__(k, (o.exp() / o.exp().sum(-1, keepdim=True)).detach())
                )
            )
    with torch.no_grad():
        model(data.x)
    for h in handles:
        h.remove()
    audit = _audit(model, data, methods=("mass",))
    for k in range(3):
        np.testing.assert_allclose(
            _values(audit, f"mixers.{k}", "mass", "attribution"), seen[k].numpy(), rtol=1e-6, atol=1e-7
        )
    if kind == "attnres":
        assert not np.allclose(seen[2][0].numpy(), seen[2][1].numpy())  # input-dependent weights


@pytest.mark.parametrize("kind", ["denseformer", "attnres"])
def test_weight_removal_equals_a_rerun_with_the_weight_set_by_hand(kind, data):
    model = _model(kind)
    audit = _audit(model, data, methods=("mass",), removal="weight")
    pred, conf = _pred_conf(model, data.x)
    for k in range(3):
        effects = _values(audit, f"mixers.{k}", "mass", "effect")
        assert effects.shape == (N, k + 2)
        for j in range(k + 2):
            edited = copy.deepcopy(model)
            if kind == "denseformer":
                with torch.no_grad():
                    edited.mixers[k].weight[j] = 0.0
                handle = None
            else:  # the logit set to -inf before the module's own softmax

                def minus_inf(m, a, o, j=j):
                    o = o.clone()
                    o[:, j] = float("-inf")
                    return o

                handle = edited.mixers[k].score.register_forward_hook(minus_inf)
            with torch.no_grad():
                p = torch.softmax(edited(data.x), -1).gather(1, pred[:, None]).squeeze(1)
            if handle is not None:
                handle.remove()
            np.testing.assert_allclose(effects[:, j], (conf - p).numpy(), atol=2e-6, rtol=0)
        assert np.abs(effects).max() > 1e-3  # the removals do change the prediction


def _manual_forward(model, x, mixer=None, source=None, value=None, record=None):
    """PatchDepthClassifier.forward written out, with one source of one mixer's input replaced by ``value``."""
    e = model.embed(x).flatten(2).transpose(1, 2) + model.pos
    states, h = [e], e
    for i, block in enumerate(model.blocks):
        states.append(h + block(h) if model.config["kind"] == "denseformer" else block(h))
        given = list(states)
        if record is not None:
            record.setdefault(i, []).append([s.clone() for s in given])
        if i == mixer:
            given[source] = value.expand_as(given[source])
        h = model.mixers[i](given)
    return model.classifier(model.norm(h).mean(1))


@pytest.mark.parametrize("kind", ["denseformer", "attnres"])
def test_mean_removal_equals_a_rerun_with_the_source_replaced_by_hand(kind, data):
    model = _model(kind)
    audit = _audit(model, data, methods=("mass",), removal="mean")
    record = {}
    with torch.no_grad():
        _manual_forward(model, data.x, record=record)
        pred, conf = _pred_conf(model, data.x)
        for k in range(3):
            effects = _values(audit, f"mixers.{k}", "mass", "effect")
            for j in range(k + 2):
                mean = record[k][0][j].double().mean(0).float()
                p = torch.softmax(_manual_forward(model, data.x, k, j, mean), -1).gather(1, pred[:, None])
                np.testing.assert_allclose(effects[:, j], (conf - p.squeeze(1)).numpy(), atol=2e-6, rtol=0)


@pytest.mark.parametrize("kind", ["denseformer", "attnres"])
def test_resample_removal_equals_reruns_with_the_recorded_donors_states(kind, data):
    model = _model(kind)
    draws = 3
    audit = _audit(model, data, methods=("mass",), removal="resample", draws=draws, seed=7)
    donors = audit.donors.pivot(index="sample", columns="draw", values="donor").to_numpy()
    assert donors.shape == (N, draws)
    assert (donors != np.arange(N)[:, None]).all() and ((donors >= 0) & (donors < N)).all()  # never the sample
    # Donors as the engine's resample ablation draws them: floor(u * (N - 1)) among the other samples, with u
    # the per-sample uniform of stream (seed, 1) — worked out here from the seeding functions themselves.
    from laya_eval.engine.seeding import derived_seed, per_sample_uniform

    u = per_sample_uniform(derived_seed(7, 1), torch.arange(N), draws).numpy()
    pick = np.minimum(np.floor(u * (N - 1)).astype(np.int64), N - 2)
    np.testing.assert_array_equal(donors, pick + (pick >= np.arange(N)[:, None]))
    record = {}
    with torch.no_grad():
        _manual_forward(model, data.x, record=record)
        pred, conf = _pred_conf(model, data.x)
        for k in range(3):
            effects = _values(audit, f"mixers.{k}", "mass", "effect")
            for j in range(k + 2):
                source = record[k][0][j]  # (N, T, d): every sample's own state of source j at mixer k
                total = torch.zeros(N, dtype=torch.float64)
                for draw in range(draws):  # sample b's source j replaced by its recorded donor's state
                    value = source[torch.tensor(donors[:, draw])]
                    p = torch.softmax(_manual_forward(model, data.x, k, j, value), -1).gather(1, pred[:, None])
                    total += p.squeeze(1).double()
                np.testing.assert_allclose(effects[:, j], (conf.double() - total / draws).numpy(), atol=3e-6, rtol=0)
            assert np.abs(effects).max() > 1e-3


def test_deletion_at_one_is_the_effect_of_the_top_scored_source(data):
    model = _model("attnres")
    audit = _audit(model, data, methods=("mass", "random"))
    for (mixer, method), part in audit.samples.groupby(["mixer", "method"]):
        scores, effects = _values(audit, mixer, method, "attribution"), _values(audit, mixer, method, "effect")
        top = np.argsort(-scores, axis=1, kind="stable")[:, 0]
        np.testing.assert_allclose(
            part.sort_values("sample").deletion_at_1.to_numpy(), effects[np.arange(N), top], atol=1e-6
        )


def test_integrated_gradients_over_the_weights_are_complete(data):
    # IG from all-zero weights sums to logit_c(weights) - logit_c(mixer weights zeroed by hand). The path
    # passes through a near-zero state that the next LayerNorm's eps makes sharp: 64 Gauss-Legendre steps miss
    # the gap by up to 0.03 here, 256 close it to float32 rounding.
    model = _model("denseformer")
    audit = _audit(model, data, methods=("ig",))
    audit_fine = audit_mixers(
        model, data, options=MixerOptions(limit=None, batch_size=N, bootstrap=0, ig_steps=256, methods=("ig",))
    )
    pred, _ = _pred_conf(model, data.x)
    for k in range(3):
        edited = copy.deepcopy(model)
        with torch.no_grad():
            edited.mixers[k].weight.zero_()
            gap = (model(data.x) - edited(data.x)).gather(1, pred[:, None]).squeeze(1).numpy()
        total = _values(audit_fine, f"mixers.{k}", "ig", "attribution").sum(1)
        np.testing.assert_allclose(total, gap, atol=1e-5)
    assert audit.summary.faithfulness.notna().all()


def test_grad_x_weight_matches_autograd_on_the_parameter_per_sample(data):
    model = _model("denseformer")
    audit = _audit(model, data, methods=("grad_x_weight",))
    pred, _ = _pred_conf(model, data.x)
    k = 2
    w = model.mixers[k].weight
    expected = []
    for b in range(4):  # per sample: the static parameter is shared across the batch
        model.zero_grad()
        out = model(data.x)  # the whole batch, so the kernels round as in the audit
        out[b, pred[b]].backward()
        expected.append((w.grad * w).detach().numpy().copy())
    got = _values(audit, f"mixers.{k}", "grad_x_weight", "attribution")[:4]
    np.testing.assert_allclose(got, np.stack(expected), rtol=1e-4, atol=1e-6)


def test_same_bytes_for_any_batch_size(data):
    model = _model("attnres")
    a = audit_mixers(model, data, options=MixerOptions(limit=None, batch_size=N, bootstrap=20, ig_steps=4))
    b = audit_mixers(model, data, options=MixerOptions(limit=None, batch_size=3, bootstrap=20, ig_steps=4))
    for table in ("sources", "samples", "summary", "map"):
        assert getattr(a, table).to_csv().encode() == getattr(b, table).to_csv().encode(), table
    options = dict(limit=None, bootstrap=0, methods=("mass",), removal="resample", draws=2)
    a = audit_mixers(model, data, options=MixerOptions(batch_size=N, **options))
    b = audit_mixers(model, data, options=MixerOptions(batch_size=3, **options))
    for table in ("sources", "donors"):
        assert getattr(a, table).to_csv().encode() == getattr(b, table).to_csv().encode(), table


def test_hooks_are_removed_when_the_block_raises(data):
    model = _model("attnres")
    mixer = model.mixers[1]
    with pytest.raises(RuntimeError, match="inside"):
        with removed_sources(mixer, torch.ones(N, 3), "weight"):
            raise RuntimeError("inside")
    with pytest.raises(RuntimeError, match="inside"):
        with capture_mixers(find_mixers(model)):
            raise RuntimeError("inside")
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


class _NotAWeightedSum(torch.nn.Module):
    mixer_softmax = False

    def mixer_logits(self, sources):
        return torch.ones(len(sources))

    def forward(self, sources):
        return torch.stack(list(sources), 1).sum(1) * 2.0  # twice what the declared weights give


class _Broken(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin, self.mix, self.out = torch.nn.Linear(4, 4), _NotAWeightedSum(), torch.nn.Linear(4, 2)

    def forward(self, x):
        h = self.lin(x.flatten(1))
        return self.out(self.mix([x.flatten(1), h]))


def test_a_module_that_breaks_the_protocol_is_named():
    data = Dataset(torch.randn(16, 1, 2, 2), torch.zeros(16, dtype=torch.int64), ("a", "b"), "random", "test")
    with pytest.raises(ConfigError, match="depth mixer 'mix': its output is not sum_j w_j s_j"):
        _audit(_Broken(), data)


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(removal="gate"), "removal must be one of {weight, mean, resample}; got 'gate'."),
        (dict(methods=("mass", "gi")), "methods must be one of"),
        (dict(batch_size=0), "batch_size must be"),
        (dict(ig_steps=0), "ig_steps must be"),
        (dict(draws=0), "draws must be"),
    ],
)
def test_bad_options_are_refused_before_work(options, message):
    with pytest.raises(ConfigError, match=message.replace("{", r"\{").replace("}", r"\}")):
        MixerOptions(**options).check()


def test_checkpoint_round_trip_and_hostile_files(tmp_path, data):
    model = _model("denseformer")
    path = save_mixer_model(model, tmp_path / "m.pt", info={"accuracy": 0.5})
    loaded, info = load_mixer_model(path)
    assert info == {"accuracy": 0.5}
    with torch.no_grad():
        assert torch.equal(loaded(data.x), model(data.x))
    raw = torch.load(path, weights_only=True)
    raw["config"]["dim"], raw["config"]["depth"] = 512, 32  # ~100 MB of weights asked of a tiny file
    torch.save(raw, tmp_path / "big.pt")
    with pytest.raises(CheckpointError, match="more than the file holds"):
        load_mixer_model(tmp_path / "big.pt")
    torch.save({"format": "something-else"}, tmp_path / "foreign.pt")
    with pytest.raises(CheckpointError, match="is not a laya-eval-depth-mixer-model file"):
        load_mixer_model(tmp_path / "foreign.pt")
    with pytest.raises(CheckpointError, match="does not exist"):
        load_mixer_model(tmp_path / "missing.pt")


def test_the_audit_checks_out_before_any_work_and_returns_what_it_wrote(tmp_path, data, monkeypatch):
    import laya_eval
    from laya_eval.mixers import audit as audit_module

    def work(*args, **kwargs):
        raise AssertionError("the model or data were prepared before the options were checked")

    monkeypatch.setattr(audit_module, "_prepared", work)
    model = _model("attnres")
    a_file = tmp_path / "a-file"
    a_file.write_text("keep me")
    with pytest.raises(ConfigError, match=r"^output folder '.*a-file' exists and is not a folder\.$"):
        laya_eval.audit_mixers(model, data, out=a_file)
    with pytest.raises(
        ConfigError, match=r"^MixerOptions.removal must be one of \{weight, mean, resample\}; got 'zero'\.$"
    ):
        laya_eval.audit_mixers(model, data, out=tmp_path / "new", options=MixerOptions(removal="zero"))
    assert a_file.read_text() == "keep me" and sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]
    monkeypatch.undo()
    options = MixerOptions(limit=None, batch_size=N, bootstrap=0, ig_steps=4, methods=("mass", "random"))
    audit = laya_eval.audit_mixers(model, data, out=tmp_path / "audit", options=options)
    assert [p.name for p in audit.files] == [
        "sources.csv",
        "samples.csv",
        "summary.csv",
        "comparisons.csv",
        "map.csv",
        "map.png",
        "manifest.json",
    ]
    assert audit.warnings == [] and all(p.parent == tmp_path / "audit" for p in audit.files)
    written = pd.read_csv(tmp_path / "audit" / "summary.csv")
    assert list(zip(written.mixer, written.method)) == list(zip(audit.summary.mixer, audit.summary.method))


def test_cli_audits_a_mixer_file_and_refuses_bad_options_before_work(tmp_path, data):
    from tests.cli_helpers import assert_one_line_error, run

    path = save_mixer_model(_model("attnres"), tmp_path / "m.pt")
    arrays = tmp_path / "d.npz"
    # 60 test samples (20% of 300): above 50 the paired Wilcoxon tests take their normal approximation (exact ones
    # are slow).
    np.savez(arrays, x=torch.randn(300, 1, 8, 8).numpy(), y=np.arange(300) % 3)
    out = tmp_path / "audit"
    result = run(
        "mixers",
        path,
        "--data",
        f"npz:{arrays}",
        "--limit",
        55,
        "--bootstrap",
        10,
        "--ig-steps",
        4,
        "--methods",
        "mass,norm_mass,random",
        "--out",
        out,
        "--quiet",
    )
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == [
        "comparisons.csv",
        "manifest.json",
        "map.csv",
        "map.png",
        "samples.csv",
        "sources.csv",
        "summary.csv",
    ]
    summary = __import__("pandas").read_csv(out / "summary.csv")
    assert list(summary.mixer.unique()) == ["mixers.0", "mixers.1", "mixers.2"] and (summary.n == 55).all()
    assert "mixers.2" in result.output and "faithfulness" in result.output
    before = sorted(p.name for p in out.iterdir())
    assert_one_line_error(run("mixers", path, "--methods", "mass,gi", "--out", out), r"--methods.*got 'gi'")
    assert_one_line_error(
        run("mixers", path, "--data", f"npz:{arrays}", "--out", out, "--removal", "zero"), r"--removal"
    )
    assert_one_line_error(
        run("mixers", tmp_path / "nothing.pt", "--data", f"npz:{arrays}", "--out", out), r"does not exist"
    )
    assert_one_line_error(
        run("mixers", path, "--data", "digits", "--out", out),
        r"the model cannot take the inputs of 'digits' \(one sample of shape \(64,\)\)",
    )
    assert_one_line_error(run("mixers", "py:os:getcwd", "--data", f"npz:{arrays}", "--out", out), r"--trust-code")
    assert sorted(p.name for p in out.iterdir()) == before  # nothing already written is lost
