#!/usr/bin/env bash
# Diagnosis from attention shift (issue 13, section 3): `laya-eval profile` on the Fashion-MNIST MLP+LAYA
# reference checkpoint (10,000 test inputs) and, if present, the frozen MiniLM+LAYA checkpoint (rotten-tomatoes
# test split). The main run is LAYA alpha with the defaults (reference = predicted class, Jensen-Shannon
# distance, leave-one-out references, 1000 stratified bootstrap resamples, seed 0); three context runs on
# Fashion-MNIST: the true class as reference (an analysis, not a deployable signal), the exact per-layer
# contribution (cosine distance of min-max scores) and the seeded random scores (chance baseline).
# Results: benchmarks/results/diagnosis-fmnist/, benchmarks/results/diagnosis-minilm/; wall times in each
# folder's time.txt. Not part of the test suite (about a minute on 1 thread).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
CKPT=${CKPT:-runs/ref/fmnist-mlp-laya-1337.pt}
MINILM=${MINILM:-runs/minilm-laya.pt}
RES=benchmarks/results
SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT

profile() {  # NAME OUTDIR ARGS...: one timed profile run; the wall time goes to OUTDIR/../time.txt
  local name=$1 out=$2; shift 2
  /usr/bin/time -f "$name: %e s wall, %M KB peak RSS" -a -o "$SCRATCH/time.txt" \
    "$BIN/laya-eval" --threads 1 profile "$@" --quiet --out "$out" | tee "$SCRATCH/$name.txt"
}

rm -rf "$RES/diagnosis-fmnist" && mkdir -p "$RES/diagnosis-fmnist"
profile laya "$RES/diagnosis-fmnist/laya" "$CKPT" --method laya
profile laya-by-label "$SCRATCH/by-label" "$CKPT" --method laya --reference-by label
profile contribution "$SCRATCH/contribution" "$CKPT" --method contribution
profile random "$SCRATCH/random" "$CKPT" --method random
for name in by-label contribution random; do
  mkdir -p "$RES/diagnosis-fmnist/$name"
  cp "$SCRATCH/$name/diagnosis_summary.csv" "$SCRATCH/$name/diagnosis.png" "$RES/diagnosis-fmnist/$name/"
done
cat "$SCRATCH"/laya.txt "$SCRATCH"/laya-by-label.txt "$SCRATCH"/contribution.txt "$SCRATCH"/random.txt \
  > "$RES/diagnosis-fmnist/output.txt"
mv "$SCRATCH/time.txt" "$RES/diagnosis-fmnist/time.txt"

if [ -f "$MINILM" ]; then
  rm -rf "$RES/diagnosis-minilm" && mkdir -p "$RES/diagnosis-minilm"
  LAYA_EVAL_DATA=${LAYA_EVAL_DATA:-.cache} HF_HUB_OFFLINE=1 profile laya "$RES/diagnosis-minilm/laya" "$MINILM" \
    --method laya > "$RES/diagnosis-minilm/output.txt"
  mv "$SCRATCH/time.txt" "$RES/diagnosis-minilm/time.txt"
fi
