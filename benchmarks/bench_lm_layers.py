"""Next-token leave-one-out at network scope on a random-init Llama: laya-eval against a hand prefix-reuse loop and
Captum, side by side in one process.

Model: ``LlamaConfig`` with hidden size 1024, 16 blocks, 16 attention heads over 4 key/value heads (grouped-query
attention), MLP 2816, vocabulary 32,000, 512 positions; random weights (seed 0), float32, eval mode. Work: 8 windows
of 128 random token ids (seed 0), every block removed in turn by ``skip`` (block i's output becomes its input), the
effect being the rise of the window's mean next-token loss (float64, as ``faithfulness --target next-token``).

Routes, each timed in CPU seconds of this process (``time.process_time``), interleaved, the order rotating:

- ``laya_eval``: the library's passes as ``faithfulness --target next-token --scope network --ablation skip`` runs
  them (the intact pass keeping every block's output, then ``shared_losses`` over the L removals, each starting at
  its removed block with the blocks before it standing in with their kept outputs), without the methods' passes.
- ``hand``: a hand loop over ``model.model.layers``: one intact pass keeping each block's input, then for block i
  the blocks after it from block i's input, the final norm, the LM head and the loss.
- ``captum_lfa``: Captum ``LayerFeatureAblation`` on each decoder layer, the whole output one feature group, its
  baseline the layer's input (``skip``), through the model's own forward and the window loss; one call per layer.

Block evaluations are counted by forward hooks on the decoder layers (rows of every call).

    python benchmarks/bench_lm_layers.py --threads 1 --reps 3
    python benchmarks/bench_lm_layers.py --threads 2 --reps 3

Writes ``lm_layers_threads<T>.csv`` and ``lm_layers_threads<T>.md`` into ``--out`` (default
``benchmarks/results``).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from laya_eval.catalog import EVAL_BATCH_SIZE  # noqa: E402
from laya_eval.language.decoder import SKIP, CausalLM, run_windows, window_losses  # noqa: E402
from laya_eval.language.passes import (  # noqa: E402
    WindowBatch,
    batch_rows,
    removal_scales,
    row_chunk,
    shared_losses,
)
from laya_eval.models.backbones.hf_layout import find_decoder_parts  # noqa: E402

SHAPE = dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=16, num_attention_heads=16)
SHAPE.update(num_key_value_heads=4, vocab_size=32000, max_position_embeddings=512)


class Counter:
    """Rows through each decoder layer (forward hooks)."""

    def __init__(self, blocks) -> None:
        self.rows = 0
        self.handles = [b.register_forward_hook(self._count) for b in blocks]

    def _count(self, module, args, out) -> None:
        self.rows += len(out[0] if isinstance(out, tuple) else out)

    def close(self) -> None:
        for h in self.handles:
            h.remove()


def build(seed: int = 0, device: str = "cpu", dtype: torch.dtype = torch.float32):
    import transformers

    torch.manual_seed(seed)
    config = transformers.LlamaConfig(**SHAPE, attn_implementation="sdpa")
    model = transformers.LlamaForCausalLM(config).eval().to(device=device, dtype=dtype)
    for p in model.parameters():
        p.requires_grad_(False)
    parts = find_decoder_parts(model, config.num_hidden_layers)
    return CausalLM(model, None, parts, "random-llama", {}, config.max_position_embeddings)


def laya_eval_route(lm: CausalLM, ids: torch.Tensor, mask: torch.Tensor, max_memory_mb: int) -> torch.Tensor:
    """Effects (B, L) through the library's passes, in its batches and row chunks within ``max_memory_mb``: the
    intact pass keeping every block's output, then the removals, each from its block."""
    rows = row_chunk(lm, ids.shape[1], max_memory_mb)
    size = batch_rows(lm, ids.shape[1], max_memory_mb, EVAL_BATCH_SIZE)
    out = []
    for s in range(0, len(ids), size):
        batch = WindowBatch(ids[s : s + size], mask[s : s + size], torch.arange(s, min(s + size, len(ids))))
        with torch.no_grad():
            run = run_windows(lm, batch.ids, batch.mask, keep=True)
            loss = window_losses(run.logits, batch.ids, batch.mask)
        scales = [removal_scales(len(batch.ids), lm.n_layers, ids.device)]
        (removed,) = shared_losses(lm, batch, scales, SKIP, rows, kept=run.outputs)
        out.append(removed - loss[:, None])
    return torch.cat(out)


def hand_route(lm: CausalLM, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Effects (B, L) by a hand loop over the decoder layers, each removal from its block's kept input."""
    body = lm.model.model
    pos = torch.arange(ids.shape[1], device=ids.device)[None]

    def tail(h, first):
        for block in body.layers[first:]:
            h = block(h, attention_mask=None, position_ids=pos, position_embeddings=rotary)
        return window_losses(lm.model.lm_head(body.norm(h)), ids, mask)

    with torch.no_grad():
        h = body.embed_tokens(ids)
        rotary = body.rotary_emb(h, position_ids=pos)
        inputs = []
        for block in body.layers:
            inputs.append(h)
            h = block(h, attention_mask=None, position_ids=pos, position_embeddings=rotary)
        loss = window_losses(lm.model.lm_head(body.norm(h)), ids, mask)
        # skipping block i: its output is its input, and the blocks after it run from there
        effects = [tail(inputs[i], i + 1) - loss for i in range(lm.n_layers)]
    return torch.stack(effects, 1)


def captum_route(lm: CausalLM, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Effects (B, L) with Captum ``LayerFeatureAblation``: baseline = the layer's input, one call per layer."""
    from captum.attr import LayerFeatureAblation

    def losses(x):
        return window_losses(lm.model(input_ids=x, use_cache=False).logits, x, torch.ones_like(x))

    inputs = []
    hooks = [
        b.register_forward_pre_hook(
            lambda m, a, kw: inputs.append(a[0] if a else kw["hidden_states"]), with_kwargs=True
        )
        for b in lm.parts.blocks
    ]
    with torch.no_grad():
        lm.model(input_ids=ids, use_cache=False)
    for h in hooks:
        h.remove()
    cols = []
    with torch.no_grad():
        for block, inp in zip(lm.parts.blocks, inputs):
            attr = LayerFeatureAblation(losses, block).attribute(
                ids, layer_baselines=inp, layer_mask=torch.zeros(1, 1, 1, dtype=torch.long)
            )
            cols.append(-attr.flatten(1)[:, 0])  # Captum: intact output minus ablated; the effect is the rise
    return torch.stack(cols, 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--captum-reps", type=int, default=1, help="repetitions of the (slow) Captum route")
    parser.add_argument("--windows", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--max-memory", type=int, default=2048)
    parser.add_argument("--device", default="cpu", help="cpu or cuda (on cuda, wall seconds are the time)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    wall = time.time()
    lm = build(device=args.device, dtype=getattr(torch, args.dtype))
    n_layers = lm.n_layers
    gen = torch.Generator().manual_seed(0)
    ids = (
        torch.randint(0, SHAPE["vocab_size"], (args.windows, args.tokens), generator=gen)
        .to(args.device)
        .to(args.device)
    )
    mask = torch.ones_like(ids)
    routes = {
        "laya_eval": lambda: laya_eval_route(lm, ids, mask, args.max_memory),
        "hand": lambda: hand_route(lm, ids, mask),
        "captum_lfa": lambda: captum_route(lm, ids, mask),
    }
    times = {k: [] for k in routes}
    walls = {k: [] for k in routes}
    counts, effects = {}, {}
    for r in range(args.reps):
        order = list(routes)[r % len(routes) :] + list(routes)[: r % len(routes)]
        for name in order:
            if name == "captum_lfa" and r >= args.captum_reps:
                continue
            counter = Counter(lm.parts.blocks) if r == 0 else None
            start, wall_start = time.process_time(), time.perf_counter()
            got = routes[name]()
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            times[name].append(time.process_time() - start)
            walls[name].append(time.perf_counter() - wall_start)
            if counter is not None:
                counter.close()
                counts[name] = counter.rows / args.windows
                effects[name] = got.double()
    med = {k: statistics.median(v) for k, v in times.items()}
    wall_med = {k: statistics.median(v) for k, v in walls.items()}
    bound = n_layers * (n_layers + 1) // 2 + 2 * n_layers
    pairs = n_layers * (n_layers - 1) // 2
    scale = float(effects["hand"].abs().max())
    diff_hand = float((effects["laya_eval"] - effects["hand"]).abs().max())
    diff_captum = float((effects["laya_eval"] - effects["captum_lfa"]).abs().max())
    args.out.mkdir(parents=True, exist_ok=True)
    plain = args.device == "cpu" and args.dtype == "float32"
    device_name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "CPU"
    stem = args.out / (f"lm_layers_threads{args.threads}" if plain else f"lm_layers_{args.device}_{args.dtype}")
    lines = ["route,block_evaluations_per_window,cpu_seconds_median,ratio_to_laya_eval,wall_seconds_median,repetitions"]
    for k in routes:
        lines.append(
            f"{k},{counts[k]:.2f},{med[k]:.3f},{med[k] / med['laya_eval']:.3f},{wall_med[k]:.3f},{len(times[k])}"
        )
    stem.with_suffix(".csv").write_text("\n".join(lines) + "\n")
    md = [
        f"# Next-token leave-one-out (`skip`), random-init Llama, {args.threads} thread(s), {args.device},"
        f" {args.dtype}",
        "",
        f"`python benchmarks/bench_lm_layers.py --threads {args.threads} --reps {args.reps}"
        f" --captum-reps {args.captum_reps}"
        + ("" if plain else f" --device {args.device} --dtype {args.dtype}")
        + f"` (torch {torch.__version__}, {platform.machine()}, {device_name}; {args.windows} windows x"
        f" {args.tokens} tokens; routes interleaved in one"
        f" process, medians of {args.reps} ({args.captum_reps} for Captum) in CPU seconds; {time.time() - wall:.0f} s of wall time in all).",
        "",
        "Model: hidden 1024, 16 blocks, 16 heads over 4 key/value heads (GQA), MLP 2816, vocabulary 32,000, random"
        f" init, {args.dtype}.",
        "",
        "| route | block evaluations per window | CPU seconds (median) | x laya_eval | wall seconds (median) |",
        "|---|---:|---:|---:|---:|",
    ]
    for k in routes:
        md.append(f"| {k} | {counts[k]:.2f} | {med[k]:.2f} | {med[k] / med['laya_eval']:.2f} | {wall_med[k]:.2f} |")
    md += [
        "",
        f"- bound L(L+1)/2 + 2L = {bound}; laya_eval counts {counts['laya_eval']:.2f}: the intact pass {n_layers},"
        f" the removals L(L-1)/2 = {pairs} (removing block i runs blocks i+1 .. L only, the blocks before it giving"
        " their kept outputs and block i its input), and"
        f" {counts['laya_eval'] - n_layers - pairs:.2f} = one window through the {n_layers} blocks once per run, with"
        " gradients, that measures the graph a window keeps (the memory budget's row size). The hand loop counts"
        f" the intact pass and the {pairs}. Captum runs {counts['captum_lfa'] / n_layers:.0f} full passes per"
        f" window ({counts['captum_lfa']:.0f} / {n_layers}: three per layer, and this script's pass that records"
        " each layer's input, its baseline).",
        f"- time laya_eval / hand prefix-reuse loop = {med['laya_eval'] / med['hand']:.2f} in CPU seconds,"
        f" {wall_med['laya_eval'] / wall_med['hand']:.2f} in wall seconds (target <= 1.2).",
        f"- throughput laya_eval / Captum LayerFeatureAblation = {med['captum_lfa'] / med['laya_eval']:.2f}x in CPU"
        f" seconds, {wall_med['captum_lfa'] / wall_med['laya_eval']:.2f}x in wall seconds (target >= 1.5x).",
        f"- effects (largest {scale:.4g} nats): laya_eval vs hand max abs difference {diff_hand:.2e}; vs Captum"
        f" {diff_captum:.2e}.",
    ]
    stem.with_suffix(".md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
