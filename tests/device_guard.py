"""A device guard for CPU-only test machines: what would raise a device mismatch on a GPU raises here too.

Two rules, both run as a ``TorchFunctionMode`` over laya-eval code:

- **No implicit CPU tensors** (:class:`NoImplicitCpuTensors`, inside hot loops): laya-eval code may create a
  tensor only with an explicit ``device=`` (or ``*_like`` / ``new_*``): on a GPU a tensor made without one lands
  on the CPU.
- **Host tensors never meet device tensors** (:class:`HostDeviceGuard`, over a whole command): every tensor
  that lives on the CPU even when the model is on a GPU is tagged "host": the output of ``torch.from_numpy``,
  ``Tensor.cpu()``, a module's ``.cpu()``, a tensor factory called without ``device=``, the tensors of the
  datasets a test marks with :func:`mark_host`, and everything computed from host tensors only. ``Tensor.to(device)`` (and ``Module.to(device)``) clears
  the tag. An operation whose non-scalar tensor arguments mix host and untagged tensors (the model's
  parameters and everything moved to or made on the device) raises, as CUDA would; indexing, ``copy_`` and
  ``to`` themselves may mix, as on a GPU. With the model on the CPU the run is otherwise unchanged.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Iterator

import torch
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map

FACTORIES = {
    torch.arange,
    torch.zeros,
    torch.ones,
    torch.empty,
    torch.eye,
    torch.full,
    torch.tensor,
    torch.as_tensor,
    torch.rand,
    torch.randn,
    torch.randint,
    torch.linspace,
    torch.randperm,
}
_HOST = "_on_host_in_device_guard"
# Ops that may take tensors on two devices on a GPU too (indexing a device tensor with CPU indices,
# copies between devices, moving) or that only read metadata.
_MIXING_ALLOWED = {
    Tensor.to,
    Tensor.copy_,
    Tensor.__getitem__,
    Tensor.__setitem__,
    Tensor.cpu,
    Tensor.numpy,
    Tensor.tolist,
    Tensor.item,
    Tensor.__repr__,
    Tensor.__format__,
    Tensor.detach,
}


def caller_is_laya_eval(depth: int = 2) -> bool:
    frame = sys._getframe(depth)
    while frame is not None and frame.f_globals.get("__name__", "").startswith(("torch", "tests.")):
        frame = frame.f_back
    return frame is not None and frame.f_globals.get("__name__", "").startswith("laya_eval")


class NoImplicitCpuTensors(TorchFunctionMode):
    """Inside the batch loop laya_eval code may create a tensor only with an explicit device (or *_like/new_*):
    on a GPU a tensor made without one lands on the CPU and the next op raises a device mismatch."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in FACTORIES and "device" not in kwargs and caller_is_laya_eval():
            raise AssertionError(f"torch.{func.__name__} without device= inside the batch loop")
        return func(*args, **kwargs)


def is_host(t: Tensor) -> bool:
    return bool(getattr(t, _HOST, False))


def mark_host(*tensors: Tensor) -> None:
    """Tag tensors that stay on the CPU whatever the device (a dataset's inputs and labels)."""
    for t in tensors:
        if isinstance(t, Tensor):
            setattr(t, _HOST, True)


def _tag_outputs(out, host: bool):
    def tag(t):
        if isinstance(t, Tensor):
            if host:
                setattr(t, _HOST, True)
            elif is_host(t):
                delattr(t, _HOST)
        return t

    return tree_map(tag, out)


def _moves_device(args, kwargs) -> bool:
    return "device" in kwargs or any(isinstance(a, (torch.device, str, Tensor)) for a in args[1:])


class HostDeviceGuard(TorchFunctionMode):
    """Raise where host-tagged and device tensors meet (see the module docstring)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.from_numpy or func is Tensor.cpu:
            return _tag_outputs(func(*args, **kwargs), True)
        if func in FACTORIES and "device" not in kwargs:
            # made on the CPU (on a GPU machine too), unless it wraps a tensor it then returns as it is
            source = args[0] if args and isinstance(args[0], Tensor) else None
            return _tag_outputs(func(*args, **kwargs), True if source is None else is_host(source))
        if func is Tensor.to:
            out = func(*args, **kwargs)
            if not _moves_device(args, kwargs):
                return _tag_outputs(out, is_host(args[0]))
            if out is args[0] and is_host(out):
                out = out.view_as(out)  # on a GPU .to(device) returns another tensor; the host original stays host
            return _tag_outputs(out, False)
        flat, _ = tree_flatten((args, kwargs))
        tensors = [t for t in flat if isinstance(t, Tensor) and t.dim() > 0]
        host = [t for t in tensors if is_host(t)]
        if host and len(host) < len(tensors) and func not in _MIXING_ALLOWED:
            name = getattr(func, "__qualname__", None) or getattr(func, "__name__", repr(func))
            raise AssertionError(
                f"device mismatch in {name}: a host tensor (CPU-side features, labels or "
                "numpy data) meets a tensor on the model's device"
            )
        out = func(*args, **kwargs)
        if func is Tensor.__getitem__:
            return _tag_outputs(out, is_host(args[0]))
        return _tag_outputs(out, bool(tensors) and len(host) == len(tensors))


@contextlib.contextmanager
def host_device_guard(monkeypatch) -> Iterator[None]:
    """The host/device rule over a block, modules' ``.cpu()`` and ``.to(device)`` included."""
    real_cpu, real_to, real_from_numpy = nn.Module.cpu, nn.Module.to, torch.from_numpy

    def from_numpy(array):  # torch.from_numpy takes no tensor, so no torch-function mode sees it
        out = real_from_numpy(array)
        mark_host(out)
        return out

    def module_cpu(self):
        out = real_cpu(self)
        for t in [*self.parameters(), *self.buffers()]:
            setattr(t, _HOST, True)
        return out

    def module_to(self, *args, **kwargs):
        out = real_to(self, *args, **kwargs)
        if "device" in kwargs or any(isinstance(a, (torch.device, str)) for a in args):
            for t in [*self.parameters(), *self.buffers()]:
                if is_host(t):
                    delattr(t, _HOST)
        return out

    monkeypatch.setattr(nn.Module, "cpu", module_cpu)
    monkeypatch.setattr(nn.Module, "to", module_to)
    monkeypatch.setattr(torch, "from_numpy", from_numpy)
    try:
        with HostDeviceGuard():
            yield
    finally:
        monkeypatch.setattr(nn.Module, "cpu", real_cpu)
        monkeypatch.setattr(nn.Module, "to", real_to)
        monkeypatch.setattr(torch, "from_numpy", real_from_numpy)


def guard_hot_loop(monkeypatch, module, name: str) -> None:
    """Run ``module.name`` under :class:`NoImplicitCpuTensors` (and forbid ``torch.from_numpy`` there),
    wherever laya_eval imported it."""
    real = getattr(module, name)

    def guarded(*args, **kwargs):
        real_from_numpy = torch.from_numpy

        def from_numpy(array):
            if caller_is_laya_eval():
                raise AssertionError("torch.from_numpy inside the batch loop makes a CPU tensor")
            return real_from_numpy(array)

        monkeypatch.setattr(torch, "from_numpy", from_numpy)
        try:
            with NoImplicitCpuTensors():
                return real(*args, **kwargs)
        finally:
            monkeypatch.setattr(torch, "from_numpy", real_from_numpy)

    for mod in [m for n, m in list(sys.modules.items()) if n.startswith("laya_eval") and m is not None]:
        if getattr(mod, name, None) is real:
            monkeypatch.setattr(mod, name, guarded)
