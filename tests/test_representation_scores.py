"""block_influence, angular_distance and alpha_norm against numpy computed by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from laya_eval.engine.methods import METHODS, MethodContext, applicable
from laya_eval.engine.representation_scores import cosine_rows
from laya_eval.models.heads import ConcatHead, LayaHead, ScalarMixHead
from laya_eval.models.layered import LayeredModel
from laya_eval.models.trace import trace_from_hidden


def _np_cos(a, b):
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _run(method, head, hidden, **context):
    tr = trace_from_hidden(head, hidden)
    model = LayeredModel(torch.nn.Identity(), head)
    return METHODS[method].fn(tr, model, target=tr.pred, context=MethodContext(**context)).numpy()


def _concat_head(widths=(2, 2, 2, 2)):
    head = ConcatHead(list(widths), 3).double()
    return head


# Four 2-d states of one sample, chosen so the cosines are round: s1 = (1, 0), s2 = (1, 1), s3 = (0, 2), s4 = (-3, 0).
STATES = [
    torch.tensor([[1.0, 0.0]]),
    torch.tensor([[1.0, 1.0]]),
    torch.tensor([[0.0, 2.0]]),
    torch.tensor([[-3.0, 0.0]]),
]


def test_block_influence_on_round_states_by_hand():
    got = _run("block_influence", _concat_head(), [s.double() for s in STATES])
    # cos(s1, s2) = 1/sqrt2, cos(s2, s3) = 2 / (sqrt2 * 2) = 1/sqrt2, cos(s3, s4) = 0; layer 1: cos taken as 0.
    expected = [1.0, 1 - 1 / math.sqrt(2), 1 - 1 / math.sqrt(2), 1.0]
    np.testing.assert_allclose(got[0], expected, atol=1e-12)


@pytest.mark.parametrize(
    "span,expected",
    [
        # n = 1: arccos(1/sqrt2) / pi = 1/4 for layers 2 and 3, arccos(0) / pi = 1/2 for layer 4; layer 1: 1/2.
        (1, [0.5, 0.25, 0.25, 0.5]),
        # n = 2: layer 2's block runs s1 -> s3: cos 0 -> 1/2; layer 3's s2 -> s4: cos = -3 / (sqrt2 * 3) -> 3/4;
        # layer 4's block passes the end and stops at s4: s3 -> s4, 1/2.
        (2, [0.5, 0.5, 0.75, 0.5]),
        # n = 3: layer 2: s1 -> s4, cos = -1 -> 1; layer 3: s2 -> s4 (cut) 3/4; layer 4: s3 -> s4 1/2.
        (3, [0.5, 1.0, 0.75, 0.5]),
    ],
)
def test_angular_distance_on_round_states_by_hand(span, expected):
    got = _run("angular_distance", _concat_head(), [s.double() for s in STATES], angular_span=span)
    np.testing.assert_allclose(got[0], expected, atol=1e-12)


def test_scores_on_adapted_states_match_numpy():
    torch.manual_seed(3)
    head = LayaHead([5, 4, 3], 4, d_star=6, scorer_hidden=7).double()
    hidden = [torch.randn(8, d, dtype=torch.float64) for d in (5, 4, 3)]
    # z_i = A_i h_i + c_i with numpy, then the definitions literally.
    z = [h.numpy() @ g.weight.detach().numpy().T + g.bias.detach().numpy() for h, g in zip(hidden, head.adapters)]
    w = head.classifier.weight.detach().numpy()
    alpha = head.layer_weights(hidden).detach().numpy()
    bi = np.array([[1.0] + [1 - _np_cos(z[i - 1][b], z[i][b]) for i in (1, 2)] for b in range(8)])
    ad = np.array([[0.5] + [math.acos(_np_cos(z[i - 1][b], z[i][b])) / math.pi for i in (1, 2)] for b in range(8)])
    an = np.array([[alpha[b, i] * np.linalg.norm(w @ z[i][b]) for i in range(3)] for b in range(8)])
    np.testing.assert_allclose(_run("block_influence", head, hidden), bi, atol=1e-10)
    np.testing.assert_allclose(_run("angular_distance", head, hidden), ad, atol=1e-10)
    np.testing.assert_allclose(_run("alpha_norm", head, hidden), an, atol=1e-10)


def test_scalarmix_alpha_norm_is_gamma_times_weight_times_norm():
    torch.manual_seed(4)
    head = ScalarMixHead([3, 3], 3, d_star=4).double()
    with torch.no_grad():
        head.scalar_weights.copy_(torch.tensor([0.0, math.log(3.0)]))  # softmax = (1/4, 3/4)
        head.gamma.fill_(2.0)
    hidden = [torch.randn(5, 3, dtype=torch.float64) for _ in range(2)]
    z = [h.numpy() @ g.weight.detach().numpy().T + g.bias.detach().numpy() for h, g in zip(hidden, head.adapters)]
    w = head.classifier.weight.detach().numpy()
    expected = np.stack([2.0 * s * np.linalg.norm(z[i] @ w.T, axis=1) for i, s in enumerate((0.25, 0.75))], 1)
    np.testing.assert_allclose(_run("alpha_norm", head, hidden), expected, atol=1e-10)


def test_zero_state_has_cosine_zero_and_applicability():
    assert float(cosine_rows(torch.zeros(1, 3), torch.ones(1, 3))[0]) == 0.0
    model = LayeredModel(torch.nn.Identity(), ConcatHead([4, 3], 2))
    assert "widths [4, 3]" in applicable(METHODS["block_influence"], model)
    assert "LAYA or ScalarMix" in applicable(METHODS["alpha_norm"], model)
    assert applicable(METHODS["block_influence"], LayeredModel(torch.nn.Identity(), ConcatHead([3, 3], 2))) is None


def test_prune_ranks_layers_by_the_baselines(digits_models, digits):
    """prune's dataset ranking of each baseline removes first the layer of lowest mean score, computed by hand."""
    from laya_eval.pruning import PruneOptions, prune

    model = digits_models["laya"]
    result = prune(
        model,
        digits,
        options=PruneOptions(
            methods=("block_influence", "alpha_norm"),
            ablations=("gate",),
            seeds=0,
            n_random=2,
            n_random_refit=0,
            bootstrap=0,
            timing=False,
            early_exit=False,
        ),
    )
    head = model.head
    with torch.no_grad():
        hidden = [h.double() for h in model.hidden_states(digits["test"].x)]
        z = [(h @ g.weight.double().T + g.bias.double()).numpy() for h, g in zip(hidden, head.adapters)]
        alpha = head.double().layer_weights(hidden).numpy()
        w = head.classifier.weight.numpy()
        head.float()
    cos = lambda a, b: (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))  # noqa: E731
    bi = np.stack([np.ones(len(z[0])), 1 - cos(z[0], z[1]), 1 - cos(z[1], z[2])], 1).mean(0)
    an = np.stack([alpha[:, i] * np.linalg.norm(z[i] @ w.T, axis=1) for i in range(3)], 1).mean(0)
    rows = result.pruning[(result.pruning.ranking == "dataset") & (result.pruning.k_removed == 1)]
    for method, mean_score in (("block_influence", bi), ("alpha_norm", an)):
        kept = rows[rows.method == method].layers_kept.iloc[0]
        first = int(np.argmin(mean_score)) + 1
        assert kept == ",".join(str(i) for i in (1, 2, 3) if i != first), (method, mean_score)
    assert {"oracle", "random", "block_influence", "alpha_norm"} <= set(result.pruning.method)
