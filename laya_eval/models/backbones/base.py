"""The backbone base classes and the ``replace`` machinery every backbone shares.

:class:`Backbone` is the interface; :class:`_BlockBackbone` runs a stem and a list
of blocks and applies ``replace`` to block outputs. ``_check_replace``,
``_apply_replacement`` and ``_replace_in_output`` validate and apply a ``replace``
mapping; ``_positive_ints`` validates a list option (single values use :mod:`laya_eval.checks`).

A replacement is a function of the block's output, ``fn(output)``, or a :class:`BlockInputReplacement`, which
also reads the block's input: ``fn(block_input, output)`` (a residual block's update ``output - block_input``
is then at hand; ``block_input`` is ``None`` where the block's input is not one tensor, e.g. token ids).

A backbone that can *start at a block* (``starts_at_block``) also has ``forward_from(i, output, x, replace)``: the
hidden states of layers ``i .. L-1`` when block ``i``'s full output is ``output``, running only the blocks after it.
Network-scope work then reuses the plain pass's states up to the first removed block instead of re-running the
backbone from the input (docs/concepts/ablations.md, "Start at block").
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from torch import Tensor, nn

from laya_eval.checks import fail, is_int
from laya_eval.errors import ConfigError

Replacement = Callable[[Tensor], Tensor]


@dataclass(frozen=True)
class BlockInputReplacement:
    """A replacement that reads the block's input as well as its output.

    Attributes
    ----------
    fn : callable
        ``fn(block_input, output) -> Tensor`` of ``output``'s shape; ``block_input`` is the tensor the block was
        called with (its first positional argument, or its ``hidden_states`` keyword), after any replacement of
        earlier blocks, or ``None`` when the block was not called with one tensor.
    """

    fn: Callable[[Tensor | None, Tensor], Tensor]


# --------------------------------------------------------------------------- argument checks
def _glob_match(name: str, pattern: str) -> bool:
    """Glob over dotted names: a wildcard stays within one ``.``-separated part (``layer.*`` skips ``layer.0.fc``)."""
    parts, pats = name.split("."), pattern.split(".")
    return len(parts) == len(pats) and all(fnmatch.fnmatchcase(a, p) for a, p in zip(parts, pats))


def select_names(requested: Sequence[str] | None, available: Sequence[str], what: str) -> list[str]:
    """Expand names and glob patterns against ``available`` (order of ``available`` kept per pattern).

    Raises
    ------
    ConfigError
        A name that does not exist or a pattern that matches nothing, with close matches.
    """
    import difflib

    if requested is None:
        return list(available)
    out: list[str] = []
    for item in requested:
        matched = (
            [n for n in available if _glob_match(n, item)]
            if any(c in item for c in "*?[")
            else ([item] if item in available else [])
        )
        if not matched:
            hints = difflib.get_close_matches(item, list(available), n=5) or list(available)[:5]
            raise ConfigError(f"{what} {item!r} matches nothing; close matches: {{{', '.join(hints)}}}.")
        out += [n for n in matched if n not in out]
    return out


def _positive_ints(name: str, values: Any) -> list[int]:
    if (
        isinstance(values, (str, bytes))
        or not isinstance(values, Sequence)
        or not values
        or not all(is_int(v) and v > 0 for v in values)
    ):
        raise fail(name, "a non-empty list of positive integers", values)
    return [int(v) for v in values]


def _check_replace(replace: Mapping[int, Replacement] | None, n_layers: int) -> dict[int, Replacement]:
    """Validate a ``replace`` mapping: integer layer indices in range, callable values."""
    if replace is None:
        return {}
    if not isinstance(replace, Mapping):
        raise ConfigError(f"replace must be a mapping {{layer index: function}}; got {type(replace).__name__}.")
    for i, fn in replace.items():
        if not is_int(i) or not 0 <= i < n_layers:
            raise ConfigError(f"replace keys must be layer indices in [0, {n_layers - 1}]; got {i!r}.")
        if not callable(fn) and not isinstance(fn, BlockInputReplacement):
            raise ConfigError(f"replace[{i}] must be a function Tensor -> Tensor; got {fn!r}.")
    return dict(replace)


def _apply_replacement(i: int, fn: Replacement, output: Tensor, block_input: Any = None) -> Tensor:
    if isinstance(fn, BlockInputReplacement):
        new = fn.fn(block_input if isinstance(block_input, Tensor) else None, output)
    else:
        new = fn(output)
    if not isinstance(new, Tensor) or new.shape != output.shape:
        got = tuple(new.shape) if isinstance(new, Tensor) else type(new).__name__
        raise ConfigError(f"replace[{i}] must return a tensor of the block's shape {tuple(output.shape)}; got {got}.")
    return new


def _replace_in_output(i: int, fn: Replacement, output: Any, block_input: Any = None) -> Any:
    """Apply ``fn`` to a block output, or to element 0 when the block returns a tuple."""
    if isinstance(output, tuple):
        return (_apply_replacement(i, fn, output[0], block_input), *output[1:])
    return _apply_replacement(i, fn, output, block_input)


def _block_input(args: tuple, kwargs: Mapping[str, Any]) -> Any:
    """The input of a block called from a forward hook: its first positional argument, else its
    ``hidden_states`` keyword (transformers' blocks), else ``None``."""
    return args[0] if args else kwargs.get("hidden_states")


# --------------------------------------------------------------------------- base classes
class Backbone(nn.Module):
    """Base class: an input batch -> list of hidden states ``[h_1 … h_L]``.

    Attributes
    ----------
    layer_dims : list of int
        Feature size of each hidden state (channels for spatial maps).
    layer_names : list of str
        Human-readable label of each hidden state.
    stored_by_reference : bool
        True when the weights are frozen pretrained weights that checkpoints
        refer to (through :meth:`config`) instead of storing.
    vector_states : bool
        True when every hidden state is (B, d_i) (pooled inside the backbone): its pooled
        features are then all a head-scope analysis sees, and the feature cache can stand in for it.
    """

    name: ClassVar[str] = ""
    stored_by_reference: bool = False
    #: Whether :meth:`forward_from` can continue from a block's output (without re-running the blocks before it).
    starts_at_block: bool = False
    vector_states: bool = False
    layer_dims: list[int]
    layer_names: list[str]

    @property
    def n_layers(self) -> int:
        """Number of hidden states ``L``."""
        return len(self.layer_dims)

    def forward(self, x: Any, replace: Mapping[int, Replacement] | None = None) -> list[Tensor]:
        """Return the hidden states; see the module docstring for ``replace``."""
        raise NotImplementedError

    def forward_from(
        self, start: int, output: Tensor, x: Any, replace: Mapping[int, Replacement] | None = None
    ) -> list[Tensor]:
        """The hidden states of layers ``start .. L-1`` when block ``start``'s full output is ``output``.

        Only the blocks after block ``start`` run; ``replace`` acts on them as in :meth:`forward` (keys after
        ``start``). ``x`` holds the inputs of the same rows (a text encoder reads its attention mask from them).
        Defined where :attr:`starts_at_block` is true.

        Returns
        -------
        list of Tensor
            ``L - start`` hidden states, ``h_start`` read from ``output`` itself.
        """
        raise ConfigError(f"{type(self).__name__} cannot start at a block; run it from the input (forward).")

    def config(self) -> dict[str, Any]:
        """JSON-serialisable ``{"name": ..., "kwargs": {...}}`` for :func:`make_backbone`."""
        raise NotImplementedError

    def layer_modules(self) -> list[nn.Module]:
        """The module whose output is block ``i`` (for Captum layer methods)."""
        raise ConfigError(f"{type(self).__name__} does not expose one module per layer.")


class _BlockBackbone(Backbone):
    """A stem (``_embed``) followed by ``self.blocks``; ``h_i = _readout(block_i output)``."""

    blocks: nn.ModuleList
    starts_at_block = True

    def _embed(self, x: Tensor) -> Tensor:
        return x

    def _readout(self, output: Tensor) -> Tensor:
        return output

    def forward(self, x: Tensor, replace: Mapping[int, Replacement] | None = None) -> list[Tensor]:
        """Run the blocks in order.

        Parameters
        ----------
        x : Tensor
            Input batch, (B, ...) as documented by the subclass.
        replace : mapping of int to callable, optional
            ``replace[i]`` is applied to the full output of block ``i`` (a :class:`BlockInputReplacement` also
            reads the block's input); later blocks see the result and ``h_i`` is read from it.

        Returns
        -------
        list of Tensor
            ``L`` hidden states, shapes as documented by the subclass.
        """
        replace = _check_replace(replace, self.n_layers)
        out = self._embed(x)
        hidden = []
        for i, block in enumerate(self.blocks):
            block_input, out = out, block(out)
            if i in replace:
                out = _apply_replacement(i, replace[i], out, block_input)
            hidden.append(self._readout(out))
        return hidden

    def forward_from(
        self, start: int, output: Tensor, x: Any = None, replace: Mapping[int, Replacement] | None = None
    ) -> list[Tensor]:
        """Blocks ``start + 1 ..`` on block ``start``'s output (see :meth:`Backbone.forward_from`)."""
        replace = _check_replace(replace, self.n_layers)
        out, hidden = output, [self._readout(output)]
        for i in range(start + 1, self.n_layers):
            block_input, out = out, self.blocks[i](out)
            if i in replace:
                out = _apply_replacement(i, replace[i], out, block_input)
            hidden.append(self._readout(out))
        return hidden

    def layer_modules(self) -> list[nn.Module]:
        """``self.blocks``: block ``i``'s output is the full output ``replace[i]`` acts on."""
        return list(self.blocks)
