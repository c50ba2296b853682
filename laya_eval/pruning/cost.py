"""What a shallower model costs: is the backbone a chain of its layers, and how long does running it up to
depth d take?

A backbone is a *chain* when one forward pass runs its layer modules (``layer_modules()``) once each, in layer
order: then the layers after the deepest kept one need not run at all. The latency of depth d is measured by
running the backbone with a forward hook on layer d's module that stops the pass there. Measurements are
timings of the machine they run on, never asserted in tests (benchmarks hold them).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch
from torch import nn

from laya_eval.errors import LayaEvalError
from laya_eval.models.layered import LayeredModel

__all__ = ["depth_latency", "is_chain", "layer_call_order"]


class _Stop(Exception):
    """Raised by the hook on the deepest layer needed: the rest of the backbone does not run."""


def _modules(model: LayeredModel) -> list[nn.Module] | None:
    try:
        modules = list(model.backbone.layer_modules())
    except (LayaEvalError, AttributeError, NotImplementedError):
        return None
    return modules if len(modules) == model.n_layers else None


@torch.no_grad()
def layer_call_order(model: LayeredModel, x: Any) -> list[int] | None:
    """The order in which one forward pass on ``x`` calls the layer modules (None: they are not exposed)."""
    modules = _modules(model)
    if modules is None:
        return None
    calls: list[int] = []
    handles = [m.register_forward_hook(lambda mod, args, out, i=i: calls.append(i)) for i, m in enumerate(modules)]
    try:
        model.eval()
        model.hidden_states(x)
    finally:
        for h in handles:
            h.remove()
    return calls


def is_chain(model: LayeredModel, x: Any) -> bool:
    """True when the layer modules run once each, in layer order (layer 1 first)."""
    return layer_call_order(model, x) == list(range(model.n_layers))


@torch.no_grad()
def _run_to(model: LayeredModel, modules: list[nn.Module], x: Any, depth: int) -> float:
    """Seconds to run the backbone up to layer ``depth`` (1-based); depth 0 runs the whole model."""
    handle = None
    if depth:

        def stop(module: nn.Module, args: Any, output: Any) -> None:
            raise _Stop

        handle = modules[depth - 1].register_forward_hook(stop)
    start = time.perf_counter()
    try:
        if depth:
            model.hidden_states(x)
        else:
            model(x)
    except _Stop:
        pass
    finally:
        if handle is not None:
            handle.remove()
    return time.perf_counter() - start


def depth_latency(model: LayeredModel, x: Any, *, repeats: int = 15, budget_s: float = 60.0) -> np.ndarray | None:
    """Median seconds of the backbone run up to each depth and of the whole model.

    Parameters
    ----------
    model : LayeredModel
    x : batch of inputs
    repeats : int
        Most interleaved rounds (every depth once per round) after one warm-up round; the median is taken.
    budget_s : float
        Fewer rounds (at least 3) when the warm-up round says ``repeats`` would take longer than this.

    Returns
    -------
    ndarray of float64, (L + 1,) or None
        ``[0]``: the whole model (backbone and head, for reference); ``[d]``: the backbone up to layer d (``[L]``:
        the whole backbone). None when the backbone is not a chain (:func:`is_chain`).
    """
    if not is_chain(model, x):
        return None
    modules = _modules(model)
    depths = list(range(model.n_layers + 1))
    warm = sum(_run_to(model, modules, x, d) for d in depths)
    rounds = int(min(repeats, max(3, budget_s // max(warm, 1e-9))))
    times = np.array([[_run_to(model, modules, x, d) for d in depths] for _ in range(rounds)])
    return np.median(times, axis=0)
