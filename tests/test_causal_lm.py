"""Causal LMs as hf: backbones: loading through AutoModelForCausalLM, last-token pooling under left and right
padding, and network-scope removals against hand loops over transformers' own decoder blocks.

The oracles run transformers' modules directly: each text alone (no padding) through the model for pooling, and
the blocks called one by one (GPT-2: token plus position embeddings; Llama: the rotary position embeddings the
model computes) for network scope. The block paths are written here per family.
"""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

from laya_eval.data import Dataset
from laya_eval.engine.evaluation import EvalOptions, evaluate
from laya_eval.errors import DefaultedWarning
from laya_eval.models.heads import make_head
from laya_eval.models.layered import LayeredModel, ModelInfo
from tests.causal_lms import FAMILIES, WORDS, tiny_causal_lm

transformers = pytest.importorskip("transformers")

TEXTS = ["the film is good", "bad", "a very long and slow story with a sad ending", "not funny", "great cast"]
N_CLASSES = 3


def _backbone(folder, **kwargs):
    from laya_eval.models.backbones.hf import HFBackbone

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DefaultedWarning)
        return HFBackbone(str(folder), **kwargs)


def _blocks(model, family):
    return model.transformer.h if family == "gpt2" else model.model.layers


def _alone_states(folder, family, text):
    """Every state of ``text`` alone (no padding) at its last token: transformers' own forward, block outputs read
    by hooks on the family's block list (the last one before the final norm)."""
    model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    ids = tokenizer(text, return_tensors="pt")["input_ids"]
    outputs = []
    handles = [b.register_forward_hook(lambda m, a, o: outputs.append(o)) for b in _blocks(model, family)]
    with torch.no_grad():
        first = model(ids, output_hidden_states=True).hidden_states[0]
    for h in handles:
        h.remove()
    return [s[0, -1] for s in (first, *outputs)]


@pytest.mark.parametrize("family", ["gpt2", "llama"])
@pytest.mark.parametrize("side", ["left", "right"])
def test_last_token_pooling_reads_each_texts_last_real_token_under_either_padding(tmp_path, family, side):
    folder = tiny_causal_lm(tmp_path / family, family, padding_side=side, pad=family == "llama")
    backbone = _backbone(folder)
    assert backbone.causal and backbone.pooling == "last" and backbone.tokenizer.padding_side == side
    batch = backbone.tokenize(TEXTS)
    mask = batch["attention_mask"]
    assert not bool(mask.all())  # the batch is padded
    # the hand gather: right padding -> position (real tokens - 1); left padding -> the final position
    last = mask.sum(1) - 1 if side == "right" else torch.full_like(mask[:, 0], mask.shape[1] - 1)
    assert bool(mask.gather(1, last[:, None]).all())
    with torch.no_grad():
        pooled = backbone(TEXTS)
    for row, text in enumerate(TEXTS):
        for got, want in zip(pooled, _alone_states(folder, family, text)):
            torch.testing.assert_close(got[row], want, atol=2e-5, rtol=1e-4)
    # the mean over real tokens differs from the last token (the pooling was applied, not a copy), and it too does
    # not depend on the padding: each text alone gives the same means
    mean = _backbone(folder, pooling="mean")
    with torch.no_grad():
        means = mean(TEXTS)
        assert float((means[-1] - pooled[-1]).abs().max()) > 1e-3
        for row, text in enumerate(TEXTS):
            for got, want in zip(means, mean([text])):
                torch.testing.assert_close(got[row], want[0], atol=2e-5, rtol=1e-4)


def test_last_token_pool_gathers_the_highest_real_position():
    from laya_eval.models.backbones.hf_causal import last_token_pool

    hidden = torch.arange(2 * 4 * 3, dtype=torch.float32).reshape(2, 4, 3)
    right = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    left = torch.tensor([[0, 0, 1, 1], [0, 1, 1, 1]])
    torch.testing.assert_close(last_token_pool(hidden, right), torch.stack([hidden[0, 1], hidden[1, 3]]))
    torch.testing.assert_close(last_token_pool(hidden, left), torch.stack([hidden[0, 3], hidden[1, 3]]))


def test_gpt2_without_a_pad_token_pads_with_eos_and_says_so(tmp_path):
    from laya_eval.models.backbones.hf import HFBackbone

    folder = tiny_causal_lm(tmp_path / "gpt2", "gpt2")
    with pytest.warns(DefaultedWarning, match=r"no pad token; batches are padded with its end-of-text token '<eos>'"):
        backbone = HFBackbone(str(folder))
    assert backbone.tokenizer.pad_token == "<eos>"
    assert type(backbone.model).__name__ == "GPT2LMHeadModel"
    assert backbone.decoder_parts.lm_head is backbone.model.lm_head


def test_a_causal_lm_defaults_to_last_pooling_and_an_encoder_type_is_not_causal(tmp_path):
    from laya_eval.loading.specs import load_backbone
    from laya_eval.models.backbones.hf_causal import is_causal_lm_type

    assert is_causal_lm_type("gpt2") and is_causal_lm_type("llama") and is_causal_lm_type("qwen2")
    assert not is_causal_lm_type("bert") and not is_causal_lm_type("vit") and not is_causal_lm_type(None)
    folder = tiny_causal_lm(tmp_path / "llama", "llama", pad=True)
    assert load_backbone(f"hf:{folder}").config()["kwargs"]["pooling"] == "last"
    assert load_backbone(f"hf:{folder}", pool="avg").config()["kwargs"]["pooling"] == "mean"


# family -> (block list, final norm) as attribute paths of the family's *ForCausalLM class
_PATHS = {
    "gpt2": ("transformer.h", "transformer.ln_f"),
    "llama": ("model.layers", "model.norm"),
    "mistral": ("model.layers", "model.norm"),
    "qwen2": ("model.layers", "model.norm"),
    "qwen3": ("model.layers", "model.norm"),
    "phi": ("model.layers", "model.final_layernorm"),
    "olmo": ("model.layers", "model.norm"),
    "gpt_neox": ("gpt_neox.layers", "gpt_neox.final_layer_norm"),
}


@pytest.mark.parametrize("family", sorted(_PATHS))
def test_each_family_saved_with_save_pretrained_loads_as_a_causal_lm_backbone(tmp_path, family):
    if not hasattr(transformers, FAMILIES[family][0]):
        pytest.skip(f"{family} is not in this transformers")
    folder = tiny_causal_lm(tmp_path / family, family, pad=True)
    backbone = _backbone(folder)
    blocks, norm = _PATHS[family]
    assert backbone.causal and backbone.pooling == "last"
    assert type(backbone.model).__name__.endswith(("ForCausalLM", "LMHeadModel"))
    assert backbone.decoder_parts.block_path == blocks
    assert backbone.layer_names == ["embeddings", *(f"layer{i}" for i in range(1, len(backbone.layer_names)))]
    # the last state is the final norm's input (the last block's output), read here by a hook on the family's norm
    seen = []
    handle = backbone.model.get_submodule(norm).register_forward_hook(lambda m, a, o: seen.append(a[0]))
    with torch.no_grad():
        pooled = backbone(TEXTS[:1])
    handle.remove()
    torch.testing.assert_close(pooled[-1][0], seen[0][0, -1])
    assert float((pooled[-1][0] - seen[0][0, -1]).abs().max()) == 0.0


# --------------------------------------------------------------------------- network scope against hand loops
def _hand_states(model, family, input_ids):
    """``states_of(replace)`` over the family's blocks called one by one; states at the last token (one length)."""

    def states_of(replace):
        with torch.no_grad():
            positions = torch.arange(input_ids.shape[1])[None]
            if family == "gpt2":
                h = model.transformer.wte(input_ids) + model.transformer.wpe(positions)
                call = lambda block, h: block(h)  # noqa: E731  (attention_mask None: causal attention)
            else:
                h = model.model.embed_tokens(input_ids)
                rotary = model.model.rotary_emb(h, position_ids=positions)
                call = lambda block, h: block(h, position_embeddings=rotary)  # noqa: E731
            states = []
            for i, block in enumerate(_blocks(model, family)):
                out = call(block, h)
                out = out[0] if isinstance(out, tuple) else out
                h = replace[i](h, out) if i in replace else out
                states.append(h[:, -1])
            return states

    return states_of


def _hand_effects(head64, states_of, n_layers, replace_of):
    with torch.no_grad():
        probs = torch.softmax(head64([s.double() for s in states_of({})]), -1)
        pred = probs.argmax(-1, keepdim=True)
        p = probs.gather(1, pred).squeeze(1)
        out = []
        for i in range(n_layers):
            removed = torch.softmax(head64([s.double() for s in states_of({i: replace_of(i)})]), -1)
            out.append(p - removed.gather(1, pred).squeeze(1))
    return torch.stack(out, 1)


def _tool_effects(model, data, ablation):
    options = EvalOptions(scope="network", ablation=(ablation,), methods=("random",), seed=3, bootstrap=0)
    table = evaluate(model, data, options=options)[ablation].layers
    table = table.pivot_table(index="sample", columns="layer", values="effect")
    return torch.tensor(table.sort_index().sort_index(axis=1).to_numpy())


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_network_skip_and_zero_on_decoder_blocks_equal_a_hand_loop_over_transformers_blocks(tmp_path, family):
    folder = tiny_causal_lm(tmp_path / family, family, pad=family == "llama", initializer_range=0.4)
    backbone = _backbone(folder, layers=["layer*"])
    torch.manual_seed(1)
    model = LayeredModel(backbone, make_head("laya", backbone.layer_dims, N_CLASSES), ModelInfo(N_CLASSES))
    gen = torch.Generator().manual_seed(2)
    texts = ["the " + " ".join(WORDS[j] for j in torch.randint(len(WORDS), (6,), generator=gen)) for _ in range(12)]
    data = Dataset(x=texts, y=torch.arange(12) % N_CLASSES, class_names=("a", "b", "c"), name="t", split="test")
    batch = backbone.tokenize(texts)
    assert bool(batch["attention_mask"].all())  # one length: the hand loop needs no padding mask
    reference = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    states_of = _hand_states(reference, family, batch["input_ids"])
    with torch.no_grad():  # the oracle first reproduces the plain states
        for got, want in zip(backbone(texts), states_of({})):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    head64 = copy.deepcopy(model.head).double().eval()
    for ablation, fill in (("skip", lambda inp, out: inp), ("zero", lambda inp, out: torch.zeros_like(out))):
        hand = _hand_effects(head64, states_of, 3, lambda i: fill)
        tool = _tool_effects(model, data, ablation)
        scale = float(hand.abs().max())
        assert scale > 1e-3  # the removals change the prediction: the comparison can fail
        assert float((tool - hand).abs().max()) <= 1e-6 * scale, (ablation, float((tool - hand).abs().max()), scale)


def test_a_text_with_no_tokens_is_refused_in_one_line(tmp_path):
    from laya_eval.errors import DataError

    backbone = _backbone(tiny_causal_lm(tmp_path / "gpt2", "gpt2"))
    for texts in ([""], ["the film", ""]):
        with pytest.raises(DataError, match="a text of the batch tokenizes to no tokens"):
            backbone(texts)


def test_a_text_longer_than_the_models_positions_is_cut_to_them(tmp_path):
    backbone = _backbone(tiny_causal_lm(tmp_path / "gpt2", "gpt2"))  # 64 positions; max_length 128
    long = " ".join(WORDS * 4)
    assert len(backbone.tokenizer(long)["input_ids"]) > 64
    assert backbone.tokenize([long])["input_ids"].shape[1] == 64
    with torch.no_grad():
        assert all(bool(torch.isfinite(h).all()) for h in backbone([long, "bad"]))


def test_a_lazy_causal_lm_loads_on_first_use_and_equals_the_eager_one(tmp_path):
    folder = tiny_causal_lm(tmp_path / "llama", "llama", pad=True)
    lazy = _backbone(folder, lazy=True)
    assert not lazy.loaded and lazy.causal and lazy.pooling == "last" and lazy.n_layers == 4
    with torch.no_grad():
        got, want = lazy(TEXTS), _backbone(folder)(TEXTS)
    assert lazy.loaded and lazy.decoder_parts.block_path == "model.layers"
    for a, b in zip(got, want):
        assert torch.equal(a, b)
