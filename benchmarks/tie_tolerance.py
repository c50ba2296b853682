"""How far apart must two leave-one-layer-out effects be before float32 rounding cannot swap them?

Trains small digits MLPs (the test-suite recipe of ``tests/conftest.py``, several depths, every head and
several seeds) and the Fashion-MNIST reference MLP + LAYA (shorter training; skipped without the data), computes the leave-one-layer-out effects of every test input twice -- in float32 (the
model as trained) and in float64 (``copy.deepcopy(model).double()`` fed double hidden states) -- and
prints, relative to each sample's largest |effect| (in float64):

- ``abs_rounding_max``: the largest |e32_i - e64_i| over all samples (absolute: float32 probabilities
  carry an absolute error of about 1e-7, so the *relative* rounding grows as 1 / max_i |e_i|);
- ``rounding``: the largest |e32_i - e64_i| of the sample;
- ``median effect``: the median over samples of max_i |e64_i| (small when p_c saturates);
- ``flip gap``: for every pair of layers whose order differs between float32 and float64, their
  float64 gap |e64_i - e64_j|; a tolerance above every flip gap makes those pairs ties;
- for candidate tolerances: the share of samples with a pair flipped but not tied by the tolerance,
  and the share of samples in which float64 effects tie at that tolerance.

The default ``rtol`` of :func:`laya_eval.stats.tie_effects` is chosen from this output
(benchmarks/results/tie_tolerance.md). Run::

    PYTHONPATH=.:cli python benchmarks/tie_tolerance.py --threads 1 > benchmarks/results/tie_tolerance.txt
"""

from __future__ import annotations

import argparse
import copy
import itertools
import platform

import numpy as np
import torch

from laya_eval.data import load_dataset
from laya_eval.errors import LayaEvalError
from laya_eval.engine.removals import leave_one_out_masks, removal_effects
from laya_eval.models.trace import trace_from_hidden
from laya_eval.training.features import encode
from laya_eval.training.trainer import TrainOptions, build_model, train_in_place

HEADS = ("lastlayer", "concat", "scalarmix", "laya")
DEPTHS = {3: (64, 32, 16), 5: (64, 64, 32, 32, 16)}
CANDIDATES = (1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2)


def _model(head: str, widths, seed: int, epochs: int, splits):
    torch.manual_seed(seed)
    kwargs = {"d_star": 16, "scorer_hidden": 16} if head == "laya" else ({"d_star": 16} if head == "scalarmix" else {})
    model = build_model(
        "mlp", head, splits["train"], backbone_kwargs={"widths": list(widths)}, head_kwargs=kwargs, seed=seed
    )
    train_in_place(
        model, splits["train"], splits["val"], TrainOptions(epochs=epochs, seed=seed, batch_size=64, patience=epochs)
    )
    return model.eval()


def _effects(model, hidden, ablation: str) -> np.ndarray:
    tr = trace_from_hidden(model.head, hidden)
    fill = [h.mean(0) for h in hidden] if ablation == "mean" else None
    return removal_effects(tr, model, leave_one_out_masks(tr.n_layers), ablation=ablation, fill=fill).numpy()


def _flip_gaps(e32: np.ndarray, e64: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Relative float64 gap of every layer pair whose order float32 reverses (or ties)."""
    n_layers = e64.shape[1]
    gaps = []
    for i in range(n_layers):
        for j in range(i + 1, n_layers):
            s64, s32 = np.sign(e64[:, i] - e64[:, j]), np.sign(e32[:, i] - e32[:, j])
            flipped = (s64 != s32) & (s64 != 0)
            gaps.append(np.where(flipped, np.abs(e64[:, i] - e64[:, j]) / scale, np.nan))
    return np.stack(gaps, 1)  # (N, pairs)


def _measure(e32: np.ndarray, e64: np.ndarray) -> dict[str, float]:
    """Rounding, flips and ties of one model's effects, relative to each sample's largest float64 |effect|."""
    scale = np.abs(e64).max(1)
    ok = scale > 0
    e32, e64, scale = e32[ok], e64[ok], scale[ok]
    rounding = np.abs(e32 - e64).max(1) / scale
    gaps = _flip_gaps(e32, e64, scale)
    max_gap = np.max(np.where(np.isnan(gaps), -np.inf, gaps), 1)  # -inf: nothing flipped
    gap64 = np.diff(np.sort(e64, 1), axis=1) / scale[:, None]
    row = {
        "n_all_zero": float((~ok).sum()),
        "median_max_effect": float(np.median(scale)),
        "abs_rounding_max": float(np.abs(e32 - e64).max()),
        "min_max_effect": float(scale.min()),
        "rounding_q99": float(np.quantile(rounding, 0.99)),
        "rounding_max": float(rounding.max()),
        "share_flipped": float(np.mean(max_gap > -np.inf)),
        "flip_gap_max": float(max_gap.max()) if np.isfinite(max_gap).any() else 0.0,
    }
    for rtol in CANDIDATES:
        row[f"untied_flip@{rtol:g}"] = float(np.mean(max_gap > rtol))
        row[f"tied64@{rtol:g}"] = float(np.mean((gap64 <= rtol).any(1)))
    return row


def _fashion_mnist(epochs: int) -> list[dict]:
    """The reference MLP + LAYA (default backbone and head sizes, seed 1337), trained ``epochs`` epochs."""
    try:
        splits = {s: load_dataset("fashion-mnist", s) for s in ("train", "val", "test")}
    except LayaEvalError as err:
        print(f"# fashion-mnist skipped: {err}")
        return []
    model = build_model("mlp", "laya", splits["train"], seed=1337)
    train_in_place(model, splits["train"], splits["val"], TrainOptions(epochs=epochs, seed=1337, patience=epochs))
    model.eval()
    hidden = encode(model, splits["test"])
    model64, hidden64 = copy.deepcopy(model).double(), [h.double() for h in hidden]
    rows = []
    for ablation in ("gate", "zero"):
        e32 = _effects(model, hidden, ablation).astype(np.float64)
        e64 = _effects(model64, hidden64, ablation)
        row = {
            "data": "fashion-mnist",
            "L": model.n_layers,
            "epochs": epochs,
            "head": "laya",
            "seed": 1337,
            "ablation": ablation,
            **_measure(e32, e64),
        }
        rows.append(row)
        print(" ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument(
        "--epochs", default="4,60", help="training lengths; long training saturates p_c and shrinks the effects"
    )
    parser.add_argument(
        "--fashion-mnist-epochs",
        type=int,
        default=10,
        help="also the Fashion-MNIST reference MLP + LAYA trained this long (0: skip)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    splits = {s: load_dataset("digits", s) for s in ("train", "val", "test")}
    print(f"# torch {torch.__version__}, numpy {np.__version__}, {platform.machine()}, {args.threads} thread(s)")
    print(f"# digits test split, n = {len(splits['test'])}; rounding and flip gaps relative to max_i |e64_i|")
    rows = []
    for (depth, widths), epochs, head, seed in itertools.product(
        DEPTHS.items(), [int(e) for e in args.epochs.split(",")], HEADS, range(args.seeds)
    ):
        model = _model(head, widths, seed, epochs, splits)
        hidden = encode(model, splits["test"])
        model64, hidden64 = copy.deepcopy(model).double(), [h.double() for h in hidden]
        for ablation in ("gate", "zero"):
            e32 = _effects(model, hidden, ablation).astype(np.float64)
            e64 = _effects(model64, hidden64, ablation)
            row = {
                "data": "digits",
                "L": depth,
                "epochs": epochs,
                "head": head,
                "seed": seed,
                "ablation": ablation,
                **_measure(e32, e64),
            }
            rows.append(row)
            print(" ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()), flush=True)
    if args.fashion_mnist_epochs:
        rows += _fashion_mnist(args.fashion_mnist_epochs)
    print("# over all models and ablations:")
    for key in ("rounding_max", "flip_gap_max", "share_flipped"):
        print(f"# max {key} = {max(r[key] for r in rows):.3g}")
    for rtol in CANDIDATES:
        untied = max(r[f"untied_flip@{rtol:g}"] for r in rows)
        tied = np.mean([r[f"tied64@{rtol:g}"] for r in rows])
        print(
            f"# rtol={rtol:g}: worst share of samples with an untied float32 flip = {untied:.4f}; "
            f"mean share of samples with a float64 tie = {tied:.4f}"
        )


if __name__ == "__main__":
    main()
