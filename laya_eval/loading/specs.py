"""Model specs: one way to name a model everywhere.

- ``PATH.pt`` / ``PATH.safetensors``: a laya-eval checkpoint;
- ``hf:ID_OR_DIR``: a Hugging Face transformers model (a directory, an installed package that
  ships one, or a Hub id downloaded only with ``download=True``);
- ``py:MODULE:CALLABLE``: a factory the user names (``MODULE`` a dotted module name or a
  ``.py`` file); it returns an ``nn.Module`` (a backbone for :func:`laya_eval.fit_head`) or a
  complete :class:`~laya_eval.models.layered.LayeredModel`.

A ``py:`` spec typed by the user is the user's choice; a ``py:`` reference read from a
checkpoint is imported only with ``trust_code=True`` (CLI ``--trust-code``).

Examples
--------
>>> loaded = load_model("ckpt.pt")                       # doctest: +SKIP
>>> loaded.model, loaded.provenance["sha256"]            # doctest: +SKIP
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch
from torch import nn

from laya_eval.errors import ConfigError
from laya_eval.loading.references import call_factory, source_hashes
from laya_eval.models.layered import LayeredModel
from laya_eval.checks import check_choice
from laya_eval.catalog import HF_POOLS, MODULE_POOLS

__all__ = ["LoadedModel", "load_backbone", "load_model", "parse_spec"]

SPEC_KINDS = ("path", "hf", "py")


@dataclass
class LoadedModel:
    """A model resolved from a spec.

    Attributes
    ----------
    model : LayeredModel
        In eval mode, on ``map_location``.
    provenance : dict
        JSON-serialisable: ``spec``, ``kind``, ``path``, ``sha256`` (of a checkpoint file) and
        ``backbone`` (the by-reference record: spec, weight-file hashes) where they exist.
    """

    model: LayeredModel
    provenance: dict[str, Any] = field(default_factory=dict)


def parse_spec(spec: str | os.PathLike) -> tuple[str, str]:
    """Split a spec into ``(kind, value)``; kind is one of ``path``, ``hf``, ``py``.

    Raises
    ------
    ConfigError
        An empty spec, or a ``py:`` spec without ``MODULE:CALLABLE``.
    """
    if isinstance(spec, os.PathLike):
        return "path", os.fspath(spec)
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(
            f"a model spec must be PATH.pt, PATH.safetensors, hf:ID_OR_DIR or py:MODULE:CALLABLE; got {spec!r}."
        )
    if spec.startswith("hf:"):
        if not spec[3:]:
            raise ConfigError("model spec 'hf:' needs a directory, package or Hub id after 'hf:'.")
        return "hf", spec[3:]
    if spec.startswith("py:"):
        module, sep, name = spec[3:].rpartition(":")
        if not sep or not module or not name.isidentifier():
            raise ConfigError(f"model spec must be py:MODULE:CALLABLE (e.g. py:mymodels:load); got {spec!r}.")
        return "py", spec[3:]
    return "path", spec


def _module_candidates(module: nn.Module) -> list[str]:
    return [n for n, _ in module.named_modules() if n]


def load_backbone(
    spec: str,
    *,
    layers: Sequence[str] | None = None,
    pool: str | None = None,
    example_input: Any = None,
    download: bool = False,
    trust_code: bool = False,
    cache_dir: str | os.PathLike | None = None,
    sources: Sequence[str | os.PathLike] = (),
    allow_unverified: bool = False,
) -> nn.Module:
    """The frozen backbone a head is fitted on (``fit-head --model``).

    Parameters
    ----------
    spec : str
        ``PATH.pt`` (the backbone of that checkpoint), ``hf:…`` or ``py:…`` (an ``nn.Module``
        or a LayeredModel, whose backbone is taken).
    layers : list of str, optional
        Names or glob patterns; ``hf:`` default every hidden state, ``py:`` required.
    pool : {"avg", "mean", "cls", "flatten"}, optional
        ``hf:`` mean (default for encoders), cls or last (the last real token; default for causal LMs);
        ``py:`` avg (default), cls or flatten.
    example_input : Any
        One batch, to infer a ``py:`` module's layer sizes.
    download : bool
        Allow Hugging Face Hub downloads.
    trust_code : bool
        For a checkpoint whose backbone is itself a ``py:`` reference.
    cache_dir : path, optional
        The feature cache, where a ``py:`` module's layer sizes are remembered (so a cache
        hit needs no dry run).
    sources : list of path, optional
        Extra files or folders of a ``py:`` factory's package whose code decides the network; their
        sha256 joins the module's and the callable's in the reference (and so in every cache key).
    allow_unverified : bool
        For a checkpoint: accept one without probe, checksum or reference hashes (see
        :func:`laya_eval.loading.checkpoints.load_checkpoint`).

    Returns
    -------
    Backbone
        Frozen: no parameter requires grad.
    """
    from laya_eval.models.backbones import HFBackbone
    from laya_eval.models.backbones.base import select_names

    kind, value = parse_spec(spec)
    if kind == "path":
        from laya_eval.loading.checkpoints import load_checkpoint

        if layers is not None or pool is not None or sources:
            raise ConfigError(
                "--layers, --pool and --source apply to hf: and py: models; a checkpoint's backbone is taken whole."
            )
        backbone = load_checkpoint(value, trust_code=trust_code, allow_unverified=allow_unverified).backbone
    elif kind == "hf":
        if sources:
            raise ConfigError("--source applies to py: models; an hf: model's files are all hashed.")
        if pool is not None and pool != "avg":  # avg: the mean over tokens, as for every model kind
            check_choice("pool (an hf: model)", pool, HF_POOLS)
        pooling = {None: None, "avg": "mean"}.get(pool, pool)  # None: last for a causal LM, else mean
        backbone = HFBackbone(value, pooling=pooling, local_files_only=not download, layers=layers)
    else:
        made = call_factory(value)
        if isinstance(made, LayeredModel):
            made = made.backbone
        if not isinstance(made, nn.Module):
            raise ConfigError(f"py:{value} must return an nn.Module or a LayeredModel; got {type(made).__name__}.")
        if layers is None:
            children = [n for n, _ in made.named_children()]
            raise ConfigError(
                f"py:{value} returns a {type(made).__name__}; name its layers with --layers "
                f"(names or patterns, e.g. {','.join(children[:4]) or 'layer1,layer2'})."
            )
        if pool is not None:
            check_choice("pool (a py: model)", pool, (*MODULE_POOLS, "mean"))
        names = select_names(layers, _module_candidates(made), "layer")
        code = source_hashes(value, sources)
        backbone = _module_backbone(
            made, f"py:{value}", names, "avg" if pool in (None, "mean") else pool, example_input, cache_dir, code
        )
    backbone.requires_grad_(False)
    return backbone


def _module_backbone(
    made: nn.Module,
    spec: str,
    names: list[str],
    pool: str,
    example_input: Any,
    cache_dir: str | os.PathLike | None,
    code: dict[str, str],
) -> nn.Module:
    """A by-reference ModuleBackbone recording its code's hashes; layer sizes from the cache when known,
    else from a dry run."""
    from laya_eval.models.backbones import ModuleBackbone
    from laya_eval.models.backbones.modules import resolve_py_spec, state_sha256
    from laya_eval.loading.feature_cache import known_layer_dims, remember_layer_dims

    made.eval()
    reference = {
        "spec": resolve_py_spec(spec),
        "layer_names": names,
        "pool": pool,
        "state_sha256": state_sha256(made),
        "source_sha256": code,
    }
    from laya_eval.loading.schema import BACKBONE_KWARGS

    try:
        dims = known_layer_dims(reference, cache_dir)
    except OSError:  # the record cannot be read (a folder in its place): the sizes are inferred again
        dims = None
    # A record is a shortcut, not a fact: sizes a checkpoint of this backbone could not hold are inferred again.
    if dims is not None and len(dims) == len(names) and BACKBONE_KWARGS["modules"]["layer_dims"].check(dims):
        backbone = ModuleBackbone(made, names, layer_dims=dims, pool=pool, spec=spec)
    elif example_input is None:
        raise ConfigError(f"{spec}: layer sizes are inferred from one batch; pass example_input.")
    else:
        backbone = ModuleBackbone(made, names, example_input=example_input, pool=pool, spec=spec)
        try:
            remember_layer_dims(reference, backbone.layer_dims, cache_dir)
        except OSError:  # a shortcut left unwritten (a full disk, a folder in its place): the next run infers again
            pass
    backbone.source_sha256 = dict(code)
    return backbone


def load_model(
    spec: str | os.PathLike,
    *,
    trust_code: bool = False,
    download: bool = False,
    map_location: str | torch.device = "cpu",
    allow_unverified: bool = False,
    feature_cache: bool = False,
    cache_dir: str | os.PathLike | None = None,
) -> LoadedModel:
    """Resolve a spec into a complete model for evaluation (faithfulness, profile, …).

    Parameters
    ----------
    spec : str or PathLike
        ``PATH.pt|PATH.safetensors``, ``hf:DIR`` (a transformers classifier with
        ``use_weighted_layer_sum=True``) or ``py:MODULE:CALLABLE`` returning a LayeredModel.
    trust_code : bool
        Allow a checkpoint's ``py:`` backbone reference to be imported.
    download : bool
        Allow Hugging Face Hub downloads.
    map_location : str or torch.device
    allow_unverified : bool
        Accept a checkpoint without probe, checksum or reference hashes (see
        :func:`laya_eval.loading.checkpoints.load_checkpoint`).
    feature_cache, cache_dir : bool, path
        A checkpoint's frozen ``hf:`` backbone is loaded on first use and its probe read through the feature
        cache (see :func:`laya_eval.loading.checkpoints.load_checkpoint`).

    Returns
    -------
    LoadedModel

    Raises
    ------
    ConfigError, CheckpointError
    """
    kind, value = parse_spec(spec)
    provenance: dict[str, Any] = {"spec": os.fspath(spec), "kind": kind}
    if kind == "path":
        from laya_eval.loading.checkpoints import load_checkpoint
        from laya_eval.output.files import file_sha256

        model = load_checkpoint(
            value,
            map_location=map_location,
            trust_code=trust_code,
            download=download,
            allow_unverified=allow_unverified,
            feature_cache=feature_cache,
            cache_dir=cache_dir,
        )
        provenance.update(path=str(value), sha256=file_sha256(value), backbone=_reference(model))
    elif kind == "hf":
        from laya_eval.models.weighted_layer_sum import load_weighted_layer_sum

        from laya_eval.models.backbones.hf import locate_hf_model, model_file_hashes
        from laya_eval.models.backbones.hf_causal import folder_is_causal_lm

        if folder_is_causal_lm(locate_hf_model(value, not download), not download):
            raise ConfigError(
                f"hf:{value} is a causal language model without a classifier head: evaluate its own prediction with "
                "--target next-token --data text:FILE, or fit a head on its layers first (fit-head --model hf:DIR)."
            )
        model, files = load_weighted_layer_sum(value, local_files_only=not download)
        provenance.update(
            path=value, weights_sha256=files, files_sha256=model_file_hashes(locate_hf_model(value, not download))
        )
    else:
        model = call_factory(value)
        if not isinstance(model, LayeredModel):
            raise ConfigError(
                f"py:{value} returned {type(model).__name__}; to evaluate it, a factory must return a "
                "laya_eval.LayeredModel (wrap your network with ModuleBackbone and your head with "
                "laya_eval.as_layer_head), or train a head on it with `laya-eval fit-head --model py:...`."
            )
        from laya_eval.output.files import module_state_sha256

        # what decides its numbers: the code and the weights (a run key built from this refuses stale chunks)
        provenance.update(source_sha256=source_hashes(value), state_sha256=module_state_sha256(model))
        _remember_spec(model, f"py:{value}")
    return LoadedModel(model=model.to(map_location).eval(), provenance=provenance)


def _remember_spec(model: LayeredModel, spec: str) -> None:
    """A ``modules`` backbone built without a spec came from ``spec``: record it, so that the model saves as it
    loaded (the backbone by that reference, the head's weights in the file)."""
    from laya_eval.models.backbones import ModuleBackbone

    backbone = model.backbone
    if (
        isinstance(backbone, ModuleBackbone)
        and backbone.spec is None
        and (backbone.pool_name is not None or backbone._pool is None)
    ):
        backbone.remember_spec(spec)


def _reference(model: LayeredModel) -> dict[str, Any] | None:
    if not getattr(model.backbone, "stored_by_reference", False):
        return None
    return model.backbone.config()
