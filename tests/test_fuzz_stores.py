"""Fault injection over feature-cache entries and partial chunks: 0 tracebacks, 0 hangs, never a wrong result.

``benchmarks/fuzz_stores.py`` runs the same injector over thousands of cases (plus checkpoint
mutants). ``LAYA_EVAL_FUZZ_SEED`` picks another seed.
"""

from __future__ import annotations

import os

import numpy as np

from tests import fuzz_stores

SEED = int(os.environ.get("LAYA_EVAL_FUZZ_SEED", "2026"))


def test_faults_in_caches_and_chunks_never_give_a_traceback_a_hang_or_a_wrong_result(tmp_path):
    report = fuzz_stores.fuzz_stores(150, 150, SEED, tmp_path, timeout=10.0)
    summary = f"seed {SEED}: {dict(report.by_store)}; first failures: {report.failures[:5]}"
    assert sum(report.counts.values()) == 300
    assert set(report.counts) <= {"exit0", "exit2"}, summary
    assert report.by_store[("cache", "exit0")] > 100 and report.by_store[("chunk", "exit0")] > 100, summary


def test_the_injector_counts_a_reader_that_trusts_what_it_reads(tmp_path, monkeypatch):
    import laya_eval.loading.feature_cache as cache

    def trusting(folder, name, record, dtype, shape):  # no checksum, dtype or shape check
        return np.load(folder / name, allow_pickle=False)

    monkeypatch.setattr(cache, "_read_array", trusting)
    report = fuzz_stores.fuzz_stores(60, 0, SEED, tmp_path, timeout=3.0)
    assert report.counts["wrong"] + report.counts["traceback"] + report.counts["hang"] > 0, dict(report.counts)
