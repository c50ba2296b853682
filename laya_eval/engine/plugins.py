"""Plug-ins: methods and ablations from installed packages and from modules named on the command line.

A plug-in is a Python module that registers entries through the public path the built-ins take,
:func:`laya_eval.register_method` and :func:`laya_eval.register_ablation` (see ``docs/plugins.md``). It comes in
two ways:

- an installed package declares an entry point in the group :data:`ENTRY_POINT_GROUP` (``laya_eval.plugins``)
  naming its module (importing it registers) or a callable of no arguments (called once). Installed entry points
  are loaded lazily, the first time the engine resolves method or ablation names, never at ``import laya_eval``;
- ``--plugin py:MODULE`` (a dotted module or a ``.py`` file) names a module for one run. It runs the module's
  code, so it is refused without ``trust_code`` (``--trust-code``), before anything is imported.

Each plug-in's code identity (the sha256 of its module source) is recorded per registered name and enters the
run key of every evaluation that uses it (:func:`code_identity`), so ``--resume`` never mixes results of two
versions of a plug-in.

A plug-in's code can fail when it is loaded and later, when the engine calls the functions it registered (a
method's scores, an ablation's logits or fill). Both become one :class:`~laya_eval.errors.UserCodeError` line
naming the plug-in, the entry, the function and the exception (the traceback is chained, shown with
``LAYA_EVAL_DEBUG=1``): every function a plug-in registers while it loads is wrapped (:func:`plugin_function`,
which the registries call).

May import: errors, catalog, output.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import sys
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from laya_eval.catalog import ABLATION_SPECS, BUILTIN_ABLATIONS, BUILTIN_METHODS, METHOD_SPECS
from laya_eval.errors import ConfigError, LayaEvalError, UserCodeError, describe_exception

__all__ = [
    "ENTRY_POINT_GROUP",
    "code_identity",
    "load_installed_plugins",
    "load_plugins",
    "loaded_plugins",
    "plugin_function",
]

#: The entry-point group installed plug-ins declare.
ENTRY_POINT_GROUP = "laya_eval.plugins"

#: ``(kind, name) -> (origin, sha256 of the module source)`` for every name a loaded plug-in registered.
_IDENTITIES: dict[tuple[str, str], tuple[str, str]] = {}
#: Origins already loaded (``entry-point:NAME`` or ``py:MODULE``), in load order.
_LOADED: list[str] = []
_installed_done = False


def _source_sha256(module: Any) -> str:
    try:
        source = inspect.getsource(module)
    except (OSError, TypeError):
        path = getattr(module, "__file__", None)
        if not path or not Path(path).is_file():
            raise ConfigError(
                f"plug-in module {getattr(module, '__name__', module)!r} has no readable source: its "
                "code identity (part of every run key) cannot be taken."
            ) from None
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    return hashlib.sha256(source.encode()).hexdigest()


def _registered_names() -> set[tuple[str, str]]:
    return {("method", n) for n in METHOD_SPECS} | {("ablation", n) for n in ABLATION_SPECS}


def _record(origin: str, before: set[tuple[str, str]], module: Any) -> None:
    digest = _source_sha256(module)
    for key in _registered_names() - before:
        _IDENTITIES[key] = (origin, digest)
    _LOADED.append(origin)


#: The origin of the plug-in being loaded now (its registrations are guarded: :func:`plugin_function`).
_LOADING: list[str] = []


@contextlib.contextmanager
def _loading(origin: str) -> Iterator[None]:
    _LOADING.append(origin)
    try:
        yield
    finally:
        _LOADING.pop()


def _plugin_name(origin: str) -> str:
    kind, _, name = origin.partition(":")
    return f"plug-in entry point {name!r}" if kind == "entry-point" else f"plug-in {origin}"


def _guarded(origin: str, kind: str, name: str, fn: Callable | None) -> Callable | None:
    """``fn`` made to raise one UserCodeError line naming the plug-in; the engine's own functions (a drawn
    ablation's replacement) and an absent function are left as they are."""
    if fn is None or str(getattr(fn, "__module__", "")).startswith("laya_eval.") or hasattr(fn, "_laya_plugin"):
        return fn

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except LayaEvalError:
            raise
        except (Exception, SystemExit) as err:
            what = getattr(fn, "__qualname__", None) or type(fn).__name__
            raise UserCodeError(
                f"{_plugin_name(origin)} ({kind} {name!r}): {what}() raised {describe_exception(err)}."
            ) from err

    call._laya_plugin = origin  # type: ignore[attr-defined]
    return call


def plugin_function(kind: str, name: str, fn: Any) -> Any:
    """The function ``register_method`` / ``register_ablation`` keep for ``(kind, name)``: while a plug-in is
    being loaded, ``fn`` wrapped so that whatever it raises when called is one UserCodeError line naming the
    plug-in (see the module docstring); otherwise ``fn`` itself."""
    return _guarded(_LOADING[-1], kind, name, fn) if _LOADING and callable(fn) else fn


def _import_py(value: str) -> Any:
    """Import a dotted module or a ``.py`` file, the way ``py:`` model specs are imported."""
    from laya_eval.loading.references import import_module_source

    return import_module_source(value, what=f"--plugin py:{value}")


def check_plugin_specs(specs: Sequence[str], *, trust_code: bool) -> tuple[str, ...]:
    """Validate ``--plugin`` values without importing anything: each ``py:MODULE``, and ``trust_code`` given."""
    specs = tuple(dict.fromkeys(specs))
    for spec in specs:
        kind, _, value = spec.partition(":")
        if kind != "py" or not value:
            raise ConfigError(f"--plugin must be py:MODULE (a dotted module or a .py file); got {spec!r}.")
    if specs and not trust_code:
        raise ConfigError(f"--plugin {specs[0]} runs that module's code; pass --trust-code if you trust it.")
    return specs


def load_plugins(specs: Sequence[str], *, trust_code: bool = False) -> list[str]:
    """Import the ``py:MODULE`` plug-ins named in ``specs`` (each once per process); returns the names they
    registered, as ``"method:NAME"`` / ``"ablation:NAME"``.

    Raises
    ------
    ConfigError
        Without ``trust_code`` (nothing is imported), for a malformed spec, a module that cannot be imported,
        or a name that collides with a built-in or another plug-in.
    """
    added: list[str] = []
    for spec in check_plugin_specs(specs, trust_code=trust_code):
        if spec in _LOADED:
            continue
        before = _registered_names()
        with _loading(spec):
            module = _import_py(spec[3:])
        _record(spec, before, module)
        added += [f"{k}:{n}" for k, n in sorted(_registered_names() - before)]
    return added


def load_installed_plugins() -> None:
    """Load every installed ``laya_eval.plugins`` entry point, once per process (later calls do nothing)."""
    global _installed_done
    if _installed_done:
        return
    _installed_done = True
    for ep in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        origin = f"entry-point:{ep.name}"
        before = _registered_names()
        try:
            with _loading(origin):
                loaded = ep.load()
        except LayaEvalError:
            raise
        except (Exception, SystemExit) as err:  # an installed package's import error, named with its entry point
            raise UserCodeError(
                f"plug-in entry point {ep.name!r} ({ep.value}) failed to load: {describe_exception(err)}."
            ) from err
        if callable(loaded) and not inspect.ismodule(loaded):
            try:
                with _loading(origin):
                    loaded()
            except LayaEvalError:
                raise
            except (Exception, SystemExit) as err:
                raise UserCodeError(
                    f"plug-in entry point {ep.name!r} ({ep.value}): calling it raised {describe_exception(err)}."
                ) from err
        module = loaded if inspect.ismodule(loaded) else sys.modules[ep.module]
        _record(origin, before, module)


def loaded_plugins() -> list[str]:
    """The plug-ins loaded so far, in load order (``entry-point:NAME``, ``py:MODULE``)."""
    return list(_LOADED)


def code_identity(kind: str, name: str, fn: Callable | None = None) -> str | None:
    """The code identity of a registered entry: ``None`` for a built-in, else ``ORIGIN@sha256`` of the module
    that registered it (for an entry registered in code outside a plug-in, its function's module source)."""
    if (kind == "method" and name in BUILTIN_METHODS) or (kind == "ablation" and name in BUILTIN_ABLATIONS):
        return None
    if (kind, name) in _IDENTITIES:
        origin, digest = _IDENTITIES[(kind, name)]
        return f"{origin}@{digest}"
    module = inspect.getmodule(fn) if fn is not None else None
    if module is None:
        raise ConfigError(
            f"{kind} {name!r} was registered without a module whose source can be read: its code "
            "identity (part of the run key) is unknown."
        )
    return f"module:{module.__name__}@{_source_sha256(module)}"
