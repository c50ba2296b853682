"""Backbones named by reference: importing a ``py:`` factory, and rebuilding a checkpoint's stored reference.

A ``py:`` spec the user types runs the user's code (:func:`import_factory`); a ``py:`` reference read
from a checkpoint is imported only with ``trust_code=True`` (:func:`build_backbone`). ``hf`` references
are rebuilt by :func:`laya_eval.models.backbones.make_backbone` with downloads only when allowed.

A ``py:`` factory's features depend on its code as much as on its weights, so a reference records
:func:`source_hashes`: the sha256 of the module's source file (``module``), of the file that defines
the callable (``callable``) and of every extra source the user names (``sources``: files, or folders
whose ``*.py`` files are hashed; ``fit_head(sources=...)``, CLI ``fit-head --source PATH``), for a
factory that builds its network from other files of its package. It also records the code the factory
actually imported from the model's folder (``imported:RELATIVE_PATH``): every module in ``sys.modules``,
after the factory ran, whose ``.py`` file lies under the folder of the spec's module (its top-level package's
folder for a dotted module in a package), leaving out the interpreter's own library folders (standard library,
site-packages). A helper module the factory imports is thus keyed without ``--source``. A rebuild recomputes
them and refuses changed code (an ``imported:`` file is compared where it was recorded).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from torch import nn

from laya_eval.errors import CheckpointError, ConfigError, LayaEvalError, UserCodeError, describe_exception
from laya_eval.models.layered import LayeredModel

__all__ = [
    "build_backbone",
    "call_factory",
    "check_sources",
    "import_factory",
    "import_module_source",
    "source_hashes",
]


def import_module_source(name: str, *, what: str) -> Any:
    """Import a dotted module or a ``.py`` file (``what`` names the option in errors: ``py:MODULE:CALLABLE``,
    ``--plugin py:MODULE``).

    A file is imported under a name made from its path and content, so an edited file is imported afresh and
    never served from an older import. This runs the module's code: call it only for a name the user typed, or
    with trust. Whatever the module raises while it runs (a syntax error, an exception, ``sys.exit``) is one
    :class:`~laya_eval.errors.UserCodeError` naming ``what``, the module and the exception, chained to it (any
    exception, a ``BaseException`` of the module's own included; only ``KeyboardInterrupt`` passes through).
    """
    try:
        if name.endswith(".py"):
            return _import_file(name, what)
        return importlib.import_module(name)
    except LayaEvalError:  # already one line (a plug-in's name that collides with a built-in)
        raise
    except ModuleNotFoundError as err:
        if err.name is not None and (name == err.name or name.startswith(err.name + ".")):  # the module itself
            raise ConfigError(f"{what} cannot import module {name!r} ({err}); is it on PYTHONPATH?") from None
        raise _code_error(what, f"importing module {name!r}", err) from err
    except KeyboardInterrupt:  # the user's own Ctrl-C, not the module's failure
        raise
    except BaseException as err:  # noqa: BLE001 - a module may raise anything, even a BaseException of its own
        raise _code_error(what, f"importing module {name!r}", err) from err


def _import_file(name: str, what: str) -> Any:
    path = Path(name).expanduser().resolve()
    if not path.is_file():
        raise ConfigError(f"{what} names the file '{name}', which does not exist.")
    from laya_eval.output.files import file_sha256

    key = f"laya_eval_user_{abs(hash(str(path)))}_{file_sha256(path)[:16]}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[key]
            raise
    return sys.modules[key]


def _code_error(what: str, doing: str, err: BaseException) -> UserCodeError:
    return UserCodeError(f"{what}: {doing} raised {describe_exception(err)}.")


def import_factory(value: str) -> Callable[[], Any]:
    """Import ``MODULE:CALLABLE`` (``MODULE`` dotted, or a path to a ``.py`` file) and return the callable.

    This runs the module's code: call it only for a spec the user typed, or with trust.
    """
    module_name, _, attr = value.rpartition(":")
    module = import_module_source(module_name, what=f"py:{value}")
    try:
        factory = getattr(module, attr, None)
    except Exception as err:  # a module-level __getattr__ that raises
        raise _code_error(f"py:{value}", f"looking up {attr!r} in module {module_name!r}", err) from err
    if not callable(factory):
        raise ConfigError(f"py: spec names {attr!r}, which module {module_name!r} does not define as a callable.")
    return factory


#: Files hashed under one extra source folder at most (a folder is a package, not a disk).
MAX_SOURCE_FILES = 4096
#: Modules imported from a factory's folder that are keyed one by one at most (a checkpoint records each).
MAX_IMPORTED_FILES = 512
_EXTRA = "extra:"
_IMPORTED = "imported:"


def _module_file(factory: Any) -> str | None:
    module = sys.modules.get(getattr(factory, "__module__", None) or "")
    path = getattr(module, "__file__", None)
    return path if isinstance(path, str) and os.path.isfile(path) else None


def _callable_file(factory: Any) -> str | None:
    try:
        path = inspect.getsourcefile(factory)
    except TypeError:  # a builtin or a C extension object: no source file
        return None
    return path if path and os.path.isfile(path) else None


def _extra_sha256(path: Path) -> str:
    from laya_eval.output.files import file_sha256
    from laya_eval.output.origin import python_files_sha256

    if path.is_file():
        return file_sha256(path)
    if not path.is_dir():
        raise ConfigError(f"source '{path}' (named to key a py: factory's code) is neither a file nor a folder.")
    files = sorted(f for f in path.rglob("*.py") if f.is_file())
    if len(files) > MAX_SOURCE_FILES:
        raise ConfigError(
            f"source folder '{path}' holds {len(files)} .py files; at most {MAX_SOURCE_FILES} are "
            "hashed. Name the package's folder, not a parent of it."
        )
    return python_files_sha256(path, files)


def _library_roots() -> set[Path]:
    """The interpreter's own library folders (standard library, site-packages): never a model's folder."""
    import site
    import sysconfig

    paths = [*sysconfig.get_paths().values(), *site.getsitepackages(), site.getusersitepackages()]
    return {Path(p).resolve() for p in paths if p}


def _code_folder(factory: Any) -> Path | None:
    """The folder whose imported modules key a factory's code: its module's folder, or its top-level package's."""
    module = sys.modules.get(getattr(factory, "__module__", None) or "")
    path = getattr(module, "__file__", None)
    if not isinstance(path, str):
        return None
    top = sys.modules.get(module.__name__.partition(".")[0])
    top_file = getattr(top, "__file__", None) if module.__name__.count(".") else None
    folder = Path(top_file if isinstance(top_file, str) else path).resolve().parent
    return None if folder in _library_roots() else folder


def _imported_files(factory: Any) -> dict[str, Path]:
    """``{path relative to the factory's folder: file}`` of the modules imported from that folder so far."""
    folder = _code_folder(factory)
    if folder is None:
        return {}
    inside = [r for r in _library_roots() if r.is_relative_to(folder)]  # a virtualenv inside a project folder
    found = {}
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if not (isinstance(path, str) and path.endswith(".py")):
            continue
        path = Path(path).resolve()
        if path.is_relative_to(folder) and not any(path.is_relative_to(r) for r in inside) and path.is_file():
            found[path.relative_to(folder).as_posix()] = path
    if len(found) > MAX_IMPORTED_FILES:
        raise ConfigError(
            f"the factory imported {len(found)} modules from '{folder}'; at most {MAX_IMPORTED_FILES} are keyed. "
            "Keep the model's code in a folder of its own."
        )
    return dict(sorted(found.items()))


def source_hashes(value: str, sources: Sequence[str | os.PathLike] = ()) -> dict[str, str]:
    """``{label: sha256}`` of a ``py:MODULE:CALLABLE`` factory's code (see the module docstring).

    Labels: ``module`` (the module's file), ``callable`` (the file defining the callable, which may be
    another module), ``imported:RELATIVE_PATH`` per module imported from the factory's folder (call this after
    the factory ran, so that what it imports when called is there) and ``extra:ABSOLUTE_PATH`` per named source.
    The module is imported (this runs it).
    """
    from laya_eval.output.files import file_sha256

    factory = import_factory(value)
    out = {}
    for label, path in (("module", _module_file(factory)), ("callable", _callable_file(factory))):
        if path is not None:
            out[label] = file_sha256(path)
    named = {os.path.realpath(p) for p in (_module_file(factory), _callable_file(factory)) if p is not None}
    for relative, path in _imported_files(factory).items():
        if str(path) not in named:
            out[_IMPORTED + relative] = file_sha256(path)
    for source in sources:
        path = Path(source).expanduser().resolve()
        out[_EXTRA + str(path)] = _extra_sha256(path)
    return out


def check_sources(value: str, recorded: dict[str, str], what: str) -> None:
    """Raise CheckpointError when the code of ``py:value`` no longer hashes to ``recorded``."""
    from laya_eval.output.files import file_sha256

    extra = [label[len(_EXTRA) :] for label in recorded if label.startswith(_EXTRA)]
    try:
        # The modules imported now may be more than those recorded (another spec from the same folder, or a
        # record made before imported modules were keyed): each recorded one is compared, by its file.
        now = {k: v for k, v in source_hashes(value, extra).items() if not k.startswith(_IMPORTED)}
        folder = _code_folder(import_factory(value))
    except ConfigError as err:
        raise CheckpointError(f"the referenced code of py:{value} cannot be checked: {err}") from None
    for label in (k for k in recorded if k.startswith(_IMPORTED)):
        path = None if folder is None else (folder / label[len(_IMPORTED) :]).resolve()
        if path is not None and path.is_relative_to(folder) and path.is_file():
            now[label] = file_sha256(path)
    changed = sorted(k for k in set(recorded) | set(now) if recorded.get(k) != now.get(k))
    if changed:
        raise CheckpointError(
            f"the referenced code of py:{value} changed since {what} was made ({', '.join(changed)[:300]} differ): "
            "its features would differ. Restore that code, or fit a new head."
        )


def call_factory(value: str) -> Any:
    """Import ``MODULE:CALLABLE`` and call it with no arguments; whatever the call raises is one
    :class:`~laya_eval.errors.UserCodeError` naming the module, the callable and the exception."""
    factory = import_factory(value)
    module_name, _, attr = value.rpartition(":")
    try:
        inspect.signature(factory).bind()
    except TypeError as err:
        raise ConfigError(f"py:{value} must be callable without arguments ({err}).") from None
    except ValueError:  # no signature to read (some builtins): the call itself tells
        pass
    try:
        return factory()
    except KeyboardInterrupt:
        raise
    except BaseException as err:  # noqa: BLE001 - as import_module_source
        raise _code_error(f"py:{value}", f"calling {attr}() of module {module_name!r}", err) from err


def build_backbone(
    config: dict[str, Any], *, trust_code: bool = False, download: bool = False, lazy: bool = False
) -> nn.Module:
    """Rebuild a checkpoint's backbone from its config ``{"name", "kwargs"}``.

    A reference is rebuilt from its resolved form (``resolved_spec`` of a ``py:`` spec, ``resolved_model`` of an
    ``hf:`` directory: absolute paths recorded when the checkpoint was saved), so the checkpoint loads from any
    working folder; the form given then is kept for display and saving. A ``modules`` backbone is a ``py:``
    reference: without ``trust_code`` nothing is imported and a CheckpointError names the module and
    ``--trust-code``. A reference whose weights changed (sha256) is a CheckpointError too. ``lazy``: an ``hf:``
    encoder is loaded on first use (its files are checked now).
    """
    from laya_eval.models.backbones import make_backbone

    name, kwargs = config["name"], dict(config.get("kwargs") or {})
    if name == "modules":
        return _build_module_backbone(kwargs, trust_code)
    if name == "hf":  # the network is reached only when this call allows it, whatever the file says
        kwargs["local_files_only"] = not download
        given = kwargs["model"]
        kwargs["model"] = kwargs.pop("resolved_model", None) or given
        backbone = make_backbone(name, **kwargs, **({"lazy": True} if lazy else {}))
        backbone.model_ref = given
        return backbone
    return make_backbone(name, **kwargs)


def _build_module_backbone(kwargs: dict[str, Any], trust_code: bool) -> nn.Module:
    from laya_eval.models.backbones import ModuleBackbone
    from laya_eval.models.backbones.modules import state_sha256

    given = kwargs.get("spec")
    if not isinstance(given, str) or not given.startswith("py:"):
        raise CheckpointError(f"a 'modules' backbone must record a py:MODULE:CALLABLE spec; got {given!r}.")
    spec = kwargs.get("resolved_spec") or given
    module_name = spec[3:].rpartition(":")[0]
    if not trust_code:
        raise CheckpointError(
            f"the backbone is the Python code py:{spec[3:]}: loading it imports module "
            f"{module_name!r}; pass --trust-code (trust_code=True) if you trust that code."
        )
    made = call_factory(spec[3:])
    if isinstance(made, LayeredModel):  # a model's factory: its backbone's network (what the spec saved)
        made = made.backbone
        made = getattr(made, "module", made) if isinstance(made, ModuleBackbone) else made
    if not isinstance(made, nn.Module):
        raise CheckpointError(f"{spec} must return an nn.Module; got {type(made).__name__}.")
    expected = kwargs.get("state_sha256")
    if expected is not None and state_sha256(made) != expected:
        raise CheckpointError(
            f"the referenced model {spec} changed: its weights hash to {state_sha256(made)[:12]}…, the head was "
            f"trained on {str(expected)[:12]}…. Restore those weights, or make the factory return the same network "
            "on every call (load or seed its weights), then fit a new head."
        )
    recorded = kwargs.get("source_sha256")
    if recorded:
        check_sources(spec[3:], recorded, "the head")
    backbone = ModuleBackbone(
        made.eval(), kwargs["layer_names"], layer_dims=kwargs["layer_dims"], pool=kwargs.get("pool"), spec=given
    )
    backbone.resolved_spec = spec
    backbone.source_sha256 = dict(recorded or {})
    return backbone.requires_grad_(False)
