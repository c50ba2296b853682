"""The drawn removals of a next-token evaluation: ``resample``, ``noise`` and their update forms.

Each replaces a removed block's output by a value drawn per window and draw, and the effect is the mean over
``draws`` draws of the rise of the window's loss (docs/concepts/language-models.md):

``resample``         block i's output is a *donor* window's intact block-i output, position by position. Donor ``j``
                     of window ``g`` is drawn as a classifier's (:func:`laya_eval.engine.interventions.donor_ids`):
                     uniform over the other ``N - 1`` evaluated windows from (seed, g, j) alone. A donor is run as
                     every window is, padded on the right to the run's length, so a window's position ``t`` reads
                     the donor's state at ``t``; where the donor is shorter, that is the donor's state at a padding
                     position (the padding token after the donor's text, which it cannot see itself).
``resample-update``  the donor's update at block i (output minus input) added to the window's own block input.
``noise``            ``mu + sigma * eps`` per token: ``mu`` and ``sigma^2 = E[h^2] - mu^2`` the per-feature mean and
                     variance of block i's output over the real tokens of the evaluated windows, and standard normal
                     ``eps`` drawn per (window g, position t, draw j, block i) from
                     ``per_sample_normal(derived_seed(seed, 2, j, i), g * 2**32 + t, d)``.
``noise-update``     the same with the update's moments, added to the window's own block input.

The draws depend on the seed, the window's index and the draw only: the same for any batch size or order. The
donors' states are run again for each batch and draw (one intact pass over the batch's donors, in chunks of the
memory budget), never kept for the whole set.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from laya_eval.catalog import ABLATION_SPECS
from laya_eval.engine.interventions import NOISE_STREAM, donor_ids
from laya_eval.engine.results import donor_table as engine_donor_table
from laya_eval.engine.seeding import derived_seed, per_sample_normal
from laya_eval.errors import ConfigError
from laya_eval.language.decoder import CausalLM, Fill, padded_batch, run_windows
from laya_eval.language.text import TextWindows

__all__ = [
    "check_draws",
    "donor_states",
    "donor_table",
    "drawn_fill",
    "is_drawn",
    "noise_draw_arrays",
    "noise_states",
]


def is_drawn(ablation: str) -> bool:
    """Whether ``ablation`` is drawn per window (``resample``, ``noise`` and their update forms)."""
    return ablation in ABLATION_SPECS and ABLATION_SPECS[ablation].drawn_per_sample


def _on_update(ablation: str) -> bool:
    return "updates" in ABLATION_SPECS[ablation].needs


def check_draws(ablations: Sequence[str], n_windows: int) -> None:
    """A donor ablation needs two windows or more (one line before any pass)."""
    for a in ablations:
        if "donors" in ABLATION_SPECS[a].needs and n_windows < 2:
            raise ConfigError(
                f"--ablation {a} draws donors from the other evaluated windows; got {n_windows} window: evaluate "
                "at least 2 (--limit, --split, --context)."
            )


def donor_states(
    lm: CausalLM, data: TextWindows, donors: Tensor, length: int, rows: int, *, updates: bool
) -> list[Tensor]:
    """Every block's intact output (``updates``: output minus input) of the windows ``donors`` (B,), padded to
    ``length``: one (B, length, d) per block, run ``rows`` windows at a time."""
    device = next(lm.model.parameters()).device
    ids, mask = padded_batch([data.ids[k] for k in donors.tolist()], length, device)
    parts = []
    with torch.no_grad():
        for s in range(0, ids.shape[0], rows):
            run = run_windows(lm, ids[s : s + rows], mask[s : s + rows], keep=True)
            parts.append([h - x if updates else h for x, h in zip(run.inputs, run.outputs)])
    return [torch.cat([p[i] for p in parts]) for i in range(lm.n_layers)]


def noise_states(
    mean: Sequence[Tensor], square_mean: Sequence[Tensor], sample_ids: Tensor, length: int, *, seed: int, draw: int
) -> list[Tensor]:
    """Draw ``draw`` of every block's noise for the windows ``sample_ids`` (B,): one (B, length, d) per block,
    ``mean + std * eps`` computed in float64 and rounded to the statistics' dtype."""
    ids = sample_ids.clamp(min=0).to(torch.int64)
    positions = torch.arange(length, device=ids.device, dtype=torch.int64)
    tokens = ((ids[:, None] << 32) | positions[None, :]).reshape(-1)  # one random row per (window, position)
    out = []
    for i, (mu, sq) in enumerate(zip(mean, square_mean)):
        mu64, sq64 = mu.double(), sq.double()
        std = torch.sqrt(torch.clamp(sq64 - mu64 * mu64, min=0.0))
        eps = per_sample_normal(derived_seed(seed, NOISE_STREAM, draw, i), tokens, mu.numel()).to(mu.device)
        out.append((mu64 + std * eps.view(ids.shape[0], length, -1)).to(mu.dtype))
    return out


def drawn_fill(
    ablation: str,
    lm: CausalLM,
    data: TextWindows,
    sample_ids: Tensor,
    length: int,
    draw: int,
    *,
    seed: int,
    draws: int,
    statistics: dict[str, list[Tensor]] | None,
    rows: int,
) -> Fill:
    """Draw ``draw`` of ``ablation``'s fill for the windows ``sample_ids`` (B,), padded to ``length``: a
    :class:`~laya_eval.language.decoder.Fill` with one (B, length, d) per block, added to the block's input for the
    update forms."""
    updates = _on_update(ablation)
    if "donors" in ABLATION_SPECS[ablation].needs:
        donors = donor_ids(seed, sample_ids, len(data), draws)[:, draw]
        const = donor_states(lm, data, donors, length, rows, updates=updates)
    else:
        key = "update" if updates else "output"
        const = noise_states(statistics[key], statistics[f"{key}_square"], sample_ids, length, seed=seed, draw=draw)
    dtype = next(lm.model.parameters()).dtype
    return Fill(1.0 if updates else 0.0, [c.to(dtype) for c in const])


def donor_table(n_windows: int, *, seed: int, draws: int) -> pd.DataFrame:
    """``donors.csv``: one row per (window, draw) with the donor window's index (``sample``, ``draw``, ``donor``)."""
    donors = donor_ids(seed, torch.arange(n_windows), n_windows, draws).numpy()
    return engine_donor_table(np.arange(n_windows, dtype=np.int64), donors)


def noise_draw_arrays(
    ablation: str, statistics: dict[str, Any], n_windows: int, length: int, *, seed: int, draws: int, dtype
) -> dict[str, np.ndarray]:
    """``noise_draws.npz``: ``sample`` (N,) and ``layer_1`` … ``layer_L``, each (N, draws, length, d), the state
    (``noise-update``: the update added to the block's input) draw k put in place of block i for each window, in
    the model's dtype — drawn again from the same statistics and seed, so they are those the effects used."""
    key = "update" if _on_update(ablation) else "output"
    ids = torch.arange(n_windows)
    drawn = [
        noise_states(statistics[key], statistics[f"{key}_square"], ids, length, seed=seed, draw=j) for j in range(draws)
    ]
    arrays = {"sample": ids.numpy().astype(np.int64)}
    for i in range(len(drawn[0])):
        arrays[f"layer_{i + 1}"] = np.stack([d[i].to(dtype).cpu().numpy() for d in drawn], 1)
    return arrays
