#!/usr/bin/env bash
# The committed report benchmarks/results/report-fmnist-seeds/: statistics across seeds.
# Five Fashion-MNIST MLP + LAYA heads trained with the reference protocol (`laya-eval train`, seeds 0-4),
# `laya-eval faithfulness` with every method on each (full test set of 10,000 images, gate ablation, head
# scope, evaluation seed 0), then one `laya-eval report` over the five result folders and the committed
# sanity folder of the reference LAYA model (benchmarks/results/sanity-fmnist; a different checkpoint,
# seed 1337, named in its section).
#
# Run from anywhere: bash benchmarks/report_seeds.sh. Not part of the test suite. With the checkpoints
# and faithfulness folders already there (runs/report-seeds/), only the missing steps run.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
RUNS=${RUNS:-runs/report-seeds}
OUT=${OUT:-benchmarks/results/report-fmnist-seeds}
SANITY=${SANITY:-benchmarks/results/sanity-fmnist}
mkdir -p "$RUNS"

folders=()
for seed in 0 1 2 3 4; do
  ckpt="$RUNS/fmnist-mlp-laya-seed$seed.pt"
  if [[ ! -f $ckpt ]]; then
    /usr/bin/time -f "train seed $seed: %e s wall, %M KB peak RSS" \
      "$BIN/laya-eval" --threads 1 train --dataset fashion-mnist --backbone mlp --head laya --seed "$seed" \
      --out "$ckpt"
  fi
  if [[ ! -f $RUNS/seed$seed/summary.csv ]]; then
    /usr/bin/time -f "faithfulness seed $seed: %e s wall, %M KB peak RSS" \
      "$BIN/laya-eval" --threads 1 faithfulness "$ckpt" --seed 0 --out "$RUNS/seed$seed" --quiet
  fi
  folders+=("$RUNS/seed$seed")
done
rm -rf "$OUT"
/usr/bin/time -f "report: %e s wall, %M KB peak RSS" \
  "$BIN/laya-eval" --threads 1 report "${folders[@]}" "$SANITY" --out "$OUT" \
  --title "Fashion-MNIST MLP + LAYA, five training seeds: how faithful are layer attributions?"
du -sh "$OUT"
