#!/usr/bin/env bash
# Diagnosis from attention shift: `laya-eval profile` on the Fashion-MNIST MLP+LAYA
# reference checkpoint (10,000 test inputs) and, if present, the frozen MiniLM+LAYA checkpoint (rotten-tomatoes
# test split). The main run is LAYA alpha with the defaults (reference = predicted class, Jensen-Shannon
# distance, leave-one-out references, 1000 stratified bootstrap resamples, seed 0); three context runs on
# Fashion-MNIST: the true class as reference (an analysis, not a deployable signal), the exact per-layer
# contribution (cosine distance of min-max scores) and the seeded random scores (chance baseline); on MiniLM
# the true-class reference as context.
# Results: benchmarks/results/diagnosis-fmnist/, benchmarks/results/diagnosis-minilm/; wall times in each
# folder's time.txt. FAITH=DIR (a faithfulness run of CKPT) adds the 1 - confidence yardstick.
# Not part of the test suite (about 6 minutes on 1 thread, MiniLM's encoder passes most of it).
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

# The runs' own files are replaced; each folder's README.md (written by hand from them) is kept.
F="$RES/diagnosis-fmnist"
rm -rf "$F/laya" "$F/by-label" "$F/contribution" "$F/random" "$F/output.txt" "$F/time.txt" && mkdir -p "$F"
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
if [ -n "${FAITH:-}" ]; then  # a faithfulness run of the same checkpoint: 1 - confidence as the yardstick
  "$BIN/python" benchmarks/diagnosis_confidence.py "$FAITH" "$F/laya" > "$F/confidence_baseline.md"
fi

if [ -f "$MINILM" ]; then
  M="$RES/diagnosis-minilm"
  rm -rf "$M/laya" "$M/by-label" "$M/output.txt" "$M/time.txt" && mkdir -p "$M"
  export LAYA_EVAL_DATA=${LAYA_EVAL_DATA:-.cache} HF_HUB_OFFLINE=1
  profile laya "$RES/diagnosis-minilm/laya" "$MINILM" --method laya > "$RES/diagnosis-minilm/output.txt"
  profile laya-by-label "$SCRATCH/minilm-by-label" "$MINILM" --method laya --reference-by label \
    >> "$RES/diagnosis-minilm/output.txt"
  mkdir -p "$RES/diagnosis-minilm/by-label"
  cp "$SCRATCH/minilm-by-label/diagnosis_summary.csv" "$SCRATCH/minilm-by-label/diagnosis.png" \
    "$RES/diagnosis-minilm/by-label/"
  mv "$SCRATCH/time.txt" "$RES/diagnosis-minilm/time.txt"
fi
