#!/usr/bin/env bash
# Same seed, same bytes: faithfulness CSVs for batch sizes 1/7/256, 1/2/3 processes (N = 301, divisible by
# neither 2 nor 3) and kill -9 at three points followed by --resume, all compared byte for byte with one
# uninterrupted run. Usage: bash benchmarks/invariance_check.sh [WORKDIR]   (~2 min on 2 cores)
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
W=${1:-/tmp/laya-invariance}; mkdir -p "$W"; cd "$W"; rm -rf ref b1 b7 t2 t3 killed
L=$ROOT/.venv/bin/laya-eval; PY=$ROOT/.venv/bin/python
C=$W/laya.pt
LAYA_EVAL_THREADS=1 $L train --dataset digits --backbone mlp --head laya --seed 0 --epochs 5 --out "$C" --quiet
COMMON="--limit 301 --ablation gate,mean --bootstrap 200 --quiet"
export LAYA_EVAL_THREADS=1 OMP_NUM_THREADS=1
$L faithfulness $C $COMMON --batch-size 256 --out ref > /dev/null && echo "ref done"
$L faithfulness $C $COMMON --batch-size 1 --out b1 > /dev/null && echo "b1 done"
$L faithfulness $C $COMMON --batch-size 7 --out b7 > /dev/null && echo "b7 done"
$PY -m torch.distributed.run --standalone --nproc-per-node 2 -m laya_eval_cli faithfulness $C $COMMON --out t2 | tail -1
$PY -m torch.distributed.run --standalone --nproc-per-node 3 -m laya_eval_cli faithfulness $C $COMMON --out t3 | tail -1
# kill -9 at three points: while the statistics pass runs (no chunk yet), after 3 chunks, after 7 chunks
resume=""
for target in 0 3 7; do
  $L faithfulness $C $COMMON --batch-size 16 --chunk-size 32 --out killed $resume > /dev/null 2>&1 &
  pid=$!
  while true; do
    n=$(ls killed/.partial/chunk-*.npz 2>/dev/null | wc -l)
    if [ "$target" = 0 ]; then sleep 2.5; break; fi
    [ "$n" -ge "$target" ] && break
    sleep 0.05
  done
  kill -9 $pid; wait $pid 2>/dev/null
  echo "killed at target $target: chunks=$(ls killed/.partial/chunk-*.npz 2>/dev/null | wc -l) stats=$(ls killed/.partial/statistics.npz 2>/dev/null | wc -l) result=$(ls killed/gate 2>/dev/null | wc -l)"
  resume="--resume"
done
$L faithfulness $C $COMMON --batch-size 16 --chunk-size 32 --out killed --resume > /dev/null && echo "resumed to the end; partial left: $(ls -d killed/.partial 2>/dev/null | wc -l)"
for d in b1 b7 t2 t3 killed; do for a in gate mean; do for f in layers samples summary comparisons; do
  cmp -s ref/$a/$f.csv $d/$a/$f.csv && r=same || r=DIFF; echo "$d/$a/$f.csv $r"; done; done; done | sort | uniq -c | awk '{print}' 
