"""Reference audits of depth mixers on text: DenseFormer-style and AttnRes-style token classifiers trained on
Rotten Tomatoes through ``laya-eval train``'s path, then every mixer audited (does mass predict effect?).

    LAYA_EVAL_THREADS=1 PYTHONPATH=.:cli python benchmarks/mixers_text.py --out benchmarks/results/mixers

Equivalent to ``laya-eval --threads 1 train --dataset rotten-tomatoes --backbone KIND --epochs 8 --patience 2
--lr 0.002 --batch-size 64 --seed 0 --out text-KIND.pt`` and ``laya-eval --threads 1 mixers text-KIND.pt --data
rotten-tomatoes --limit 300 --batch-size 100 --ig-steps 32 --removal REMOVAL``. Writes ``OUT/text-KIND-REMOVAL/``
(the audit folders) and ``OUT/text-results.json`` (accuracy, wall times, options, summaries); the trained
models go to ``--models`` (not committed: the command rebuilds them byte for byte).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from laya_eval.mixers.audit import MixerOptions, audit_mixers
from laya_eval.mixers.reference import KINDS, save_mixer_model
from laya_eval.mixers.training import train_mixer_model
from laya_eval.output.files import atomic_write_text
from laya_eval.output.origin import provenance
from laya_eval.training.trainer import TrainOptions

SUMMARY = [
    "mixer",
    "method",
    "n",
    "n_undefined",
    "faithfulness",
    "faithfulness_ci_low",
    "faithfulness_ci_high",
    "deletion_at_1",
    "deletion_at_1_ci_low",
    "deletion_at_1_ci_high",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results/mixers")
    parser.add_argument("--models", default="mixer-models")
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    parser.add_argument("--removals", nargs="+", default=["weight", "mean"], choices=["weight", "mean", "resample"])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--limit", type=int, default=300)
    parser.add_argument("--ig-steps", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    out, models = Path(args.out), Path(args.models)
    out.mkdir(parents=True, exist_ok=True)
    models.mkdir(parents=True, exist_ok=True)
    options = TrainOptions(epochs=args.epochs, batch_size=64, lr=0.002, patience=2, seed=args.seed)
    results = {
        "options": vars(args),
        "train": {"epochs": args.epochs, "batch_size": 64, "lr": 0.002, "patience": 2},
        **provenance(),
        "models": {},
    }
    for kind in args.kinds:
        start = time.perf_counter()
        fit = train_mixer_model(kind, "rotten-tomatoes", options=options)
        entry = {
            **fit.info,
            "vocabulary_size": len(fit.model.config["vocabulary"]),
            "train_seconds": round(time.perf_counter() - start, 1),
            "audits": {},
        }
        path = save_mixer_model(fit.model, models / f"text-{kind}.pt", info=fit.info)
        print(kind, f"test accuracy {fit.metrics['test_accuracy']:.4f}", entry["train_seconds"], "s", flush=True)
        for removal in args.removals:
            start = time.perf_counter()
            audit = audit_mixers(
                str(path),
                "rotten-tomatoes",
                out=out / f"text-{kind}-{removal}",
                options=MixerOptions(
                    removal=removal, limit=args.limit, batch_size=100, seed=args.seed, ig_steps=args.ig_steps
                ),
            )
            entry["audits"][removal] = {
                "seconds": round(time.perf_counter() - start, 1),
                "summary": audit.summary[SUMMARY].to_dict("records"),
            }
            print(kind, removal, entry["audits"][removal]["seconds"], "s", flush=True)
            print(audit.summary[SUMMARY].to_string(index=False), flush=True)
        results["models"][kind] = entry
        atomic_write_text(out / "text-results.json", json.dumps(results, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
