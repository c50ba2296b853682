"""Small causal LMs saved with ``save_pretrained`` (random weights, nothing downloaded), with a byte-level BPE
tokenizer trained here with ``tokenizers``."""

from __future__ import annotations

from pathlib import Path

import torch

WORDS = (
    "the a film good bad great dull plot cast long quiet moving thin watch again story fresh rotten "
    "fun slow smart funny sad actor scene ending music is was and but not very too"
).split()

#: Small configs per family (keyword arguments of the family's config class).
FAMILIES = {
    "gpt2": ("GPT2Config", dict(n_layer=3, n_embd=32, n_head=2, n_positions=64)),
    "llama": (
        "LlamaConfig",
        dict(
            num_hidden_layers=3,
            hidden_size=32,
            intermediate_size=64,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=64,
        ),
    ),
}
_DECODER = dict(num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=2)
FAMILIES.update(
    {
        "mistral": ("MistralConfig", dict(_DECODER, num_key_value_heads=1)),
        "qwen2": ("Qwen2Config", dict(_DECODER, num_key_value_heads=1)),
        "qwen3": ("Qwen3Config", dict(_DECODER, num_key_value_heads=1, head_dim=16)),
        "phi": ("PhiConfig", dict(_DECODER)),
        "olmo": ("OlmoConfig", dict(_DECODER)),
        "gpt_neox": ("GPTNeoXConfig", dict(_DECODER)),
    }
)


def word_tokenizer(padding_side: str = "right", pad: bool = False):
    """A byte-level BPE tokenizer trained with ``tokenizers`` until every word of :data:`WORDS` is one token (with
    or without its leading space), with ``<eos>`` and, if ``pad``, a ``<pad>`` token; wrapped as transformers'
    fast tokenizer. Byte-level, so no text is out of vocabulary, and every family's tokenizer class reads it."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    special = ["<eos>", *(["<pad>"] if pad else [])]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1000, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator([*WORDS, " " + " ".join(WORDS)], trainer)
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<eos>",
        pad_token="<pad>" if pad else None,
        padding_side=padding_side,
        model_input_names=["input_ids", "attention_mask"],
    )


def tiny_causal_lm(
    folder: Path, family: str = "gpt2", *, padding_side: str = "right", pad: bool = False, seed: int = 0, **config
) -> Path:
    """Save a random ``family`` causal LM and its tokenizer into ``folder`` (created); returns ``folder``."""
    import transformers

    folder = Path(folder)
    folder.mkdir(parents=True)
    tokenizer = word_tokenizer(padding_side, pad)
    tokenizer.save_pretrained(folder)
    name, kwargs = FAMILIES[family]
    ids = dict(eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.eos_token_id)
    if pad:
        ids["pad_token_id"] = tokenizer.pad_token_id
    cfg = getattr(transformers, name)(vocab_size=len(tokenizer), **ids, **{**kwargs, **config})
    torch.manual_seed(seed)
    transformers.AutoModelForCausalLM.from_config(cfg).save_pretrained(folder, safe_serialization=True)
    return folder
