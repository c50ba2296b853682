"""What attribution patching (``atp``) adds to a network-scope run: backward calls and time, side by side.

A random BERT (6 layers, width 256, 4 heads; word-level tokenizer) with a LAYA head on its six block outputs, 32
texts of 24 to 31 words, one thread, CPU. Two measurements, both through the library:

1. The batch's gradient pass (``laya_eval.engine.gradients.gradient_pass``) at network scope: ``d logit_c`` only
   (what ``grad_x_act``/``gradcam`` take), ``d p_c`` only (``atp`` alone), both in one backward call (a run with
   both kinds of method), and, for comparison, the two as separate passes (what a separate ``atp`` pass would cost).
2. Whole ``evaluate`` runs (``--scope network --ablation skip``): ``grad_x_act`` against ``grad_x_act,atp``, with the
   calls of ``torch.autograd.grad`` counted, and ``grad_x_act,random``: any added method adds its deletion curve
   (network-scope removal passes), which is most of what a second method costs in a whole run.

Median of ``--repeats`` runs. ``python benchmarks/bench_atp_backward.py --out benchmarks/results/atp_backward.md``
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch

WORDS = [f"w{i}" for i in range(200)]


def _model(folder: Path):
    import transformers

    from laya_eval.models.backbones.hf import HFBackbone
    from laya_eval.models.heads import make_head
    from laya_eval.models.layered import LayeredModel, ModelInfo

    folder.mkdir()
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    transformers.BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)}).save_pretrained(folder)
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=len(vocab),
        hidden_size=256,
        num_hidden_layers=6,
        num_attention_heads=4,
        intermediate_size=1024,
        max_position_embeddings=64,
    )
    transformers.BertModel(config).save_pretrained(folder, safe_serialization=True)
    backbone = HFBackbone(str(folder), layers=["layer*"])
    torch.manual_seed(1)
    head = make_head("laya", backbone.layer_dims, 2)
    return LayeredModel(backbone, head, ModelInfo(num_classes=2))


def _data(n: int):
    from laya_eval.data import Dataset

    gen = torch.Generator().manual_seed(2)
    texts = [
        " ".join(WORDS[j] for j in torch.randint(len(WORDS), (24 + k % 8,), generator=gen).tolist()) for k in range(n)
    ]
    return Dataset(x=texts, y=torch.arange(n) % 2, class_names=("a", "b"), name="texts", split="test")


def _median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _count_backward_calls(fn) -> int:
    """Calls of ``torch.autograd.grad`` while ``fn`` runs (the library takes every gradient through it)."""
    original, calls = torch.autograd.grad, [0]

    def counting(*args, **kwargs):
        calls[0] += 1
        return original(*args, **kwargs)

    torch.autograd.grad = counting
    try:
        fn()
    finally:
        torch.autograd.grad = original
    return calls[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)

    from laya_eval.engine.evaluation import EvalOptions, evaluate
    from laya_eval.engine.gradients import gradient_pass
    from laya_eval.models.trace import trace_from_hidden

    with tempfile.TemporaryDirectory() as tmp:
        model = _model(Path(tmp) / "bert")
        data = _data(args.samples)
        with torch.no_grad():
            hidden = model.hidden_states(data.x)
        tr = trace_from_hidden(model.head, hidden, labels=data.y, inputs=list(data.x))

        def grads(logit: bool, probability: bool):
            return lambda: gradient_pass(tr, model, tr.pred, "network", logit=logit, probability=probability)

        def forward():
            with torch.no_grad():
                model.block_outputs(model.backbone.tokenize(list(data.x)))

        def separate():
            grads(True, False)()
            grads(False, True)()

        passes = [
            ("forward only (no gradients), for scale", forward),
            ("d logit_c (grad_x_act, gradcam)", grads(True, False)),
            ("d p_c (atp alone)", grads(False, True)),
            ("d logit_c and d p_c, one backward call (a run with both)", grads(True, True)),
            ("d logit_c, then d p_c as a second pass (not what runs; for comparison)", separate),
        ]
        grads(True, True)()  # warm up
        rows = [(name, _median_time(fn, args.repeats), _count_backward_calls(fn)) for name, fn in passes]

        def run(methods):
            opts = EvalOptions(scope="network", ablation=("skip",), methods=methods, bootstrap=0, seed=0)
            return lambda: evaluate(model, data, options=opts)

        runs = [
            ("grad_x_act", run(("grad_x_act",))),
            ("grad_x_act, random (one more deletion curve, no gradients)", run(("grad_x_act", "random"))),
            ("grad_x_act, atp", run(("grad_x_act", "atp"))),
        ]
        run_rows = [(name, _median_time(fn, max(1, args.repeats // 2)), _count_backward_calls(fn)) for name, fn in runs]

    base = rows[1][1]
    lines = [
        "# What `atp` adds to a network-scope run",
        "",
        f"`python benchmarks/bench_atp_backward.py --samples {args.samples} --repeats {args.repeats}` — random BERT "
        f"(6 layers, width 256, 4 heads), LAYA head on the 6 block outputs, {args.samples} texts of 24-31 words "
        f"(padded to one length), CPU ({platform.processor() or platform.machine()}), torch {torch.__version__}, "
        f"one thread; median wall time. Load average when it ended: {os.getloadavg()[0]:.1f} (a shared machine: "
        "compare the rows of one run, not across runs).",
        "",
        "## The batch's gradient pass (`laya_eval.engine.gradients.gradient_pass`, network scope)",
        "",
        "| gradients | backward calls | time (s) | × d logit_c alone |",
        "|---|---|---|---|",
        *[f"| {name} | {calls} | {t:.3f} | {t / base:.2f} |" for name, t, calls in rows],
        "",
        "## Whole runs (`evaluate`, `--scope network --ablation skip`)",
        "",
        "| methods | backward calls (`torch.autograd.grad`) | time (s) |",
        "|---|---|---|",
        *[f"| {name} | {calls} | {t:.3f} |" for name, t, calls in run_rows],
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
