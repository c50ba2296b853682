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

__all__ = ["derived_seed", "per_sample_normal", "per_sample_uniform"]

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
        A seed (:func:`laya_eval.checks.check_seed`).
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


def derived_seed(seed: int, *parts: int) -> int:
    """A seed for one purpose (an ablation's draw ``j`` of layer ``i``, say) from ``seed`` and small integers.

    The parts are mixed in order by the same hash, so ``derived_seed(s, 1, 0)`` and ``derived_seed(s, 0, 1)``
    differ and the result is a fixed function of its arguments (below 2**63).
    """
    check_seed("seed", seed)
    hi, lo = (seed >> 32) & _M32, seed & _M32
    for k, part in enumerate(parts):
        h = _mix32(torch.tensor([(lo ^ ((int(part) * 0x9E3779B9 + k) & _M32)) & _M32], dtype=torch.int64))
        lo, hi = int(_mix32(h ^ hi)), int(h)
    return ((hi & 0x7FFFFFFF) << 32) | lo


def per_sample_normal(seed: int, sample_ids: Tensor, n: int) -> Tensor:
    """Standard normal numbers, one row of ``n`` per sample, from (seed, sample index) (Box-Muller).

    Returns
    -------
    Tensor of float64, (B, n)
        Row ``b`` depends only on ``(seed, sample_ids[b])``.
    """
    half = (n + 1) // 2
    u = per_sample_uniform(seed, sample_ids, 2 * half)
    radius = torch.sqrt(-2.0 * torch.log1p(-u[:, :half]))  # 1 - u lies in (0, 1]: the log is finite
    angle = 2.0 * torch.pi * u[:, half:]
    return torch.cat([radius * torch.cos(angle), radius * torch.sin(angle)], 1)[:, :n]
