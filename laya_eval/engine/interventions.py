"""Random replacements of a layer's state: the ``resample`` and ``noise`` ablations.

Both replace the removed layer's state — the pooled state at head scope, the block's full output inside the
backbone at network scope — by a value drawn per sample, and average the resulting probability over ``K``
draws (``--draws``):

``resample``    the state of another sample of the evaluated split (a *donor*). Donor ``j`` of sample ``g`` is
                drawn uniformly among the other ``N - 1`` samples from (seed, ``g``, ``j``) alone, so the donors
                do not depend on batching, chunking or the number of processes. The replacement keeps the
                layer's marginal distribution exactly (a distribution-preserving intervention).
``noise``       ``mu + sigma * eps``: the layer's per-feature mean and standard deviation over the evaluated
                data (``sigma^2 = E[h^2] - E[h]^2`` from the dataset statistics, clipped at 0) and standard
                normal ``eps`` drawn per sample, draw, layer and feature from (seed, sample index). It keeps the
                first two moments of every feature (not their correlations).

Their update forms (``resample-update``, ``noise-update``; specs that need ``"updates"``) draw the same way from
the blocks' updates ``h_i - h_{i-1}`` (the donors' updates; the updates' per-feature moments) and add the draw to the
removed block's input inside the backbone (network scope).

:class:`SampleFills` carries the per-draw replacement states of one batch; :func:`sample_fill_probs` turns them
into the mean ``p_c`` after each removal. :func:`resample_sample_fill` and :func:`noise_sample_fill` are the two
ablations' *sample fills*, the callables they are registered with (:func:`laya_eval.register_ablation`, the
protocol every ablation drawn per sample follows; ``docs/plugins.md``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
from torch import Tensor

from laya_eval.engine.memory_budget import row_chunks
from laya_eval.engine.network_passes import continued_logits, starts_at_block, update_replacer
from laya_eval.engine.seeding import derived_seed, per_sample_normal, per_sample_uniform
from laya_eval.errors import ConfigError
from laya_eval.models.heads import LayerHead, pool_hidden
from laya_eval.models.layered import LayeredModel
from laya_eval.models.trace import Trace

__all__ = [
    "DONOR_STREAM",
    "NOISE_STREAM",
    "SampleFills",
    "donor_ids",
    "drawn_class_probs",
    "drawn_head_logits",
    "drawn_network_logits",
    "drawn_update_network_logits",
    "noise_fills",
    "noise_sample_fill",
    "noise_update_sample_fill",
    "resample_fills",
    "resample_sample_fill",
    "sample_fill_probs",
]

#: The first part of every derived seed of each ablation, so donors and noise never share random numbers.
DONOR_STREAM, NOISE_STREAM = 1, 2


@dataclass(frozen=True)
class SampleFills:
    """Per-sample replacement states of one batch, one list per draw.

    Attributes
    ----------
    draws : tuple of list of Tensor
        ``draws[j][i]``: draw ``j``'s replacement of layer ``i``, (B, d_i) at head scope, (B, *block output)
        at network scope.
    donors : Tensor of int64, (B, K), or None
        For an ablation that needs donors (``resample``): the global index of each draw's donor.
    """

    draws: tuple[list[Tensor], ...]
    donors: Tensor | None = None

    def double(self) -> SampleFills:
        """The same fills in float64 (effects are computed in float64)."""
        return SampleFills(tuple([v.double() for v in d] for d in self.draws), self.donors)


def donor_ids(seed: int, sample_ids: Tensor, n_samples: int, draws: int) -> Tensor:
    """Donor ``j`` of each sample: uniform over the other ``n_samples - 1`` indices, from (seed, index, j).

    Parameters
    ----------
    seed : int
    sample_ids : Tensor of int64, (B,)
        Global indices in ``[0, n_samples)`` (padding rows, -1, are treated as index 0 and dropped later).
    n_samples : int
        Size of the evaluated split; at least 2.
    draws : int

    Returns
    -------
    Tensor of int64, (B, draws), never equal to the sample's own index.
    """
    if n_samples < 2:
        raise ConfigError(f"resample needs at least 2 samples to draw donors from; got {n_samples}.")
    ids = sample_ids.clamp(min=0)
    u = per_sample_uniform(derived_seed(seed, DONOR_STREAM), ids, draws)  # (B, K), in [0, 1)
    pick = torch.floor(u * (n_samples - 1)).to(torch.int64).clamp(max=n_samples - 2)
    return pick + (pick >= ids[:, None]).to(torch.int64)  # skip the sample itself


def resample_fills(donor_states: Sequence[Tensor], donors: Tensor) -> SampleFills:
    """Split the donors' states (each (K * B, ...), draw-major: rows ``j*B .. (j+1)*B - 1`` are draw ``j``)."""
    batch, draws = donors.shape
    return SampleFills(tuple([s[j * batch : (j + 1) * batch] for s in donor_states] for j in range(draws)), donors)


def noise_fills(
    mean: Sequence[Tensor], square_mean: Sequence[Tensor], sample_ids: Tensor, *, seed: int, draws: int
) -> SampleFills:
    """``mean + std * eps`` per sample and draw; ``mean``/``square_mean`` per layer, each of one state's shape."""
    ids = sample_ids.clamp(min=0)
    out = []
    for j in range(draws):
        layers = []
        for i, (mu, sq) in enumerate(zip(mean, square_mean)):
            mu64, sq64 = mu.double(), sq.double()
            std = torch.sqrt(torch.clamp(sq64 - mu64 * mu64, min=0.0))
            eps = per_sample_normal(derived_seed(seed, NOISE_STREAM, j, i), ids, mu.numel())
            layers.append((mu64 + std * eps.to(mu.device).view(-1, *mu.shape)).to(mu.dtype))
        out.append(layers)
    return SampleFills(tuple(out))


def resample_sample_fill(
    statistics: dict[str, list[Tensor]],
    sample_ids: Tensor,
    *,
    seed: int,
    draws: int,
    donor_states: Sequence[Tensor],
    donors: Tensor,
) -> SampleFills:
    """``resample``'s sample fill: the states of the donors the engine drew (:func:`donor_ids`) and ran."""
    return resample_fills(donor_states, donors)


def noise_sample_fill(
    statistics: dict[str, list[Tensor]],
    sample_ids: Tensor,
    *,
    seed: int,
    draws: int,
    donor_states: None = None,
    donors: None = None,
) -> SampleFills:
    """``noise``'s sample fill: :func:`noise_fills` from the ``hidden_mean`` and ``hidden_square_mean`` statistics."""
    return noise_fills(statistics["hidden_mean"], statistics["hidden_square_mean"], sample_ids, seed=seed, draws=draws)


def noise_update_sample_fill(
    statistics: dict[str, list[Tensor]],
    sample_ids: Tensor,
    *,
    seed: int,
    draws: int,
    donor_states: None = None,
    donors: None = None,
) -> SampleFills:
    """``noise-update``'s sample fill: :func:`noise_fills` from the ``update_mean`` and ``update_square_mean``
    statistics (the same random numbers as ``noise``'s, scaled by the updates' moments)."""
    return noise_fills(statistics["update_mean"], statistics["update_square_mean"], sample_ids, seed=seed, draws=draws)


def _expand(masks: Tensor, batch: int) -> Tensor:
    return masks.expand(batch, *masks.shape) if masks.dim() == 2 else masks


def _head_logits(tr: Trace, head: LayerHead, masks: Tensor, values: Sequence[Tensor]) -> Tensor:
    """Head logits (B, K, C) with layer ``i`` replaced by ``values[i][b]`` wherever ``masks[b, k, i] == 0``."""
    batch, k, _ = masks.shape
    replaced = []
    for i, h in enumerate(tr.hidden):
        p = pool_hidden(h)
        keep = (masks[:, :, i] > 0.5)[..., None]  # (B, K, 1)
        v = values[i].to(p)
        replaced.append(torch.where(keep, p[:, None, :], v[:, None, :]).reshape(batch * k, -1))
    return head(replaced).view(batch, k, -1)


def _network_logits(
    tr: Trace,
    model: LayeredModel,
    masks: Tensor,
    values: Sequence[Tensor],
    max_rows: int | None = None,
    on_update: bool = False,
) -> Tensor:
    """Logits (B, K, C) with block ``i``'s output replaced by ``values[i][b]`` (``on_update``: by its input plus
    ``values[i][b]``) inside the backbone; at most ``max_rows`` inputs per backbone pass
    (:mod:`laya_eval.engine.memory_budget`)."""
    if starts_at_block(tr, model):  # each removal from its first removed block (laya_eval.engine.network_passes)

        def replacer_for(i: int, rows: Tensor, drop: Tensor) -> Any:
            value = values[i][rows.to(values[i].device)]
            return update_replacer(drop, value) if on_update else _per_sample_replacer(drop, value)

        first = row_chunks(tr.n_samples, max_rows)[0]
        index = torch.arange(tr.n_samples, device=masks.device)
        return torch.stack(
            [
                continued_logits(tr, model, index, masks[:, k] == 0, replacer_for, first.stop - first.start)
                for k in range(masks.shape[1])
            ],
            1,
        )
    out = []
    for k in range(masks.shape[1]):
        parts = []
        for sl in row_chunks(tr.n_samples, max_rows):
            replace: dict[int, Any] = {}
            for i in range(masks.shape[2]):
                drop = masks[sl, k, i] == 0
                if bool(drop.any()):
                    value = values[i][sl]
                    replace[i] = update_replacer(drop, value) if on_update else _per_sample_replacer(drop, value)
            parts.append(model.head(model.hidden_states(tr.inputs[sl], replace)))
        out.append(torch.cat(parts))
    return torch.stack(out, 1)


def _per_sample_replacer(drop: Tensor, value: Tensor) -> Callable[[Tensor], Tensor]:
    def apply(t: Tensor) -> Tensor:
        if value.shape != t.shape:
            raise ConfigError(
                f"a replacement state has shape {tuple(value.shape)}; the block output it replaces "
                f"has {tuple(t.shape)}."
            )
        shape = (-1,) + (1,) * (t.dim() - 1)
        return torch.where(drop.to(t.device).view(shape), value.to(t), t)

    return apply


def drawn_class_probs(
    tr: Trace,
    head,
    model: LayeredModel | None,
    masks: Tensor,
    fills: SampleFills,
    scope: str,
    max_rows: int | None = None,
    on_update: bool = False,
) -> Tensor:
    """Mean over the draws of the class probabilities after each removal in ``masks`` ((K, L) or (B, K, L)):
    (B, K, C). ``model`` is needed at network scope only, where a backbone pass carries at most ``max_rows``
    inputs (``on_update``: the draws are updates, added to the removed blocks' inputs)."""
    masks = _expand(masks.to(tr.terms.dtype), tr.n_samples)
    total = None
    for values in fills.draws:
        if len(values) != masks.shape[-1]:
            raise ConfigError(
                f"each draw of a sample fill holds one replacement state per layer ({masks.shape[-1]}); "
                f"got {len(values)}."
            )
        if scope == "head":
            logits = _head_logits(tr, head, masks, values)
        else:
            logits = _network_logits(tr, model, masks, values, max_rows, on_update)
        p = torch.softmax(logits, -1)
        total = p if total is None else total + p
    return total / len(fills.draws)


def sample_fill_probs(
    tr: Trace,
    model: LayeredModel,
    masks: Tensor,
    fills: SampleFills,
    scope: str,
    *,
    target: Tensor | None = None,
    max_rows: int | None = None,
    on_update: bool = False,
) -> Tensor:
    """Mean over the draws of ``p_t`` after each removal in ``masks`` ((K, L) or (B, K, L)): (B, K); ``t`` is
    ``target`` or the predicted class; at network scope at most ``max_rows`` inputs per backbone pass
    (``on_update``: the draws are updates, added to the removed blocks' inputs)."""
    probs = drawn_class_probs(tr, model.head, model, masks, fills, scope, max_rows, on_update)
    target = tr.pred if target is None else target
    return probs.gather(2, target[:, None, None].expand(-1, probs.shape[1], 1)).squeeze(2)


def drawn_head_logits(tr: Trace, head: LayerHead, masks: Tensor, fill) -> Tensor:
    """Head-scope logits of an ablation drawn per sample: ``log`` of the class probabilities averaged over the
    draws, whose softmax is that average (``removal_probs`` takes the average itself)."""
    return drawn_class_probs(tr, head, None, masks, _sample_fills(fill), "head").log()


def drawn_network_logits(tr: Trace, model: LayeredModel, masks: Tensor, fill, *, max_rows: int | None = None) -> Tensor:
    """As :func:`drawn_head_logits`, inside the backbone, at most ``max_rows`` inputs per backbone pass."""
    return drawn_class_probs(tr, model.head, model, masks, _sample_fills(fill), "network", max_rows).log()


def drawn_update_network_logits(
    tr: Trace, model: LayeredModel, masks: Tensor, fill, *, max_rows: int | None = None
) -> Tensor:
    """As :func:`drawn_network_logits` with the draws as updates: each removed block's output is its input plus
    the draw."""
    fills = _sample_fills(fill)
    return drawn_class_probs(tr, model.head, model, masks, fills, "network", max_rows, on_update=True).log()


def _sample_fills(fill) -> SampleFills:
    if not isinstance(fill, SampleFills):
        raise ConfigError("an ablation drawn per sample needs the batch's draws (SampleFills) as its fill.")
    return fill
