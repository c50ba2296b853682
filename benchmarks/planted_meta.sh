#!/usr/bin/env bash
# `laya-eval meta` with the defaults (five planted families x 5 seeds, every method, the four head-scope
# ablations, the digits test split), one thread, timed with /usr/bin/time (CPU time: user + sys; the shared
# machine's load changes wall time, not CPU time). The result folder goes to $OUT/run (replaced whole), the
# printed tables and the timing to $OUT/stdout.txt and $OUT/time.txt; $OUT/README.md says what the run found.
# Not part of the test suite.
#
#   bash benchmarks/planted_meta.sh benchmarks/results/meta [extra meta options...]
#
# Environment: BIN (folder of the laya-eval entry point, default .venv/bin).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
OUT=${1:?usage: planted_meta.sh OUT [meta options]}
shift
mkdir -p "$OUT"
/usr/bin/time -v "$BIN/laya-eval" --threads 1 meta --seeds 5 --out "$OUT/run" -q "$@" \
    > "$OUT/stdout.txt" 2> "$OUT/time.txt"
grep -E "Elapsed|User time|System time|Maximum resident" "$OUT/time.txt"
