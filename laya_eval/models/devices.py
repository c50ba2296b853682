"""Where computations run: checking a requested device, and the optional low-precision backbone pass."""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch

from laya_eval.errors import ConfigError
from laya_eval import catalog
from laya_eval.checks import check_choice

__all__ = ["DTYPES", "backbone_precision", "resolve_device"]

#: Autocast dtype of each choice of :data:`laya_eval.catalog.DTYPES` (float32: no autocast).
DTYPES = dict(zip(catalog.DTYPES, (None, torch.bfloat16, torch.float16), strict=True))


def resolve_device(device: str) -> torch.device:
    """Check that ``device`` exists here; ``cuda`` without a GPU is a ConfigError."""
    if not isinstance(device, str) or (device not in ("cpu", "cuda") and not device.startswith("cuda:")):
        raise ConfigError(f"device must be 'cpu', 'cuda' or 'cuda:N'; got {device!r}.")
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError(f"device {device!r} was requested but no CUDA GPU is available; use --device cpu.")
        index = device.partition(":")[2]
        if index and (not index.isdigit() or int(index) >= torch.cuda.device_count()):
            raise ConfigError(f"device {device!r} does not exist; this machine has {torch.cuda.device_count()} GPU(s).")
    return torch.device(device)


@contextlib.contextmanager
def backbone_precision(device: torch.device, dtype: str) -> Iterator[None]:
    """Autocast the backbone pass to ``dtype`` ("bfloat16"/"float16"); "float32" changes nothing.

    Effects, attributions and metrics are computed afterwards in float32 or better.
    """
    check_choice("dtype", dtype, DTYPES)
    if DTYPES[dtype] is None:
        yield
        return
    with torch.autocast(device_type=device.type, dtype=DTYPES[dtype]):
        yield
