"""What one evaluation computes, resolved before any work: :class:`EvalOptions` and :class:`Plan`.

:func:`make_plan` resolves the model (a checkpoint path or a model in memory), the data
(the checkpoint's dataset unless named), the applicable methods and the dataset
statistics that the methods and ablations declare in their catalog entries. Every user
error of an evaluation is raised here, before a batch runs.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from laya_eval.engine.methods import (METHODS, AttributionMethod, applicable, baseline_needs, resolve_methods,
                                     resolved_baseline)
from laya_eval.catalog import (ABLATION_DRAWS, ABLATION_SPECS, ABLATIONS, ANGULAR_SPAN, BOOTSTRAP_RESAMPLES, CHUNK_SIZE,
                               EVAL_BATCH_SIZE, IG_BASELINES, IG_STEPS, MAX_MEMORY_MB, SCOPES)
from laya_eval.checks import (check_fields, check_non_negative_int, check_number, check_optional,
                              check_positive_int, check_seed)
from laya_eval.data import Dataset, check_finite, load_dataset
from laya_eval.models.devices import resolve_device
from laya_eval.engine.distributed import SINGLE_PROCESS, World
from laya_eval.engine.effect_precision import float64_view
from laya_eval.engine.memory_budget import check_network_budget, ig_rows, one_row_block_outputs
from laya_eval.errors import ConfigError, DataError
from laya_eval.loading.feature_cache import Features, backbone_features, caches_features
from laya_eval.models.layered import LayeredModel
from laya_eval.engine.partial import run_key
from laya_eval.engine.plugins import code_identity
from laya_eval.engine.removals import ABLATION_REGISTRY, check_ablations
from laya_eval.stats import DEFAULT_RTOL

__all__ = ["CHUNK_SIZE", "EvalOptions", "KeptStates", "Plan", "check_extra_methods", "check_target", "check_target_class",
           "explained_classes", "make_plan", "plugin_sources", "resolved_ig_baseline", "with_cached_features"]

@dataclass(frozen=True)
class EvalOptions:
    """Options of one evaluation (the CLI's flags).

    ``cache`` and ``cache_dir``: at head scope, read (and fill) the feature cache of a frozen backbone stored by
    reference instead of running it batch by batch (:func:`with_cached_features`);
    the results are the same bytes either way, so neither joins a run key. ``max_memory_mb``: the working set of
    network-scope work; at head scope, the most the states kept between the two passes may take (:class:`KeptStates`).
    """

    methods: tuple[str, ...] | None = None
    ablation: str = ABLATIONS[0]
    scope: str = SCOPES[0]
    split: str = "test"
    limit: int | None = None
    batch_size: int = EVAL_BATCH_SIZE
    seed: int = 0
    bootstrap: int = BOOTSTRAP_RESAMPLES
    device: str = "cpu"
    n_steps: int = IG_STEPS
    internal_batch_size: int | None = None
    ig_baseline: str | None = None
    target: str | int = "pred"
    dtype: str = "float32"
    chunk_size: int = CHUNK_SIZE
    tie_rtol: float = DEFAULT_RTOL
    trust_code: bool = False
    download: bool = False
    allow_nonfinite: bool = False
    allow_unverified: bool = False
    max_memory_mb: int = MAX_MEMORY_MB
    draws: int = ABLATION_DRAWS
    angular_span: int = ANGULAR_SPAN
    cache: bool = True
    cache_dir: str | None = None

    def __post_init__(self) -> None:
        check_ablations(self.ablation, self.scope)
        check_fields(self, _EVAL_RULES)
        check_target(self.target)
        if self.ig_baseline is not None and self.ig_baseline not in IG_BASELINES:
            raise ConfigError(f"ig_baseline must be one of {{{', '.join(IG_BASELINES)}}}; got {self.ig_baseline!r}.")
        resolve_methods(None if self.methods is None else list(self.methods))


_EVAL_RULES = {
    "batch_size": check_positive_int,
    "n_steps": check_positive_int,
    "chunk_size": check_positive_int,
    "limit": check_optional(check_positive_int),
    "internal_batch_size": check_optional(check_positive_int),
    "max_memory_mb": check_positive_int,
    "draws": check_positive_int,
    "angular_span": check_positive_int,
    "bootstrap": check_non_negative_int,
    "seed": check_seed,
    "tie_rtol": lambda name, value: check_number(name, value, low=0, high=1, high_open=True),
}


def explained_classes(target: str | int, pred: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The class each row's attributions explain and whose probability its effects measure, (B,): the prediction
    (``"pred"``), the label (``"label"``) or a fixed class index."""
    if target == "pred":
        return pred
    if target == "label":
        return labels.to(pred)
    return torch.full_like(pred, int(target))


def check_target(target: Any) -> None:
    """``pred``, ``label`` or a class index (an int >= 0; its upper bound is checked against the model)."""
    if target in ("pred", "label"):
        return
    if isinstance(target, bool) or not isinstance(target, int) or target < 0:
        raise ConfigError(f"target must be 'pred', 'label' or a class index (an integer >= 0); got {target!r}.")


def resolved_ig_baseline(options: EvalOptions) -> str:
    """The Integrated Gradients baseline a run uses: the option, else zero at head scope and removed at network."""
    return resolved_baseline(options.ig_baseline, options.scope)


@dataclass(frozen=True)
class Plan:
    """What one evaluation computes, resolved once before any work; ``features`` holds the pooled states of
    ``data`` when they come from the feature cache (set by the engine after planning)."""

    model: LayeredModel
    data: Dataset
    methods: tuple[AttributionMethod, ...]
    ablations: tuple[str, ...]
    options: EvalOptions
    device: torch.device
    statistics: tuple[str, ...]
    checkpoint: dict[str, Any]
    notes: tuple[str, ...] = ()
    effect_model: LayeredModel | None = None
    features: Features | None = None
    #: Rows per batch where the budget allows fewer than ``options.batch_size`` (see :func:`make_plan`).
    batch_rows: int | None = None

    @property
    def needs_gradients(self) -> bool:
        return any("gradients" in m.needs for m in self.methods)

    @property
    def rows_per_batch(self) -> int:
        return min(self.options.batch_size, self.batch_rows or self.options.batch_size)

    def key(self) -> str:
        """What changes a record (everything but batch size, chunk size, bootstrap, tie tolerance and process
        count): the model's identity, the data's name, split, size and content sha256, and the options."""
        from laya_eval.output.files import data_content_sha256, module_state_sha256

        o = self.options
        model = self.checkpoint if self.checkpoint.get("sha256") or self.checkpoint.get("kind") else {
            "in_memory_state_sha256": module_state_sha256(self.model)}
        return run_key({"checkpoint": self.checkpoint, "model": model, "data": self.data.name, "split": o.split,
                        "n": len(self.data), "content_sha256": data_content_sha256(self.data.x, self.data.y),
                        "methods": [m.name for m in self.methods], "ablations": self.ablations,
                        "scope": o.scope, "seed": o.seed, "n_steps": o.n_steps, "dtype": o.dtype,
                        "internal_batch_size": o.internal_batch_size, "device": self.device.type, "draws": o.draws,
                        "angular_span": o.angular_span, "target": o.target, "ig_baseline": resolved_ig_baseline(o),
                        "plugins": plugin_sources(self),
                        # network scope runs in row chunks within the budget, which rounding can tell apart
                        **({"max_memory_mb": o.max_memory_mb} if o.scope == "network" else {})})

    def result_key(self) -> str:
        """:meth:`key` plus every option that changes the finished tables (bootstrap, tie tolerance); a
        result's manifest records it, and ``--resume`` onto a result with another one is refused."""
        o = self.options
        return run_key({"run": self.key(), "bootstrap": o.bootstrap, "tie_rtol": o.tie_rtol})


def _resolve_model(model: LayeredModel | str | os.PathLike, device: torch.device, options: EvalOptions,
                   world: World = SINGLE_PROCESS) -> tuple[LayeredModel, dict]:
    """A model in memory as it is, or a spec (checkpoint path, ``hf:``, ``py:``) through :func:`laya_eval.loading.specs.load_model`."""
    if isinstance(model, LayeredModel):
        return model.to(device).eval(), {"path": None, "sha256": None}
    from laya_eval.loading.specs import load_model

    # Through the feature cache where a head-scope run may read every pooled state from it (with_cached_features):
    # a frozen hf: encoder is then loaded only if a state is missing.
    cached = options.cache and options.scope == "head" and options.dtype == "float32" and world.size == 1
    loaded = load_model(model, trust_code=options.trust_code, download=options.download, map_location=device,
                        allow_unverified=options.allow_unverified, feature_cache=cached, cache_dir=options.cache_dir)
    return loaded.model, loaded.provenance


def _resolve_data(model: LayeredModel, data: Dataset | str | None, options: EvalOptions, data_dir: Any) -> Dataset:
    if isinstance(data, Dataset):
        if not options.allow_nonfinite:  # a Dataset built in memory has not passed a loader's check
            check_finite(data)
        return data
    name = data or model.info.dataset
    if not name:
        raise DataError("the checkpoint records no dataset; name one with --data (e.g. --data digits or --data npz:PATH).")
    return load_dataset(name, options.split, data_dir=data_dir, download=options.download,
                        allow_nonfinite=options.allow_nonfinite)


def check_extra_methods(extra: Sequence[AttributionMethod]) -> tuple[AttributionMethod, ...]:
    """Methods given in code besides the registry's: each an :class:`AttributionMethod` with a name of its own."""
    extra = tuple(extra)
    for m in extra:
        if not isinstance(m, AttributionMethod):
            raise ConfigError(f"extra methods must be AttributionMethod objects; got {type(m).__name__}.")
    names = [m.name for m in extra]
    for k, name in enumerate(names):
        if name in METHODS:
            raise ConfigError(f"an extra method may not take a registered method's name; got {name!r}.")
        if name in names[:k]:
            raise ConfigError(f"extra method names must be unique; got {name!r} twice.")
    return extra


def _check_network_budget(model: LayeredModel, data: Dataset, device: torch.device, options: EvalOptions, *,
                          gradients: bool) -> int | None:
    """One input's full block outputs sized against ``--max-memory`` (one backbone pass on one row), before any
    work. With gradients, the rows a batch may have: the methods read every block's output and its gradient for the
    whole batch, so a batch holds no more rows than one gradient call within the budget."""
    first = data.subset(slice(0, 1)).x
    outputs = one_row_block_outputs(model, first.to(device) if isinstance(first, torch.Tensor) else first)
    check_network_budget(outputs, options.max_memory_mb, gradients=gradients)
    return ig_rows(outputs, options.max_memory_mb) if gradients else None


def _check_ablation_needs(ablations: Sequence[str], data: Dataset, options: EvalOptions) -> None:
    """What the ablations' needs ask of the data, checked before any work."""
    for a in ablations:
        needs = ABLATION_SPECS[a].needs
        if "donors" in needs and len(data) < 2:
            raise ConfigError(f"ablation {a!r} draws donors from the other samples of the split; '{data.name}' "
                              f"has {len(data)} sample (raise --limit).")
        if "tensor_inputs" in needs and options.scope == "network" and not isinstance(data.x, torch.Tensor):
            raise ConfigError(f"ablation {a!r} at network scope needs tensor inputs (replacement states of one "
                              f"shape per sample); '{data.name}' holds text: use --scope head.")


def _applicable_methods(model: LayeredModel, data: Dataset, options: EvalOptions,
                        extra: Sequence[AttributionMethod] = ()) -> tuple[list, list[str]]:
    """The requested methods that can run, and a note per method skipped.

    A method that does not apply to the head is skipped with a note. One that needs tensor inputs at network
    scope on text data is skipped with a note among the defaults and refused by name when asked for (by
    name in ``options.methods`` or as an ``extra`` method). No
    method left is an error: there would be nothing to score.
    """
    asked = None if options.methods is None else list(options.methods)
    methods, notes = [], []
    for m in [*resolve_methods(asked), *extra]:
        reason = applicable(m, model)
        if reason is None and options.scope == "network" and "tensor_inputs" in m.needs and data.input_shape is None:
            reason = (f"it needs tensor inputs at network scope; '{data.name}' is text (use scope 'head' "
                      "for its direct effect).")
            if asked is not None or any(m is e for e in extra):
                raise ConfigError(f"method {m.name!r}: {reason}")
        (notes.append(f"skipped {m.name}: {reason}") if reason else methods.append(m))
    if not methods:
        raise ConfigError("no requested method applies to this model: " + " ".join(notes)
                          + " Choose others with --methods.")
    return methods, notes


def check_target_class(target: str | int, model: LayeredModel) -> None:
    """A class index ``target`` must be one of ``model``'s classes."""
    n = model.head.num_classes
    if isinstance(target, int) and target >= n:
        raise ConfigError(f"target must be 'pred', 'label' or a class index below {n} (the model has {n} classes); "
                          f"got {target}.")


def plugin_sources(plan: Plan) -> dict[str, str]:
    """The code identity (sha256 of the module source) of every plug-in method and ablation the plan uses."""
    names = [("method", m.name, m.fn) for m in plan.methods]
    # An ablation drawn per sample is its sample fill (its head and network logits are the engine's own).
    names += [("ablation", a, ABLATION_REGISTRY[a].sample_fill or ABLATION_REGISTRY[a].head
               or ABLATION_REGISTRY[a].network) for a in plan.ablations]
    out = {}
    for kind, name, fn in names:
        identity = code_identity(kind, name, fn)
        if identity is not None:
            out[f"{kind}:{name}"] = identity
    return out


def make_plan(model: LayeredModel | str | os.PathLike, data: Dataset | str | None, ablations: Sequence[str], *,
              options: EvalOptions, data_dir: Any = None, world: World = SINGLE_PROCESS,
              extra_methods: Sequence[AttributionMethod] = ()) -> Plan:
    """Resolve model, data, methods and needs; every user error is raised here, before any work.

    ``extra_methods`` are scored after the registered ones, exactly like them (an attribution computed in code,
    e.g. a known ranking of the layers)."""
    extra = check_extra_methods(extra_methods)
    ablations = check_ablations(ablations, options.scope)
    device = resolve_device(world.device(options.device))
    model, ckpt = _resolve_model(model, device, options, world)
    if model.n_layers < 2:
        raise ConfigError("the model has a single hidden layer: faithfulness (a rank correlation across layers) is undefined.")
    data = _resolve_data(model, data, options, data_dir)
    if options.limit is not None:
        if options.limit > len(data):
            raise ConfigError(f"limit {options.limit} is larger than the {len(data)} samples of '{data.name}' ({options.split}).")
        data = data.subset(slice(0, options.limit))
    model.check_fits(data)
    _check_ablation_needs(ablations, data, options)
    methods, notes = _applicable_methods(model, data, options, extra)
    check_target_class(options.target, model)
    needs = [n for m in methods for n in m.needs] + [n for a in ablations for n in ABLATION_SPECS[a].needs]
    if any("baseline" in m.needs for m in methods):
        needs += baseline_needs(resolved_ig_baseline(options), ablations, explicit=options.ig_baseline is not None)
    stats = tuple(dict.fromkeys(n.split(":", 1)[1] for n in needs if n.startswith("stat:")))
    batch_rows = None
    if options.scope == "network":
        # methods that need gradients or tensor inputs take gradients through the backbone at network scope
        backward = any({"gradients", "tensor_inputs"} & set(m.needs) for m in methods)
        batch_rows = _check_network_budget(model, data, device, options, gradients=backward)
    return Plan(model, data, tuple(methods), ablations, options, device, stats, ckpt, tuple(notes),
                effect_model=float64_view(model), batch_rows=batch_rows)


class KeptStates:
    """The pooled states of the statistics pass, kept for the main pass so that it does not run the backbone a
    second time: head scope, one process, no feature cache in use, every state a vector (B, d_i) in float32, all of
    them within ``options.max_memory_mb``. The main pass reads them as it reads the feature cache; they are the
    rows of the same batches, so the tables are the same bytes."""

    def __init__(self, n: int, dims: Sequence[int]) -> None:
        self.hidden = [torch.empty(n, d, device="cpu") for d in dims]
        self.left, self.whole = n, True

    @classmethod
    def for_plan(cls, plan: Plan, world: World = SINGLE_PROCESS) -> KeptStates | None:
        """A store for ``plan``'s states, or None where they are not kept."""
        dims = list(plan.model.head.layer_dims)
        fits = len(plan.data) * sum(dims) * 4 <= plan.options.max_memory_mb * 2**20
        if not plan.statistics or plan.features is not None or plan.options.scope != "head" or world.size != 1:
            return None
        return cls(len(plan.data), dims) if fits else None

    def add(self, hidden: Sequence[torch.Tensor], ids: torch.Tensor, index: torch.Tensor) -> None:
        """Keep the real rows (``ids`` >= 0) of a batch's states at their rows ``index`` (CPU) of the data."""
        self.whole = self.whole and all(h.dim() == 2 and h.dtype == torch.float32 and h.shape[1] == s.shape[1]
                                        for h, s in zip(hidden, self.hidden))
        if self.whole:
            real = ids >= 0
            for store, h in zip(self.hidden, hidden):
                store[index[real.cpu()]] = h[real].cpu()
            self.left -= int(real.sum())

    def into(self, plan: Plan) -> Plan:
        """``plan`` reading the kept states, once every row is kept; else ``plan``."""
        if not self.whole or self.left:
            return plan
        return dataclasses.replace(plan, features=Features(hidden=self.hidden, y=plan.data.y))


def with_cached_features(plan: Plan, world: World = SINGLE_PROCESS) -> Plan:
    """``plan`` with its pooled states from the feature cache where they can stand in for the backbone pass: head
    scope, a float32 pass, one process, a frozen backbone stored by reference whose states are vectors, and
    ``options.cache``; else ``plan`` unchanged."""
    o = plan.options
    if not (o.cache and o.scope == "head" and o.dtype == "float32" and world.size == 1
            and caches_features(plan.model.backbone, vector_states=True)):
        return plan
    features = backbone_features(plan.model.backbone, plan.data, device=str(plan.device), cache_dir=o.cache_dir)
    return dataclasses.replace(plan, features=features)
