#!/usr/bin/env bash
# The committed report benchmarks/results/report-fmnist/: `laya-eval faithfulness` with every
# method on the four Fashion-MNIST MLP heads (seed 0, full test set of 10,000 images, gate
# ablation, head scope), then one `laya-eval report` over the four result folders.
#
# Checkpoints: $CELLS/fashion-mnist-mlp-{head}-seed0/fashion-mnist-mlp-{head}-seed0.pt, the cells of the
# paper reproduction's sweep (benchmarks/reproduce.py, --sweep-dir runs/reproduce/sweep).
# Run from anywhere: bash benchmarks/report_fmnist.sh (~4 min on 2 CPU cores with --threads 1, mostly IG).
# Not part of the test suite. STYLE=paper writes the figures for a paper (PDF, captions beside) into
# benchmarks/results/report-fmnist-paper/. With the faithfulness folders already there, the report alone:
#   laya-eval --threads 1 report runs/report-fmnist/{lastlayer,concat,scalarmix,laya} --out ... --title ...
# Last run (2026-12-01, 2 shared cores at load ~8): the checkpoints from `benchmarks/reproduce.py
# --settings fashion-mnist --seeds 0 --threads 1 --eval-limit 200 --bootstrap 100` (training as in the
# reproduction; the two limits only shorten its own scoring), faithfulness 36 / 56 / 106 / 49 s per head
# (accuracies 0.8983 / 0.8941 / 0.8912 / 0.8931, as in results/reproduce/runs.csv; the concat, scalarmix
# and laya checkpoints have the same sha256 as the previous report's, lastlayer differs because that one
# was trained with 2 threads then): faithfulness identical (max |difference| 0), Deletion@1 within 4.2e-5.
# Report regenerated 2026-12-01 (h-report: significance matrix) with the report-only command above on the
# same faithfulness folders (57.7 s wall, 417 MB peak RSS; paper style 65.6 s): every earlier file is
# byte-identical except report.md/.html (new section) and the paper faithfulness.pdf (PDF drawing
# commands differ: clip states; the PNG and caption are identical); new: significance.csv and figure.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
CELLS=${CELLS:-runs/reproduce/sweep/fashion-mnist/cells}
RUNS=${RUNS:-runs/report-fmnist}
STYLE=${STYLE:-default}
if [[ $STYLE == paper ]]; then  # PDF figures with captions beside; no HTML (its PNGs at 300 dpi are large)
  OUT=${OUT:-benchmarks/results/report-fmnist-paper}; EXTRA=(--no-html)
else
  OUT=${OUT:-benchmarks/results/report-fmnist}; EXTRA=()
fi

folders=()
for head in lastlayer concat scalarmix laya; do
  ckpt="$CELLS/fashion-mnist-mlp-$head-seed0/fashion-mnist-mlp-$head-seed0.pt"
  if [[ ! -f $ckpt ]]; then
    echo "missing $ckpt: train the four heads first (benchmarks/reproduce.py)" >&2
    exit 2
  fi
  /usr/bin/time -f "faithfulness $head: %e s wall, %M KB peak RSS" \
    "$BIN/laya-eval" --threads 1 faithfulness "$ckpt" --seed 0 --out "$RUNS/$head" --quiet
  folders+=("$RUNS/$head")
done
rm -rf "$OUT"
"$BIN/laya-eval" --threads 1 report "${folders[@]}" --out "$OUT" --style "$STYLE" "${EXTRA[@]}" \
  --title "Fashion-MNIST MLP, four heads (seed 0): how faithful are layer attributions?"
du -sh "$OUT"
