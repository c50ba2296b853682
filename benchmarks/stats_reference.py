"""laya_eval.stats on the Fashion-MNIST reference run: float64 effects with honest ties, p-values, paired tests.

Reads a ``laya-eval faithfulness`` folder (float32 effects, as the engine writes them today) and its
checkpoint, recomputes the leave-one-layer-out effects in float64 at the head
(:func:`laya_eval.sanity_checks.attribute_features`), ties them (:func:`laya_eval.stats.tie_effects`, default
rtol) and reports, per method, which numbers move and by how much; then the faithfulness p-value, the
paired comparisons (``comparisons.csv`` format) and the collapsed-head check. Run::

    laya-eval faithfulness fmnist-mlp-laya-1337.pt --out FAITH --quiet
    PYTHONPATH=.:cli python benchmarks/stats_reference.py fmnist-mlp-laya-1337.pt FAITH \\
        --out benchmarks/results/fmnist_stats
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from laya_eval.loading.checkpoints import load_checkpoint
from laya_eval.data import load_dataset
from laya_eval.stats.metrics import spearman_per_sample
from laya_eval.sanity_checks import attribute_features, encode_features
from laya_eval.stats import (
    DEFAULT_RTOL,
    compare_methods,
    faithfulness_p_value,
    identical_rankings,
    tie_effects,
)


def _wide(layers: pd.DataFrame, column: str, method: str) -> np.ndarray:
    part = layers[layers.method == method].sort_values(["sample", "layer"])
    return part[column].to_numpy(np.float64).reshape(-1, int(layers.layer.max()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint")
    parser.add_argument("faithfulness_dir")
    parser.add_argument("--out", default="benchmarks/results/fmnist_stats")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    layers = pd.read_csv(Path(args.faithfulness_dir) / "layers.csv")
    samples = pd.read_csv(Path(args.faithfulness_dir) / "samples.csv")
    methods = list(dict.fromkeys(layers.method))
    model = load_checkpoint(args.checkpoint)
    test = load_dataset(model.info.dataset, "test")
    _, e64 = attribute_features(model, encode_features(model, test), ["random"])
    e32 = _wide(layers, "effect", methods[0])
    tied = tie_effects(e64)
    start = time.perf_counter()
    rows, per_sample, scores = [], [], {}
    for m in methods:
        a = _wide(layers, "attribution", m)
        scores[m] = a
        old, new = spearman_per_sample(a, e32), spearman_per_sample(a, tied.effects)
        both = ~np.isnan(old) & ~np.isnan(new)
        rows.append(
            {
                "method": m,
                "faithfulness_float32": np.nanmean(old),
                "faithfulness_float64_tied": np.nanmean(new),
                "change": np.nanmean(new) - np.nanmean(old),
                "n_undefined_float32": int(np.isnan(old).sum()),
                "n_undefined_float64_tied": int(np.isnan(new).sum()),
                "share_rho_changed": float(np.mean(np.abs(old[both] - new[both]) > 1e-9)),
                "max_abs_rho_change": float(np.max(np.abs(old[both] - new[both]))),
                "faithfulness_p_value": faithfulness_p_value(new, tied.effects),
            }
        )
        part = samples[samples.method == m].sort_values("sample")
        per_sample.append(
            pd.DataFrame(
                {
                    "sample": part["sample"].to_numpy(),
                    "method": m,
                    "spearman": new,
                    "deletion_at_1": part["deletion_at_1"].to_numpy(),
                }
            )
        )
    table = pd.DataFrame(rows)
    comparisons = compare_methods(pd.concat(per_sample), n_resamples=1000, seed=0)
    collapsed = identical_rankings(scores)
    seconds = time.perf_counter() - start
    csv = {"index": False, "float_format": "%.6g", "lineterminator": "\n"}
    table.to_csv(out / "float64_ties.csv", **csv)
    comparisons.to_csv(out / "comparisons.csv", **csv)
    exact_zero32 = float(np.mean(e32 == 0))
    lines = [
        (
            f"checkpoint {args.checkpoint}, {model.head.name} head, {model.info.dataset} test, n = {len(test)}, "
            f"L = {model.n_layers}, gate ablation"
        ),
        f"effects exactly 0 in float32: {exact_zero32:.3f} of all (sample, layer) effects",
        (
            f"float64 ties at rtol {DEFAULT_RTOL:g}: {tied.n_effect_ties} samples with a tie "
            f"({tied.n_effect_ties / len(test):.3f}); negligible effects: {tied.share_negligible_effects:.3f} of all"
        ),
        (
            f"identical rankings over real methods {collapsed.methods}: share {collapsed.share_identical:.3f} -> "
            f"collapsed head: {collapsed.identical}"
        ),
        f"stats time (p-values, 21 x 2 paired comparisons, ties): {seconds:.1f} s",
        "",
        table.to_string(index=False, float_format=lambda v: f"{v:.4g}"),
        "",
        comparisons.to_string(index=False, float_format=lambda v: f"{v:.4g}"),
    ]
    (out / "summary.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
