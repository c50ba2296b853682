"""The engine: device discipline, batch-size/chunk/shard invariance, resumable runs, result folders as a set."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import laya_eval.engine.evaluation as engine
from laya_eval.engine.evaluation import EvalOptions, evaluate
from laya_eval.engine.partial import PartialStore
from laya_eval.engine.records import Records, merge_records
from tests.device_guard import guard_hot_loop

FAST = dict(bootstrap=20, n_steps=4)
TABLES = ("layers.csv", "samples.csv", "summary.csv", "comparisons.csv")
ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------ device discipline
@pytest.fixture
def device_guard(monkeypatch):
    """Run every per-batch computation of the engine under the guard (tests/device_guard.py); torch.from_numpy is
    forbidden there too. The other commands' hot loops: tests/test_device_guard.py."""
    guard_hot_loop(monkeypatch, engine, "_batch_records")


@pytest.mark.parametrize("head", ["laya", "scalarmix", "lastlayer"])
def test_batch_loop_creates_no_tensor_off_the_batch_device(device_guard, digits_models, head):
    model = digits_models[head]
    out = evaluate(
        model,
        "digits",
        options=EvalOptions(limit=40, batch_size=16, **FAST, ablation=("gate", "gate-renorm", "zero", "mean")),
    )
    assert set(out) == {"gate", "gate-renorm", "zero", "mean"}
    net = evaluate(
        model,
        "digits",
        options=dataclasses.replace(
            EvalOptions(limit=20, batch_size=16, scope="network", ablation="zero", **FAST), ablation=("zero", "mean")
        ),
    )
    assert len(net["zero"].summary) >= 5


def test_the_guard_catches_a_cpu_arange(device_guard, digits_models, monkeypatch):
    """The first reintroduced bug: deletion masks built with torch.arange(n) on the CPU."""
    import laya_eval.engine.removals as perturb

    def cpu_masks(ranking):
        batch, n = ranking.shape
        position = torch.empty_like(ranking)
        position.scatter_(1, ranking, torch.arange(n).expand(batch, n))
        return (position[:, None, :] >= torch.arange(1, n + 1)[None, :, None]).float()

    monkeypatch.setattr(perturb, "deletion_masks", cpu_masks)
    monkeypatch.setattr(engine, "deletion_masks", cpu_masks)
    with pytest.raises(AssertionError, match="arange without device"):
        evaluate(digits_models["laya"], "digits", options=EvalOptions(limit=20, **FAST, ablation=("gate",)))


def test_the_guard_catches_numpy_random_scores(device_guard, digits_models, monkeypatch):
    """The second reintroduced bug: random scores made with numpy and torch.from_numpy."""
    import laya_eval.engine.methods as attribution

    def numpy_random(tr, model, *, target, context):
        return torch.from_numpy(np.random.default_rng(0).random((tr.n_samples, tr.n_layers))).float()

    monkeypatch.setitem(
        attribution.METHODS, "random", dataclasses.replace(attribution.METHODS["random"], fn=numpy_random)
    )
    with pytest.raises(AssertionError, match="from_numpy"):
        evaluate(
            digits_models["laya"],
            "digits",
            options=EvalOptions(limit=20, methods=("random",), **FAST, ablation=("gate",)),
        )


# ------------------------------------------------------------------ invariance
def _write(tmp, name, model, **opts):
    out = tmp / name
    ablation = tuple(opts.pop("ablations", ["gate"]))
    evaluate(
        model, "digits", options=EvalOptions(limit=opts.pop("limit", 101), ablation=ablation, **FAST, **opts), out=out
    )
    return out


def _same_tables(a: Path, b: Path, sub: str = "") -> None:
    for f in TABLES:
        assert (a / sub / f).read_bytes() == (b / sub / f).read_bytes(), f"{sub}{f} differs"


def test_csv_bytes_do_not_depend_on_batch_size_or_chunking(tmp_path, digits_checkpoints):
    ckpt = digits_checkpoints["laya"]
    ref = _write(tmp_path, "b256", ckpt, batch_size=256, ablations=["gate", "mean"])
    for name, opts in {"b1": dict(batch_size=1), "b7": dict(batch_size=7, chunk_size=10)}.items():
        out = _write(tmp_path, name, ckpt, ablations=["gate", "mean"], **opts)
        for sub in ("gate", "mean"):
            _same_tables(ref, out, sub)


def test_records_merge_in_any_order():
    def part(ids):
        ids = np.asarray(ids)
        return Records(
            sample=ids,
            label=ids % 3,
            pred=ids % 2,
            confidence=ids / 10.0,
            scores={"m": np.c_[ids, -ids].astype(float)},
            effects={"gate": np.c_[ids, ids].astype(float)},
            deletion={"gate": {"m": np.c_[ids, ids].astype(float)}},
            diagnostics={},
        )

    merged = merge_records([part([5, 6]), part([0, 1, 2]), part([3, 4])])
    assert merged.sample.tolist() == list(range(7))
    assert merged.scores["m"][:, 1].tolist() == [-i for i in range(7)]
    with pytest.raises(Exception, match="appears in two records"):
        merge_records([part([1, 2]), part([2])])


# ------------------------------------------------------------------ resume
class _Killed(Exception):
    pass


def test_resume_after_an_interruption_gives_the_same_bytes(tmp_path, digits_checkpoints, monkeypatch):
    ckpt = digits_checkpoints["laya"]
    ref = _write(tmp_path, "ref", ckpt, chunk_size=20, ablations=["gate", "mean"])
    saved, real_save = [], PartialStore.save_chunk

    def save_then_die(self, start, stop, records):
        real_save(self, start, stop, records)
        saved.append(start)
        if len(saved) == 3:
            raise _Killed

    monkeypatch.setattr(PartialStore, "save_chunk", save_then_die)
    out = tmp_path / "resumed"
    options = EvalOptions(limit=101, chunk_size=20, **FAST)
    with pytest.raises(_Killed):
        evaluate(ckpt, "digits", options=dataclasses.replace(options, ablation=("gate", "mean")), out=out)
    assert len(list((out / ".partial").glob("chunk-*.npz"))) == 3 and not (out / "gate").exists()
    monkeypatch.setattr(PartialStore, "save_chunk", real_save)
    computed = []
    real_batch = engine._batch_records
    monkeypatch.setattr(engine, "_batch_records", lambda *a, **k: computed.append(1) or real_batch(*a, **k))
    evaluate(ckpt, "digits", options=dataclasses.replace(options, ablation=("gate", "mean")), out=out, resume=True)
    assert len(computed) == 3  # only the chunks 60-79, 80-99 and 100 were left (batch 256 > chunk)
    for sub in ("gate", "mean"):
        _same_tables(ref, out, sub)
    assert not (out / ".partial").exists()  # a finished run removes its partial files


def test_resume_refuses_partial_files_of_other_options(tmp_path, digits_checkpoints, monkeypatch):
    ckpt = digits_checkpoints["laya"]
    out = tmp_path / "r"
    monkeypatch.setattr(PartialStore, "save_chunk", lambda *a: (_ for _ in ()).throw(_Killed()))
    with pytest.raises(_Killed):
        evaluate(ckpt, "digits", options=EvalOptions(limit=60, seed=1, **FAST, ablation=("gate",)), out=out)
    monkeypatch.undo()
    store = PartialStore(out, "another-key", resume=False)
    store.save_chunk(
        0, 20, Records(sample=np.arange(20), label=np.zeros(20, int), pred=np.zeros(20, int), confidence=np.zeros(20))
    )
    with pytest.raises(Exception, match="other options"):
        evaluate(
            ckpt, "digits", options=EvalOptions(limit=60, seed=2, **FAST, ablation=("gate",)), out=out, resume=True
        )


# ------------------------------------------------------------------ result folders
def test_a_result_replaces_its_folder_whole_and_keeps_a_complete_earlier_one_on_failure(
    tmp_path, digits_checkpoints, monkeypatch
):
    ckpt = digits_checkpoints["laya"]
    out = _write(tmp_path, "res", ckpt, ablations=["gate", "mean"])
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    import laya_eval.output.files as fileio

    calls = []

    def die_while_writing(fd):
        calls.append(fd)
        if len(calls) == 4:  # after the output checks, while the new set is being written
            raise _Killed

    monkeypatch.setattr(fileio.os, "fsync", die_while_writing)
    with pytest.raises(_Killed):
        evaluate(ckpt, "digits", options=EvalOptions(limit=30, **FAST, ablation=("gate",)), out=out)
    monkeypatch.undo()
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file() and ".partial" not in p.parts}
    assert after == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".res.")]  # no temporary folder left
    _write(tmp_path, "res", ckpt, ablations=["zero"], limit=30)
    assert sorted(p.name for p in out.iterdir()) == [
        "comparisons.csv",
        "layers.csv",
        "manifest.json",
        "samples.csv",
        "summary.csv",
    ]


def test_a_folder_of_other_files_is_never_replaced(tmp_path, digits_checkpoints):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(Exception, match="not a laya-eval result"):
        _write(tmp_path, "mine", digits_checkpoints["laya"])
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


def test_mixed_files_are_recognised(tmp_path, digits_checkpoints):
    from laya_eval.output.files import verify_result_folder

    a = _write(tmp_path, "a", digits_checkpoints["laya"])
    b = _write(tmp_path, "b", digits_checkpoints["laya"], limit=50)
    verify_result_folder(a)
    (a / "samples.csv").write_bytes((b / "samples.csv").read_bytes())
    with pytest.raises(Exception, match="not the file run"):
        verify_result_folder(a)


# ------------------------------------------------------------------ torchrun
# One torchrun at a time (xdist_group): two gloo worlds starting at once on a shared 2-core machine.
@pytest.mark.slow
@pytest.mark.xdist_group("torchrun")
def test_two_processes_under_torchrun_write_the_same_bytes(tmp_path, digits_checkpoints):
    ckpt = digits_checkpoints["scalarmix"]
    args = [
        "faithfulness",
        str(ckpt),
        "--limit",
        "101",
        "--bootstrap",
        "20",
        "--batch-size",
        "16",
        "--ablation",
        "gate,mean",
        "--quiet",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "LAYA_EVAL_THREADS": "1"}
    one = subprocess.run(
        [sys.executable, "-m", "laya_eval_cli", *args, "--out", str(tmp_path / "one")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert one.returncode == 0, one.stderr
    two = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            "-m",
            "laya_eval_cli",
            *args,
            "--out",
            str(tmp_path / "two"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert two.returncode == 0, two.stderr[-3000:]
    assert "from 2 processes" in two.stdout and two.stdout.count("wrote") == 1  # rank 0 alone prints and writes
    for sub in ("gate", "mean"):
        _same_tables(tmp_path / "one", tmp_path / "two", sub)


def test_parquet_tables_hold_the_csv_tables(tmp_path, digits_checkpoints):
    pytest.importorskip("pyarrow")
    import pandas as pd

    from laya_eval.output.files import verify_result_folder
    from laya_eval.output.tables import read_table

    ckpt = digits_checkpoints["concat"]
    csv = _write(tmp_path, "csv", ckpt, limit=40)
    pq = tmp_path / "pq"
    evaluate(ckpt, "digits", options=EvalOptions(limit=40, **FAST, ablation=("gate",), table_format="parquet"), out=pq)
    assert sorted(p.name for p in pq.iterdir()) == [
        "comparisons.csv",
        "layers.parquet",
        "manifest.json",
        "samples.parquet",
        "summary.csv",
    ]
    assert set(verify_result_folder(pq)["files"]) == {
        "layers.parquet",
        "samples.parquet",
        "summary.csv",
        "comparisons.csv",
    }
    for name in ("layers", "samples"):
        a, b = read_table(csv / f"{name}.csv"), read_table(pq / f"{name}.parquet")
        pd.testing.assert_frame_equal(a, b, check_exact=False, rtol=5e-8)  # CSV keeps 8 significant digits


# ------------------------------------------------------------------ any model spec
def test_faithfulness_takes_hf_and_py_specs(tmp_path, monkeypatch):
    """`laya-eval faithfulness hf:DIR` (a transformers classifier with use_weighted_layer_sum) and `py:MOD:FN`."""
    import pandas as pd

    from tests.byom_models import MyLayerAttention
    from tests.cli_helpers import run
    from tests.test_weighted_layer_sum import _classifier

    hf = _classifier("wavlm")
    hf.save_pretrained(tmp_path / "wavlm", safe_serialization=True)
    g = torch.Generator().manual_seed(0)
    np.savez(tmp_path / "audio.npz", x=torch.randn(24, 400, generator=g).numpy(), y=np.arange(24) % 3)
    res = run(
        "faithfulness",
        f"hf:{tmp_path / 'wavlm'}",
        "--data",
        f"npz:{tmp_path / 'audio.npz'}",
        "--split",
        "test",
        "--ablation",
        "gate-renorm",
        "--bootstrap",
        "10",
        "--out",
        str(tmp_path / "hf-out"),
        "--quiet",
    )
    assert res.exit_code == 0, res.output
    summary = pd.read_csv(tmp_path / "hf-out" / "summary.csv")
    assert {"static", "contribution"} <= set(summary.method) and summary["head"].iloc[0] == "scalarmix"
    torch.manual_seed(0)
    own = MyLayerAttention([8, 12, 16], 10, d=16, hidden=24)
    torch.save(own.state_dict(), tmp_path / "own.pt")
    monkeypatch.setenv("MY_LAYA_WEIGHTS", str(tmp_path / "own.pt"))
    res = run(
        "faithfulness",
        "py:tests.byom_models:my_laya_model",
        "--limit",
        "30",
        "--bootstrap",
        "10",
        "--methods",
        "laya,contribution",
        "--out",
        str(tmp_path / "py-out"),
        "--quiet",
    )
    assert res.exit_code == 0, res.output
    manifest = json.loads((tmp_path / "py-out" / "manifest.json").read_text())
    assert manifest["checkpoint"]["spec"] == "py:tests.byom_models:my_laya_model"


@pytest.mark.slow
def test_kill_9_during_a_run_leaves_the_earlier_result_intact(tmp_path, digits_checkpoints):
    import signal
    import time

    ckpt = digits_checkpoints["laya"]
    out = _write(tmp_path, "res", ckpt, limit=60)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "laya_eval_cli",
            "faithfulness",
            str(ckpt),
            "--limit",
            "300",
            "--batch-size",
            "16",
            "--chunk-size",
            "16",
            "--out",
            str(out),
            "--quiet",
        ],
        env={**os.environ, "LAYA_EVAL_THREADS": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 240
    while not list((out / ".partial").glob("chunk-*.npz")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "the run finished before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before


def test_parquet_without_pyarrow_fails_before_any_work(tmp_path, digits_checkpoints, monkeypatch):
    from laya_eval.errors import ConfigError

    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as if pyarrow were not installed
    monkeypatch.setattr(engine, "_evaluate", lambda *a, **k: pytest.fail("computed before checking"))
    with pytest.raises(ConfigError, match="parquet tables need pyarrow"):
        evaluate(
            digits_checkpoints["laya"],
            "digits",
            options=EvalOptions(limit=10, **FAST, ablation=("gate",), table_format="parquet"),
            out=tmp_path / "out",
        )
    assert not (tmp_path / "out").exists()


def test_network_statistics_pass_runs_the_backbone_once_per_batch(digits_models):
    from laya_eval.engine.evaluation import collect_statistics, make_plan

    model = digits_models["laya"]
    calls = []
    handle = model.backbone.register_forward_hook(lambda *a: calls.append(1))
    try:
        plan = make_plan(
            model,
            "digits",
            options=dataclasses.replace(
                EvalOptions(limit=40, batch_size=16, scope="network", ablation="mean", **FAST), ablation=("mean",)
            ),
        )
        calls.clear()  # planning sizes one input's block outputs against the memory budget
        means = collect_statistics(plan, 0, 40)
    finally:
        handle.remove()
    assert len(calls) == 3  # batches of 16, 16, 8: one pass each gives the hidden states and the block outputs
    # the fill is the mean of each block's full output, computed here by a slow loop over samples
    x = plan.data.x[:40]
    with torch.no_grad():
        slow = [
            torch.stack([model.block_outputs(x[i : i + 1])[1][k][0] for i in range(40)]).double().mean(0)
            for k in range(model.n_layers)
        ]
    for got, want in zip(means["hidden_mean"], slow):
        torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5)
