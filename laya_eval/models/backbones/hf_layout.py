"""Where a decoder language model keeps its parts (a minimal version; the full one finds them by structure)."""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from laya_eval.errors import ConfigError

__all__ = ["DecoderParts", "find_decoder_parts"]


@dataclass(frozen=True)
class DecoderParts:
    embeddings: nn.Module
    blocks: nn.ModuleList
    final_norm: nn.Module | None
    lm_head: nn.Module | None
    block_path: str


def find_decoder_parts(model: nn.Module, n_layers: int) -> DecoderParts:
    found = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.ModuleList) and len(m) == n_layers and n]
    if not found:
        raise ConfigError(f"found no decoder block stack of {n_layers} blocks in {type(model).__name__}.")
    path, blocks = min(found, key=lambda item: item[0].count("."))
    parent = model.get_submodule(path.rpartition(".")[0]) if "." in path else model
    names = list(parent._modules)
    after = names[names.index(path.rpartition(".")[2]) + 1 :]
    norms = [parent._modules[n] for n in after if "norm" in n.lower() or n == "ln_f"]
    return DecoderParts(
        model.get_input_embeddings(), blocks, norms[-1] if norms else None, model.get_output_embeddings(), path
    )
