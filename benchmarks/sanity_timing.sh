#!/usr/bin/env bash
# `laya-eval sanity` against one full `laya-eval faithfulness` run of the same checkpoint, side by side,
# in CPU time (user + sys from /usr/bin/time; the shared machine's load changes wall time, not CPU time).
# Writes the sanity result to a temporary folder and copies its files into $OUT (a benchmark folder also
# holds its README and older runs, which a result folder, replaced whole, may not); the faithfulness
# folder goes to a temporary folder, then is removed. Prints one line per run: wall, user, sys, peak RSS.
# Not part of the test suite.
#
#   bash benchmarks/sanity_timing.sh CKPT OUT [extra sanity options...]
#   e.g. DATA_DIR=/work/main/.cache bash benchmarks/sanity_timing.sh runs/ref/fmnist-mlp-laya-1337.pt \
#            benchmarks/results/sanity-fmnist
#
# Environment: BIN (folder of the laya-eval entry point, default .venv/bin), DATA_DIR (--data-dir).
# Results and the machine they were measured on: benchmarks/results/sanity-*/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
CKPT=${1:?usage: sanity_timing.sh CKPT OUT [sanity options]}
OUT=${2:?usage: sanity_timing.sh CKPT OUT [sanity options]}
shift 2
DATA=()
if [[ -n ${DATA_DIR:-} ]]; then DATA=(--data-dir "$DATA_DIR"); fi
FORMAT="%e s wall, %U s user, %S s sys, %M KB peak RSS"

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
/usr/bin/time -f "faithfulness: $FORMAT" \
  "$BIN/laya-eval" --threads 1 faithfulness "$CKPT" "${DATA[@]}" --out "$TMP/faithfulness" --quiet > /dev/null
/usr/bin/time -f "sanity: $FORMAT" \
  "$BIN/laya-eval" --threads 1 sanity "$CKPT" "${DATA[@]}" --out "$TMP/sanity" --quiet "$@"
mkdir -p "$OUT"
cp "$TMP"/sanity/* "$OUT"/
