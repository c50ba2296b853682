"""Sharded evaluation: 2 processes (torchrun, gloo) vs 1 on this machine, 1 thread per process.

For each case the same `faithfulness` evaluation (all methods, gate ablation, head scope) runs in
one process and under `torchrun --nproc-per-node 2`, alternately, `--repeats` times; each rank
reports its wall time for the evaluation (model loading included, interpreter start excluded) and
its peak RSS. Throughput = samples / the slowest rank's wall time. The CSVs of the two runs are
checked to be byte-identical.

    python benchmarks/bench_distributed.py --case fmnist=runs/ref/fmnist-mlp-laya-1337.pt:10000 \
        --case minilm=runs/minilm-laya.pt:2000 --out benchmarks/results/distributed

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


def worker(ckpt: str, limit: int, out: str, report: str) -> None:
    """One rank (or the single process): evaluate, then write this rank's wall time and peak RSS."""
    import torch

    torch.set_num_threads(1)
    from laya_eval.engine.distributed import world_from_environment
    from laya_eval.engine.evaluation import EvalOptions, evaluate_to_folder

    world = world_from_environment("cpu")
    start = time.perf_counter()
    evaluate_to_folder(ckpt, None, ["gate"], out, options=EvalOptions(limit=limit), world=world)
    wall = time.perf_counter() - start
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    Path(f"{report}.{world.rank}.json").write_text(json.dumps({"rank": world.rank, "wall_s": wall, "rss_mib": rss}))


def _run(nproc: int, ckpt: str, limit: int, tmp: Path, tag: str) -> dict:
    out, report = tmp / f"out-{tag}", tmp / f"report-{tag}"
    script = [str(Path(__file__).resolve()), "--worker", ckpt, str(limit), str(out), str(report)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": f"{ROOT}:{ROOT / 'cli'}"}
    cmd = [sys.executable, *script] if nproc == 1 else [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", *script]
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    ranks = [json.loads(Path(f"{report}.{r}.json").read_text()) for r in range(nproc)]
    return {"wall_s": max(r["wall_s"] for r in ranks), "rss_mib": [round(r["rss_mib"]) for r in ranks], "out": out}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", required=True, help="NAME=CHECKPOINT:N")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="benchmarks/results/distributed")
    args = parser.parse_args()
    from laya_eval.output.files import atomic_write_text, provenance

    rows = []
    for case in args.case:
        name, _, rest = case.partition("=")
        ckpt, _, n = rest.rpartition(":")
        times = {1: [], 2: []}
        rss = {}
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            for rep in range(args.repeats):
                for nproc in (1, 2) if rep % 2 == 0 else (2, 1):
                    got = _run(nproc, ckpt, int(n), tmp, f"{nproc}-{rep}")
                    times[nproc].append(got["wall_s"])
                    rss[nproc] = got["rss_mib"]
            for f in ("layers.csv", "samples.csv", "summary.csv"):
                if (tmp / "out-1-0" / f).read_bytes() != (tmp / "out-2-0" / f).read_bytes():
                    raise SystemExit(f"{name}: {f} differs between 1 and 2 processes")
        one, two = statistics.median(times[1]), statistics.median(times[2])
        rows.append({"case": name, "n": int(n), "wall_1proc_s": round(one, 2), "wall_2proc_s": round(two, 2),
                     "throughput_ratio": round(one / two, 3), "rss_1proc_mib": rss[1][0],
                     "rss_per_rank_2proc_mib": "/".join(map(str, rss[2])), "csv_identical": True})
        print(rows[-1], flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    import pandas as pd

    table = pd.DataFrame(rows)
    atomic_write_text(out / "distributed.csv", table.to_csv(index=False, lineterminator="\n"))
    prov = provenance()
    md = ["# Sharded evaluation: 2 processes vs 1", "", f"Command: `python {' '.join(sys.argv)}`", "",
          f"Machine: {prov['machine']}; versions: {prov['versions']}", "", "| " + " | ".join(table.columns) + " |", "|" + "---|" * len(table.columns),
          *("| " + " | ".join(str(v) for v in row) + " |" for row in table.itertuples(index=False)), "",
          "Medians over alternating repeats; wall time of the evaluation in each rank (model loading included, "
          "interpreter start excluded), the slowest rank for 2 processes; 1 thread per process; gloo."]
    atomic_write_text(out / "distributed.md", "\n".join(md) + "\n")
    shutil.rmtree(out / "tmp", ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5])
    else:
        main()
