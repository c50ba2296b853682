"""Transformers classifiers with ``use_weighted_layer_sum=True`` as a ScalarMix LayeredModel.

Wav2Vec2, HuBERT, WavLM, Data2VecAudio, … ``ForSequenceClassification`` with
``use_weighted_layer_sum=True`` compute

    logits = W_c mean_t(W_p sum_i s_i h_i[t] + b_p) + b_c,   s = softmax(layer_weights)

Because the projector and the time mean are linear and ``sum_i s_i = 1``, this equals
``sum_i s_i W_c (W_p m_i + b_p) + b_c`` with ``m_i = mean_t h_i``: a ScalarMix head whose
adapters are all the projector, ``gamma = 1``, mixing weights ``layer_weights`` and the
model's classifier. Its layer weights are the ``static`` attribution, its terms are exact and
``gate-renorm`` removal equals the transformers model re-run with that layer's weight at −∞.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from laya_eval.models.backbones.base import Backbone, Replacement
from laya_eval.errors import ConfigError, DataError
from laya_eval.models.heads import ScalarMixHead
from laya_eval.models.layered import LayeredModel, ModelInfo

__all__ = ["WeightedLayerSumBackbone", "from_weighted_layer_sum", "load_weighted_layer_sum"]


class WeightedLayerSumBackbone(Backbone):
    """The base model of a weighted-layer-sum classifier; ``h_i`` = time mean of ``hidden_states[i]``.

    Parameters
    ----------
    base_model : nn.Module
        E.g. ``Wav2Vec2Model``; called as ``base_model(x, output_hidden_states=True)``.
    n_states : int
        Number of hidden states (``num_hidden_layers + 1``).
    hidden_size : int
    """

    name = "hf-weighted-layer-sum"
    stored_by_reference = True

    def __init__(self, base_model: nn.Module, n_states: int, hidden_size: int) -> None:
        super().__init__()
        self.model = base_model.eval().requires_grad_(False)
        self.layer_dims = [int(hidden_size)] * int(n_states)
        self.layer_names = ["features", *(f"layer{i}" for i in range(1, int(n_states)))]

    def train(self, mode: bool = True) -> WeightedLayerSumBackbone:
        """Set the flag; the frozen model stays in eval mode."""
        super().train(mode)
        self.model.eval()
        return self

    def forward(self, x: Any, replace: Mapping[int, Replacement] | None = None) -> list[Tensor]:
        """Hidden states of waveforms ``x`` (B, T), each time-averaged to (B, D)."""
        if replace:
            raise ConfigError(
                "network-scope removal is not available for weighted-layer-sum classifiers; use --scope head."
            )
        if not isinstance(x, Tensor) or x.dim() != 2:
            got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise DataError(f"a weighted-layer-sum audio classifier expects waveforms (B, T); got {got}.")
        device = next(self.model.parameters()).device
        states = self.model(x.to(device, torch.float32), output_hidden_states=True).hidden_states
        if len(states) != self.n_layers:
            raise ConfigError(f"the model returned {len(states)} hidden states; expected {self.n_layers}.")
        return [h.mean(dim=1) for h in states]

    def config(self) -> dict[str, Any]:
        raise ConfigError(
            "a weighted-layer-sum classifier is evaluated from its own folder: name it with "
            "hf:DIR each time instead of saving a laya-eval checkpoint."
        )


def from_weighted_layer_sum(classifier: nn.Module) -> LayeredModel:
    """The exact ScalarMix LayeredModel of a transformers classifier with ``use_weighted_layer_sum=True``.

    Raises
    ------
    ConfigError
        The model does not aggregate its layers this way.
    """
    config = getattr(classifier, "config", None)
    parts = [getattr(classifier, a, None) for a in ("layer_weights", "projector", "classifier")]
    if not getattr(config, "use_weighted_layer_sum", False) or any(p is None for p in parts):
        raise ConfigError(
            f"{type(classifier).__name__} does not aggregate its layers (it needs use_weighted_layer_sum=True, "
            "layer_weights, projector and classifier); train a head on its layers with `laya-eval fit-head`."
        )
    weights, projector, linear = parts
    n_states = int(weights.shape[0])
    classifier = classifier.float().eval()
    backbone = WeightedLayerSumBackbone(classifier.base_model, n_states, projector.in_features)
    head = ScalarMixHead(backbone.layer_dims, int(linear.out_features), d_star=int(projector.out_features))
    with torch.no_grad():
        head.scalar_weights.copy_(weights.detach())
        head.gamma.fill_(1.0)
        for adapter in head.adapters:
            adapter.load_state_dict(projector.state_dict())
        head.classifier.load_state_dict(linear.state_dict())
    labels = getattr(config, "id2label", None) or {}
    names = tuple(str(labels.get(i, labels.get(str(i), i))) for i in range(int(linear.out_features)))
    info = ModelInfo(
        num_classes=int(linear.out_features),
        class_names=names,
        input_shape=(-1,),
        preprocessing={"input": "raw waveform (B, T), as the model's feature extractor expects"},
    )
    return LayeredModel(backbone, head.eval(), info).eval()


def load_weighted_layer_sum(model: str, *, local_files_only: bool = True) -> tuple[LayeredModel, dict[str, str]]:
    """Load ``hf:``'s audio classifier (safetensors only, no remote code) and adapt it.

    Returns
    -------
    (LayeredModel, dict)
        The model and ``{weight file: sha256}``.
    """
    from transformers import AutoModelForAudioClassification

    from laya_eval.models.backbones.hf import no_progress_bars, refuse_remote_code, locate_hf_model, weight_file_hashes

    path = locate_hf_model(model, local_files_only)
    refuse_remote_code(path)
    try:
        with no_progress_bars():
            classifier = AutoModelForAudioClassification.from_pretrained(
                path, use_safetensors=True, trust_remote_code=False, local_files_only=local_files_only
            )
    except (OSError, ValueError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ConfigError(f"could not load a transformers audio classifier from {path!r}: {first}") from None
    return from_weighted_layer_sum(classifier), weight_file_hashes(path)
