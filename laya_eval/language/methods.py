"""Layer scores of a causal LM on its own next-token prediction: one registered function per method.

Every method returns ``(B, L)`` float64 scores of blocks ``1..L`` oriented like the effect they are scored against:
higher = removing the block raises the window's mean next-token loss more. With ``h_0`` the first block's input
and ``h_i`` block ``i``'s output (over the window's real tokens):

- ``block_influence`` (ShortGPT): ``1 - mean_t cos(h_{i-1,t}, h_{i,t})``.
- ``angular_distance`` (Gromov et al., one block): ``mean_t arccos(cos(h_{i-1,t}, h_{i,t})) / pi``.
- ``grad_x_act``: ``-sum_{t,d} dl/dh_i * h_i``, the first-order rise of the loss when ``h_i`` is zeroed, ``l`` the
  window's mean loss and the gradient through every later block.
- ``atp`` (attribution patching): ``sum_{t,d} dl/dh_i * (fill_i - h_i)``, the first-order estimate of the
  ablation's own effect (``fill_i = h_{i-1}`` for ``skip``). A drawn ablation's score is the mean over its draws
  (the evaluation sets each draw's fill in turn), i.e. against the mean fill.
- ``ig``: Integrated Gradients of ``-l`` along ``fill_i + a (h_i - fill_i)``, ``a`` from 0 to 1, later blocks
  recomputed (Gauss-Legendre, ``n_steps`` points); by completeness it sums to the exact effect (a drawn ablation:
  the mean over its draws, which sums to the mean effect).
- ``logit_lens``: ``lens(h_{i-1}) - lens(h_i)``, ``lens(h)`` the mean next-token loss of the LM head reading ``h``
  through the final norm: how much the loss falls when the head reads block i instead of block i-1.
- ``random``: uniform numbers drawn from (seed, window index), a chance baseline.

Register another with :func:`register_next_token_method`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from torch import Tensor

from laya_eval.catalog import NEXT_TOKEN_METHODS
from laya_eval.engine.seeding import per_sample_uniform
from laya_eval.language.decoder import CausalLM, Fill, run_windows, window_losses

__all__ = ["NEXT_TOKEN_REGISTRY", "IntactPass", "NextTokenMethod", "register_next_token_method"]


@dataclass
class IntactPass:
    """One batch of windows run intact: what every method reads.

    Attributes
    ----------
    lm : CausalLM
    ids, mask : Tensor of int64, (B, T)
    inputs, outputs : list of Tensor, each (B, T, d)
        Every block's input and output.
    grads : list of Tensor, each (B, T, d)
        ``d l_b / d h_i`` of each window's mean loss (through every later block); empty where no method of the
        run reads gradients.
    sample_ids : Tensor of int64, (B,)
    fill : Fill or None
        The ablation's fill (the state IG and attribution patching start from); one draw's for a drawn ablation
        (rows as the batch's), None where no fill is set (the methods that read none).
    seed, n_steps : int
    rows : int
        Rows per model call with gradients within the memory budget (IG and the logit lens run in such chunks).
    """

    lm: CausalLM
    ids: Tensor
    mask: Tensor
    inputs: list[Tensor]
    outputs: list[Tensor]
    grads: list[Tensor]
    sample_ids: Tensor
    fill: Fill | None
    seed: int
    n_steps: int
    rows: int


@dataclass(frozen=True)
class NextTokenMethod:
    name: str
    description: str
    fn: Callable[[IntactPass], Tensor]
    baseline: bool = False
    #: Whether it reads the intact pass's loss gradients (``IntactPass.grads``): the intact pass runs backward only
    #: when some method does.
    gradients: bool = False


NEXT_TOKEN_REGISTRY: dict[str, NextTokenMethod] = {}


def register_next_token_method(name: str, description: str, *, baseline: bool = False, gradients: bool = False):
    """Decorator: enter ``fn(batch: IntactPass) -> Tensor (B, L)`` under ``name`` (``gradients``: it reads
    ``batch.grads``)."""

    def enter(fn: Callable[[IntactPass], Tensor]) -> Callable[[IntactPass], Tensor]:
        if name in NEXT_TOKEN_REGISTRY:
            raise ValueError(f"next-token method {name!r} is registered already")
        NEXT_TOKEN_REGISTRY[name] = NextTokenMethod(name, description, fn, baseline, gradients)
        return fn

    return enter


def _real(batch: IntactPass) -> Tensor:
    return batch.mask.double()


def _token_mean(values: Tensor, real: Tensor) -> Tensor:
    return (values * real).sum(1) / real.sum(1)


def _cosines(batch: IntactPass) -> Tensor:
    """(B, L, T) cosine of each token's state before and after each block."""
    return torch.stack(
        [
            torch.nn.functional.cosine_similarity(a.double(), b.double(), dim=-1)
            for a, b in zip(batch.inputs, batch.outputs)
        ],
        1,
    )


@register_next_token_method(
    "block_influence", "ShortGPT's Block Influence: 1 - mean cosine of a block's input and output."
)
def block_influence(batch: IntactPass) -> Tensor:
    real = _real(batch)[:, None]
    return ((1 - _cosines(batch)) * real).sum(-1) / real.sum(-1)


@register_next_token_method("angular_distance", "Mean angular distance arccos(cos)/pi of a block's input and output.")
def angular_distance(batch: IntactPass) -> Tensor:
    real = _real(batch)[:, None]
    angle = torch.arccos(_cosines(batch).clamp(-1, 1)) / np.pi
    return (angle * real).sum(-1) / real.sum(-1)


@register_next_token_method(
    "grad_x_act", "-gradient x activation of block outputs (first-order rise of the loss on zeroing).", gradients=True
)
def grad_x_act(batch: IntactPass) -> Tensor:
    return torch.stack([-(g.double() * h.double()).sum((1, 2)) for g, h in zip(batch.grads, batch.outputs)], 1)


@register_next_token_method(
    "atp", "Attribution patching: gradient x (fill - output), the first-order removal effect.", gradients=True
)
def attribution_patching(batch: IntactPass) -> Tensor:
    cols = []
    for i, (g, h, x) in enumerate(zip(batch.grads, batch.outputs, batch.inputs)):
        cols.append((g.double() * (batch.fill.of(i, x).double() - h.double())).sum((1, 2)))
    return torch.stack(cols, 1)


@register_next_token_method("ig", "Integrated Gradients of the loss from the removed block to the intact one.")
def integrated_gradients(batch: IntactPass) -> Tensor:
    from numpy.polynomial.legendre import leggauss

    nodes, weights = leggauss(batch.n_steps)
    alphas, weights = (nodes + 1) / 2, weights / 2
    b, n_layers = batch.ids.shape[0], len(batch.outputs)
    out = torch.zeros(b, n_layers, dtype=torch.float64, device=batch.ids.device)
    for i in range(n_layers):
        diff = (batch.outputs[i] - batch.fill.of(i, batch.inputs[i])).detach().double()
        for s in range(0, b, batch.rows):  # row chunks within the memory budget
            ids, mask, part = batch.ids[s : s + batch.rows], batch.mask[s : s + batch.rows], diff[s : s + batch.rows]
            for alpha, weight in zip(alphas.tolist(), weights.tolist()):
                scale = torch.ones(ids.shape[0], n_layers, device=batch.ids.device)
                scale[:, i] = alpha
                # the path starts at block i: the blocks before it give their intact outputs without running
                start = (i, [h[s : s + batch.rows] for h in batch.outputs[:i]])
                with torch.enable_grad():
                    fill = batch.fill.rows(slice(s, s + batch.rows))
                    run = run_windows(batch.lm, ids, mask, scale=scale, fill=fill, keep=True, start=start)
                    window_losses(run.logits, ids, mask).sum().backward()
                # only blocks i .. run, so block i's output is the first one kept
                out[s : s + batch.rows, i] -= weight * (run.outputs[0].grad.double() * part).sum((1, 2))
    return out


def lens_losses(lm: CausalLM, state: Tensor, ids: Tensor, mask: Tensor) -> Tensor:
    """(B,) mean next-token loss of the LM head reading ``state`` (B, T, d) through the final norm."""
    h = state if lm.parts.final_norm is None else lm.parts.final_norm(state)
    return window_losses(lm.parts.lm_head(h), ids, mask)


@register_next_token_method(
    "logit_lens", "Logit lens: fall of the next-token loss when the head reads block i instead of i-1."
)
def logit_lens(batch: IntactPass) -> Tensor:
    states = [batch.inputs[0], *batch.outputs]
    parts = []
    with torch.no_grad():
        for r in range(0, batch.ids.shape[0], batch.rows):  # row chunks within the memory budget
            rows = slice(r, r + batch.rows)
            parts.append(
                torch.stack([lens_losses(batch.lm, s[rows], batch.ids[rows], batch.mask[rows]) for s in states], 1)
            )
    lens = torch.cat(parts)
    return lens[:, :-1] - lens[:, 1:]


@register_next_token_method("random", "Uniform random scores per window (a chance baseline).", baseline=True)
def random_scores(batch: IntactPass) -> Tensor:
    ids = batch.sample_ids.clamp(min=0)
    return per_sample_uniform(batch.seed, ids, len(batch.outputs)).to(batch.ids.device)


if tuple(NEXT_TOKEN_REGISTRY) != NEXT_TOKEN_METHODS:
    raise ImportError(f"next-token methods {tuple(NEXT_TOKEN_REGISTRY)} differ from the catalog's {NEXT_TOKEN_METHODS}")
