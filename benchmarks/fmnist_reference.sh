#!/usr/bin/env bash
# Fashion-MNIST MLP + LAYA with the paper's reference protocol (seed 1337), then `laya-eval
# faithfulness` over the full test set with every method. Results: benchmarks/results/fmnist_mlp_laya.md
# and benchmarks/results/fmnist_mlp_laya_{summary,comparisons}.csv. Not part of the test suite (~5 min on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/fmnist-reference}
mkdir -p "$OUT"
BIN=${BIN:-.venv/bin}
/usr/bin/time -f "train: %e s wall, %M KB peak RSS" \
  "$BIN/laya-eval" train --dataset fashion-mnist --backbone mlp --head laya --seed 1337 --out "$OUT/fmnist-mlp-laya-1337.pt" --quiet
/usr/bin/time -f "faithfulness: %e s wall, %M KB peak RSS" \
  "$BIN/laya-eval" faithfulness "$OUT/fmnist-mlp-laya-1337.pt" --out "$OUT/faithfulness" --quiet
cp "$OUT/faithfulness/summary.csv" benchmarks/results/fmnist_mlp_laya_summary.csv
cp "$OUT/faithfulness/comparisons.csv" benchmarks/results/fmnist_mlp_laya_comparisons.csv
