"""Summarise a `laya-eval prune` folder for a README: per (ranking, curve) under one ablation, the best method's
area with its interval, every method's paired difference to the best, and laya against random.

python benchmarks/prune_summary.py benchmarks/results/prune-fmnist [--ablation gate]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd


def _diff(c: pd.DataFrame, ranking: str, ablation: str, curve: str, a: str, b: str) -> tuple[float, float, float]:
    rows = c[(c.ranking == ranking) & (c.ablation == ablation) & (c.curve == curve)]
    hit = rows[(rows.method_a == a) & (rows.method_b == b)]
    if len(hit):
        r = hit.iloc[0]
        return r.auc_difference, r.ci_low, r.ci_high
    r = rows[(rows.method_a == b) & (rows.method_b == a)].iloc[0]
    return -r.auc_difference, -r.ci_high, -r.ci_low


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("folder", type=Path)
    p.add_argument("--ablation", default="gate")
    args = p.parse_args()
    s = pd.read_csv(args.folder / "pruning_summary.csv")
    c = pd.read_csv(args.folder / "pruning_comparisons.csv")
    for (ranking, curve), part in s[s.ablation == args.ablation].groupby(["ranking", "curve"], sort=False):
        methods = part[~part.method.isin(["oracle", "random"])].sort_values("auc", ascending=False)
        best = methods.iloc[0]
        print(f"{ranking:<8} {curve:<9} best {best.method} {best.auc:.4f} [{best.ci_low:.4f}, {best.ci_high:.4f}]")
        for m in methods.method.iloc[1:]:
            d = _diff(c, ranking, args.ablation, curve, best.method, m)
            print(f"    {best.method} - {m}: {d[0]:+.4f} [{d[1]:+.4f}, {d[2]:+.4f}]")
        for bound in ("random", "oracle"):
            if (part.method == bound).any() and (part.method == "laya").any():
                d = _diff(c, ranking, args.ablation, curve, "laya", bound)
                r = part[part.method == bound].iloc[0]
                print(
                    f"    {bound} {r.auc:.4f} [{r.ci_low:.4f}, {r.ci_high:.4f}]; laya - {bound}: "
                    f"{d[0]:+.4f} [{d[1]:+.4f}, {d[2]:+.4f}]"
                )


if __name__ == "__main__":
    main()
