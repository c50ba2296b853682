"""Fault injection over what laya-eval reads back: checkpoints, feature-cache entries, partial chunks and
result folders.

Usage::

    python benchmarks/fuzz_stores.py --checkpoints 600 --cache 800 --chunks 800 --results 300 --seed 0 --threads 1

Checkpoint mutants (``.pt`` and ``.safetensors``, ``tests/fuzzing.py``) go through ``laya-eval info``
and ``faithfulness`` in-process (click's CliRunner); cache and chunk faults (``tests/fuzz_stores.py``)
go through the feature cache and the partial-result store of ``--resume``; result-folder mutants (the
edits of ``tests/result_mutations.py`` on a small ``faithfulness`` folder, each with its manifest
re-hashed so that it still verifies) go through ``laya-eval report``. Writes ``fuzz_stores.json`` and
``fuzz_stores.md`` into ``--out`` (default ``benchmarks/results``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "cli")]
os.environ.setdefault("HF_HUB_OFFLINE", "1")

OUTCOMES = ["exit0", "exit2", "wrong", "traceback", "hang", "marker"]


def _checkpoints(n: int, seed: int, folder: Path, timeout: float) -> tuple[Counter, list]:
    from tests.fuzzing import MARKER, make_seeds, mutants, run_mutant

    seeds = make_seeds(folder / "seeds")
    marker, counts, failures, done = folder / MARKER, Counter(), [], 0
    for i, kind, mutation, data in mutants(seeds, 10**9, seed, str(folder / MARKER)):
        if done == n:
            break
        if kind not in ("pt", "safetensors"):
            continue
        outcome, detail = run_mutant(kind, data, seeds, folder / "case", timeout)
        if marker.exists():
            outcome, detail = "marker", "a planted payload ran"
            marker.unlink()
        counts[(kind, outcome)] += 1
        done += 1
        if outcome not in ("exit0", "exit2") and len(failures) < 20:
            failures.append((kind, outcome, f"#{i} {mutation}: {detail}"))
    return counts, failures


def _report_outcome(folder: Path, out: Path, timeout: float) -> tuple[str, str]:
    """``laya-eval report`` on one edited folder: exit 0 with a report.md, or exit 2 with one ``Error:`` line that
    names the folder; anything else is ``wrong`` (another message or no report) or ``traceback``."""
    from click.testing import CliRunner

    from laya_eval_cli.main import cli
    from tests.fuzzing import CaseTimeout, time_limit

    try:
        with time_limit(timeout):
            result = CliRunner().invoke(
                cli, ["report", str(folder), "--out", str(out), "--no-html", "--max-points", "5"], catch_exceptions=True
            )
    except CaseTimeout:
        return "hang", "report"
    if isinstance(result.exception, CaseTimeout):
        return "hang", "report"
    escaped = result.exception is not None and not isinstance(result.exception, SystemExit)
    if escaped or result.exit_code not in (0, 2) or "Traceback" in result.output:
        detail = repr(result.exception)[:200] if escaped else result.output[-300:]
        return "traceback", f"exit {result.exit_code}: {detail}"
    if result.exit_code == 0:
        return ("exit0", "") if (out / "report.md").is_file() else ("wrong", "exit 0 without report.md")
    errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    if len(errors) == 1 and str(folder) in errors[0]:
        return "exit2", ""
    return "wrong", f"an error that is not one line naming the folder: {result.output[-200:]!r}"


def _results(n: int, seed: int, folder: Path, timeout: float) -> tuple[Counter, list]:
    """``n`` edited and re-hashed copies of one result folder through ``report`` (the edits cycle through
    ``tests.result_mutations.mutations()``, each drawn with its own seed)."""
    import shutil

    import numpy as np

    from tests.fuzzing import make_seeds
    from tests.result_mutations import mutations, rehash

    seeds = make_seeds(folder / "seeds")
    template = folder / "run"
    _, detail = _faithfulness_folder(seeds.models["digits"], template)
    if detail:
        raise SystemExit(f"the result folder to mutate could not be made: {detail}")
    cases, counts, failures = mutations(), Counter(), []
    for i in range(n):
        name, edit = cases[i % len(cases)]
        case, out = folder / "case" / "run", folder / "case" / "report"
        shutil.rmtree(folder / "case", ignore_errors=True)
        shutil.copytree(template, case)
        edit(case, np.random.default_rng([seed, i]))
        rehash(case)
        outcome, detail = _report_outcome(case, out, timeout)
        counts[("results", outcome)] += 1
        if outcome not in ("exit0", "exit2") and len(failures) < 20:
            failures.append(("results", outcome, f"#{i} {name}: {detail}"))
    return counts, failures


def _faithfulness_folder(checkpoint: Path, out: Path) -> tuple[str, str]:
    from tests.fuzzing import _cli

    return _cli(
        [
            "faithfulness",
            checkpoint,
            "--data",
            "digits",
            "--limit",
            "24",
            "--methods",
            "contribution,grad_x_act,random",
            "--bootstrap",
            "100",
            "--out",
            out,
            "--quiet",
        ]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoints", type=int, default=600)
    parser.add_argument("--cache", type=int, default=800)
    parser.add_argument("--chunks", type=int, default=800)
    parser.add_argument("--results", type=int, default=300, help="Edited result folders read by `report`.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=20.0, help="Seconds per case before it counts as a hang.")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args()

    import torch

    from tests.fuzz_stores import fuzz_stores

    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="laya-fuzz-stores-") as folder:
        counts, failures = _checkpoints(args.checkpoints, args.seed, Path(folder) / "ckpt", args.timeout)
        stores = fuzz_stores(args.cache, args.chunks, args.seed, Path(folder) / "stores", timeout=args.timeout)
        results, result_failures = _results(args.results, args.seed, Path(folder) / "results", args.timeout)
    counts.update(stores.by_store)
    counts.update(results)
    failures += stores.failures + result_failures
    seconds = time.perf_counter() - start
    command = (
        f"python benchmarks/fuzz_stores.py --checkpoints {args.checkpoints} --cache {args.cache} "
        f"--chunks {args.chunks} --results {args.results} --seed {args.seed} --threads {args.threads} --timeout {args.timeout:g}"
    )
    machine = (
        f"{os.cpu_count()} CPU cores ({platform.processor() or platform.machine()}), "
        f"load average {', '.join(f'{x:.2f}' for x in os.getloadavg())} at the end; "
        f"Python {platform.python_version()}, torch {torch.__version__}"
    )
    totals = Counter()
    for (_, outcome), v in counts.items():
        totals[outcome] += v
    result = {
        "command": command,
        "machine": machine,
        "seconds": round(seconds, 1),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cases": sum(totals.values()),
        "counts": dict(sorted(totals.items())),
        "by_store": {f"{k}/{o}": v for (k, o), v in sorted(counts.items())},
        "failures": [list(f) for f in failures],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fuzz_stores.json").write_text(json.dumps(result, indent=2) + "\n")
    stores_seen = sorted({k for k, _ in counts})
    lines = [
        f"# Faults in checkpoints, feature caches, partial chunks and result folders: {result['cases']} cases",
        "",
        f"Generated by `{command}` on {result['date']} ({seconds / 60:.1f} min).",
        "",
        f"Machine: {machine}.",
        "",
        "Outcomes: `exit0` = exit 0 (checkpoints; result folders: with a report written) or a result equal "
        "to a fresh computation (caches, chunks: the damage was caught and the work redone, or the fault "
        "changed nothing); `exit2` = a one-line `Error:` (result folders: naming the edited folder); `wrong` = "
        "a result that differs from a fresh computation (a damaged entry trusted), or for result folders an "
        "error that is not one line naming the folder; `traceback` = any other exit or escaping exception; "
        f"`hang` = past {args.timeout:g} s; `marker` = code ran (a planted pickle payload wrote its file).",
        "",
        "Result folders: the edits of `tests/result_mutations.py` (a cell set to text, empty, nan, inf, "
        "a fraction, ...; a column dropped; rows dropped, duplicated or shuffled; bad `layer_names`) cycled "
        "over a small `faithfulness` folder, each with its manifest re-hashed, read by `laya-eval report`.",
        "",
        "| store | " + " | ".join(OUTCOMES) + " |",
        "|---|" + "---:|" * len(OUTCOMES),
    ]
    for store in stores_seen:
        lines.append(f"| {store} | " + " | ".join(str(counts[(store, o)]) for o in OUTCOMES) + " |")
    lines.append("| **all** | " + " | ".join(f"**{totals[o]}**" for o in OUTCOMES) + " |")
    if failures:
        lines += ["", "First failures (store, outcome, detail):", ""] + [f"- {f}" for f in failures]
    (args.out / "fuzz_stores.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if sum(totals[o] for o in ("wrong", "traceback", "hang", "marker")) == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
