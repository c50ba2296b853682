"""Per-sample randomness drawn from (seed, sample index), the same on every device and for any batching.

A counter-based hash (the "lowbias32" integer mixer, Wellons 2018) applied to the seed,
the global sample index and the layer index gives 53-bit uniform numbers. Nothing is
consumed sequentially, so a sample's numbers do not depend on which batch, chunk or
process it was evaluated in. The arithmetic is done on int64 tensors masked to 32 bits
on the device of ``sample_ids``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from laya_eval.checks import check_seed

__all__ = ["per_sample_uniform"]

_M32 = 0xFFFFFFFF


def _mix32(x: Tensor) -> Tensor:
    """A bijective 32-bit mixer on int64 tensors holding values in [0, 2**32)."""
    # Products may pass 2**63 and wrap; the low 32 bits kept by the mask are exact either way.
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & _M32
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & _M32
    return x ^ (x >> 16)


def per_sample_uniform(seed: int, sample_ids: Tensor, n: int) -> Tensor:
    """Uniform numbers in [0, 1), one row of ``n`` per sample.

    Parameters
    ----------
    seed : int
        Non-negative, below 2**64.
    sample_ids : Tensor of int64, (B,)
        Global sample indices (non-negative).
    n : int
        Numbers per sample.

    Returns
    -------
    Tensor of float64, (B, n)
        Row ``b`` depends only on ``(seed, sample_ids[b])``.

    Examples
    --------
    >>> a = per_sample_uniform(0, torch.tensor([3, 4]), 2)
    >>> torch.equal(a[1], per_sample_uniform(0, torch.tensor([4]), 2)[0])
    True
    """
    check_seed("seed", seed)
    ids = sample_ids.to(torch.int64)
    h = _mix32(torch.full_like(ids, (seed & _M32) ^ 0x9E3779B9))
    h = _mix32(h ^ ((seed >> 32) & _M32))
    h = _mix32(h ^ (ids & _M32))
    h = _mix32(h ^ ((ids >> 32) & _M32))
    layer = torch.arange(n, device=ids.device, dtype=torch.int64)
    h = h[:, None] ^ (layer[None, :] * 0x27D4EB2F & _M32)
    high = _mix32(h ^ 0x85EBCA6B)
    low = _mix32(high ^ 0xC2B2AE35)
    return ((high >> 11).double() * 2.0**32 + low.double()) / 2.0**53
