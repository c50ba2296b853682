"""The depth-mixer protocol: what a module must expose so that its weights over depth can be audited.

A *depth mixer* is an :class:`torch.nn.Module` called once per forward pass as ``mixer(sources)``, with
``sources`` a sequence of ``J`` tensors of one shape ``(B, ...)`` (states produced earlier in the network),
whose output is exactly ``sum_j w_j(x) * s_j``. It declares

- ``mixer_softmax`` (bool): whether the weights are a softmax over the sources, and
- ``mixer_logits(sources) -> Tensor (B, J)`` (or ``(J,)`` for static weights): the logits before the softmax
  when ``mixer_softmax`` is true, the weights themselves otherwise.

Everything else is read from the outside through hooks that live only inside the context managers below:

- :func:`capture_mixers` records each mixer's sources, logits, weights and output in one pass and checks that
  the output is the weighted sum the protocol promises;
- :func:`removed_sources` runs the network with some sources removed from one mixer: ``removal="weight"``
  sets their weight to zero (for a softmax their logit to minus infinity, so the rest renormalise; with every
  source removed the mixer outputs zeros); ``removal="mean"`` replaces the source states with their mean over
  the evaluated data before the mixer computes its weights, ``removal="resample"`` with the same source states
  of other samples (one donor per sample, given from outside);
- :func:`set_weights` runs the network with a mixer's weights given from outside (for gradients and
  integrated gradients over the weights).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Protocol, Sequence, runtime_checkable

import torch
from torch import Tensor, nn

from laya_eval.catalog import MIXER_REMOVALS
from laya_eval.errors import ConfigError
from laya_eval.checks import check_choice

__all__ = [
    "REMOVALS",
    "DepthMixer",
    "MixerCall",
    "capture_mixers",
    "find_mixers",
    "is_depth_mixer",
    "masked_weights",
    "mix",
    "mixer_weights",
    "removed_sources",
    "set_weights",
]

#: How a source is removed from a mixer (the names and descriptions live in the catalog).
REMOVALS = MIXER_REMOVALS


@runtime_checkable
class DepthMixer(Protocol):
    """A module whose output is ``sum_j w_j(x) s_j`` over its sources (see the module docstring)."""

    mixer_softmax: bool

    def mixer_logits(self, sources: Sequence[Tensor]) -> Tensor:
        """(B, J) or (J,): softmax logits when ``mixer_softmax``, else the weights."""

    def __call__(self, sources: Sequence[Tensor]) -> Tensor:
        """The weighted sum, shaped like one source."""


def is_depth_mixer(module: nn.Module) -> bool:
    """Whether ``module`` declares the protocol (``mixer_softmax`` a bool and a callable ``mixer_logits``)."""
    return isinstance(getattr(module, "mixer_softmax", None), bool) and callable(getattr(module, "mixer_logits", None))


def find_mixers(model: nn.Module) -> dict[str, nn.Module]:
    """Every depth mixer in ``model`` by submodule name, in module order."""
    return {name: m for name, m in model.named_modules() if name and is_depth_mixer(m)}


def _logits(mixer: nn.Module, sources: Sequence[Tensor]) -> Tensor:
    logits = mixer.mixer_logits(sources)
    batch, n = sources[0].shape[0], len(sources)
    if logits.dim() == 1:
        logits = logits.expand(batch, n)
    if tuple(logits.shape) != (batch, n):
        raise ConfigError(
            f"mixer_logits must return ({batch}, {n}) or ({n},) for {n} sources; got {tuple(logits.shape)}."
        )
    return logits


def mixer_weights(mixer: nn.Module, sources: Sequence[Tensor]) -> Tensor:
    """The mixer's weights over its sources, (B, J)."""
    logits = _logits(mixer, sources)
    return torch.softmax(logits, -1) if mixer.mixer_softmax else logits


def masked_weights(mixer: nn.Module, sources: Sequence[Tensor], keep: Tensor) -> Tensor:
    """The weights with the sources where ``keep`` (B, J) is 0 removed (zero weight; -inf logit before a
    softmax, so the kept weights renormalise; a row with nothing kept has all weights zero)."""
    logits = _logits(mixer, sources)
    kept = keep.to(torch.bool)
    if not mixer.mixer_softmax:
        return torch.where(kept, logits, torch.zeros_like(logits))
    masked = logits.masked_fill(~kept, float("-inf"))
    weights = torch.softmax(masked, -1)
    return torch.where(kept.any(-1, keepdim=True), weights, torch.zeros_like(weights))


def mix(weights: Tensor, sources: Sequence[Tensor]) -> Tensor:
    """``sum_j weights[:, j] * sources[j]``, shaped like one source."""
    stacked = torch.stack(list(sources), 1)  # (B, J, ...)
    return (weights.reshape(*weights.shape, *(1,) * (stacked.dim() - 2)).to(stacked) * stacked).sum(1)


@dataclass(frozen=True)
class MixerCall:
    """One mixer's call in one forward pass.

    Attributes
    ----------
    sources : tuple of Tensor, each (B, ...)
    logits : Tensor, (B, J)
        As ``mixer_logits`` returns them, expanded to the batch.
    weights : Tensor, (B, J)
    output : Tensor, (B, ...)
    """

    sources: tuple[Tensor, ...]
    logits: Tensor
    weights: Tensor
    output: Tensor


@contextmanager
def _hooks(pairs: Sequence[tuple[nn.Module, object, object]]) -> Iterator[None]:
    """Register (module, forward pre-hook, forward hook) pairs; every hook is removed on leaving, also on error."""
    handles = []
    try:
        for module, pre, post in pairs:
            if pre is not None:
                handles.append(module.register_forward_pre_hook(pre))
            if post is not None:
                handles.append(module.register_forward_hook(post))
        yield
    finally:
        for handle in handles:
            handle.remove()


def _sources(name: str, args: tuple) -> tuple[Tensor, ...]:
    if len(args) != 1 or not isinstance(args[0], (list, tuple)) or not args[0]:
        raise ConfigError(f"depth mixer {name!r} must be called as mixer(sources) with a non-empty list of tensors.")
    return tuple(args[0])


@contextmanager
def capture_mixers(mixers: dict[str, nn.Module], *, check: bool = True) -> Iterator[dict[str, list[MixerCall]]]:
    """Record every call of each mixer (sources, logits, weights, output), detached.

    With ``check`` a mixer whose output is not the weighted sum of its sources is an error naming it.
    """
    calls: dict[str, list[MixerCall]] = {name: [] for name in mixers}

    def recorder(name: str):
        def hook(module, args, output):
            sources = tuple(s.detach() for s in _sources(name, args))
            with torch.no_grad():
                logits = _logits(module, sources)
                weights = torch.softmax(logits, -1) if module.mixer_softmax else logits
                expected = mix(weights, sources)
            out = output.detach()
            if check and not torch.allclose(out, expected, rtol=1e-4, atol=1e-5 * float(expected.abs().max()) + 1e-6):
                raise ConfigError(
                    f"depth mixer {name!r}: its output is not sum_j w_j s_j of its sources with the "
                    "weights its mixer_logits give; it does not follow the depth-mixer protocol."
                )
            calls[name].append(MixerCall(sources, logits.detach(), weights.detach(), out))

        return hook

    with _hooks([(m, None, recorder(name)) for name, m in mixers.items()]):
        yield calls


@contextmanager
def removed_sources(
    mixer: nn.Module, keep: Tensor, removal: str, fill: Sequence[Tensor] | None = None
) -> Iterator[None]:
    """Run the network with the sources where ``keep`` (B, J) is 0 removed from ``mixer``.

    ``removal`` as :data:`REMOVALS`; ``fill`` (one tensor per source) is the replacement for ``"mean"`` (shaped
    like one sample's source) and ``"resample"`` (shaped like the source: row ``b`` is sample ``b``'s donor's state).
    """
    check_choice("removal", removal, REMOVALS)
    if removal == "weight":

        def post(module, args, output):
            sources = _sources("mixer", args)
            return mix(masked_weights(module, sources, keep.to(sources[0].device)), sources).to(output.dtype)

        pairs = [(mixer, None, post)]
    else:
        if fill is None:
            raise ConfigError(
                f"removal {removal!r} needs the replacement of every source (the mean over the "
                "evaluated data, or the donors' states)."
            )

        def pre(module, args):
            sources = _sources("mixer", args)
            out = []
            for j, s in enumerate(sources):
                drop = (keep[:, j] == 0).to(s.device).view(-1, *(1,) * (s.dim() - 1))
                out.append(torch.where(drop, fill[j].to(s).expand_as(s), s))
            return (out,)

        pairs = [(mixer, pre, None)]
    with _hooks(pairs):
        yield


@contextmanager
def set_weights(mixer: nn.Module, weights: Tensor) -> Iterator[None]:
    """Run the network with ``mixer``'s output computed from the given ``weights`` (B, J) instead of its own."""

    def post(module, args, output):
        return mix(weights, _sources("mixer", args)).to(output.dtype)

    with _hooks([(mixer, None, post)]):
        yield
