"""Backbones named by reference: importing a ``py:`` factory, and rebuilding a checkpoint's stored reference.

A ``py:`` spec the user types runs the user's code (:func:`import_factory`); a ``py:`` reference read
from a checkpoint is imported only with ``trust_code=True`` (:func:`build_backbone`). ``hf`` references
are rebuilt by :func:`laya_eval.models.backbones.make_backbone` with downloads only when allowed.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any, Callable

from torch import nn

from laya_eval.errors import CheckpointError, ConfigError
from laya_eval.models.layered import LayeredModel

__all__ = ["build_backbone", "call_factory", "import_factory"]


def import_factory(value: str) -> Callable[[], Any]:
    """Import ``MODULE:CALLABLE`` (``MODULE`` dotted, or a path to a ``.py`` file) and return the callable.

    This runs the module's code: call it only for a spec the user typed, or with trust.
    """
    module_name, _, attr = value.rpartition(":")
    try:
        if module_name.endswith(".py"):
            path = Path(module_name).expanduser().resolve()
            if not path.is_file():
                raise ConfigError(f"py: spec names the file '{module_name}', which does not exist.")
            key = f"laya_eval_user_{abs(hash(str(path)))}"
            if key not in sys.modules:
                spec = importlib.util.spec_from_file_location(key, path)
                module = importlib.util.module_from_spec(spec)
                sys.modules[key] = module
                spec.loader.exec_module(module)
            module = sys.modules[key]
        else:
            module = importlib.import_module(module_name)
    except ImportError as err:
        raise ConfigError(f"py: spec cannot import module {module_name!r} ({err}); is it on PYTHONPATH?") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ConfigError(f"py: spec names {attr!r}, which module {module_name!r} does not define as a callable.")
    return factory


def call_factory(value: str) -> Any:
    try:
        return import_factory(value)()
    except TypeError as err:
        raise ConfigError(f"py:{value} must be callable without arguments ({err}).") from None



def build_backbone(config: dict[str, Any], *, trust_code: bool = False, download: bool = False) -> nn.Module:
    """Rebuild a checkpoint's backbone from its config ``{"name", "kwargs"}``.

    A ``modules`` backbone is a ``py:`` reference: without ``trust_code`` nothing is imported
    and a CheckpointError names the module and ``--trust-code``. A reference whose weights
    changed (sha256) is a CheckpointError too.
    """
    from laya_eval.models.backbones import ModuleBackbone, make_backbone
    from laya_eval.models.backbones.modules import state_sha256

    name, kwargs = config["name"], dict(config.get("kwargs") or {})
    if name == "hf":  # the network is reached only when this call allows it, whatever the file says
        kwargs["local_files_only"] = not download
    if name != "modules":
        return make_backbone(name, **kwargs)
    spec = kwargs.get("spec")
    if not isinstance(spec, str) or not spec.startswith("py:"):
        raise CheckpointError(f"a 'modules' backbone must record a py:MODULE:CALLABLE spec; got {spec!r}.")
    module_name = spec[3:].rpartition(":")[0]
    if not trust_code:
        raise CheckpointError(f"the backbone is the Python code py:{spec[3:]}: loading it imports module "
                              f"{module_name!r}; pass --trust-code (trust_code=True) if you trust that code.")
    made = call_factory(spec[3:])
    if isinstance(made, LayeredModel):
        made = made.backbone
    if not isinstance(made, nn.Module):
        raise CheckpointError(f"{spec} must return an nn.Module; got {type(made).__name__}.")
    expected = kwargs.get("state_sha256")
    if expected is not None and state_sha256(made) != expected:
        raise CheckpointError(
            f"the referenced model {spec} changed: its weights hash to {state_sha256(made)[:12]}…, the head was "
            f"trained on {str(expected)[:12]}…. Restore those weights, or make the factory return the same network "
            "on every call (load or seed its weights), then fit a new head.")
    backbone = ModuleBackbone(made.eval(), kwargs["layer_names"], layer_dims=kwargs["layer_dims"],
                              pool=kwargs.get("pool"), spec=spec)
    return backbone.requires_grad_(False)
