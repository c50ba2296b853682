"""Network scope at its floor: start-at-block against the from-input route and Captum, side by side in one process.

    python benchmarks/bench_start_at_block.py --threads 1 --reps 3

Two cases, every route on the same inputs, interleaved (the order rotates every repetition), after an untimed
warm-up; medians of ``--reps`` are reported, in CPU seconds of the process (one thread: on a shared machine its wall
time measures the other users' load as well). Block evaluations are counted by forward hooks on the blocks (rows per
call, summed; backward hooks count the backward passes of IG), divided by the number of inputs.

1. Leave-one-layer-out ``zero`` at network scope on a random-init BERT-base (12 blocks, hidden 768; 64 inputs of
   32 tokens, tokenized once), a LAYA head on the 12 block outputs. The work is what the engine does for one batch:
   the plain pass (keeping every block's output where the backbone starts at a block) and the 12 removals through
   the float64 effect model (``removal_effects``).

   - ``start_at_block``: each removal starts from the plain pass's output of its block;
   - ``from_input``: the route of a backbone that cannot start at a block (every removal re-runs all 12 blocks);
   - ``captum_lfa``: Captum ``LayerFeatureAblation`` on each ``BertLayer`` (one feature group, baseline 0: the
     same zero removal of the block's whole output), one call per layer, on the model's probabilities.

2. Network-scope IG (``ig``, zero baseline, 16 Gauss-Legendre steps) on the 16-block depthwise CNN of
   ``benchmarks/depthwise_cnn.py`` (64x64x3, 16 inputs): ``start_at_block`` against ``from_input``. The floor of
   start-at-block IG is the blocks after each block, times the steps, forward and backward:
   ``2 * steps * sum_i (L - 1 - i)`` block evaluations per input.

Writes ``start_at_block.csv`` and ``start_at_block.md`` into ``--out`` (default ``benchmarks/results``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from laya_eval.engine.effect_precision import float64_trace, float64_view  # noqa: E402
from laya_eval.engine.methods import METHODS, MethodContext  # noqa: E402
from laya_eval.engine.removals import leave_one_out_masks, removal_effects  # noqa: E402
from laya_eval.models.heads import make_head  # noqa: E402
from laya_eval.models.layered import LayeredModel, ModelInfo  # noqa: E402
from laya_eval.models.trace import trace_from_hidden  # noqa: E402

WORDS = ["good", "bad", "fine", "poor", "great", "awful", "nice", "dull"]


class Counter:
    """Rows through the blocks (forward, and backward with ``backward=True``), while installed."""

    def __init__(self, blocks, backward: bool = False) -> None:
        self.forward = self.backward = 0
        self.handles = [b.register_forward_hook(self._fwd) for b in blocks]
        if backward:
            self.handles += [b.register_full_backward_hook(self._bwd) for b in blocks]

    def _fwd(self, module, args, out) -> None:
        self.forward += len(out[0] if isinstance(out, tuple) else out)

    def _bwd(self, module, grad_in, grad_out) -> None:
        self.backward += len(grad_out[0])

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


@contextlib.contextmanager
def from_input(model: LayeredModel):
    """The backbone told it cannot start at a block (the route of every backbone before start-at-block)."""
    backbone = model.backbone
    owner = backbone if "starts_at_block" in vars(backbone) else type(backbone)
    saved = vars(owner).get("starts_at_block")
    setattr(owner, "starts_at_block", False)
    try:
        yield
    finally:
        if saved is None:
            delattr(owner, "starts_at_block")
        else:
            setattr(owner, "starts_at_block", saved)


def routed(fn, model: LayeredModel, started: bool):
    def run():
        if started:
            return fn()
        with from_input(model):
            return fn()

    return run


@torch.no_grad()
def lolo(model: LayeredModel, model64: LayeredModel, x) -> torch.Tensor:
    """The engine's network-scope leave-one-out on one batch: the plain pass, then the removals (float64 head)."""
    if model.backbone.starts_at_block:
        hidden, inputs, outputs = model.block_inputs_and_outputs(x)
    else:
        hidden, inputs, outputs = model.hidden_states(x), None, None
    tr = trace_from_hidden(model.head, [h.float() for h in hidden], inputs=x)
    if outputs is not None:
        tr = dataclasses.replace(tr, block_outputs=tuple(outputs), block_inputs=tuple(inputs))
    masks = leave_one_out_masks(model.n_layers)
    return removal_effects(float64_trace(tr, model64), model64, masks, ablation="zero", scope="network")


def captum_lfa(model: LayeredModel, x: dict) -> torch.Tensor:
    """Zero LOLO effects with Captum: ``LayerFeatureAblation`` on each ``BertLayer``, one call per layer.

    The forward calls the embeddings and each ``BertLayer`` by hand (the encoder's bidirectional mask) and pools the
    block outputs it sees: transformers records ``hidden_states`` with hooks of its own that run before Captum's, so
    through ``BertModel.forward`` the head would read the un-ablated output of the ablated block."""
    from captum.attr import LayerFeatureAblation
    from transformers.masking_utils import create_bidirectional_mask

    encoder = model.backbone.model

    def probs(ids, mask):
        h = encoder.embeddings(input_ids=ids)
        attention = create_bidirectional_mask(config=encoder.config, inputs_embeds=h, attention_mask=mask)
        hidden = []
        weight = mask[..., None].to(h.dtype)
        for layer in encoder.encoder.layer:
            h = layer(h, attention)
            hidden.append((h * weight).sum(1) / weight.sum(1))
        return torch.softmax(model.head(hidden), -1)

    with torch.no_grad():
        pred = probs(x["input_ids"], x["attention_mask"]).argmax(-1)
        cols = []
        for layer in encoder.encoder.layer:
            attr = LayerFeatureAblation(probs, layer).attribute(
                x["input_ids"],
                additional_forward_args=(x["attention_mask"],),
                target=pred,
                layer_baselines=0.0,
                layer_mask=torch.zeros(1, 1, 1, dtype=torch.long),
            )
            cols.append(attr.flatten(1)[:, 0])
    return torch.stack(cols, 1)


def bert_case(tmp: Path, n: int, tokens: int):
    import transformers
    from laya_eval.models.backbones.hf import HFBackbone

    folder = tmp / "bert-base"
    folder.mkdir()
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    transformers.BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)}).save_pretrained(folder)
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=len(vocab))  # BERT-base: 12 blocks, hidden 768, 12 heads
    transformers.BertModel(config).save_pretrained(folder, safe_serialization=True)
    backbone = HFBackbone(str(folder), layers=["layer*"], max_length=tokens)
    torch.manual_seed(1)
    model = LayeredModel(backbone, make_head("laya", backbone.layer_dims, 2), ModelInfo(2)).eval()
    gen = torch.Generator().manual_seed(2)
    texts = [" ".join(WORDS[j] for j in torch.randint(8, (tokens - 2,), generator=gen)) for _ in range(n)]
    return model, backbone.tokenize(texts)


def cnn_ig(model: LayeredModel, x: torch.Tensor, steps: int) -> torch.Tensor:
    """Network-scope IG as the engine runs it for one batch (the trace keeps the block outputs where it starts)."""
    with torch.no_grad():
        if model.backbone.starts_at_block:
            hidden, inputs, outputs = model.block_inputs_and_outputs(x)
        else:
            hidden, inputs, outputs = model.hidden_states(x), None, None
    tr = trace_from_hidden(model.head, hidden, inputs=x)
    if outputs is not None:
        tr = dataclasses.replace(tr, block_outputs=tuple(outputs), block_inputs=tuple(inputs))
    ctx = MethodContext(scope="network", n_steps=steps, internal_batch_size=None, seed=0, max_memory_mb=4096)
    return METHODS["ig"].fn(tr, model, target=tr.pred, context=ctx)


def measure(routes: dict, reps: int, blocks, n: int, backward: bool = False) -> tuple[dict, dict]:
    """Median CPU seconds of each route (one thread), interleaved (order rotated per repetition), and its block
    evaluations per input (forward, backward) counted during the first repetition."""
    out = {name: [] for name in routes}
    counts = {}
    names = list(routes)
    for r in range(reps):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            counter = Counter(blocks, backward) if r == 0 else None
            start = time.process_time()  # CPU seconds of this one-thread process: a shared machine's load aside
            try:
                routes[name]()
            finally:
                seconds = time.process_time() - start
                if counter is not None:
                    counter.remove()
                    counts[name] = (counter.forward / n, counter.backward / n)
            out[name].append(seconds)
    return {k: statistics.median(v) for k, v in out.items()}, counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--n", type=int, default=64, help="BERT inputs")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--n-cnn", type=int, default=16, help="CNN inputs")
    parser.add_argument("--steps", type=int, default=16, help="IG steps")
    parser.add_argument("--check-rows", type=int, default=16, help="rows of the untimed warm-up and agreement check")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows, lines = [], []
    started_at = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        model, x = bert_case(Path(tmp), args.n, args.tokens)
        model64 = float64_view(model)
        blocks = list(model.backbone.model.encoder.layer)
        n_layers = len(blocks)
        routes = {
            "start_at_block": routed(lambda: lolo(model, model64, x), model, True),
            "from_input": routed(lambda: lolo(model, model64, x), model, False),
            "captum_lfa": lambda: captum_lfa(model, x),
        }
        # warm-up and the agreement check on the first rows
        few = {k: v[: args.check_rows] for k, v in x.items()}
        check = {
            "start_at_block": routed(lambda: lolo(model, model64, few), model, True)(),
            "from_input": routed(lambda: lolo(model, model64, few), model, False)(),
            "captum_lfa": captum_lfa(model, few),
        }
        diff_old = float((check["start_at_block"] - check["from_input"]).abs().max())
        diff_captum = float((check["start_at_block"].float() - check["captum_lfa"]).abs().max())
        seconds, counted = measure(routes, args.reps, blocks, args.n)
        counts = {name: c[0] for name, c in counted.items()}
        bound = n_layers * (n_layers + 1) / 2 + 2 * n_layers
        for name in routes:
            rows.append(("bert-base lolo zero", name, counts[name], seconds[name]))
        lines += [
            f"## Leave-one-out `zero` at network scope, random-init BERT-base ({n_layers} blocks, "
            f"{args.n} inputs x {args.tokens} tokens)",
            "",
            "| route | block evaluations per input | CPU seconds (median) | x start_at_block |",
            "|---|---:|---:|---:|",
            *(
                f"| {name} | {counts[name]:.2f} | {seconds[name]:.2f} | "
                f"{seconds[name] / seconds['start_at_block']:.2f} |"
                for name in routes
            ),
            "",
            f"- bound L(L+1)/2 + 2L = {bound:.0f}; start_at_block counts {counts['start_at_block']:.2f} "
            f"(the plain pass {n_layers}, the removals L(L-1)/2 = {n_layers * (n_layers - 1) // 2}).",
            f"- time start_at_block / from_input = {seconds['start_at_block'] / seconds['from_input']:.2f} "
            "(target <= 0.6).",
            f"- throughput start_at_block / Captum LayerFeatureAblation = "
            f"{seconds['captum_lfa'] / seconds['start_at_block']:.2f}x (target >= 1.5x).",
            f"- effects on the first {args.check_rows} inputs: start_at_block vs from_input max abs difference "
            f"{diff_old:.3g}; vs Captum (float32 probabilities) {diff_captum:.3g}.",
            "",
        ]
        routes = check = None  # free the BERT case before the next
    from depthwise_cnn import depthwise_cnn_laya

    cnn = depthwise_cnn_laya()
    torch.manual_seed(0)
    images = torch.rand(args.n_cnn, 3, 64, 64)
    blocks = list(cnn.backbone.module.blocks)
    n_layers = len(blocks)
    routes = {
        "start_at_block": routed(lambda: cnn_ig(cnn, images, args.steps), cnn, True),
        "from_input": routed(lambda: cnn_ig(cnn, images, args.steps), cnn, False),
    }
    few = images[: args.check_rows]
    check = {
        "start_at_block": routed(lambda: cnn_ig(cnn, few, args.steps), cnn, True)(),
        "from_input": routed(lambda: cnn_ig(cnn, few, args.steps), cnn, False)(),
    }
    diff = float((check["start_at_block"] - check["from_input"]).abs().max())
    scale = float(check["from_input"].abs().max())
    seconds, counts = measure(routes, args.reps, blocks, args.n_cnn, backward=True)
    floor = 2 * args.steps * n_layers * (n_layers - 1) / 2
    for name in routes:
        rows.append(("depthwise-cnn network ig", name, sum(counts[name]), seconds[name]))
    lines += [
        f"## Network-scope IG, 16-block depthwise CNN ({args.n_cnn} inputs, 64x64x3, {args.steps} steps)",
        "",
        "| route | forward | backward | block evaluations per input | x floor | CPU seconds (median) | x start_at_block |",
        "|---|---:|---:|---:|---:|---:|---:|",
        *(
            f"| {name} | {counts[name][0]:.0f} | {counts[name][1]:.0f} | {sum(counts[name]):.0f} | "
            f"{sum(counts[name]) / floor:.2f} | {seconds[name]:.2f} | "
            f"{seconds[name] / seconds['start_at_block']:.2f} |"
            for name in routes
        ),
        "",
        f"- floor 2 x steps x sum_i (L - 1 - i) = {floor:.0f} (target: within 1.5x).",
        f"- time start_at_block / from_input = {seconds['start_at_block'] / seconds['from_input']:.2f} "
        "(target <= 0.7).",
        f"- attributions on the first {args.check_rows} inputs: max abs difference {diff:.3g} "
        f"(largest attribution {scale:.3g}).",
        "",
    ]
    args.out.mkdir(parents=True, exist_ok=True)
    csv = ["case,route,block_evaluations_per_input,seconds_median"]
    csv += [f"{case},{route},{count:.4f},{sec:.4f}" for case, route, count, sec in rows]
    (args.out / "start_at_block.csv").write_text("\n".join(csv) + "\n")
    head = [
        "# Network scope at its floor: start at block",
        "",
        f"`python benchmarks/bench_start_at_block.py {' '.join(sys.argv[1:])}` "
        f"(torch {torch.__version__}, {args.threads} thread(s), CPU; all routes in one process, interleaved, "
        f"medians of {args.reps} in CPU seconds; {time.perf_counter() - started_at:.0f} s of wall time in all).",
        "",
    ]
    (args.out / "start_at_block.md").write_text("\n".join(head + lines))
    print("\n".join(head + lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
