"""Where a decoder language model keeps its parts, found by structure rather than by family.

A transformers causal LM (GPT-2, Llama, Mistral, Qwen2/3, Phi, OLMo, GPT-NeoX, ...) is an input embedding, a
stack of blocks, usually a final norm, and an LM head. :func:`find_decoder_parts` finds them without a list of
attribute names per family:

- ``embeddings`` and ``lm_head`` are what the model itself reports (``get_input_embeddings()``,
  ``get_output_embeddings()``);
- ``blocks`` is the ``nn.ModuleList`` whose length is the config's layer count, found by walking the module
  tree. Where several lists have that length, the one under the base model (``model.base_model``) wins, then
  the one with the fewest dotted parts in its name, then the first in the model's registration order;
- ``final_norm`` is the norm applied after the last block: a direct child of the block list's parent,
  registered after the block list, that is a norm (a ``LayerNorm``/``RMSNorm`` class, or a class or attribute
  named like ``*norm*`` / ``ln_f``); the last such child where there are several, and None where the family
  has none (the hidden state then goes to the LM head as the last block left it).

A model whose parts cannot be found is refused with one line naming what was looked for.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from laya_eval.errors import ConfigError

__all__ = ["DecoderParts", "find_decoder_parts"]


@dataclass(frozen=True)
class DecoderParts:
    """The parts of a decoder LM (modules of the model, not copies).

    Attributes
    ----------
    embeddings : nn.Module
        The input (token) embedding, ``model.get_input_embeddings()``.
    blocks : nn.ModuleList
        The decoder blocks, in order; ``len(blocks)`` is the config's layer count.
    final_norm : nn.Module or None
        The norm applied after the last block, or None where the family has none.
    lm_head : nn.Module or None
        ``model.get_output_embeddings()`` (None for a base model without an LM head).
    block_path : str
        The dotted name of ``blocks`` in the model (``"transformer.h"``, ``"model.layers"``, ...).
    """

    embeddings: nn.Module
    blocks: nn.ModuleList
    final_norm: nn.Module | None
    lm_head: nn.Module | None
    block_path: str


def _is_norm(name: str, module: nn.Module) -> bool:
    """A norm by class (LayerNorm, RMSNorm, ``*Norm``) or by attribute name (``*norm*``, ``ln_f``)."""
    if isinstance(module, (nn.LayerNorm, nn.RMSNorm, nn.GroupNorm)):
        return True
    lowered = name.lower()
    return type(module).__name__.lower().endswith("norm") or "norm" in lowered or lowered == "ln_f"


def _block_list(model: nn.Module, n_layers: int) -> tuple[str, nn.ModuleList]:
    base = getattr(model, "base_model", None)
    base_ids = {id(m) for m in base.modules()} if isinstance(base, nn.Module) else set()
    found = [
        (name, module)
        for name, module in model.named_modules()
        if isinstance(module, nn.ModuleList) and len(module) == n_layers and name
    ]
    if not found:
        raise ConfigError(
            f"found no decoder block stack in {type(model).__name__}: looked for an nn.ModuleList of "
            f"{n_layers} blocks (the config's layer count) anywhere in the model."
        )
    # Stable sort: under the base model first, then the shortest dotted name, then registration order.
    found.sort(key=lambda item: (id(item[1]) not in base_ids, item[0].count(".")))
    return found[0]


def _final_norm(model: nn.Module, block_path: str) -> nn.Module | None:
    parent_name, _, block_name = block_path.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    children = list(parent.named_children())
    after = [n for n, _ in children].index(block_name) + 1
    norms = [module for name, module in children[after:] if _is_norm(name, module)]
    return norms[-1] if norms else None


def find_decoder_parts(model: nn.Module, n_layers: int) -> DecoderParts:
    """The embeddings, block stack, final norm and LM head of a decoder LM, found by structure.

    Parameters
    ----------
    model : nn.Module
        A transformers model (``*ForCausalLM`` or its base model).
    n_layers : int
        The config's layer count (``config.num_hidden_layers``).

    Returns
    -------
    DecoderParts

    Raises
    ------
    ConfigError
        No input embedding, or no ``nn.ModuleList`` of ``n_layers`` blocks (one line naming what was looked for).
    """
    get_embeddings = getattr(model, "get_input_embeddings", None)
    embeddings = get_embeddings() if callable(get_embeddings) else None
    if not isinstance(embeddings, nn.Module):
        raise ConfigError(
            f"found no input embedding in {type(model).__name__}: looked for a module returned by "
            "get_input_embeddings()."
        )
    block_path, blocks = _block_list(model, n_layers)
    get_head = getattr(model, "get_output_embeddings", None)
    lm_head = get_head() if callable(get_head) else None
    return DecoderParts(
        embeddings=embeddings,
        blocks=blocks,
        final_norm=_final_norm(model, block_path),
        lm_head=lm_head if isinstance(lm_head, nn.Module) else None,
        block_path=block_path,
    )
