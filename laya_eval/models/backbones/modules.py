"""The backbone that wraps any ``nn.Module`` and reads named submodules with forward hooks."""

from __future__ import annotations

import contextlib
import difflib
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from laya_eval.models.backbones.base import (
    Backbone,
    Replacement,
    _block_input,
    _check_replace,
    _positive_ints,
    _replace_in_output,
)
from laya_eval.errors import ConfigError
from laya_eval.output.files import module_state_sha256
from laya_eval.checks import check_choice


# --------------------------------------------------------------------------- modules
class _AllCaptured(Exception):
    """Raised from a hook once every named layer is captured: the rest is not needed."""


_POOLS: dict[str, Callable[[Tensor], Tensor]] = {
    "avg": lambda t: t.mean(dim=tuple(range(2, t.ndim))) if t.ndim > 2 else t,
    "cls": lambda t: t[:, 0],
    "flatten": lambda t: t.reshape(t.shape[0], -1),
}


class ModuleBackbone(Backbone):
    """Any ``nn.Module`` as a backbone, reading the outputs of named submodules.

    Outputs are captured with forward hooks that live only during ``forward``.
    The forward pass stops as soon as every named submodule has run. A
    submodule returning a tuple contributes its element 0.

    It can start at a block (:meth:`forward_from`) when every named submodule is a child of one
    ``nn.Sequential`` (the network itself or a submodule such as ``features``; children in order), or when the
    network defines ``forward_from(layer_name, output)``: run everything after submodule ``layer_name`` (the
    submodules' own calls, so their hooks fire) given that submodule's output. Otherwise network-scope work runs
    it from the input.

    Parameters
    ----------
    module : nn.Module
        The network; called as ``module(x)``, or ``module(**x)`` for a dict.
    layer_names : list of str
        Submodule names as in ``module.named_modules()``, e.g. ``"features.0"``.
    example_input : Any, optional
        One batch for a dry run that infers ``layer_dims``.
    layer_dims : list of int, optional
        Feature size per layer, instead of ``example_input``.
    pool : {None, "avg", "flatten", "cls"} or callable, optional
        Turns a captured output into ``h_i``: None keeps it, ``"avg"`` averages
        dims >= 2 ((B, C, H, W) -> (B, C)), ``"flatten"`` gives (B, -1),
        ``"cls"`` takes index 0 of dim 1 ((B, T, D) -> (B, D)). ``layer_dims``
        is dim 1 of the pooled output.
    spec : str, optional
        The ``py:MODULE:CALLABLE`` factory that returns ``module``. With it the
        backbone is frozen and stored by reference (spec, layer names, pooling and a
        sha256 of the module's weights), never its code or weights; without it
        :meth:`config` refuses. The spec is recorded as given and resolved
        (:func:`resolve_py_spec`, against the working folder of the call), and a
        checkpoint is rebuilt from the resolved form.
    """

    name = "modules"

    def __init__(
        self,
        module: nn.Module,
        layer_names: Sequence[str],
        *,
        example_input: Any = None,
        layer_dims: Sequence[int] | None = None,
        pool: str | Callable[[Tensor], Tensor] | None = None,
        spec: str | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(module, nn.Module):
            raise ConfigError(f"module must be a torch.nn.Module; got {type(module).__name__}.")
        if isinstance(layer_names, str) or not layer_names or not all(isinstance(n, str) for n in layer_names):
            raise ConfigError(f"layer_names must be a non-empty list of submodule names; got {layer_names!r}.")
        if len(set(layer_names)) != len(layer_names):
            raise ConfigError(f"layer_names must not repeat a name; got {list(layer_names)!r}.")
        if pool is not None and not callable(pool):
            check_choice("pool", pool, sorted(_POOLS))
        if spec is not None and (not isinstance(spec, str) or not spec.startswith("py:")):
            raise ConfigError(f"spec must be a 'py:MODULE:CALLABLE' string; got {spec!r}.")
        if spec is not None and pool is not None and not isinstance(pool, str):
            raise ConfigError(
                "a backbone stored by reference (spec) needs pool to be a name "
                f"{{{', '.join(sorted(_POOLS))}}} or None; got a function."
            )
        self.module = module
        self.spec = spec
        #: The spec a checkpoint is rebuilt from: a ``.py`` file as an absolute path (see resolve_py_spec).
        self.resolved_spec = None if spec is None else resolve_py_spec(spec)
        #: ``{label: sha256}`` of the factory's source files (set by laya_eval.loading), recorded by config().
        self.source_sha256: dict[str, str] = {}
        self.pool_name = pool if isinstance(pool, str) else None
        self.vector_states = self.pool_name in ("avg", "flatten")  # both end in (B, d)
        self.stored_by_reference = spec is not None
        if spec is not None:
            module.eval().requires_grad_(False)
        self.layer_names = list(layer_names)
        self._submodules = [self._find(name) for name in self.layer_names]
        self._chain = self._sequential_chain()
        self.starts_at_block = self._chain is not None or callable(getattr(module, "forward_from", None))
        self._pool = _POOLS.get(pool, pool) if isinstance(pool, str) else pool
        if layer_dims is not None:
            self.layer_dims = _positive_ints("layer_dims", layer_dims)
            if len(self.layer_dims) != len(self.layer_names):
                raise ConfigError(
                    f"layer_dims must have one entry per layer name ({len(self.layer_names)}); "
                    f"got {len(self.layer_dims)}."
                )
        elif example_input is not None:
            self.layer_dims = self._infer_dims(example_input)
        else:
            raise ConfigError("ModuleBackbone needs example_input (to infer layer_dims) or layer_dims.")

    def _find(self, name: str) -> nn.Module:
        try:
            return self.module.get_submodule(name)
        except AttributeError:
            valid = [n for n, _ in self.module.named_modules() if n]
            hints = difflib.get_close_matches(name, valid, n=5) or valid[:5]
            more = ", …" if len(valid) > len(hints) else ""
            raise ConfigError(
                f"layer name {name!r} is not a submodule of {type(self.module).__name__}; "
                f"valid names include {{{', '.join(hints)}{more}}}."
            ) from None

    def _infer_dims(self, example_input: Any) -> list[int]:
        training = {m: m.training for m in self.module.modules()}
        self.module.eval()  # a dry run must not touch BatchNorm statistics
        try:
            with torch.no_grad():
                hidden = self.forward(example_input)
        finally:
            for m, flag in training.items():
                m.training = flag
        if any(h.ndim < 2 for h in hidden):
            shapes = [tuple(h.shape) for h in hidden]
            raise ConfigError(f"layer outputs must be at least (B, d) after pooling; got shapes {shapes}.")
        return [int(h.shape[1]) for h in hidden]

    def _sequential_chain(self) -> tuple[nn.Sequential, list[int]] | None:
        """``(parent, child positions)`` when every named submodule is a child of one plain ``nn.Sequential``, in
        its order; ``None`` otherwise."""
        parents = {name.rpartition(".")[0] for name in self.layer_names}
        if len(parents) != 1:
            return None
        parent = self.module.get_submodule(parents.pop())
        if not isinstance(parent, nn.Sequential) or type(parent).forward is not nn.Sequential.forward:
            return None
        children = [name for name, _ in parent.named_children()]
        positions = [children.index(name.rpartition(".")[2]) for name in self.layer_names]
        return (parent, positions) if positions == sorted(set(positions)) else None

    def layer_modules(self) -> list[nn.Module]:
        return list(self._submodules)

    def forward_from(
        self, start: int, output: Tensor, x: Any = None, replace: Mapping[int, Replacement] | None = None
    ) -> list[Tensor]:
        """The named submodules after ``start`` on submodule ``start``'s output (the ``nn.Sequential``'s later
        children, or the network's own ``forward_from``); see :meth:`Backbone.forward_from`."""
        if not self.starts_at_block:
            return super().forward_from(start, output, x, replace)
        replace = _check_replace(replace, len(self.layer_names))
        n = len(self.layer_names)
        captured: list[Tensor | None] = [output] * (start + 1) + [None] * (n - start - 1)
        with self._capturing(captured, replace, first=start + 1):
            try:
                if start + 1 < n and self._chain is not None:
                    parent, positions = self._chain
                    h = output
                    for child in list(parent)[positions[start] + 1 : positions[-1] + 1]:
                        h = child(h)
                elif start + 1 < n:
                    self.module.forward_from(self.layer_names[start], output)
            except _AllCaptured:
                pass
        missing = [name for name, c in zip(self.layer_names, captured) if c is None]
        if missing:
            raise ConfigError(
                f"submodules {missing} did not run in forward_from({self.layer_names[start]!r}) of "
                f"{type(self.module).__name__}; it must run every submodule after the one it starts from."
            )
        return [self._pool(c) if self._pool else c for c in captured[start:]]  # type: ignore[arg-type]

    @contextlib.contextmanager
    def _capturing(
        self, captured: list[Tensor | None], replace: dict[int, Replacement], first: int = 0
    ) -> Iterator[None]:
        def make_hook(i: int) -> Callable[..., Any]:
            def hook(module: nn.Module, args: Any, kwargs: Any, output: Any) -> Any:
                if captured[i] is not None:
                    raise ConfigError(
                        f"submodule {self.layer_names[i]!r} ran more than once in one forward "
                        "pass; name a submodule that runs once."
                    )
                if i in replace:
                    output = _replace_in_output(i, replace[i], output, _block_input(args, kwargs))
                main = output[0] if isinstance(output, tuple) else output
                if not isinstance(main, Tensor):
                    raise ConfigError(
                        f"submodule {self.layer_names[i]!r} must return a tensor; got {type(main).__name__}."
                    )
                captured[i] = main
                if all(c is not None for c in captured):
                    raise _AllCaptured
                return output

            return hook

        handles = []
        try:
            for i, sub in enumerate(self._submodules):
                if i < first:
                    continue
                handles.append(sub.register_forward_hook(make_hook(i), with_kwargs=True))
            yield
        finally:
            for handle in handles:
                handle.remove()

    def forward(self, x: Any, replace: Mapping[int, Replacement] | None = None) -> list[Tensor]:
        """Run ``module`` until every named submodule has produced its output.

        Returns
        -------
        list of Tensor
            One pooled output per name in ``layer_names``.
        """
        replace = _check_replace(replace, len(self.layer_names))
        captured: list[Tensor | None] = [None] * len(self.layer_names)
        with self._capturing(captured, replace):
            try:
                self.module(**x) if isinstance(x, Mapping) else self.module(x)
            except _AllCaptured:
                pass
        missing = [n for n, c in zip(self.layer_names, captured) if c is None]
        if missing:
            raise ConfigError(
                f"submodules {missing} did not run in the forward pass of "
                f"{type(self.module).__name__}; name submodules that its forward calls."
            )
        return [self._pool(c) if self._pool else c for c in captured]  # type: ignore[arg-type]

    def train(self, mode: bool = True) -> ModuleBackbone:
        """Set the flag; a module stored by reference is frozen and stays in eval mode (BatchNorm, dropout)."""
        super().train(mode)
        if self.stored_by_reference:
            self.module.eval()
        return self

    def remember_spec(self, spec: str) -> "ModuleBackbone":
        """Record the ``py:MODULE:CALLABLE`` factory this backbone came from: it is then frozen and stored by
        that reference (its ``state_sha256`` checked when it is rebuilt)."""
        if not isinstance(spec, str) or not spec.startswith("py:"):
            raise ConfigError(f"spec must be a 'py:MODULE:CALLABLE' string; got {spec!r}.")
        if self._pool is not None and self.pool_name is None:
            raise ConfigError(
                "a backbone stored by reference (spec) needs pool to be a name "
                f"{{{', '.join(sorted(_POOLS))}}} or None; got a function."
            )
        self.spec, self.stored_by_reference = spec, True
        self.resolved_spec = resolve_py_spec(spec)
        self.module.eval().requires_grad_(False)
        return self

    def config(self) -> dict[str, Any]:
        """``{"name": "modules", "kwargs": {spec, resolved_spec, layer_names, layer_dims, pool, state_sha256[,
        source_sha256]}}``.

        Raises
        ------
        ConfigError
            The backbone was built without ``spec`` (nothing could rebuild it).
        """
        if self.spec is None:
            raise ConfigError(
                "a 'modules' backbone wraps an arbitrary nn.Module and cannot be rebuilt from a config; "
                "name its factory with spec='py:MODULE:CALLABLE' (or `laya-eval fit-head --model py:...`)."
            )
        kwargs = {
            "spec": self.spec,
            "resolved_spec": self.resolved_spec,
            "layer_names": list(self.layer_names),
            "layer_dims": list(self.layer_dims),
            "pool": self.pool_name,
            "state_sha256": state_sha256(self.module),
        }
        if self.source_sha256:
            kwargs["source_sha256"] = dict(self.source_sha256)
        return {"name": self.name, "kwargs": kwargs}


def resolve_py_spec(spec: str) -> str:
    """The form of a ``py:MODULE:CALLABLE`` spec that names the same code from any working folder.

    A ``MODULE`` that is a ``.py`` file becomes its absolute path (``~`` expanded, links resolved); a dotted
    module name is already importable by name and stays as it is.

    Examples
    --------
    >>> resolve_py_spec("py:mymodels.nets:make")
    'py:mymodels.nets:make'
    """
    module, _, name = spec[3:].rpartition(":")
    if not module.endswith(".py"):
        return spec
    return f"py:{Path(module).expanduser().resolve()}:{name}"


def state_sha256(module: nn.Module) -> str:
    """SHA-256 over a module's state dict (names, dtypes, shapes and bytes, in key order)."""
    return module_state_sha256(module)
