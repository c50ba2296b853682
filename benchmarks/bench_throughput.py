"""Throughput on real-size encoders: laya-eval against Captum doing the same work on the same model.

    python benchmarks/bench_throughput.py --models bert --n 64 --n-captum 8 --threads 1,2
    python benchmarks/bench_throughput.py --models vit --n 16 --n-captum 4 --threads 1,2

Models (random weights, nothing downloaded): BERT-base (``transformers.BertConfig()``: 12 layers, 768 wide;
13 hidden states) saved with ``save_pretrained(safe_serialization=True)`` into a temporary folder with a
WordPiece tokenizer built there, read back as ``hf:DIR``; inputs are sentences of 30 vocabulary words, 32 tokens
with [CLS] and [SEP], no padding. ViT-B/16 (``transformers.ViTConfig()``: 224x224, 197 tokens, 12 blocks; 13
hidden states), uniform random images. A random LAYA head (d* = 96, tau = 1.5, seed 0) over the mean-pooled
hidden states. Each model is loaded the way ``faithfulness`` loads it: ``HFBackbone`` by reference.

Routes (n inputs, one batch; the rows of the CSV are per model and thread count):

plain              ``model(x)`` under no_grad: one backbone pass and one head pass.
floor              one backbone pass + L head passes on its states: the least any LOLO at head scope can cost.
lolo_head          laya-eval leave-one-layer-out at head scope, zero ablation: ``trace`` + ``removal_effects``.
faith_no_ig        ``laya_eval.engine.evaluation.evaluate`` with every method but ig, zero ablation, head scope, the
                   feature cache off (the encoder runs on every call).
faith_ig32         the same with every method and IG at 32 steps.
ig32               the same with ig alone (32 steps).
lolo_network       laya-eval network-scope removal: ``trace`` + ``removal_effects(scope="network")``, zero
                   ablation, row chunks within the default 2048 MB budget.
captum_lfa_head    Captum ``LayerFeatureAblation`` on the head's input of each layer (one group per layer, zero
                   baseline): the model re-run per layer, as a Captum user removes a layer at the head input.
captum_lfa_network Captum ``LayerFeatureAblation`` on each block's output inside the encoder (zero baseline).
captum_lig32       Captum ``LayerIntegratedGradients`` over the L head inputs at once (32 Gauss-Legendre steps,
                   zero layer baselines, ``internal_batch_size`` 64): IG over the layer stack, the direct effect.

The Captum routes and ``lolo_network`` run on the first ``--n-captum`` inputs (they re-run the encoder L or
32 times). Every route is timed ``--reps`` times, interleaved, after one untimed warm-up; medians. Peak memory:
the peak RSS during the call minus the RSS before it (``benchmarks/bench_speed.py``'s counter reset).
Agreement is checked on the first repetition: Captum's ablation effects equal laya-eval's (head and network
scope) and Captum's IG equals laya-eval's, to 1e-4.

Writes ``throughput.csv`` (rows of models not rerun are kept) and ``throughput.md`` into ``--out``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_speed import _reset_peak, _status_mb  # noqa: E402

from laya_eval.catalog import METHOD_SPECS  # noqa: E402
from laya_eval.data import Dataset  # noqa: E402
from laya_eval.engine.evaluation import EvalOptions, evaluate  # noqa: E402
from laya_eval.engine.memory_budget import replacement_rows, row_cost  # noqa: E402
from laya_eval.engine.removals import leave_one_out_masks, removal_effects  # noqa: E402
from laya_eval.models.trace import trace  # noqa: E402
from laya_eval.output.files import atomic_write_text  # noqa: E402
from laya_eval.output.origin import provenance  # noqa: E402
from laya_eval.training.build import build_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
STEPS = 32
CAPTUM_IBS = 64
NO_IG = tuple(m for m in METHOD_SPECS if m != "ig")
AGREE_ATOL = 1e-4


# --------------------------------------------------------------------------- models and inputs
def bert_case(folder: Path, n: int) -> tuple[str, Dataset]:
    from transformers import BertConfig, BertModel, BertTokenizerFast

    words = [f"w{i}" for i in range(2000)]
    vocab = folder / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    torch.manual_seed(0)
    BertModel(BertConfig()).save_pretrained(folder, safe_serialization=True)
    BertTokenizerFast(vocab_file=str(vocab), do_lower_case=True).save_pretrained(folder)
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(words, 30)) for _ in range(n)]
    return f"hf:{folder}", Dataset(texts, torch.as_tensor(rng.integers(0, 2, n)), ("0", "1"), "random-text", "test")


def vit_case(folder: Path, n: int) -> tuple[str, Dataset]:
    from transformers import ViTConfig, ViTModel

    torch.manual_seed(0)
    ViTModel(ViTConfig()).save_pretrained(folder, safe_serialization=True)
    g = torch.Generator().manual_seed(0)
    x = torch.rand(n, 3, 224, 224, generator=g)
    return f"hf:{folder}", Dataset(
        x, torch.randint(0, 10, (n,), generator=g), tuple("0123456789"), "random-224", "test"
    )


CASES = {"bert": bert_case, "vit": vit_case}
TITLES = {"bert": "BERT-base (random init), 32 tokens", "vit": "ViT-B/16 (random init), 224x224"}


class HeadInputTaps(nn.Module):
    """The model with an identity module on each head input (Captum's handle on the layer stack at the head).

    ``gate`` (B, 1) multiplies every head input: 1 is the model; LayerIntegratedGradients from ``gate = 0``
    integrates each head input from zero, the baseline laya-eval's IG uses."""

    def __init__(self, model: nn.Module, probs: bool) -> None:
        super().__init__()
        self.model, self.probs = model, probs
        self.taps = nn.ModuleList(nn.Identity() for _ in range(model.n_layers))

    def forward(self, x: Any, gate: torch.Tensor | None = None, mask: torch.Tensor | None = None) -> torch.Tensor:
        inputs = {"input_ids": x, "attention_mask": mask} if mask is not None else x
        hidden = self.model.hidden_states(inputs)
        scale = 1.0 if gate is None else gate
        logits = self.model.head([tap(h * scale) for tap, h in zip(self.taps, hidden)])
        return torch.softmax(logits, -1) if self.probs else logits


class BlockOutputView(nn.Module):
    """The model read through forward hooks on its block modules, registered at every call, so they run after a
    hook Captum registered before the call (LayerFeatureAblation's replacement): the head sees the ablated block
    output, and every later block too, as laya-eval's network scope. transformers records ``hidden_states``
    with hooks of its own that run before Captum's, so the encoder's own output would not show the ablation.
    Pooling as ``HFBackbone``'s ``mean``: over the real tokens."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: Any, gate: torch.Tensor | None = None, mask: torch.Tensor | None = None) -> torch.Tensor:
        backbone = self.model.backbone
        seen: list[torch.Tensor] = []
        handles = [
            m.register_forward_hook(lambda mod, a, out: seen.append(out[0] if isinstance(out, tuple) else out))
            for m in backbone.layer_modules()
        ]
        try:
            backbone.model(**({"input_ids": x, "attention_mask": mask} if mask is not None else {"pixel_values": x}))
        finally:
            for h in handles:
                h.remove()
        if mask is None:
            hidden = [h.mean(1) for h in seen]
        else:
            w = mask.unsqueeze(-1).to(seen[0].dtype)
            hidden = [(h * w).sum(1) / w.sum(1).clamp_min(1.0) for h in seen]
        return torch.softmax(self.model.head(hidden), -1)


def captum_inputs(model, x: Any) -> tuple[torch.Tensor, tuple]:
    """Tensors Captum can pass through: token ids (+ the attention mask as an extra argument), or the images."""
    if isinstance(x, list):
        tok = model.backbone.tokenize(x)
        return tok["input_ids"], (tok["attention_mask"],)
    return x, ()


# --------------------------------------------------------------------------- routes
def routes(model, data: Dataset, n: int, n_captum: int) -> dict[str, tuple[int, Callable[[], Any]]]:
    from captum.attr import LayerFeatureAblation, LayerIntegratedGradients

    x, xc = data.x[:n], data.x[:n_captum]
    sub, sub_c = data.subset(slice(0, n)), data.subset(slice(0, n_captum))
    L = model.n_layers
    lolo = leave_one_out_masks(L)
    probs_view, logits_view = HeadInputTaps(model, True), HeadInputTaps(model, False)

    def plain():
        with torch.no_grad():
            return model(x)

    def floor():
        with torch.no_grad():
            hidden = model.hidden_states(x)
            return [model.head(hidden) for _ in range(L)]

    def lolo_head():
        tr = trace(model, x)
        return removal_effects(tr, model, lolo, ablation="zero", scope="head")

    def faith(methods, n_steps=50, data_=sub):
        # cache=False: the encoder runs on every call, as in the Captum routes (a warm feature cache would serve
        # the pooled states of the warm-up call instead).
        return lambda: evaluate(
            model,
            data_,
            options=EvalOptions(
                methods=methods, ablation="zero", bootstrap=0, n_steps=n_steps, batch_size=256, cache=False
            ),
        )

    def lolo_network():
        tr = trace(model, xc)
        rows = replacement_rows(row_cost(model, xc), 2048)
        return removal_effects(tr, model, lolo, ablation="zero", scope="network", max_rows=rows)

    inputs, extra = captum_inputs(model, xc)

    def target():
        with torch.no_grad():
            return probs_view(inputs, None, *extra).argmax(-1)

    block_view = BlockOutputView(model)

    def captum_lfa(layers, view):
        def run():
            t = target()
            out = []
            for layer in layers:
                lfa = LayerFeatureAblation(lambda i, g, *m: view(i, g, *m), layer)
                attr = lfa.attribute(
                    inputs,
                    target=t,
                    additional_forward_args=(None, *extra),
                    layer_baselines=0.0,
                    layer_mask=_one_group(layer, inputs, extra, view),
                )
                out.append((attr[0] if isinstance(attr, tuple) else attr).flatten(1)[:, 0])
            return torch.stack(out, 1)

        return run

    def captum_lig():
        t = target()
        lig = LayerIntegratedGradients(lambda g, i, *m: logits_view(i, g, *m), list(logits_view.taps))
        gate = torch.ones(len(inputs), 1)
        attrs = lig.attribute(
            gate,
            baselines=torch.zeros_like(gate),
            target=t,
            n_steps=STEPS,
            method="gausslegendre",
            additional_forward_args=(inputs, *extra),
            internal_batch_size=CAPTUM_IBS,
        )
        return torch.stack([a.flatten(1).sum(1) for a in attrs], 1)

    return {
        "plain": (n, plain),
        "floor": (n, floor),
        "lolo_head": (n, lolo_head),
        "faith_no_ig": (n, faith(NO_IG)),
        "faith_ig32": (n, faith(tuple(METHOD_SPECS), STEPS)),
        "ig32": (n, faith(("ig",), STEPS)),
        "lolo_network": (n_captum, lolo_network),
        "captum_lfa_head": (n_captum, captum_lfa(list(probs_view.taps), probs_view)),
        "captum_lfa_network": (n_captum, captum_lfa(model.backbone.layer_modules(), block_view)),
        "captum_lig32": (n_captum, captum_lig),
        "ig32@n_captum": (n_captum, faith(("ig",), STEPS, sub_c)),
        "lolo_head@n_captum": (
            n_captum,
            lambda: removal_effects(trace(model, xc), model, lolo, ablation="zero", scope="head"),
        ),
    }


def _one_group(layer: nn.Module, inputs, extra, view) -> Any:
    """A layer mask that puts the whole layer output in one group (one ablation per layer)."""
    seen = []
    handle = layer.register_forward_hook(lambda m, a, out: seen.append(out))
    try:
        with torch.no_grad():
            view(inputs[:1], None, *(e[:1] for e in extra))
    finally:
        handle.remove()
    out = seen[0]
    mask = lambda t: torch.zeros((1, *t.shape[1:]), dtype=torch.long)  # noqa: E731
    return tuple(mask(t) for t in out) if isinstance(out, tuple) else mask(out)


def check_agreement(results: dict[str, Any], n_captum: int) -> dict[str, float]:
    """Captum's numbers against laya-eval's on the same inputs (first repetition)."""
    head = results["lolo_head@n_captum"].double()
    gaps = {
        "lfa_head_vs_lolo_head": float((results["captum_lfa_head"].double() - head).abs().max()),
        "lfa_network_vs_lolo_network": float(
            (results["captum_lfa_network"].double() - results["lolo_network"].double()).abs().max()
        ),
    }
    ig = results["ig32@n_captum"].layers
    ig = ig[ig.method == "ig"].pivot(index="sample", columns="layer", values="attribution").to_numpy()
    gaps["lig_vs_ig"] = float(
        np.abs(results["captum_lig32"].double().numpy() - ig).max() / max(1e-12, np.abs(ig).max())
    )
    return gaps


# --------------------------------------------------------------------------- timing
def time_model(
    name: str, model, data: Dataset, n: int, n_captum: int, threads: int, reps: int, log
) -> tuple[list, dict]:
    torch.set_num_threads(threads)
    table = routes(model, data, n, n_captum)
    warm = routes(model, data.subset(slice(0, 2)), 2, 2)
    for fn_n, fn in warm.values():
        fn()
    times: dict[str, list[float]] = {r: [] for r in table}
    peaks: dict[str, float] = {r: 0.0 for r in table}
    agreement: dict[str, float] = {}
    order = list(table)
    for rep in range(reps):
        first = {}
        for route in order[rep % len(order) :] + order[: rep % len(order)]:
            before = _reset_peak()
            start = time.perf_counter()
            out = table[route][1]()
            times[route].append(time.perf_counter() - start)
            peaks[route] = max(peaks[route], _status_mb("VmHWM") - before)
            if rep == 0:
                first[route] = out
            log(f"{name} threads={threads} rep {rep} {route}: {times[route][-1]:.2f} s")
        if rep == 0:
            agreement = check_agreement(first, n_captum)
            log(f"{name} threads={threads} agreement {agreement}")
            bad = {k: v for k, v in agreement.items() if not v <= AGREE_ATOL}
            if bad:
                raise SystemExit(f"{name}: Captum and laya-eval disagree: {bad}")
    rows = []
    for route, (route_n, _) in table.items():
        med = statistics.median(times[route])
        rows.append(
            {
                "model": name,
                "threads": threads,
                "route": route,
                "n": route_n,
                "seconds_median": med,
                "seconds_min": min(times[route]),
                "examples_per_s": route_n / med,
                "peak_rss_mb": peaks[route],
            }
        )
    return rows, agreement


def ratios(rows: list[dict]) -> list[str]:
    """The targets, per model and thread count, from the medians."""
    out = []
    t = pd.DataFrame(rows).set_index(["model", "threads", "route"])
    for (model, threads), g in pd.DataFrame(rows).groupby(["model", "threads"]):
        r = g.set_index("route")["examples_per_s"]
        lolo_x_plain = r["plain"] / r["lolo_head"]
        net_vs_captum = r["lolo_network"] / r["captum_lfa_network"]
        head_vs_captum = r["lolo_head@n_captum"] / r["captum_lfa_head"]
        ig_vs_captum = r["ig32@n_captum"] / r["captum_lig32"]
        mem = t.loc[(model, threads), "peak_rss_mb"]
        out.append(
            f"- {model}, {threads} thread(s): LOLO at head scope {lolo_x_plain:.2f}x plain "
            f"({'met' if lolo_x_plain <= 1.1 else 'missed'}: within 1.1x); floor {r['plain'] / r['floor']:.2f}x plain; "
            f"network-scope removal {net_vs_captum:.2f}x Captum's per-layer ablation "
            f"({'met' if net_vs_captum >= 1.5 else 'missed'}: at least 1.5x); head-scope LOLO {head_vs_captum:.1f}x "
            f"Captum's ablation at the head input; IG (32 steps) {ig_vs_captum:.1f}x Captum's LIG "
            f"({'met' if ig_vs_captum >= 1 else 'missed'}: no slower), peak {mem['ig32@n_captum']:.0f} MB vs "
            f"{mem['captum_lig32']:.0f} MB."
        )
    return out


def write_report(out: Path, rows: list[dict], meta: dict) -> None:
    table = pd.DataFrame(rows)
    csv = out / "throughput.csv"
    if csv.exists():
        old = pd.read_csv(csv)
        table = pd.concat([old[~old.model.isin(table.model.unique())], table], ignore_index=True)
    atomic_write_text(csv, table.to_csv(index=False, lineterminator="\n"))
    prov = provenance()
    fmt = table.drop(columns=["command", "load", "agreement"]).copy()
    for c in ("seconds_median", "seconds_min", "examples_per_s", "peak_rss_mb"):
        fmt[c] = fmt[c].map(lambda v: f"{v:.4g}")
    md = [
        "# Throughput on real-size encoders: laya-eval and Captum doing the same work",
        "",
        __doc__.split("\n\n", 2)[2].split("\n\nWrites")[0],
        "",
        "## Runs",
        "",
        *(
            f"- {m}: `{c}`; load average (1 min) before/after: {ld}; agreement (max abs gap; IG relative to its "
            f"largest score): {a}"
            for m, c, ld, a in table[["model", "command", "load", "agreement"]]
            .drop_duplicates("model")
            .itertuples(index=False)
        ),
        f"- machine: {prov['machine']}; {os.cpu_count()} CPU cores shared with other jobs; versions: "
        f"{prov['versions']}",
        "",
        "## Results",
        "",
        "| " + " | ".join(fmt.columns) + " |",
        "|" + "---|" * len(fmt.columns),
        *("| " + " | ".join(str(v) for v in row) + " |" for row in fmt.itertuples(index=False)),
        "",
        "## Targets",
        "",
        *ratios(table.to_dict("records")),
        "",
        meta.get("notes", ""),
    ]
    atomic_write_text(out / "throughput.md", "\n".join(md) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="bert,vit")
    parser.add_argument("--n", type=int, default=64)
    parser.add_argument("--n-captum", type=int, default=8)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args()

    def log(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    rows = []
    for name in args.models.split(","):
        load = os.getloadavg()[0]
        with tempfile.TemporaryDirectory() as tmp:
            spec, data = CASES[name](Path(tmp), max(args.n, args.n_captum))
            model = build_model("hf", "laya", data, backbone_kwargs={"model": spec.removeprefix("hf:")}, seed=0).eval()
            agreement = {}
            part = []
            for threads in map(int, args.threads.split(",")):
                got, agreement = time_model(name, model, data, args.n, args.n_captum, threads, args.reps, log)
                part += got
        command = shlex.join(["python", "benchmarks/bench_throughput.py", *sys.argv[1:]])
        for r in part:
            r.update(
                command=command,
                load=f"{load:.2f}/{os.getloadavg()[0]:.2f}",
                agreement=" ".join(f"{k}={v:.1e}" for k, v in agreement.items()),
            )
        rows += part
    args.out.mkdir(parents=True, exist_ok=True)
    write_report(args.out, rows, {})
    log(f"wrote {args.out / 'throughput.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
