"""The decoder parts of causal LMs of each common family, found by structure, against the attribute paths each
family's transformers class uses (written here by hand: the independent oracle)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

transformers = pytest.importorskip("transformers")

from laya_eval.errors import ConfigError  # noqa: E402
from laya_eval.models.backbones.hf_layout import DecoderParts, find_decoder_parts  # noqa: E402

_SMALL = dict(hidden_size=32, intermediate_size=64, num_attention_heads=2, vocab_size=64)


def _configs() -> dict[str, object]:
    t = transformers
    out = {
        "gpt2": t.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=32),
        "llama": t.LlamaConfig(num_hidden_layers=3, num_key_value_heads=1, **_SMALL),
        "mistral": t.MistralConfig(num_hidden_layers=2, num_key_value_heads=1, **_SMALL),
        "qwen2": t.Qwen2Config(num_hidden_layers=3, num_key_value_heads=1, **_SMALL),
        "phi": t.PhiConfig(num_hidden_layers=2, **_SMALL),
        "olmo": t.OlmoConfig(num_hidden_layers=2, pad_token_id=0, **_SMALL),
        "gpt_neox": t.GPTNeoXConfig(num_hidden_layers=3, **_SMALL),
    }
    if hasattr(t, "Qwen3Config"):
        out["qwen3"] = t.Qwen3Config(num_hidden_layers=2, num_key_value_heads=1, head_dim=16, **_SMALL)
    return out


# family -> (block list, final norm, lm head), as attribute paths of the family's *ForCausalLM class
_PATHS = {
    "gpt2": ("transformer.h", "transformer.ln_f", "lm_head"),
    "llama": ("model.layers", "model.norm", "lm_head"),
    "mistral": ("model.layers", "model.norm", "lm_head"),
    "qwen2": ("model.layers", "model.norm", "lm_head"),
    "qwen3": ("model.layers", "model.norm", "lm_head"),
    "phi": ("model.layers", "model.final_layernorm", "lm_head"),
    "olmo": ("model.layers", "model.norm", "lm_head"),
    "gpt_neox": ("gpt_neox.layers", "gpt_neox.final_layer_norm", "lm_head"),
}
_EMBEDDINGS = {"gpt2": "transformer.wte", "gpt_neox": "gpt_neox.embed_in"}


@pytest.mark.parametrize("family", sorted(_PATHS))
def test_decoder_parts_of_each_family_are_the_modules_at_its_known_paths(family):
    configs = _configs()
    if family not in configs:
        pytest.skip(f"{family} is not in this transformers")
    config = configs[family]
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config)
    parts = find_decoder_parts(model, config.num_hidden_layers)
    blocks, norm, head = _PATHS[family]
    assert isinstance(parts, DecoderParts)
    assert parts.block_path == blocks
    assert parts.blocks is model.get_submodule(blocks)
    assert len(parts.blocks) == config.num_hidden_layers
    assert parts.final_norm is model.get_submodule(norm)
    assert parts.lm_head is model.get_submodule(head)
    assert parts.embeddings is model.get_submodule(_EMBEDDINGS.get(family, "model.embed_tokens"))


def test_decoder_parts_are_frozen():
    config = _configs()["llama"]
    parts = find_decoder_parts(transformers.AutoModelForCausalLM.from_config(config), config.num_hidden_layers)
    with pytest.raises(AttributeError):
        parts.block_path = "x"  # type: ignore[misc]


class _Base(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.blocks = nn.ModuleList(nn.Linear(4, 4) for _ in range(2))
        self.scale = nn.Linear(4, 4)


class _ToyLM(nn.Module):
    """A model with a decoy list of two modules outside the base model, registered first and named shorter."""

    base_model_prefix = "core"

    def __init__(self, with_norm: bool) -> None:
        super().__init__()
        self.adapters = nn.ModuleList(nn.Linear(4, 4) for _ in range(2))
        self.core = _Base()
        if with_norm:
            self.core.ln_f = nn.LayerNorm(4)
        self.head = nn.Linear(4, 10)

    @property
    def base_model(self) -> nn.Module:
        return self.core

    def get_input_embeddings(self) -> nn.Module:
        return self.core.embed

    def get_output_embeddings(self) -> nn.Module:
        return self.head


def test_a_tie_between_block_lists_goes_to_the_one_under_the_base_model():
    model = _ToyLM(with_norm=True)
    parts = find_decoder_parts(model, 2)
    assert parts.block_path == "core.blocks" and parts.blocks is model.core.blocks
    assert parts.final_norm is model.core.ln_f
    assert parts.lm_head is model.head and parts.embeddings is model.core.embed


def test_a_family_without_a_final_norm_has_none():
    model = _ToyLM(with_norm=False)
    assert find_decoder_parts(model, 2).final_norm is None  # core.scale is a Linear, not a norm


def test_a_norm_before_the_blocks_is_not_the_final_norm():
    model = _ToyLM(with_norm=False)
    model.core = nn.Module()
    model.core.ln_in = nn.LayerNorm(4)
    model.core.embed = nn.Embedding(10, 4)
    model.core.blocks = nn.ModuleList(nn.Linear(4, 4) for _ in range(2))
    assert find_decoder_parts(model, 2).final_norm is None


def test_a_model_without_a_block_list_of_the_layer_count_is_refused_in_one_line():
    config = _configs()["gpt2"]
    model = transformers.AutoModelForCausalLM.from_config(config)
    with pytest.raises(ConfigError) as err:
        find_decoder_parts(model, 5)
    message = str(err.value)
    assert "\n" not in message
    assert "nn.ModuleList of 5 blocks" in message and "GPT2LMHeadModel" in message


def test_a_model_without_input_embeddings_is_refused_in_one_line():
    with pytest.raises(ConfigError, match="get_input_embeddings"):
        find_decoder_parts(nn.Sequential(nn.ModuleList([nn.Linear(2, 2)])), 1)
