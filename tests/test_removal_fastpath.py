"""The heads' removal fast paths (``zero`` / ``mean`` at head scope) against a slow recomputation.

Oracle: for every removal ``k`` the replaced inputs ``h_i' = m p_i + (1 - m) v_i`` are built
one removal at a time and handed to the head's ordinary ``forward`` (no code of
``laya_eval.models.removal`` involved). The fast paths must agree within 1e-6 in float32 and
1e-12 in float64, on spatial maps too (the heads pool them first), and each test also checks
that the fast route was the one taken, so the agreement is not the oracle against itself.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from laya_eval.errors import ConfigError
from laya_eval.models.removal import fast_route, recompute_removal_logits
from laya_eval.models.heads import ConcatHead, LayerHead, LayaHead, make_head, pool_hidden
from laya_eval.engine.removals import deletion_masks, leave_one_out_masks, removal_effects
from laya_eval.models.trace import trace_from_hidden

C = 5
B = 7
# layer 2 and 4 are spatial maps (B, C_i, H, W); the heads see their channel means
SHAPES = [(6,), (4, 3, 3), (5,), (3, 2, 4)]
DIMS = [s[0] for s in SHAPES]
# (registry name, head kwargs)
HEAD_CASES = {
    "lastlayer": ("lastlayer", {}),
    "concat": ("concat", {}),
    "scalarmix": ("scalarmix", {"d_star": 6}),
    "laya-identity": ("laya", {"d_star": 6, "scorer_hidden": 9, "tau": 0.7}),
    "laya-mlp": ("laya", {"d_star": 6, "scorer_hidden": 9, "tau": 0.7, "psi": "mlp"}),
}
# float32: 1e-6 absolute plus 1e-6 relative (a few ulps of logits near 1: the fast path sums the scorer's
# per-layer blocks in another order than one matmul over the concatenation does)
TOL = {torch.float32: {"atol": 1e-6, "rtol": 1e-6}, torch.float64: {"atol": 1e-12, "rtol": 0}}


def _head(case: str, dtype: torch.dtype) -> LayerHead:
    name, kwargs = HEAD_CASES[case]
    torch.manual_seed(0)
    head = make_head(name, DIMS, C, **kwargs)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # non-trivial weights everywhere (ScalarMix starts uniform)
        for p in head.parameters():
            p.add_(0.5 * torch.randn(p.shape, generator=g))
    return head.to(dtype).eval()


def _hidden(dtype: torch.dtype, seed: int = 2) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, *s, generator=g, dtype=torch.float64).to(dtype) for s in SHAPES]


def _fill(kind: str, hidden: list[torch.Tensor]) -> list[torch.Tensor]:
    if kind == "zero":
        return [h.new_zeros(h.shape[1]) for h in hidden]
    # a "dataset mean" that is not the batch mean, so a wrong fill cannot pass by accident
    return [pool_hidden(h).mean(0) + 0.3 for h in hidden]


def _random_masks(k: int, seed: int = 3) -> torch.Tensor:
    """(B, K, L) binary masks with several removals per row; row 0 keeps all, row 1 removes all."""
    g = torch.Generator().manual_seed(seed)
    masks = (torch.rand(B, k, len(SHAPES), generator=g) > 0.5).double()
    masks[:, 0] = 1.0
    masks[:, 1] = 0.0
    return masks


def _slow_removal_logits(head, hidden, keep, fill) -> torch.Tensor:
    """One removal at a time through ``head.forward`` on replaced pooled states: (B, K, C)."""
    pooled = [pool_hidden(h) for h in hidden]
    keep = keep.expand(len(pooled[0]), *keep.shape[-2:]).to(pooled[0].dtype)
    out = []
    for k in range(keep.shape[1]):
        replaced = [
            keep[:, k, i : i + 1] * p + (1 - keep[:, k, i : i + 1]) * v for i, (p, v) in enumerate(zip(pooled, fill))
        ]
        out.append(head(replaced))
    return torch.stack(out, 1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kind", ["zero", "mean"])
@pytest.mark.parametrize("case", sorted(HEAD_CASES))
def test_fast_path_equals_recomputation(case, kind, dtype):
    head = _head(case, dtype)
    hidden = _hidden(dtype)
    fill = _fill(kind, hidden)
    keep = _random_masks(k=6).to(dtype)
    assert fast_route(head, keep) is not recompute_removal_logits, "the built-in heads must take their fast path"
    got = head.removal_logits(hidden, keep, fill)
    expected = _slow_removal_logits(head, hidden, keep, fill)
    assert got.shape == (B, 6, C) and got.dtype == dtype
    torch.testing.assert_close(got, expected, **TOL[dtype])
    # not vacuous: removals change the logits, and differently per removal
    assert (got[:, 1] - got[:, 0]).abs().max() > 1e-2
    assert (expected[:, 2:] - expected[:, :1]).abs().max() > 1e-2


@pytest.mark.parametrize("case", sorted(HEAD_CASES))
def test_shared_masks_and_deletion_masks(case):
    """(K, L) masks shared by the batch (leave-one-layer-out) and per-input deletion masks."""
    head = _head(case, torch.float64)
    hidden = _hidden(torch.float64, seed=5)
    fill = _fill("mean", hidden)
    for keep in (
        leave_one_out_masks(len(SHAPES)).double(),
        deletion_masks(torch.argsort(torch.randn(B, len(SHAPES)), dim=1)),
    ):
        torch.testing.assert_close(
            head.removal_logits(hidden, keep, fill), _slow_removal_logits(head, hidden, keep, fill), atol=1e-12, rtol=0
        )


@pytest.mark.parametrize("case", sorted(HEAD_CASES))
def test_fractional_masks(case):
    """Values between 0 and 1 mix the two inputs; LAYA with an MLP psi takes the generic route for them."""
    head = _head(case, torch.float64)
    hidden = _hidden(torch.float64)
    fill = _fill("mean", hidden)
    keep = torch.rand(B, 3, len(SHAPES), generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    fast = fast_route(head, keep) is not recompute_removal_logits
    assert fast == (case != "laya-mlp")
    torch.testing.assert_close(
        head.removal_logits(hidden, keep, fill), _slow_removal_logits(head, hidden, keep, fill), atol=1e-12, rtol=0
    )


class _ProductHead(LayerHead):
    """A custom head without a fast path: per-layer terms ``tanh(W_i p_i)``, not affine in ``p_i``."""

    name = "product"

    def __init__(self, layer_dims, num_classes):
        super().__init__(layer_dims, num_classes)
        self.blocks = nn.ModuleList(nn.Linear(d, num_classes) for d in layer_dims)
        self.b = nn.Parameter(torch.zeros(num_classes))

    def terms(self, hidden):
        return torch.stack([torch.tanh(m(p)) for m, p in zip(self.blocks, self._check(hidden))], 1)

    @property
    def bias(self):
        return self.b


class _TanhConcat(ConcatHead):
    """Overrides ``terms`` of a head with a fast path: the affine shortcut would be wrong for it."""

    def terms(self, hidden):
        return torch.tanh(super().terms(hidden))


class _CachedLaya(LayaHead):
    """Subclass that changes nothing the fast path relies on: keeps LAYA's fast path."""


class _OptedOutLaya(LayaHead):
    """Subclass that opts out of the fast path explicitly."""

    removal_fast_path = None


@pytest.mark.parametrize("cls", [_ProductHead, _TanhConcat, _OptedOutLaya])
def test_custom_heads_fall_back_to_the_generic_route(cls):
    torch.manual_seed(0)
    head = cls(DIMS, C).double()
    hidden = _hidden(torch.float64)
    fill = _fill("mean", hidden)
    keep = _random_masks(k=4)
    assert fast_route(head, keep) is recompute_removal_logits
    torch.testing.assert_close(
        head.removal_logits(hidden, keep, fill), _slow_removal_logits(head, hidden, keep, fill), atol=1e-12, rtol=0
    )


def test_subclass_without_overrides_keeps_the_fast_path():
    assert fast_route(_CachedLaya(DIMS, C), _random_masks(k=2)) is not recompute_removal_logits


def test_removal_effects_with_a_custom_head():
    """perturb's zero/mean route goes through removal_logits, so a custom head works there too."""
    torch.manual_seed(0)
    head = _ProductHead(DIMS, C).double()
    hidden = _hidden(torch.float64)
    tr = trace_from_hidden(head, hidden)
    model = nn.Module()
    model.head = head
    got = removal_effects(tr, model, leave_one_out_masks(len(SHAPES)), ablation="zero")
    probs = torch.softmax(
        _slow_removal_logits(head, hidden, leave_one_out_masks(len(SHAPES)).double(), _fill("zero", hidden)), -1
    )
    expected = tr.confidence[:, None] - probs.gather(2, tr.pred[:, None, None].expand(-1, len(SHAPES), 1))[..., 0]
    torch.testing.assert_close(got, expected, atol=1e-12, rtol=0)


@pytest.mark.parametrize("case", sorted(set(HEAD_CASES) - {"laya-mlp"}))
def test_fast_path_creates_nothing_off_the_inputs_device(case):
    """On the meta device any tensor made on the CPU inside the route would raise a device mismatch.

    (LAYA with an MLP psi first reads the masks to check they are 0/1, which meta tensors cannot answer.)
    """
    head = _head(case, torch.float32).to("meta")
    hidden = [h.to("meta") for h in _hidden(torch.float32)]
    fill = [torch.zeros(d, device="meta") for d in DIMS]
    keep = _random_masks(k=3).float().to("meta")
    out = head.removal_logits(hidden, keep, fill)
    assert out.device.type == "meta" and out.shape == (B, 3, C)


def test_bad_inputs_are_explained():
    head = _head("laya-identity", torch.float64)
    hidden = _hidden(torch.float64)
    fill = _fill("zero", hidden)
    with pytest.raises(ConfigError, match=r"keep must have shape \(K, 4\) or \(B, K, 4\).*got \(3, 3\)"):
        head.removal_logits(hidden, torch.ones(3, 3), fill)
    with pytest.raises(ConfigError, match=r"must have B = 7 rows, one per input; got 2"):
        head.removal_logits(hidden, torch.ones(2, 3, 4), fill)
    with pytest.raises(ConfigError, match=r"one replacement vector per layer \(4\); got 3"):
        head.removal_logits(hidden, torch.ones(3, 4), fill[:3])
    with pytest.raises(ConfigError, match=r"fill vector 2 must have shape \(4,\).*got \(5,\)"):
        head.removal_logits(hidden, torch.ones(3, 4), [fill[0], torch.zeros(5), *fill[2:]])
