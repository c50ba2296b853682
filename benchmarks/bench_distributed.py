"""Sharded evaluation: 2 processes (torchrun, gloo) vs 1 on this machine, 1 thread per process.

For each case the same `faithfulness` evaluation (all methods, gate ablation, head scope) runs in
one process and under `torchrun --nproc-per-node 2`, alternately, `--repeats` times. Each rank reports
its start-up (from the process's creation to the start of the evaluation: interpreter, imports, joining
the process group) and its work (the evaluation itself, model loading included) separately, and its peak
RSS; the driver also records the whole command's wall time (torchrun's launcher included) and the load
average before and after each run (the machine is shared). Throughput = samples / the slowest rank's work
time. The CSVs of the two runs are checked to be byte-identical.

    python benchmarks/bench_distributed.py --case fmnist=runs/ref/fmnist-mlp-laya-1337.pt:10000 \
        --case minilm=runs/minilm-laya.pt:2000 --out benchmarks/results/distributed

``--split train`` evaluates the training split (more inputs, for runs of a minute or more).
Writes ``distributed.csv`` and ``distributed.md`` (with the command and the machine) into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "cli")]


def _process_age() -> float:
    """Seconds since this process was created (Linux /proc)."""
    ticks = os.sysconf("SC_CLK_TCK")
    start = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19]) / ticks
    return float(Path("/proc/uptime").read_text().split()[0]) - start


def worker(ckpt: str, limit: int, out: str, report: str, split: str) -> None:
    """One rank (or the single process): evaluate, then write this rank's start-up and work times and peak RSS."""
    import torch

    torch.set_num_threads(1)
    from laya_eval.engine.distributed import world_from_environment
    from laya_eval.engine.evaluation import EvalOptions, evaluate

    world = world_from_environment("cpu")
    startup = _process_age()
    start = time.perf_counter()
    evaluate(ckpt, None, options=EvalOptions(limit=limit, split=split, ablation=("gate",)), out=out, world=world)
    wall = time.perf_counter() - start
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    Path(f"{report}.{world.rank}.json").write_text(
        json.dumps({"rank": world.rank, "startup_s": startup, "wall_s": wall, "rss_mib": rss})
    )


def _run(nproc: int, ckpt: str, limit: int, tmp: Path, tag: str, split: str) -> dict:
    out, report = tmp / f"out-{tag}", tmp / f"report-{tag}"
    script = [str(Path(__file__).resolve()), "--worker", ckpt, str(limit), str(out), str(report), split]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": f"{ROOT}:{ROOT / 'cli'}"}
    cmd = (
        [sys.executable, *script]
        if nproc == 1
        else [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", *script]
    )
    load = os.getloadavg()[0]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    command_s = time.perf_counter() - start
    ranks = [json.loads(Path(f"{report}.{r}.json").read_text()) for r in range(nproc)]
    return {
        "wall_s": max(r["wall_s"] for r in ranks),
        "startup_s": max(r["startup_s"] for r in ranks),
        "command_s": command_s,
        "rss_mib": [round(r["rss_mib"]) for r in ranks],
        "out": out,
        "load": f"{load:.1f}>{os.getloadavg()[0]:.1f}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", required=True, help="NAME=CHECKPOINT:N")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--split", default="test")
    parser.add_argument("--note", default="", help="free text added to distributed.md (e.g. the machine's load)")
    parser.add_argument("--out", default="benchmarks/results/distributed")
    args = parser.parse_args()
    from laya_eval.output.files import atomic_write_text
    from laya_eval.output.origin import provenance

    rows = []
    for case in args.case:
        name, _, rest = case.partition("=")
        ckpt, _, n = rest.rpartition(":")
        runs: dict[int, list[dict]] = {1: [], 2: []}
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            for rep in range(args.repeats):
                for nproc in (1, 2) if rep % 2 == 0 else (2, 1):
                    runs[nproc].append(_run(nproc, ckpt, int(n), tmp, f"{nproc}-{rep}", args.split))
                    print(name, nproc, {k: v for k, v in runs[nproc][-1].items() if k != "out"}, flush=True)
            for f in ("layers.csv", "samples.csv", "summary.csv"):
                if (tmp / "out-1-0" / f).read_bytes() != (tmp / "out-2-0" / f).read_bytes():
                    raise SystemExit(f"{name}: {f} differs between 1 and 2 processes")

        def med(nproc: int, key: str) -> float:
            return round(statistics.median(r[key] for r in runs[nproc]), 2)

        rows.append(
            {
                "case": name,
                "n": int(n),
                "split": args.split,
                "work_1proc_s": med(1, "wall_s"),
                "work_2proc_s": med(2, "wall_s"),
                "throughput_ratio": round(med(1, "wall_s") / med(2, "wall_s"), 3),
                "startup_1proc_s": med(1, "startup_s"),
                "startup_2proc_s": med(2, "startup_s"),
                "command_1proc_s": med(1, "command_s"),
                "command_2proc_s": med(2, "command_s"),
                "rss_1proc_mib": runs[1][-1]["rss_mib"][0],
                "rss_per_rank_2proc_mib": "/".join(map(str, runs[2][-1]["rss_mib"])),
                "load_1min_1proc": " ".join(r["load"] for r in runs[1]),
                "load_1min_2proc": " ".join(r["load"] for r in runs[2]),
                "csv_identical": True,
            }
        )
        print(rows[-1], flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    import pandas as pd

    table = pd.DataFrame(rows)
    atomic_write_text(out / "distributed.csv", table.to_csv(index=False, lineterminator="\n"))
    prov = provenance()
    md = [
        "# Sharded evaluation: 2 processes vs 1",
        "",
        f"Command: `python {' '.join(sys.argv)}`",
        "",
        f"Machine: {prov['machine']}; versions: {prov['versions']}",
        "",
        "| " + " | ".join(table.columns) + " |",
        "|" + "---|" * len(table.columns),
        *("| " + " | ".join(str(v) for v in row) + " |" for row in table.itertuples(index=False)),
        "",
        "Medians over alternating repeats. `work` is the evaluation's wall time in each rank (checkpoint loading "
        "included), the slowest rank for 2 processes; `startup` is from the process's creation to the start of "
        "the evaluation (interpreter, imports, joining the gloo group); `command` is the whole command as the "
        "shell sees it (torchrun's launcher and rendezvous included). `load_1min` is the 1-minute load average "
        "before > after each run. 1 thread per process; gloo.",
        "",
        args.note,
    ]
    atomic_write_text(out / "distributed.md", "\n".join(md) + "\n")
    shutil.rmtree(out / "tmp", ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6])
    else:
        main()
