"""Network scope on a CNN with real widths within its memory budget: EfficientNet-Lite0 (16 MBConv blocks, expansion
x6, up to 1,152 channels inside a block) over 64x64x3 inputs with a LAYA head, `faithfulness --ablation zero`.

    python benchmarks/bench_network_memory.py --n 64 --ig-steps 8 --threads 1 --reps 3 --other-budgets 1024,4096

The model is ``py:benchmarks/efficientnet_lite0.py:efficientnet_lite0_laya`` (random, seeded weights; a random
LAYA head built with it); the inputs are uniform random images with random labels, written as an ``.npz`` (its
``x_test`` holds exactly ``--n`` inputs) into a temporary folder. Each route is one ``laya-eval`` process, started
fresh, run through this script's ``--child`` mode: the command runs in-process while a thread reads the process's
resident set (``VmRSS``) every 20 ms and records the main thread's stack (``sys._current_frames``) at each new peak,
so the report says where the peak was reached. The parent reads the child's own resource usage (``os.wait4``): peak
RSS (``ru_maxrss``, the whole process: interpreter, torch, model, data, results), minor and major page faults, user
and system CPU seconds; wall seconds around it; the engine's own seconds are the "done in" the command prints.

Routes, each ``--reps`` times, the order rotating, the median (peak: the largest) reported:

network        ``--scope network --max-memory MB``, every method, IG with ``--ig-steps`` steps;
network_loo    the same without the methods that take gradients (ig, gradcam, grad_x_act, atp): leave-one-out and
               the deletion curves of the other methods;
head_loo       ``--scope head --no-cache`` with the methods of ``network_loo`` on the same inputs (the denominator
               of the leave-one-out ratio).

``--other-budgets 1024,4096`` adds the ``network`` route at those ``--max-memory`` values (``network@MB``). Each
route's peak is also given less the head-scope run's (``above_head_mb``): the part that network-scope work added to
the process, which is what ``--max-memory`` bounds.

``--library DIR`` runs the children on another checkout of laya-eval (its ``laya_eval`` and ``cli``) with this
script and model, to compare before and after a change. Writes ``network_memory.csv`` and ``network_memory.md`` into
``--out`` (default ``benchmarks/results``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MODEL = "py:benchmarks/efficientnet_lite0.py:efficientnet_lite0_laya"
GRADIENT_NEEDS = {"gradients", "network_gradients", "probability_gradients"}


def child(cli_args: list[str], report: Path) -> int:
    """Run ``laya-eval CLI_ARGS`` in this process, sampling VmRSS; write the sampled peak and its stack to
    ``report``."""
    import threading
    import traceback

    def rss_mb() -> float:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return 0.0

    main_id = threading.main_thread().ident
    peak = {"mb": 0.0, "at_s": 0.0, "stack": []}
    done = threading.Event()
    start = time.perf_counter()

    def sample() -> None:
        while not done.wait(0.02):
            mb = rss_mb()
            if mb > peak["mb"] + 8:  # a new peak: where is the main thread?
                frame = sys._current_frames().get(main_id)
                stack = traceback.extract_stack(frame) if frame is not None else []
                peak.update(
                    mb=mb, at_s=time.perf_counter() - start, stack=[f"{f.filename}:{f.lineno} {f.name}" for f in stack]
                )
            elif mb > peak["mb"]:
                peak["mb"] = mb

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    # the heavy imports before the clock starts: run_cpu_s is the command's own work
    import captum.attr  # noqa: F401
    import pandas  # noqa: F401
    import scipy.stats  # noqa: F401
    import torch  # noqa: F401

    import laya_eval  # noqa: F401
    import laya_eval.engine.evaluation  # noqa: F401
    from laya_eval_cli.main import cli

    code, cpu = 0, time.process_time()
    try:
        cli(args=cli_args, prog_name="laya-eval", standalone_mode=False)
    except SystemExit as exc:  # click's exit
        code = int(exc.code or 0)
    finally:
        peak["run_cpu_s"] = time.process_time() - cpu
        done.set()
        thread.join()
        report.write_text(json.dumps(peak))
    return code


def write_inputs(path: Path, n: int, seed: int = 0) -> None:
    """``n`` test inputs (and as many training inputs, which the runs do not read): uniform 64x64x3, labels 0-9."""
    rng = np.random.default_rng(seed)
    x = rng.random((2 * n, 3, 64, 64), dtype=np.float32)
    y = rng.integers(0, 10, 2 * n).astype(np.int64)
    np.savez(path, x_train=x[:n], y_train=y[:n], x_test=x[n:], y_test=y[n:])


def run(cli_args: list[str], threads: int, library: Path, tmp: Path, name: str) -> dict:
    """One fresh ``laya-eval`` process: its rusage, wall seconds, the engine's seconds, the sampled peak."""
    report = tmp / f"{name}.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(report), "--", "--threads", str(threads)]
    env = {**os.environ, "PYTHONPATH": f"{library}:{library / 'cli'}"}
    log = tmp / f"{name}.log"
    start = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen([*cmd, *cli_args], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    text = log.read_text()
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed ({proc.returncode}); see {log}:\n{text[-2000:]}")
    sampled = json.loads(report.read_text())
    return {
        "wall_s": wall,
        "engine_s": float(re.search(r"done in ([\d.]+) s", text).group(1)),
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "run_cpu_s": sampled["run_cpu_s"],
        "peak_rss_mb": usage.ru_maxrss / 1024,
        "minor_faults": usage.ru_minflt,
        "major_faults": usage.ru_majflt,
        "sampled_peak_mb": sampled["mb"],
        "peak_at_s": sampled["at_s"],
        "peak_stack": [_short(f) for f in sampled["stack"] if "laya_eval" in f or "captum" in f],
    }


def _short(frame: str) -> str:
    """A frame's path from its package folder on (``laya_eval/...``, ``captum/...``)."""
    return re.sub(r"^.*?/(?=(laya_eval|laya_eval_cli|captum|benchmarks)/)", "", frame)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=64, help="inputs of every run")
    parser.add_argument("--ig-steps", type=int, default=8, help="IG steps of the network route")
    parser.add_argument("--max-memory", type=int, default=2048, help="--max-memory of the network routes (MB)")
    parser.add_argument(
        "--other-budgets", default="", help="comma-separated --max-memory values (MB) of extra network routes"
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--library", type=Path, default=ROOT, help="the laya-eval checkout the runs import")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--note", default="")
    args = parser.parse_args()
    sys.path[:0] = [str(ROOT), str(ROOT / "cli")]
    from laya_eval.catalog import METHOD_SPECS

    methods = list(METHOD_SPECS)
    no_grad = [m for m, spec in METHOD_SPECS.items() if not GRADIENT_NEEDS & set(spec.needs)]
    load_start = os.getloadavg()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data = tmp / "images.npz"
        write_inputs(data, args.n)
        common = ["faithfulness", MODEL, "--data", f"npz:{data}", "--ablation", "zero", "--limit", str(args.n), "-q"]
        network = ["--scope", "network", "--max-memory", str(args.max_memory)]
        routes = {
            "network": [*common, "--methods", ",".join(methods), "--ig-steps", str(args.ig_steps), *network],
            "network_loo": [*common, "--methods", ",".join(no_grad), *network],
            "head_loo": [*common, "--methods", ",".join(no_grad), "--scope", "head", "--no-cache"],
        }
        budgets = {"network": args.max_memory, "network_loo": args.max_memory}
        for mb in (int(v) for v in args.other_budgets.split(",") if v):
            routes[f"network@{mb}"] = [
                *routes["network"][: -len(network)],
                "--scope",
                "network",
                "--max-memory",
                str(mb),
            ]
            budgets[f"network@{mb}"] = mb
        got: dict[str, list[dict]] = {r: [] for r in routes}
        order = list(routes)
        for rep in range(args.reps):
            for route in order[rep % len(order) :] + order[: rep % len(order)]:
                out = ["--out", str(tmp / f"out-{route}")]
                res = run([*routes[route], *out], args.threads, args.library.resolve(), tmp, f"{route}-{rep}")
                got[route].append(res)
                brief = {k: v for k, v in res.items() if k != "peak_stack"}
                print(f"[{time.strftime('%H:%M:%S')}] {route}: {brief}", file=sys.stderr, flush=True)
    rows = []
    for route, cli_args in routes.items():
        runs = got[route]
        top = max(runs, key=lambda r: r["peak_rss_mb"])
        shown = " ".join(a if not a.startswith("npz:") else "npz:IMAGES.npz" for a in map(shlex.quote, cli_args))
        rows.append(
            {
                "route": route,
                "n": args.n,
                "engine_s": statistics.median(r["engine_s"] for r in runs),
                "cpu_s": statistics.median(r["cpu_s"] for r in runs),
                "run_cpu_s": statistics.median(r["run_cpu_s"] for r in runs),
                "wall_s": statistics.median(r["wall_s"] for r in runs),
                "peak_rss_mb": top["peak_rss_mb"],
                "budget_mb": budgets.get(route, float("nan")),
                "peak_x_budget": top["peak_rss_mb"] / budgets[route] if route in budgets else float("nan"),
                "minor_faults": statistics.median(r["minor_faults"] for r in runs),
                "major_faults": statistics.median(r["major_faults"] for r in runs),
                "peak_at_s": top["peak_at_s"],
                "peak_stack": " <- ".join(reversed(top["peak_stack"][-6:])),
                "command": f"laya-eval --threads {args.threads} {shown}",
            }
        )
    process = next(r["peak_rss_mb"] for r in rows if r["route"] == "head_loo")
    for r in rows:  # what network-scope work added to the process a head-scope run needs
        r["above_head_mb"] = r["peak_rss_mb"] - process
        r["above_head_x_budget"] = r["above_head_mb"] / r["budget_mb"]
    write_report(args, rows, load_start, os.getloadavg(), time.perf_counter() - started)
    return 0


def write_report(args, rows, load_start, load_end, elapsed) -> None:
    import pandas as pd

    from laya_eval.output.files import atomic_write_text
    from laya_eval.output.origin import provenance

    table = pd.DataFrame(rows)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "network_memory.csv", table.to_csv(index=False, lineterminator="\n"))
    by = table.set_index("route")
    budget = args.max_memory
    cols = [
        "route",
        "n",
        "engine_s",
        "run_cpu_s",
        "cpu_s",
        "wall_s",
        "budget_mb",
        "peak_rss_mb",
        "peak_x_budget",
        "above_head_mb",
        "above_head_x_budget",
        "minor_faults",
        "major_faults",
    ]
    fmt = table[cols].copy()
    numbers = ("engine_s", "run_cpu_s", "cpu_s", "wall_s", "budget_mb", "peak_rss_mb", "peak_x_budget")
    for c in (*numbers, "above_head_mb", "above_head_x_budget"):
        fmt[c] = fmt[c].map(lambda v: "—" if v != v else f"{v:.4g}")
    for c in ("minor_faults", "major_faults"):
        fmt[c] = fmt[c].map(lambda v: f"{int(v):,}")
    peak = by.loc["network", "peak_rss_mb"]
    loo = {k: by.loc["network_loo", k] / by.loc["head_loo", k] for k in ("engine_s", "run_cpu_s", "cpu_s", "wall_s")}
    prov = provenance()
    library = "this checkout" if args.library.resolve() == ROOT else f"`{args.library}`"
    md = [
        "# Network scope within its memory budget: EfficientNet-Lite0 + LAYA, `--ablation zero`",
        "",
        f"Generated by `python benchmarks/bench_network_memory.py {shlex.join(sys.argv[1:])}` on "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} ({elapsed / 60:.1f} min), laya-eval from {library}.",
        "",
        f"Machine: {prov['machine']}; {os.cpu_count()} CPU cores shared with other jobs; load average "
        f"{' / '.join(f'{v:.2f}' for v in load_start)} (1/5/15 min) at the start, "
        f"{' / '.join(f'{v:.2f}' for v in load_end)} at the end; torch threads: {args.threads}; "
        f"{args.reps} repetition(s). Versions: {prov['versions']}.",
        "",
        "Model: `benchmarks/efficientnet_lite0.py` (EfficientNet-Lite0 from its published block table: stem 3x3/2 "
        "to 32 channels, 16 MBConv blocks without squeeze-excitation, ReLU6, expansion 6, 16 -> 320 output channels "
        "and up to 1,152 inside a block, 32x32 -> 2x2 maps; LAYA head d* = 96 over the pooled output of every block; "
        f"random seeded weights). Inputs: {args.n} uniform random 64x64x3 images, random labels. "
        f"`--max-memory {budget}` (MB, the default) on the network routes unless the route's name gives another; IG "
        f"with {args.ig_steps} steps; bootstrap 1000.",
        "",
        "| " + " | ".join(cols) + " |",
        "|" + "---|" * len(cols),
        *("| " + " | ".join(str(v) for v in row) + " |" for row in fmt.itertuples(index=False)),
        "",
        "`peak_rss_mb` is the child's `ru_maxrss` (the whole process); `peak_x_budget` divides it by `--max-memory`; "
        "`above_head_mb` is the peak less the head-scope run's (what network-scope work added), "
        "`above_head_x_budget` that over the budget. "
        "`minor_faults` / `major_faults`: the child's `ru_minflt` / `ru_majflt`. `cpu_s`: user + system seconds of "
        "the child; `run_cpu_s`: the CPU seconds of the command alone (`time.process_time` around it, torch, Captum, "
        'pandas and laya-eval imported before); `engine_s`: the "done in" the command prints (planning, statistics, '
        "the batch loop, the tables; wall-clock, so it carries the machine's load); `wall_s` adds the interpreter "
        "and imports.",
        "",
        "## Targets",
        "",
        f"- peak within 1.25x the budget with every method, IG included: {peak:.0f} MB = "
        f"{peak / budget:.2f}x {budget} MB ({'met' if peak <= 1.25 * budget else 'missed'}).",
        *(
            f"- the same at `--max-memory {r['budget_mb']:.0f}`: {r['peak_rss_mb']:.0f} MB = {r['peak_x_budget']:.2f}x."
            for r in rows
            if r["route"].startswith("network@")
        ),
        f"- the budget covers network-scope work, not the process around it: the head-scope run, which does none, "
        f"peaks at {by.loc['head_loo', 'peak_rss_mb']:.0f} MB (interpreter, torch, model, data, statistics), so the "
        "smaller the budget, the larger that part of the ratio.",
        f"- leave-one-out without gradient methods within 12x the head-scope run on the same inputs: "
        f"{loo['run_cpu_s']:.1f}x in the command's CPU seconds ({'met' if loo['run_cpu_s'] <= 12 else 'missed'}); "
        f"{loo['engine_s']:.1f}x in engine seconds, {loo['cpu_s']:.1f}x in the processes' CPU seconds (imports "
        f"included), {loo['wall_s']:.1f}x in wall seconds. The floor is (L + 1)/2 = 8.5 "
        "backbone passes per input for leave-one-out alone at L = 16, and the network route also runs the deletion "
        "curves of its methods (k = 2..15 removal sets, shared where methods rank alike), which head scope gets from "
        "its one pass.",
        "",
        "Where each route was at its sampled peak (innermost laya-eval or Captum frames first):",
        "",
        *(f"- {r['route']} ({r['peak_at_s']:.1f} s in): `{r['peak_stack']}`" for r in rows),
        "",
        "Commands (the data path shortened):",
        "",
        *(f"- {r['route']}: `{r['command']}`" for r in rows),
        "",
        *([f"Note: {args.note}", ""] if args.note else []),
    ]
    atomic_write_text(out / "network_memory.md", "\n".join(md))


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        raise SystemExit(child(sys.argv[4:], Path(sys.argv[2])))
    raise SystemExit(main())
