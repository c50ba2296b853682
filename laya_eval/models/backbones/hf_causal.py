"""Decoder language models (causal LMs) as frozen backbones of :class:`~laya_eval.models.backbones.hf.HFBackbone`.

A model folder whose ``model_type`` transformers loads as a causal LM and not as a masked LM (GPT-2, Llama,
Mistral, Qwen2/3, Phi, OLMo, GPT-NeoX, ...: the decoder-only families) loads through ``AutoModelForCausalLM``
(safetensors only, no remote code); its LM head stays loaded for next-token work. Its parts are found by
structure (:func:`~laya_eval.models.backbones.hf_layout.find_decoder_parts`).

Hidden states of a causal LM are read here, not through transformers' ``output_hidden_states``: ``h_0`` is the
input of the first block (the token embeddings, plus position embeddings where the family adds them) and ``h_i``
the output of block ``i``, the last one *before* the final norm (transformers reports the normed one), so that
``h_i - h_{i-1}`` is block i's update for every block. Position ids follow the attention mask, so a text's states
do not depend on how much padding its batch needs, on either side.

``last`` pooling reads each row's last real token (the highest position whose attention mask is 1), which is the
last token under right padding and the final position under left padding.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import Tensor, nn

from laya_eval.errors import ConfigError, DataError, DefaultedWarning
from laya_eval.models.backbones.base import Replacement, _apply_replacement, _block_input, _replace_in_output
from laya_eval.models.backbones.hf_layout import DecoderParts

__all__ = [
    "decoder_states",
    "folder_is_causal_lm",
    "is_causal_lm_type",
    "last_token_pool",
    "load_causal_lm",
    "position_ids",
    "truncation_length",
]


def is_causal_lm_type(model_type: Any) -> bool:
    """Whether transformers loads ``model_type`` as a causal LM and not as a masked LM (a decoder-only family).

    BERT-like encoders have a causal-LM class too (``BertLMHeadModel``) but are masked LMs first; they stay
    encoders. Only transformers' tables of names are read: no model code is imported.
    """
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    return (
        isinstance(model_type, str)
        and model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
        and model_type not in MODEL_FOR_MASKED_LM_MAPPING_NAMES
    )


def folder_is_causal_lm(path: str, local_files_only: bool) -> bool:
    """Whether the model at ``path`` is a decoder-only causal LM, from its config's ``model_type`` alone
    (``config.json`` read as JSON; through ``AutoConfig`` for a Hub id). Call after the remote-code check."""
    from pathlib import Path

    config = Path(path) / "config.json"
    if config.is_file():
        import json

        try:
            data = json.loads(config.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False  # the config's own reader says what is wrong with it
        return isinstance(data, dict) and is_causal_lm_type(data.get("model_type"))
    if Path(path).is_dir():
        return False
    from transformers import AutoConfig

    try:
        found = AutoConfig.from_pretrained(path, local_files_only=local_files_only, trust_remote_code=False)
    except (OSError, ValueError):
        return False
    return is_causal_lm_type(getattr(found, "model_type", None))


def load_causal_lm(path: str, kwargs: Mapping[str, Any]) -> tuple[nn.Module, Any]:
    """``AutoModelForCausalLM`` (safetensors only) and its tokenizer, padded with the end-of-text token where the
    tokenizer names no pad token (with a :class:`~laya_eval.errors.DefaultedWarning` saying so)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(path, use_safetensors=True, **kwargs)
    tokenizer = AutoTokenizer.from_pretrained(path, **kwargs)
    if getattr(tokenizer, "pad_token", None) is None:
        eos = getattr(tokenizer, "eos_token", None)
        if eos is None:
            raise ConfigError(
                f"the tokenizer of {path!r} has neither a pad token nor an end-of-text token to pad batches with; "
                "set pad_token in its tokenizer_config.json."
            )
        tokenizer.pad_token = eos
        warnings.warn(
            f"the tokenizer of {path!r} has no pad token; batches are padded with its end-of-text token {eos!r} "
            "(padding positions are masked out, so this changes no result).",
            DefaultedWarning,
            stacklevel=3,
        )
    return model, tokenizer


def truncation_length(model: nn.Module, max_length: int) -> int:
    """``max_length``, or fewer where the model has fewer positions (``max_position_embeddings``, GPT-2's
    ``n_positions``): a longer text would index past its position embeddings."""
    positions = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    return min(max_length, positions) if isinstance(positions, int) and positions > 0 else max_length


def position_ids(attention_mask: Tensor) -> Tensor:
    """(B, T) positions counted over real tokens only (0 on padding before the first real token)."""
    return (attention_mask.long().cumsum(-1) - 1).clamp_min(0)


def last_token_pool(hidden: Tensor, attention_mask: Tensor | None) -> Tensor:
    """(B, D): each row's state at its last real token (the highest position whose mask is 1; the final position
    for a row without a mask)."""
    if attention_mask is None:
        return hidden[:, -1]
    positions = torch.arange(hidden.shape[1], device=hidden.device)
    last = (attention_mask.to(hidden.device).long() * positions).argmax(dim=1)
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]


@contextlib.contextmanager
def _recording(parts: DecoderParts, replace: Mapping[int, Replacement], states: dict[int, Tensor]) -> Iterator[None]:
    """Hooks that record ``h_0`` (the first block's input) and every block's output into ``states``, applying
    ``replace`` (keyed by state index: 0 the embedding state, i block i) first."""

    def first_input(module: nn.Module, args: tuple, kwargs: dict) -> Any:
        h = _block_input(args, kwargs)
        if not isinstance(h, Tensor):
            raise ConfigError(f"the first decoder block of {parts.block_path} was not called with a hidden state.")
        if 0 in replace:
            h = _apply_replacement(0, replace[0], h, None)
        states[0] = h
        return ((h, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": h})

    def block_output(module: nn.Module, args: tuple, kwargs: dict, output: Any, i: int) -> Any:
        if i in replace:
            output = _replace_in_output(i, replace[i], output, _block_input(args, kwargs))
        states[i] = output[0] if isinstance(output, tuple) else output
        return output

    blocks = parts.blocks
    handles = [blocks[0].register_forward_pre_hook(first_input, with_kwargs=True, prepend=True)]
    try:
        for i, block in enumerate(blocks, start=1):

            def hook(module: nn.Module, args: tuple, kwargs: dict, output: Any, i: int = i) -> Any:
                return block_output(module, args, kwargs, output, i)

            handles.append(block.register_forward_hook(hook, with_kwargs=True, prepend=True))
        yield
    finally:
        for handle in handles:
            handle.remove()


def decoder_states(
    model: nn.Module, parts: DecoderParts, inputs: Mapping[str, Tensor], replace: Mapping[int, Replacement]
) -> list[Tensor]:
    """Every state ``[h_0, h_1, …, h_L]`` (B, T, D) of a causal LM's base model, with ``replace`` (by state index)
    applied inside the network: later blocks see the replaced state."""
    base = getattr(model, "base_model", model)
    # what a decoder reads (a tokenizer's token_type_ids would be added to GPT-2's embeddings as tokens)
    inputs = {k: v for k, v in inputs.items() if k in ("input_ids", "attention_mask", "position_ids")}
    ids, mask = inputs.get("input_ids"), inputs.get("attention_mask")
    if ids is not None and (ids.shape[-1] == 0 or (mask is not None and not bool(mask.any(dim=-1).all()))):
        raise DataError(
            "a text of the batch tokenizes to no tokens; a causal LM reads at least one (drop empty texts, or use a "
            "tokenizer that adds a start token)."
        )
    if mask is not None:
        inputs.setdefault("position_ids", position_ids(mask))
    states: dict[int, Tensor] = {}
    with _recording(parts, replace, states):
        base(**inputs, use_cache=False)
    return [states[i] for i in range(len(parts.blocks) + 1)]
