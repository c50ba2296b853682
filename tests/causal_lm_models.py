"""Tiny causal LMs (GPT-2, Llama) built from small configs and saved with a trained word-level tokenizer."""

from __future__ import annotations

from pathlib import Path

import torch

CORPUS = [
    "the cat sat on the mat and the dog sat on the rug",
    "a film about a cat that goes on a long trip to the sea",
    "the plot is thin but the acting is good and the music is better",
    "short one",
    "the dog and the cat are friends and they play in the park every day",
    "music and film and plot",
]


def train_tokenizer(texts=CORPUS):
    """A word-level tokenizer trained on ``texts`` (whitespace split, [UNK] and [PAD]), as a transformers one."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(texts, trainers.WordLevelTrainer(special_tokens=["[UNK]", "[PAD]"]))
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]")


def save_causal_lm(folder: Path, family: str, *, layers: int = 3, seed: int = 0, positions: int = 64) -> Path:
    """Save a random tiny ``family`` ("gpt2" or "llama") causal LM and its tokenizer into ``folder``."""
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    tokenizer = train_tokenizer()
    vocab = len(tokenizer)
    torch.manual_seed(seed)
    if family == "gpt2":
        config = GPT2Config(
            vocab_size=vocab,
            n_positions=positions,
            n_embd=16,
            n_layer=layers,
            n_head=2,
            bos_token_id=None,
            eos_token_id=None,
        )
        model = GPT2LMHeadModel(config)
    else:
        config = LlamaConfig(
            vocab_size=vocab,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=positions,
        )
        model = LlamaForCausalLM(config)
    with torch.no_grad():  # larger updates than the initialisation's, so that removing a block matters
        for block in model.base_model.h if family == "gpt2" else model.base_model.layers:
            for p in block.parameters():
                if p.dim() == 2:
                    p.mul_(8.0)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
