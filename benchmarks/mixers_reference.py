"""Reference audits of depth mixers: a DenseFormer-style and an AttnRes-style patch transformer trained on
Fashion-MNIST, then every mixer audited (does mass predict the effect of removing a source?).

    PYTHONPATH=.:cli python benchmarks/mixers_reference.py --out benchmarks/results/mixers

Writes ``OUT/KIND.pt`` (the trained model), ``OUT/KIND-REMOVAL/`` (the audit folder: sources, samples,
summary, comparisons, map, manifest, map.png) and ``OUT/results.json`` (accuracy, wall times, options).

``py:benchmarks/mixers_reference.py:reference_model`` returns the model of the file named by ``LAYA_MIXER_MODEL``
(``OUT/KIND.pt``) for ``laya-eval fit-head --layers "block_states.*" --pool flatten``: a LAYA head over its
blocks' states, evaluated by ``laya-eval faithfulness`` (benchmarks/residual_models.sh).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

from laya_eval.data import load_dataset
from laya_eval.mixers.audit import MixerOptions, audit_mixers
from laya_eval.mixers.reference import KINDS, accuracy, fit_mixer_model, load_mixer_model, save_mixer_model
from laya_eval.output.files import atomic_write_text
from laya_eval.output.origin import provenance


def reference_model() -> torch.nn.Module:
    """The classifier of the mixer model file ``LAYA_MIXER_MODEL`` (eval mode)."""
    path = os.environ.get("LAYA_MIXER_MODEL")
    if not path:
        raise RuntimeError("set LAYA_MIXER_MODEL to a file `python benchmarks/mixers_reference.py` wrote")
    return load_mixer_model(path)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results/mixers")
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    parser.add_argument(
        "--removals", nargs="*", default=["weight", "mean"], choices=["weight", "mean"], help="none: train only"
    )
    parser.add_argument("--n-train", type=int, default=12000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--limit", type=int, default=300)
    parser.add_argument("--ig-steps", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    train, test = load_dataset("fashion-mnist", "train"), load_dataset("fashion-mnist", "test")
    results = {"options": vars(args), **provenance(), "models": {}}
    for kind in args.kinds:
        start = time.perf_counter()
        model = fit_mixer_model(
            kind, train.x[: args.n_train], train.y[: args.n_train], epochs=args.epochs, seed=args.seed
        )
        train_s = time.perf_counter() - start
        acc = accuracy(model, test.x, test.y)
        info = {
            "dataset": "fashion-mnist",
            "n_train": args.n_train,
            "epochs": args.epochs,
            "seed": args.seed,
            "test_accuracy": acc,
            "n_test": len(test),
        }
        save_mixer_model(model, out / f"{kind}.pt", info=info)
        entry = {**info, "train_seconds": round(train_s, 1), "audits": {}}
        for removal in args.removals:
            start = time.perf_counter()
            options = MixerOptions(
                removal=removal, limit=args.limit, batch_size=100, seed=args.seed, ig_steps=args.ig_steps
            )
            audit = audit_mixers(
                str(out / f"{kind}.pt"), "fashion-mnist", out=out / f"{kind}-{removal}", options=options
            )
            cols = [
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
            entry["audits"][removal] = {
                "seconds": round(time.perf_counter() - start, 1),
                "summary": audit.summary[cols].to_dict("records"),
            }
            print(kind, removal, f"accuracy {acc:.4f}", entry["audits"][removal]["seconds"], "s", flush=True)
            print(audit.summary[cols].to_string(index=False), flush=True)
        results["models"][kind] = entry
        atomic_write_text(out / "results.json", json.dumps(results, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
