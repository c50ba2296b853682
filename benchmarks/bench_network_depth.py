"""Network scope at depth: a 16-block depthwise-separable CNN (BatchNorm) over 64x64x3 inputs with a LAYA head,
`faithfulness --ablation zero` at head and at network scope, side by side, every method.

    python benchmarks/bench_network_depth.py --n 1000 --n-network 64 --threads 1

The model is ``py:benchmarks/depthwise_cnn.py:depthwise_cnn_laya`` (random, seeded weights); the inputs are
uniform random images with random labels, written as an ``.npz`` into a temporary folder. Each run is one
``laya-eval faithfulness`` process under ``/usr/bin/time -f %M`` (peak RSS of the whole process: interpreter,
torch, model, data, results); wall time is the process's, and the engine's own time is the "done in" it
prints. The head-scope runs pass ``--no-cache``: they run the backbone batch by batch, as a first run does and as
network scope always must, rather than read pooled states an earlier run left in the feature cache (and they
leave nothing there). Routes, each ``--reps`` times, interleaved, the median reported:

head            ``--scope head`` on the first ``--n`` inputs;
head@n_net      ``--scope head`` on the first ``--n-network`` inputs (the ratio's denominator);
network         ``--scope network --max-memory MB`` on the first ``--n-network`` inputs, every method;
network_no_ig   the same without ``ig`` (network-scope IG runs ``n_steps`` scaled copies of each block's output
                through every later block: L x n_steps forward-and-backward passes per input).

Writes ``network_depth.csv`` and ``network_depth.md`` into ``--out`` (default ``benchmarks/results``).
"""

from __future__ import annotations

import argparse
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
sys.path[:0] = [str(ROOT), str(ROOT / "cli")]
MODEL = "py:benchmarks/depthwise_cnn.py:depthwise_cnn_laya"
CLI = [sys.executable, "-m", "laya_eval_cli"]


def write_inputs(path: Path, n: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    np.savez(path, x=rng.random((n, 3, 64, 64), dtype=np.float32), y=rng.integers(0, 10, n).astype(np.int64))


def run(args: list[str], threads: int, log: Path) -> dict:
    """One CLI run under /usr/bin/time: wall seconds, the engine's own seconds, peak RSS (MB)."""
    cmd = ["/usr/bin/time", "-f", "peak_rss_kb=%M", *CLI, "--threads", str(threads), *args]
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'cli'}"}
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    log.write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise SystemExit(f"{shlex.join(args)} failed ({done.returncode}); see {log}:\n{done.stderr[-2000:]}")
    rss = int(re.search(r"peak_rss_kb=(\d+)", done.stderr).group(1)) / 1024
    engine = float(re.search(r"done in ([\d.]+) s", done.stdout).group(1))
    return {"wall_s": wall, "engine_s": engine, "peak_rss_mb": rss}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000, help="inputs of the head-scope run")
    parser.add_argument("--n-network", type=int, default=64, help="inputs of the network-scope runs")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--max-memory", type=int, default=1024, help="--max-memory of the network-scope runs (MB)")
    parser.add_argument("--n-steps", type=int, default=50, help="IG steps (laya-eval's default: 50)")
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--note", default="")
    args = parser.parse_args()
    from laya_eval.catalog import METHOD_SPECS
    from laya_eval.output.files import atomic_write_text
    from laya_eval.output.origin import provenance

    methods = list(METHOD_SPECS)
    no_ig = [m for m in methods if m != "ig"]
    load_start = os.getloadavg()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data = tmp / "images.npz"
        write_inputs(data, max(args.n, args.n_network))
        common = [
            "faithfulness",
            MODEL,
            "--data",
            f"npz:{data}",
            "--ablation",
            "zero",
            "--ig-steps",
            str(args.n_steps),
            "-q",
        ]
        routes = {
            "head": (
                args.n,
                [*common, "--methods", ",".join(methods), "--scope", "head", "--no-cache", "--limit", str(args.n)],
            ),
            "head@n_net": (
                args.n_network,
                [
                    *common,
                    "--methods",
                    ",".join(methods),
                    "--scope",
                    "head",
                    "--no-cache",
                    "--limit",
                    str(args.n_network),
                ],
            ),
            "network": (
                args.n_network,
                [
                    *common,
                    "--methods",
                    ",".join(methods),
                    "--scope",
                    "network",
                    "--max-memory",
                    str(args.max_memory),
                    "--limit",
                    str(args.n_network),
                ],
            ),
            "network_no_ig": (
                args.n_network,
                [
                    *common,
                    "--methods",
                    ",".join(no_ig),
                    "--scope",
                    "network",
                    "--max-memory",
                    str(args.max_memory),
                    "--limit",
                    str(args.n_network),
                ],
            ),
        }
        got: dict[str, list[dict]] = {r: [] for r in routes}
        order = list(routes)
        for rep in range(args.reps):
            for route in order[rep % len(order) :] + order[: rep % len(order)]:
                n, cli_args = routes[route]
                load = os.getloadavg()[0]
                res = run([*cli_args, "--out", str(tmp / f"out-{route}")], args.threads, tmp / f"{route}.log")
                got[route].append({**res, "load_1min_before": load})
                print(f"[{time.strftime('%H:%M:%S')}] {route} n={n}: {res}", file=sys.stderr, flush=True)
    rows = []
    for route, (n, cli_args) in routes.items():
        runs = got[route]
        rows.append(
            {
                "route": route,
                "n": n,
                "wall_s_median": statistics.median(r["wall_s"] for r in runs),
                "engine_s_median": statistics.median(r["engine_s"] for r in runs),
                "peak_rss_mb_max": max(r["peak_rss_mb"] for r in runs),
                "load_1min_before": "/".join(f"{r['load_1min_before']:.2f}" for r in runs),
                "command": "laya-eval --threads {} {}".format(
                    args.threads, shlex.join(a if not a.startswith("npz:") else "npz:IMAGES.npz" for a in cli_args)
                ),
            }
        )
    by = {r["route"]: r for r in rows}
    for r in rows:
        r["examples_per_s"] = r["n"] / r["engine_s_median"]
        r["x_head_same_n"] = r["engine_s_median"] / by["head@n_net"]["engine_s_median"]
        # per input against the head-scope run on --n inputs: the fixed costs (statistics pass, bootstrap) of a
        # small head-scope run no longer flatter the ratio
        r["x_head_per_input"] = (r["engine_s_median"] / r["n"]) / (by["head"]["engine_s_median"] / by["head"]["n"])
    write_report(args, rows, load_start, os.getloadavg(), time.perf_counter() - started, atomic_write_text, provenance)
    return 0


def write_report(args, rows, load_start, load_end, elapsed, atomic_write_text, provenance) -> None:
    import pandas as pd

    table = pd.DataFrame(rows)
    cols = [
        "route",
        "n",
        "engine_s_median",
        "wall_s_median",
        "examples_per_s",
        "x_head_same_n",
        "x_head_per_input",
        "peak_rss_mb_max",
        "load_1min_before",
    ]
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "network_depth.csv", table[[*cols, "command"]].to_csv(index=False, lineterminator="\n"))
    prov = provenance()
    fmt = table[cols].copy()
    for c in (
        "engine_s_median",
        "wall_s_median",
        "examples_per_s",
        "x_head_same_n",
        "x_head_per_input",
        "peak_rss_mb_max",
    ):
        fmt[c] = fmt[c].map(lambda v: f"{v:.4g}")
    net = table.set_index("route")
    md = [
        "# Network scope at depth: 16-block depthwise CNN + LAYA, `--ablation zero`",
        "",
        f"Generated by `python benchmarks/bench_network_depth.py {shlex.join(sys.argv[1:])}` on "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} ({elapsed / 60:.1f} min).",
        "",
        f"Machine: {prov['machine']}; {os.cpu_count()} CPU cores shared with other jobs; load average "
        f"{' / '.join(f'{v:.2f}' for v in load_start)} (1/5/15 min) at the start, "
        f"{' / '.join(f'{v:.2f}' for v in load_end)} at the end; torch threads: {args.threads}. "
        f"Versions: {prov['versions']}." + (f" Note: {args.note}" if args.note else ""),
        "",
        "Model: `benchmarks/depthwise_cnn.py` (stem + 16 depthwise-separable blocks, BatchNorm, 64 -> 512 channels, "
        "32x32 -> 4x4 maps; LAYA head d* = 96 over the pooled output of every block; random seeded weights). "
        "Inputs: uniform random 64x64x3 images, random labels (an .npz in a temporary folder). "
        f"Methods: every registered method; IG with {args.n_steps} steps; bootstrap 1000 (the default).",
        "",
        "| " + " | ".join(cols) + " |",
        "|" + "---|" * len(cols),
        *("| " + " | ".join(str(v) for v in row) + " |" for row in fmt.itertuples(index=False)),
        "",
        '`engine_s` is the "done in" the command prints (planning, statistics, the batch loop, the tables); '
        "`wall_s` adds the interpreter and imports. `peak_rss_mb_max` is `/usr/bin/time -f %M` of the whole "
        "process. `x_head_same_n` divides by the head-scope run on the same inputs. Commands (the data path "
        "shortened):",
        "",
        *(f"- {r['route']}: `{r['command']}`" for r in rows),
        "",
        "## Targets",
        "",
        f"- peak memory under 2 GB at network scope: {net.loc['network', 'peak_rss_mb_max']:.0f} MB "
        f"({'met' if net.loc['network', 'peak_rss_mb_max'] < 2048 else 'missed'}).",
        f"- network scope within 25x the head-scope run: per input, against the head-scope run on {args.n} inputs, "
        f"{net.loc['network', 'x_head_per_input']:.1f}x ({'met' if net.loc['network', 'x_head_per_input'] <= 25 else 'missed'})"
        f" and without IG {net.loc['network_no_ig', 'x_head_per_input']:.1f}x; against the head-scope run on the same "
        f"{args.n_network} inputs {net.loc['network', 'x_head_same_n']:.1f}x (without IG "
        f"{net.loc['network_no_ig', 'x_head_same_n']:.1f}x)"
        + (", a ratio the fixed costs of that small run flatter." if args.n_network < args.n else "."),
        "",
        "Where the time goes: at head scope a batch costs one backbone pass (the head works on pooled states). At "
        "network scope each distinct removal set of an input re-runs the backbone from the input with the removed "
        "blocks' outputs replaced: the L = 16 leave-one-layer-out sets, then each method's deletion curve (k = "
        "1..16), whose k = 1 set is a leave-one-out set and whose k = 16 set all methods share, i.e. at most "
        "16 + 1 + 14 x methods passes per input, fewer where methods rank alike; network IG adds n_steps "
        "forward-and-backward passes from the input for each of the 16 blocks, and its completeness check 16 more "
        "passes. These counts, not overheads, set the ratio.",
        "" + (f"Note: {args.note}" if args.note else ""),
    ]
    atomic_write_text(out / "network_depth.md", "\n".join(md) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
