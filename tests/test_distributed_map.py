"""Sharing the summary over ranks: World.map's order, and tables that do not depend on how the work is shared.

The end-to-end check (two torchrun processes write the same bytes as one) is in test_engine.py; these tests
pin the pieces: the order World.map reassembles, and that every per-method score and paired-comparison row is
seeded on its own, so computing them in another order, as ranks do, gives the same table.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from laya_eval.engine.distributed import World
from laya_eval.engine.evaluation import EvalOptions, make_plan, collect, summarize
from laya_eval.stats.paired import compare_methods


def test_world_map_gives_every_rank_the_items_in_order(monkeypatch):
    import torch.distributed as dist

    items = list(range(11))
    size = 3

    def fake_all_gather(parts, mine):  # what each rank's share would be: rank r computes items r, r + 3, ...
        for r in range(size):
            parts[r] = [x * 10 for x in items[r::size]]

    monkeypatch.setattr(dist, "all_gather_object", fake_all_gather)
    for rank in range(size):
        seen = []
        out = World(rank=rank, size=size).map(lambda x: seen.append(x) or x * 10, items)
        assert out == [x * 10 for x in items]
        assert seen == items[rank::size]  # a rank computes only its share


def _backwards(fn, items):
    """A mapper that computes the items last to first (as another rank's share would be), returned in order."""
    out = {i: fn(items[i]) for i in reversed(range(len(items)))}
    return [out[i] for i in range(len(items))]


def test_comparisons_do_not_depend_on_the_order_rows_are_computed():
    rng = np.random.default_rng(0)
    n = 40
    per_sample = pd.DataFrame(
        {
            "sample": np.tile(np.arange(n), 3),
            "method": np.repeat(["a", "b", "c"], n),
            "spearman": rng.uniform(-1, 1, 3 * n),
            "deletion_at_1": rng.uniform(0, 1, 3 * n),
        }
    )
    serial = compare_methods(per_sample, n_resamples=200, seed=3)
    shared = compare_methods(per_sample, n_resamples=200, seed=3, map_rows=_backwards)
    pd.testing.assert_frame_equal(serial, shared, check_exact=True)


def test_summary_does_not_depend_on_the_order_methods_are_scored(digits_models, digits):
    options = EvalOptions(methods=("laya", "contribution", "random"), limit=40, bootstrap=200, seed=5)
    plan = make_plan(digits_models["laya"], digits["test"], options=dataclasses.replace(options, ablation=("gate",)))
    records = collect(plan, {}, 0, len(plan.data))
    serial = summarize(records, plan)["gate"]
    shared = summarize(records, plan, map_items=_backwards)["gate"]
    for table in ("summary", "samples", "layers", "comparisons"):
        pd.testing.assert_frame_equal(getattr(serial, table), getattr(shared, table), check_exact=True)


def test_a_single_process_world_maps_in_place():
    assert World(rank=0, size=1).map(lambda x: x + 1, [1, 2, 3]) == [2, 3, 4]
