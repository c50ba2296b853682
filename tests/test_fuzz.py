"""Fuzzing: a few hundred seeded mutants of every file format through info, faithfulness and the loaders.

Zero tracebacks, zero hangs, exit 0 or 2 only, no planted payload ever runs. The
benchmark ``benchmarks/fuzz.py`` runs the same mutator over thousands of mutants.
``LAYA_EVAL_FUZZ_SEED`` picks another seed (the default keeps CI reproducible).
"""

from __future__ import annotations

import os
import pickle
import time

import pytest
import torch

from tests import fuzzing

N_MUTANTS = 300
SEED = int(os.environ.get("LAYA_EVAL_FUZZ_SEED", "2026"))


def test_planted_payload_really_would_run(tmp_path):
    target = tmp_path / fuzzing.MARKER
    pickle.loads(pickle.dumps(fuzzing.PlantedPayload(str(target))))  # control: unrestricted unpickling runs it
    assert target.exists()


def test_mutants_are_seeded(tmp_path):
    seeds = fuzzing.make_seeds(tmp_path / "s")
    a = [(k, m, d) for _, k, m, d in fuzzing.mutants(seeds, 40, 7, "m")]
    b = [(k, m, d) for _, k, m, d in fuzzing.mutants(seeds, 40, 7, "m")]
    c = [(k, m, d) for _, k, m, d in fuzzing.mutants(seeds, 40, 8, "m")]
    assert a == b and a != c
    assert {k for k, _, _ in a} == {"pt", "safetensors", "npz", "idx", "idx_raw", "cifar"}


def test_the_runner_reports_tracebacks_and_hangs(tmp_path, monkeypatch):
    seeds = fuzzing.make_seeds(tmp_path / "s")
    # the unmodified seeds are accepted
    for kind in fuzzing.KINDS:
        assert fuzzing.run_mutant(kind, seeds.files[kind], seeds, tmp_path / "case")[0] == "exit0", kind
    # a loader that crashes is a traceback, one that sleeps is a hang: the fuzz test can fail
    import laya_eval.data as data

    monkeypatch.setattr(data, "load_dataset", lambda *a, **k: 1 / 0)
    outcome, detail = fuzzing.run_mutant("npz", seeds.files["npz"], seeds, tmp_path / "case")
    assert outcome == "traceback" and "ZeroDivisionError" in detail
    monkeypatch.setattr(data, "load_dataset", lambda *a, **k: time.sleep(30))
    assert fuzzing.run_mutant("npz", seeds.files["npz"], seeds, tmp_path / "case", timeout=0.5)[0] == "hang"


def test_fuzz_every_format(tmp_path):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        report = fuzzing.fuzz(N_MUTANTS, SEED, tmp_path, timeout=20.0)
    finally:
        torch.set_num_threads(threads)
    summary = f"seed {SEED}: {dict(report.counts)}; first failures: {report.failures[:5]}"
    assert report.n == N_MUTANTS
    assert report.counts["traceback"] == 0 and report.counts["hang"] == 0 and report.counts["marker"] == 0, summary
    assert report.counts["exit0"] + report.counts["exit2"] == N_MUTANTS, summary
    # the mutants reach past the first check: some are still valid files, most are refused
    assert report.counts["exit0"] > 0 and report.counts["exit2"] > N_MUTANTS // 2, summary
    assert {kind for kind, _ in report.by_kind} == {"pt", "safetensors", "npz", "idx", "idx_raw", "cifar"}


@pytest.mark.parametrize("kind", ["pt", "npz", "cifar"])
def test_planted_payloads_are_refused(tmp_path, kind):
    import io

    import numpy as np

    seeds = fuzzing.make_seeds(tmp_path / "s")
    marker = tmp_path / fuzzing.MARKER
    payload = fuzzing.PlantedPayload(str(marker))
    if kind == "pt":
        buf = io.BytesIO()
        torch.save({"format": "laya-eval-checkpoint", "config": payload}, buf)
        data = buf.getvalue()
    elif kind == "npz":
        buf = io.BytesIO()
        np.savez(buf, x=np.array([payload, 1], dtype=object), y=np.array([0, 1]))
        data = buf.getvalue()
    else:
        data = pickle.dumps({b"data": payload, b"labels": [0]}, protocol=4)
    assert fuzzing.run_mutant(kind, data, seeds, tmp_path / "case")[0] == "exit2"
    assert not marker.exists()
