"""transformers' ``use_weighted_layer_sum`` audio classifiers as an exact ScalarMix LayeredModel.

The oracle is the transformers model itself: its logits, and its logits re-run with one
layer's weight forced to -inf before its softmax (which renormalises the other weights).
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

pytestmark = pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="transformers not installed")

SMALL = dict(
    hidden_size=16,
    num_hidden_layers=3,
    num_attention_heads=2,
    intermediate_size=32,
    conv_dim=(8, 8),
    conv_stride=(4, 4),
    conv_kernel=(8, 4),
    num_conv_pos_embeddings=4,
    num_conv_pos_embedding_groups=2,
    use_weighted_layer_sum=True,
    classifier_proj_size=6,
    num_labels=3,
)


def _classifier(kind: str):
    import transformers as T

    configs = {
        "wav2vec2": (T.Wav2Vec2Config, T.Wav2Vec2ForSequenceClassification),
        "hubert": (T.HubertConfig, T.HubertForSequenceClassification),
        "wavlm": (T.WavLMConfig, T.WavLMForSequenceClassification),
    }
    config_cls, model_cls = configs[kind]
    torch.manual_seed(0)
    model = model_cls(config_cls(**SMALL)).eval()
    with torch.no_grad():
        model.layer_weights.normal_(0, 1.5)  # not the uniform initial mix
    return model


@pytest.mark.parametrize("kind", ["wav2vec2", "hubert"])
def test_terms_sum_to_the_models_logits_and_lolo_matches_minus_inf(kind):
    from laya_eval.engine.removals import leave_one_out_masks, removal_effects
    from laya_eval.models.trace import trace
    from laya_eval.models.weighted_layer_sum import from_weighted_layer_sum

    hf = _classifier(kind)
    model = from_weighted_layer_sum(hf)
    x = torch.randn(5, 400)
    with torch.no_grad():
        reference = hf(x).logits
        hidden = model.hidden_states(x)
        terms = model.head.terms(hidden)
    assert model.n_layers == 4  # features + 3 layers
    torch.testing.assert_close(terms.sum(1) + model.head.bias, reference, rtol=0, atol=1e-5)
    torch.testing.assert_close(model.head.layer_weights(hidden)[0], torch.softmax(hf.layer_weights, -1).detach())
    tr = trace(model, x)
    effects = removal_effects(tr, model, leave_one_out_masks(model.n_layers), ablation="gate-renorm")
    confidence = torch.softmax(reference, -1).gather(1, reference.argmax(-1, keepdim=True)).squeeze(1)
    for i in range(model.n_layers):
        original = hf.layer_weights.detach().clone()
        with torch.no_grad():
            hf.layer_weights[i] = float("-inf")
            removed = torch.softmax(hf(x).logits, -1).gather(1, reference.argmax(-1, keepdim=True)).squeeze(1)
            hf.layer_weights.copy_(original)
        torch.testing.assert_close(effects[:, i], confidence - removed, rtol=0, atol=1e-5)


def test_load_model_hf_dir_reads_safetensors(tmp_path):
    from laya_eval.errors import ConfigError
    from laya_eval.loading.specs import load_model

    hf = _classifier("wavlm")
    hf.save_pretrained(tmp_path / "wavlm", safe_serialization=True)
    loaded = load_model(f"hf:{tmp_path / 'wavlm'}")
    assert set(loaded.provenance["weights_sha256"]) == {"model.safetensors"}
    x = torch.randn(2, 400)
    with torch.no_grad():
        torch.testing.assert_close(loaded.model(x), hf(x).logits, rtol=0, atol=1e-5)
    loaded.model.check_fits(type("D", (), {"input_shape": (400,), "name": "npz", "__len__": lambda s: 0})())
    import transformers as T

    plain = T.Wav2Vec2ForSequenceClassification(T.Wav2Vec2Config(**{**SMALL, "use_weighted_layer_sum": False}))
    plain.save_pretrained(tmp_path / "plain", safe_serialization=True)
    with pytest.raises(ConfigError, match="does not aggregate its layers"):
        load_model(f"hf:{tmp_path / 'plain'}")
