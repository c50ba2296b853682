#!/bin/bash
# The Keras round trip on a trained model: train the reference LAYA architecture in Keras 3 (torch backend)
# on Fashion-MNIST, import it with `laya-eval import-keras` (no Keras there), compare logits on the first
# 1,000 test images, then `laya-eval faithfulness` on them. Needs keras and the Fashion-MNIST files
# (apt-get install dataset-fashion-mnist). Run from the repository root:
#   bash benchmarks/keras_acceptance.sh OUTDIR [EPOCHS]
set -euo pipefail
EPOCHS=${2:-3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "${1:-keras-acceptance}"
OUT=$(cd "${1:-keras-acceptance}" && pwd)
export KERAS_BACKEND=torch KERAS_HOME=${KERAS_HOME:-$OUT/keras-home}
echo "== $(date -u)  $(nproc --all) cores, $(uname -m), load $(cut -d' ' -f1-3 /proc/loadavg)"
python - "$OUT/fmnist.npz" <<'PY'
import sys, numpy as np, laya_eval
splits = {s: laya_eval.load_dataset("fashion-mnist", s) for s in ("train", "val", "test")}
np.savez(sys.argv[1], **{f"{k}_{s}": (d.x.reshape(len(d), -1).numpy() if k == "x" else d.y.numpy())
                         for s, d in splits.items() for k in ("x", "y")})
print("fashion-mnist:", {s: len(d) for s, d in splits.items()})
PY
python "$ROOT/benchmarks/keras_reference_train.py" "$OUT" "$OUT/fmnist.npz" "$EPOCHS"
laya-eval import-keras "$OUT/laya.keras" --input-shape 1,28,28 --out "$OUT/laya.pt"
laya-eval import-keras "$OUT/laya.weights.h5" --input-shape 1,28,28 --out "$OUT/laya-weights-only.pt"
python - "$OUT" <<'PY'
import sys, numpy as np, torch, laya_eval
out = sys.argv[1]
keras_logits = np.load(f"{out}/logits.npy")
x = laya_eval.load_dataset("fashion-mnist", "test").x[:1000]
for name in ("laya.pt", "laya-weights-only.pt"):
    with torch.no_grad():
        got = laya_eval.load_model(f"{out}/{name}").model(x).numpy()
    diff = np.abs(got - keras_logits)
    print(f"{name}: max |logit difference| {diff.max():.3g} (mean {diff.mean():.3g}) over {diff.size} logits "
          f"of 1000 images, largest |logit| {np.abs(keras_logits).max():.3g}; same prediction on "
          f"{int((got.argmax(1) == keras_logits.argmax(1)).sum())}/1000")
PY
laya-eval --threads 1 faithfulness "$OUT/laya.pt" --data fashion-mnist --limit 1000 --out "$OUT/faithfulness" -q
echo "== done $(date -u), load $(cut -d' ' -f1-3 /proc/loadavg)"
