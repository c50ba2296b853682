"""Where the time of a ``zero`` leave-one-layer-out run on the Fashion-MNIST MLP + LAYA goes, per batch of 256.

Usage::

    python benchmarks/removal_breakdown.py [--reps 11]    # about a minute on one CPU thread

Needs the reference checkpoint ``runs/fmnist-laya-1337.pt`` and Fashion-MNIST. Prints three tables:

1. routes over the first 5,120 test inputs (batches of 256), CPU seconds, median of ``--reps`` interleaved
   repetitions: ``model(x)``; ``trace``; ``trace`` + the gate and the zero effects of the L removals; the effects
   alone from traces made beforehand;
2. the zero effects step by step (the steps of :func:`laya_eval.models.removal.laya_removal_logits` and of
   :func:`laya_eval.engine.removals.removal_probs`, written out here with public calls only and checked to give the
   library's effects to the bit before timing; the head's own check of its inputs is left out), median
   microseconds per batch;
3. torch's softmax over the last dimension of the (B x L, C) removal logits against the same softmax over dimension 0
   of the transposed tensor: the time of each and whether the results are bit-identical.

The result CSVs print effects with 8 significant digits, so a change in the last bit of a float32 effect changes
them: a faster route must compute the same floats in the same order.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_speed import FMNIST_CKPT  # noqa: E402

from laya_eval.data import load_dataset  # noqa: E402
from laya_eval.engine.removals import leave_one_out_masks, removal_effects  # noqa: E402
from laya_eval.loading.checkpoints import load_checkpoint  # noqa: E402
from laya_eval.models.heads import pool_hidden  # noqa: E402
from laya_eval.models.removal import check_removal_inputs  # noqa: E402
from laya_eval.models.trace import trace  # noqa: E402

N, BATCH = 5120, 256


def zero_effects_in_steps(model, tr, masks, clock=None):
    """The zero effects (B, K) by the fast path's steps; ``clock(name)`` is called after each step."""
    tick = clock or (lambda name: None)
    head = model.head
    keep = masks.to(tr.terms.dtype).expand(tr.n_samples, *masks.shape)  # one (K, L) mask per input, as the engine
    pooled = [pool_hidden(h) for h in tr.hidden]
    keep, fill = check_removal_inputs(pooled, keep, [p.new_zeros(p.shape[-1]) for p in pooled])
    tick("inputs and checks")
    first, act, second = head.scorer[0], head.scorer[1], head.scorer[2]
    z = tr.adapted
    z_fill = torch.stack([g(v) for g, v in zip(head.adapters, fill)], dim=0)
    w1 = first.weight.view(-1, len(pooled), head.d_star)
    fill_blocks = torch.einsum("ld,hld->lh", head.psi(z_fill), w1)
    tick("adapters and scorer blocks of the fills")
    blocks = torch.einsum("bld,hld->blh", head.psi(z), w1)
    tick("scorer blocks W1_i psi(z_i), (B, L, hidden)")
    pre = torch.einsum("bkl,blf->bkf", keep, blocks) + torch.einsum("bkl,lf->bkf", 1 - keep, fill_blocks) + first.bias
    tick("pre-activation of each removal (two einsums)")
    alpha = torch.softmax(second(act(pre)) / head.tau, dim=-1)
    tick("GELU, Linear(hidden -> L), softmax over L")
    readout = z @ head.classifier.weight.T
    fill_readout = z_fill @ head.classifier.weight.T
    m = keep.unsqueeze(-1)
    replaced = m * readout.unsqueeze(1) + (1 - m) * fill_readout
    logits = (alpha.unsqueeze(-1) * replaced).sum(2) + head.bias
    tick("readout and weighted sum")
    probs = torch.softmax(logits, -1)
    tick("softmax over the classes")
    index = tr.pred[:, None, None].expand(-1, probs.shape[1], 1)
    effects = tr.confidence[:, None] - probs.gather(2, index).squeeze(2)
    tick("effect of the predicted class")
    return effects


def cpu_median(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=11)
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = load_checkpoint(FMNIST_CKPT).eval()
    x = load_dataset("fashion-mnist", "test").subset(slice(0, N)).x
    xs = [x[i : i + BATCH] for i in range(0, N, BATCH)]
    masks = leave_one_out_masks(model.n_layers)
    with torch.no_grad():
        traces = [trace(model, xb) for xb in xs]
        for tr in traces:
            ours = zero_effects_in_steps(model, tr, masks)
            if not torch.equal(ours, removal_effects(tr, model, masks, ablation="zero")):
                sys.exit("the steps written out here no longer give the library's zero effects; update them")

        def effects(ablation, fresh):
            return lambda: [
                removal_effects(trace(model, xb) if fresh else t, model, masks, ablation=ablation)
                for xb, t in zip(xs, traces)
            ]

        routes = {
            "model(x)": lambda: [model(xb) for xb in xs],
            "trace": lambda: [trace(model, xb) for xb in xs],
            "trace + gate effects": effects("gate", True),
            "trace + zero effects": effects("zero", True),
            "gate effects from traces": effects("gate", False),
            "zero effects from traces": effects("zero", False),
        }
        for fn in routes.values():
            fn()
        runs = {name: [] for name in routes}
        for _ in range(args.reps):
            for name, fn in routes.items():
                runs[name].append(cpu_median(fn, 1))
        plain = statistics.median(runs["model(x)"])
        print(f"Routes over {N} inputs, batches of {BATCH}, CPU seconds (median of {args.reps}):")
        for name, values in runs.items():
            value = statistics.median(values)
            print(f"  {name:26s} {value:7.4f} s  {value / plain:6.3f}x model(x)")

        steps: dict[str, list[float]] = {}
        for _ in range(max(20, args.reps)):
            for tr in traces:
                last = [time.perf_counter()]

                def clock(name):
                    now = time.perf_counter()
                    steps.setdefault(name, []).append(now - last[0])
                    last[0] = now

                zero_effects_in_steps(model, tr, masks, clock)
        total = sum(statistics.median(v) for v in steps.values())
        print(f"\nZero effects by step, microseconds per batch of {BATCH} (median), {total * 1e6:.0f} in all:")
        for name, values in steps.items():
            print(f"  {name:45s} {statistics.median(values) * 1e6:7.1f}")

        gen = torch.Generator().manual_seed(0)
        logits = torch.randn(BATCH * model.n_layers, model.head.num_classes, generator=gen)
        transposed = logits.T.contiguous()
        last_dim = cpu_median(lambda: [torch.softmax(logits, -1) for _ in range(2000)], 5) / 2000
        first_dim = cpu_median(lambda: [torch.softmax(transposed, 0) for _ in range(2000)], 5) / 2000
        same = torch.equal(torch.softmax(logits, -1), torch.softmax(transposed, 0).T)
        diff = float((torch.softmax(logits, -1) - torch.softmax(transposed, 0).T).abs().max())
        print(
            f"\nsoftmax of {tuple(logits.shape)}: over the last dimension {last_dim * 1e6:.1f} us, over dimension 0 "
            f"of the transpose {first_dim * 1e6:.1f} us; bit-identical: {same} (largest difference {diff:.2e})"
        )


if __name__ == "__main__":
    main()
