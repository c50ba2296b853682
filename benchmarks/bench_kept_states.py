"""One backbone pass at head scope: the statistics pass's states kept for the main pass, against running the
backbone in both passes, side by side in one process.

    python benchmarks/bench_kept_states.py --threads 1 --n 64 --reps 3 [--checkpoint runs/fmnist-laya-1337.pt]

Routes, on the same model and inputs, feature cache off (``cache=False``), zero ablation, head scope, every
registered method but ``ig`` (``static`` needs the dataset's mean layer weights: a statistics pass):

plain   ``model(x)`` under no_grad: one backbone pass and one head pass.
kept    ``laya_eval.evaluate`` as it runs: the statistics pass keeps the pooled states, the main pass reads them.
twice   the same with :class:`~laya_eval.engine.plan.KeptStates` switched off: the main pass runs the backbone again.

Models: BERT-base with random weights (``benchmarks/bench_throughput.py``'s ``hf:`` folder, 32 tokens, 13 hidden
states, ``--n`` texts) and, with ``--checkpoint``, a trained MLP (e.g. the Fashion-MNIST reference) on its test
split. Every route is timed ``--reps`` times after one untimed warm-up, interleaved, order rotating; medians.
Before timing, ``kept`` and ``twice`` must give equal tables. Writes ``kept_states.md`` into ``--out``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_throughput  # noqa: E402  (the BERT folder it builds)

from laya_eval.catalog import method_names  # noqa: E402
from laya_eval.data import load_dataset  # noqa: E402
from laya_eval.engine.evaluation import evaluate  # noqa: E402
from laya_eval.engine.plan import EvalOptions, KeptStates  # noqa: E402
from laya_eval.loading.specs import load_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
KEEP = KeptStates.for_plan


def _routes(model, data, options):
    def plain():
        with torch.no_grad():
            return model(data.x)

    def kept():
        KeptStates.for_plan = KEEP
        return evaluate(model, data, options=options)

    def twice():
        KeptStates.for_plan = classmethod(lambda cls, plan, world=None: None)
        try:
            return evaluate(model, data, options=options)
        finally:
            KeptStates.for_plan = KEEP

    return {"plain": plain, "kept": kept, "twice": twice}


def time_case(name: str, model, data, reps: int) -> dict:
    options = EvalOptions(
        methods=tuple(m for m in method_names() if m != "ig"), ablation="zero", bootstrap=0, cache=False
    )
    routes = _routes(model, data, options)
    outs = {k: f() for k, f in routes.items()}  # warm-up; its tables are compared
    for table in ("layers", "samples", "summary"):
        if not getattr(outs["kept"], table).equals(getattr(outs["twice"], table)):
            raise SystemExit(f"{name}: the {table} tables differ between kept and twice")
    times: dict[str, list[float]] = {k: [] for k in routes}
    order = list(routes)
    for rep in range(reps):
        for k in order[rep % len(order) :] + order[: rep % len(order)]:
            start = time.perf_counter()
            routes[k]()
            times[k].append(time.perf_counter() - start)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "case": name,
        "n": len(data),
        **{f"{k}_s": round(v, 3) for k, v in med.items()},
        "kept_x_plain": round(med["kept"] / med["plain"], 2),
        "twice_x_plain": round(med["twice"] / med["plain"], 2),
        "twice_x_kept": round(med["twice"] / med["kept"], 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--n", type=int, default=64)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--checkpoint", type=Path)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    load = os.getloadavg()[0]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        spec, data = bench_throughput.bert_case(Path(tmp), args.n)
        model = bench_throughput.build_model(
            "hf", "laya", data, backbone_kwargs={"model": spec.removeprefix("hf:")}, seed=0
        ).eval()
        rows.append(time_case("BERT-base (random init), 32 tokens", model, data, args.reps))
    if args.checkpoint is not None:
        model = load_model(args.checkpoint).model
        rows.append(
            time_case(
                f"{args.checkpoint.name} ({model.info.dataset} test)",
                model,
                load_dataset(model.info.dataset, "test"),
                args.reps,
            )
        )
    command = "python benchmarks/bench_kept_states.py " + shlex.join(sys.argv[1:])
    columns = list(rows[0])
    lines = [
        "# One backbone pass at head scope: states kept between the passes",
        "",
        f"Generated by `{command}` on {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; {os.cpu_count()} CPU "
        f"cores, torch threads {args.threads}, load average {load:.2f} before and {os.getloadavg()[0]:.2f} "
        f"after. Medians of {args.reps} interleaved repetitions after a warm-up; `kept` and `twice` gave equal "
        "tables.",
        "",
        "`plain`: one forward pass. `kept`: `laya_eval.evaluate` (every method but ig, zero ablation, head "
        "scope, feature cache off), the statistics pass's states kept for the main pass. `twice`: the same "
        "with the backbone run again in the main pass.",
        "",
        "| " + " | ".join(columns) + " |",
        "|" + "---|" * len(columns),
    ]
    lines += ["| " + " | ".join(str(r[c]) for c in columns) + " |" for r in rows]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "kept_states.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
