"""Speed of laya_eval.stats at the size of a full Fashion-MNIST test set (n = 10,000 samples).

- ``faithfulness_p_value`` for L = 3, 5, 8 (exact route) and 12 (permutation route, its default 2000 null means),
  effects rounded so that about a quarter of the samples have tied effects (several tie patterns, so the
  multi-group convolution is exercised);
- ``compare_methods`` for 7 methods (21 pairs x 2 metrics, 1000 bootstrap resamples each).

Run::

    PYTHONPATH=.:cli python benchmarks/bench_stats.py > benchmarks/results/bench_stats.txt
"""

from __future__ import annotations

import os
import platform
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
import pandas as pd

from laya_eval.stats.metrics import spearman_per_sample
from laya_eval.stats import compare_methods, faithfulness_p_value, tie_effects

N = 10_000


def _timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def main() -> None:
    print(f"# numpy {np.__version__}, {platform.machine()}, {os.cpu_count()} cores, n = {N}")
    rng = np.random.default_rng(0)
    for n_layers in (3, 5, 8, 12):
        effects = rng.random((N, n_layers))
        effects[: N // 4] = effects[: N // 4].round(1)  # a quarter of the samples: coarse values, many ties
        effects = tie_effects(effects).effects
        scores = rng.random((N, n_layers)) + 0.2 * effects
        rho = spearman_per_sample(scores, effects)
        p, seconds = _timed(lambda rho=rho, effects=effects: faithfulness_p_value(rho, effects, seed=0))
        print(
            f"faithfulness_p_value L={n_layers:2d}: {seconds:6.2f} s  (p = {p:.3g}, mean rho = {np.nanmean(rho):.4f})"
        )
    methods = ["laya", "static", "contribution", "ig", "gradcam", "grad_x_act", "random"]
    per_sample = pd.DataFrame(
        {
            "sample": np.tile(np.arange(N), len(methods)),
            "method": np.repeat(methods, N),
            "spearman": rng.choice([-1, -0.5, 0.5, 1, np.nan], N * len(methods)),
            "deletion_at_1": rng.random(N * len(methods)).round(3),
        }
    )
    table, seconds = _timed(lambda: compare_methods(per_sample, n_resamples=1000, seed=0))
    print(f"compare_methods 7 methods: {seconds:6.2f} s  ({len(table)} rows)")


if __name__ == "__main__":
    main()
