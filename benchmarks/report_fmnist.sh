#!/usr/bin/env bash
# The committed report benchmarks/results/report-fmnist/: `laya-eval faithfulness` with every
# method on the four Fashion-MNIST MLP heads (seed 0, full test set of 10,000 images, gate
# ablation, head scope), then one `laya-eval report` over the four result folders.
#
# Checkpoints: $CKPT_DIR/fashion-mnist-mlp-{lastlayer,concat,scalarmix,laya}-seed0.pt, written by
# the paper reproduction (benchmarks/reproduce.py, --ckpt-dir runs/reproduce/ckpt).
# Run from anywhere: bash benchmarks/report_fmnist.sh (~10 min on 2 CPU cores, mostly IG).
# Not part of the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
CKPT_DIR=${CKPT_DIR:-runs/reproduce/ckpt}
RUNS=${RUNS:-runs/report-fmnist}
OUT=${OUT:-benchmarks/results/report-fmnist}

folders=()
for head in lastlayer concat scalarmix laya; do
  ckpt="$CKPT_DIR/fashion-mnist-mlp-$head-seed0.pt"
  if [[ ! -f $ckpt ]]; then
    echo "missing $ckpt: train the four heads first (benchmarks/reproduce.py)" >&2
    exit 2
  fi
  /usr/bin/time -f "faithfulness $head: %e s wall, %M KB peak RSS" \
    "$BIN/laya-eval" faithfulness "$ckpt" --seed 0 --out "$RUNS/$head" --quiet
  folders+=("$RUNS/$head")
done
rm -rf "$OUT"
"$BIN/laya-eval" report "${folders[@]}" --out "$OUT" \
  --title "Fashion-MNIST MLP, four heads (seed 0): how faithful are layer attributions?"
du -sh "$OUT"
