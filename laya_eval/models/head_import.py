"""Heads from other code: the head protocol, and weights mapped onto laya-eval's four heads.

**The head protocol.** Any ``nn.Module`` with

- ``terms(hidden) -> Tensor (B, L, C)``: the per-layer logit terms,
- ``bias``: a (C,) tensor, so that ``logits = terms(hidden).sum(1) + bias``, and
- optionally ``layer_weights(hidden) -> Tensor (B, L)`` (weights that sum to 1),

can be a :class:`~laya_eval.models.layered.LayeredModel`'s head once wrapped by :func:`as_layer_head`;
every attribution method and removal then works on it (``gate-renorm`` needs layer weights).

**Weights of your own LAYA/ScalarMix/Concat/LastLayer code.** :func:`import_head_state_dict`
loads a ``state_dict`` written by another implementation into the standard head of the same
shape: keys are matched by name when they equal laya-eval's, else by shape in order of
appearance (pass ``key_map`` to name them when two roles share a shape). A mismatch names the
keys and shapes on both sides. Weights that fit say nothing of the settings they were trained with
(``tau``, the scorer's activation), so the imported head is checked against the other code's logits
(``reference=``); loading without that check has to be asked for (``check=False``).
See ``docs/concepts/models.md``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from laya_eval.errors import ConfigError
from laya_eval.models.heads import LayerHead, make_head

__all__ = ["ProtocolHead", "as_layer_head", "import_head_state_dict"]


class ProtocolHead(LayerHead):
    """A user module that follows the head protocol, seen as a :class:`~laya_eval.models.heads.LayerHead`.

    Parameters
    ----------
    module : nn.Module
        Has ``terms`` and ``bias`` (and optionally ``layer_weights``).
    layer_dims : list of int
        Feature size of each hidden state.
    num_classes : int
    """

    name = "protocol"

    def __init__(self, module: nn.Module, layer_dims: Sequence[int], num_classes: int) -> None:
        super().__init__(layer_dims, num_classes)
        self.module = module

    def terms(self, hidden: Sequence[Tensor]) -> Tensor:
        t = self.module.terms(list(hidden))
        expected = (hidden[0].shape[0], self.n_layers, self.num_classes)
        if not isinstance(t, Tensor) or tuple(t.shape) != expected:
            got = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
            raise ConfigError(
                f"{type(self.module).__name__}.terms must return a (B, L, C) = {expected} tensor; got {got}."
            )
        return t

    @property
    def bias(self) -> Tensor:
        return torch.as_tensor(self.module.bias)

    def layer_weights(self, hidden: Sequence[Tensor]) -> Tensor | None:
        fn = getattr(self.module, "layer_weights", None)
        return None if fn is None else fn(list(hidden))

    def config(self) -> dict:
        raise ConfigError(
            "a head following the protocol is your own code: laya-eval cannot rebuild it from a "
            "checkpoint; evaluate it through a py:MODULE:CALLABLE spec that returns the LayeredModel."
        )


def as_layer_head(module: nn.Module, layer_dims: Sequence[int], num_classes: int) -> LayerHead:
    """Wrap a module that follows the head protocol (a LayerHead is returned unchanged).

    Raises
    ------
    ConfigError
        ``module`` lacks ``terms`` or ``bias``.
    """
    if isinstance(module, LayerHead):
        return module
    missing = [a for a in ("terms", "bias") if not hasattr(module, a)]
    if missing:
        raise ConfigError(
            f"{type(module).__name__} does not follow the head protocol: it lacks {missing}. A head needs "
            "terms(hidden) -> (B, L, C), bias (C,) and, where it has them, layer_weights(hidden) -> (B, L); "
            "or load its weights into a standard head with import_head_state_dict."
        )
    return ProtocolHead(module, layer_dims, num_classes)


def _shape_groups(state: Mapping[str, Tensor]) -> dict[tuple[int, ...], list[str]]:
    groups: dict[tuple[int, ...], list[str]] = defaultdict(list)
    for key, value in state.items():
        groups[tuple(value.shape)].append(key)
    return groups


def _mapping_by_shape(ours: Mapping[str, Tensor], theirs: Mapping[str, Tensor], name: str) -> dict[str, str]:
    mine, other = _shape_groups(ours), _shape_groups(theirs)
    bad = sorted(s for s in set(mine) | set(other) if len(mine.get(s, [])) != len(other.get(s, [])))
    if bad:
        lines = "; ".join(
            f"shape {list(s)}: state dict {other.get(s, [])} vs {name} head {mine.get(s, [])}" for s in bad[:4]
        )
        raise ConfigError(
            f"the state dict does not fit the {name} head: {lines}. Check d_star, "
            "scorer_hidden, the layer sizes and the number of classes, or pass key_map."
        )
    return {ours_key: their_key for s in mine for ours_key, their_key in zip(mine[s], other[s])}


def import_head_state_dict(
    name: str,
    state_dict: Mapping[str, Any],
    layer_dims: Sequence[int],
    num_classes: int,
    *,
    key_map: Mapping[str, str] | None = None,
    reference: nn.Module | Tensor | None = None,
    hidden: Sequence[Tensor] | None = None,
    atol: float = 1e-4,
    check: bool = True,
    **head_kwargs: Any,
) -> LayerHead:
    """Build the standard head ``name`` and load another implementation's weights into it.

    Parameters
    ----------
    name : {"laya", "scalarmix", "concat", "lastlayer"}
    state_dict : mapping of str to Tensor
        The other implementation's head weights.
    layer_dims : list of int
    num_classes : int
    key_map : mapping, optional
        ``{laya-eval key: state-dict key}`` for keys to pair explicitly; the rest are paired
        by name or shape.
    reference : nn.Module or Tensor
        The other implementation with these weights loaded (called as ``reference(hidden)``, a list of (B, d_i)
        tensors, returning (B, C) logits) or its logits on ``hidden``. The imported head must give the same logits
        within ``atol``: a hyper-parameter the weights cannot show (``tau``, the scorer's activation) is caught
        here. Required unless ``check=False``.
    hidden : list of Tensor, each (B, d_i), optional
        The batch of the comparison; default a seeded standard-normal batch of 16 (required with logits).
    atol : float
        Largest absolute logit difference accepted.
    check : bool
        ``False`` loads the weights without comparing logits (no ``reference``): the head is then whatever
        function the given settings make of them.
    **head_kwargs
        ``d_star``, ``tau``, ``scorer_hidden``, ``psi``: the other code's hyper-parameters (a
        wrong ``tau`` cannot be seen in the weights: pass ``reference``).

    Returns
    -------
    LayerHead
        In eval mode.

    Raises
    ------
    ConfigError
        No ``reference`` without ``check=False`` (or one with it); shapes or key counts that do not match, named on
        both sides; logits that differ from ``reference``'s by more than ``atol`` (the largest difference, its
        sample and class named).
    """
    if check and reference is None:
        raise ConfigError(
            "import_head_state_dict needs reference=: the other code's module with these weights loaded (or its "
            "logits, with hidden=), since weights that fit do not show tau or the scorer's activation; pass "
            "check=False to load them unchecked."
        )
    if not check and reference is not None:
        raise ConfigError("import_head_state_dict got reference= and check=False; drop one of them.")
    head = make_head(name, layer_dims, num_classes, **head_kwargs)
    ours = head.state_dict()
    theirs = {k: v for k, v in state_dict.items() if isinstance(v, Tensor)}
    pairs = dict(key_map or {})
    unknown = [k for k in pairs if k not in ours] + [v for v in pairs.values() if v not in theirs]
    if unknown:
        raise ConfigError(f"key_map names keys that do not exist: {unknown}; head keys are {list(ours)}.")
    rest_ours = {k: v for k, v in ours.items() if k not in pairs}
    rest_theirs = {k: v for k, v in theirs.items() if k not in pairs.values()}
    if set(rest_ours) == set(rest_theirs):
        pairs.update({k: k for k in rest_ours})
    else:
        pairs.update(_mapping_by_shape(rest_ours, rest_theirs, name))
    wrong = [
        (k, tuple(ours[k].shape), v, tuple(theirs[v].shape))
        for k, v in pairs.items()
        if ours[k].shape != theirs[v].shape
    ]
    if wrong:
        k, ks, v, vs = wrong[0]
        raise ConfigError(f"key_map pairs head key {k!r} {list(ks)} with state-dict key {v!r} {list(vs)}.")
    head.load_state_dict({k: theirs[v].detach().to(ours[k].dtype) for k, v in pairs.items()})
    head.eval()
    if check:
        _check_logits(head, name, reference, hidden, layer_dims, atol)
    return head


def _check_logits(
    head: LayerHead,
    name: str,
    reference: nn.Module | Tensor,
    hidden: Sequence[Tensor] | None,
    layer_dims: Sequence[int],
    atol: float,
) -> None:
    """Refuse an import whose logits differ from the other implementation's by more than ``atol``."""
    if isinstance(reference, Tensor) and hidden is None:
        raise ConfigError("reference logits need the hidden states they were computed on: pass hidden=[...].")
    if not isinstance(reference, (Tensor, nn.Module)) and not callable(reference):
        raise ConfigError(
            f"reference must be the other head (an nn.Module) or its logits (a Tensor); got {type(reference).__name__}."
        )
    if hidden is None:
        gen = torch.Generator().manual_seed(0)
        hidden = [torch.randn(16, d, generator=gen) for d in layer_dims]
    hidden = [torch.as_tensor(h, dtype=torch.float32) for h in hidden]
    with torch.no_grad():
        want = reference if isinstance(reference, Tensor) else reference(list(hidden))
        got = head(hidden)
    if not isinstance(want, Tensor) or want.shape != got.shape:
        shape = list(want.shape) if isinstance(want, Tensor) else type(want).__name__
        raise ConfigError(f"reference logits must have the imported head's shape {list(got.shape)}; got {shape}.")
    diff = (got - want.to(got.dtype)).abs()
    worst = float(diff.max())
    if not worst <= atol:  # NaN fails too
        sample, cls = divmod(int(diff.argmax()), diff.shape[1])
        raise ConfigError(
            f"the imported {name} head's logits differ from the reference's by up to {worst:.4g} (sample {sample}, "
            f"class {cls}; tolerance {atol:g}): the weights fit, so a setting does not — check tau, psi, the "
            "scorer's activation and the layer order."
        )
