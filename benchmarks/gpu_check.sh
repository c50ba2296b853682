#!/usr/bin/env bash
# One pass over every CUDA path, for a machine with one NVIDIA GPU (< 8 min): the speed benchmark on the GPU,
# the Fashion-MNIST reference evaluation with --device cuda (float32 and --dtype bfloat16), sanity and prune
# with --device cuda, a torchrun run over NCCL, and next-token leave-one-out of a 16-block Llama in bfloat16. Figures and logs go to benchmarks/results/gpu/ (OUT);
# every step prints its wall time and peak RSS and a summary line; a failed step is reported and the
# script goes on, exiting non-zero at the end.
#
#   bash benchmarks/gpu_check.sh            # BIN: folder of laya-eval/python (default .venv/bin)
#                                           # DATA_DIR: where fashion-mnist lies (default: the system folders)
#                                           # CKPT: a reference checkpoint (default: trained here on the GPU)
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
OUT=${OUT:-benchmarks/results/gpu}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$OUT"
LOG="$OUT/gpu_check.log"
: > "$LOG"
DATA=()
if [[ -n ${DATA_DIR:-} ]]; then DATA=(--data-dir "$DATA_DIR"); fi
FAILED=0
export LAYA_EVAL_THREADS=${LAYA_EVAL_THREADS:-4}

step() {  # step NAME SECONDS COMMAND...: run with a time limit, log its output and its cost
  local name=$1 limit=$2
  shift 2
  echo "== $name" | tee -a "$LOG"
  if timeout "$limit" /usr/bin/time -f "$name: %e s wall, %M KB peak RSS" "$@" >> "$LOG" 2>&1; then
    tail -n 1 "$LOG"
  else
    echo "$name: FAILED (exit $?; see $LOG)" | tee -a "$LOG"
    FAILED=1
  fi
}

{
  date -u +"%Y-%m-%d %H:%M UTC"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  "$BIN/python" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'gpus', torch.cuda.device_count())"
  git rev-parse --short HEAD
} | tee "$OUT/machine.txt" | tee -a "$LOG"

CKPT=${CKPT:-$WORK/fmnist-mlp-laya-1337.pt}
if [[ ! -f $CKPT ]]; then
  step train 150 "$BIN/laya-eval" train --dataset fashion-mnist --backbone mlp --head laya --seed 1337 \
    "${DATA[@]}" --device cuda --out "$CKPT" --quiet
fi
step speed 150 "$BIN/python" benchmarks/bench_speed.py --quick --device cuda --cases a_fmnist_mlp,c_cnn \
  --out "$OUT/speed" --note "gpu_check.sh"
step faithfulness-cuda 60 "$BIN/laya-eval" faithfulness "$CKPT" "${DATA[@]}" --device cuda \
  --ablation gate,zero,mean --out "$OUT/faithfulness-cuda" --quiet
step faithfulness-cuda-bf16 60 "$BIN/laya-eval" faithfulness "$CKPT" "${DATA[@]}" --device cuda --dtype bfloat16 \
  --ablation gate,zero,mean --out "$OUT/faithfulness-cuda-bf16" --quiet
step sanity-cuda 90 "$BIN/laya-eval" sanity "$CKPT" "${DATA[@]}" --device cuda --limit 2000 --roar-seeds 1 \
  --epochs 5 --out "$OUT/sanity-cuda" --quiet
step prune-cuda 90 "$BIN/laya-eval" prune "$CKPT" "${DATA[@]}" --device cuda --limit 2000 --seeds 1 \
  --epochs 5 --out "$OUT/prune-cuda" --quiet
step torchrun-nccl 60 "$BIN/python" -m torch.distributed.run --standalone --nproc-per-node 1 -m laya_eval_cli \
  faithfulness "$CKPT" "${DATA[@]}" --device cuda --limit 2000 --ablation gate,mean --out "$WORK/t1" --quiet
# one process on the GPU against torchrun: the same tables (one rank over NCCL covers every sample)
step faithfulness-cuda-2000 60 "$BIN/laya-eval" faithfulness "$CKPT" "${DATA[@]}" --device cuda --limit 2000 \
  --ablation gate,mean --out "$WORK/p1" --quiet
for a in gate mean; do
  for f in layers samples summary comparisons; do
    if cmp -s "$WORK/t1/$a/$f.csv" "$WORK/p1/$a/$f.csv"; then r=same; else r=DIFF; FAILED=1; fi
    echo "torchrun vs one process: $a/$f.csv $r" | tee -a "$LOG"
  done
done
# network scope at a language model's width in bfloat16: next-token leave-one-out (skip) of a 16-block GQA Llama
# against a hand prefix loop and Captum (benchmarks/bench_lm_layers.py; lm_layers_cuda_bfloat16.md)
step lm-layers-cuda-bf16 240 "$BIN/python" benchmarks/bench_lm_layers.py --device cuda --dtype bfloat16 --reps 3 \
  --captum-reps 1 --out "$OUT"
echo "gpu_check: $([[ $FAILED = 0 ]] && echo all steps passed || echo some steps FAILED)" | tee -a "$LOG"
exit $FAILED
