"""Network-scope removals share backbone passes: each distinct removal set of a sample runs once, and the logits
are those of one pass per removal (a slow reference loop, one sample and one removal at a time)."""

from __future__ import annotations

import dataclasses

import copy

import pandas as pd
import pytest
import torch

import laya_eval.engine.fixed_ablations as fixed_ablations
from laya_eval.engine.evaluation import EvalOptions, evaluate
from laya_eval.engine.network_passes import _per_removal_logits, network_replacement_logits
from laya_eval.models.trace import trace_from_hidden


def backbone_rows(model, monkeypatch, replacer: str = "_replacer") -> list[int]:
    """Rows of every backbone pass that replaces block outputs through ``replacer`` (a removal's values by default,
    ``_per_sample_replacer``: per-sample draws), each pass from the input: the route of a backbone that cannot start
    at a block (``tests/test_start_at_block.py`` counts the other)."""
    seen, forward = [], model.backbone.forward
    monkeypatch.setattr(model.backbone, "starts_at_block", False)

    def recording(x, replace=None):
        if replace and any(getattr(fn, "__qualname__", "").startswith(replacer + ".") for fn in replace.values()):
            seen.append(len(x))
        return forward(x, replace=replace)

    monkeypatch.setattr(model.backbone, "forward", recording)
    return seen


def _reference(model, x, masks, values):
    """Logits (B, K, C): sample n under removal k alone, block i's output replaced where masks[n, k, i] == 0."""
    out = torch.zeros(masks.shape[0], masks.shape[1], model.info.num_classes, dtype=torch.float64)
    for n in range(masks.shape[0]):
        for k in range(masks.shape[1]):
            replace = {}
            for i in range(masks.shape[2]):
                if masks[n, k, i] == 0:
                    fill = values[i]
                    replace[i] = lambda t, fill=fill: fill.to(t).expand_as(t).clone()
            out[n, k] = model.head(model.hidden_states(x[n : n + 1], replace))[0]
    return out


@pytest.fixture()
def model64(digits_models):
    return copy.deepcopy(digits_models["laya"]).double().eval()


def test_each_distinct_removal_set_of_a_sample_runs_once(model64, digits, monkeypatch):
    x = digits["test"].x[:20].double()
    tr = trace_from_hidden(model64.head, model64.hidden_states(x), inputs=x)
    one = torch.ones(3)
    # per sample: drop 0, drop 1, drop 0 again, drop 0 and 1, drop all three, drop 1 again: 4 distinct sets
    rows = torch.stack(
        [
            one - torch.tensor(d, dtype=one.dtype)
            for d in ([1, 0, 0], [0, 1, 0], [1, 0, 0], [1, 1, 0], [1, 1, 1], [0, 1, 0])
        ]
    )
    masks = rows.expand(20, 6, 3).clone()
    masks[:5, 5] = torch.tensor([0.0, 0.0, 1.0])  # five samples drop 0 and 1 twice instead: 4 sets as well
    masks[5:10, 2] = torch.tensor([1.0, 1.0, 0.0])  # five samples drop 2 instead: 5 distinct sets
    values = [
        torch.full((1, d), 0.25 * (i + 1), dtype=torch.float64) for i, d in enumerate(model64.backbone.layer_dims)
    ]
    seen = backbone_rows(model64, monkeypatch)
    with torch.no_grad():
        logits = network_replacement_logits(tr, model64, masks, values)
    # 15 samples x 4 sets + 5 samples x 5 sets = 85 (sample, set) rows in passes of the 20-row batch: 5 passes
    # (the last one 5 real rows, padded to 20); one pass per removal would have run 6
    assert seen == [20] * 5
    with torch.no_grad():
        expected = _reference(model64, x, masks, values)
    torch.testing.assert_close(logits, expected, rtol=1e-12, atol=1e-12)
    # zeros when no values are given
    with torch.no_grad():
        zeroed = network_replacement_logits(tr, model64, masks, None)
        zeros = [torch.zeros(1, d, dtype=torch.float64) for d in model64.backbone.layer_dims]
        torch.testing.assert_close(zeroed, _reference(model64, x, masks, zeros), rtol=1e-12, atol=1e-12)


def test_network_scope_runs_fewer_passes_and_gives_the_per_removal_results(digits_models, monkeypatch):
    model = digits_models["laya"]
    options = EvalOptions(
        limit=48,
        batch_size=48,
        scope="network",
        ablation="zero",
        bootstrap=0,
        methods=("contribution", "static", "random"),
    )
    seen = backbone_rows(model, monkeypatch)
    shared = evaluate(model, "digits", options=dataclasses.replace(options, ablation=("zero", "mean")))
    shared_rows = sum(seen)
    seen.clear()

    def per_removal(tr, model, masks, values, max_rows=None):
        return _per_removal_logits(tr, model, masks, values, max_rows)

    monkeypatch.setattr(fixed_ablations, "network_replacement_logits", per_removal)
    alone = evaluate(model, "digits", options=dataclasses.replace(options, ablation=("zero", "mean")))
    # one pass per removal: per ablation, 3 leave-one-out removals and 3 deletion steps for each of 3 methods,
    # 12 passes of 48 rows; shared, each sample's distinct sets are at most 7: the 3 leave-one-out sets (deletion
    # at k = 1 is one of them), the all-layer set (k = 3) and one k = 2 set per method: at most 7 passes
    assert seen == [48] * 24
    assert shared_rows <= 2 * 7 * 48
    for a in ("zero", "mean"):
        for table in ("layers", "samples", "summary"):
            pd.testing.assert_frame_equal(
                getattr(shared[a], table), getattr(alone[a], table), check_exact=False, rtol=1e-5, atol=1e-6
            )
