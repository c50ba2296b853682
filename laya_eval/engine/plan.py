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

from laya_eval.engine.methods import (
    METHODS,
    AttributionMethod,
    applicable,
    baseline_needs,
    resolve_methods,
    resolved_baseline,
)
from laya_eval.catalog import ABLATION_SPECS, AUTO_REFERENCE, CHUNK_SIZE, DEFAULT_ABLATION
from laya_eval.options import check_declared, declared, role_fields
from laya_eval.data import Dataset, check_finite, load_dataset
from laya_eval.models.devices import resolve_device
from laya_eval.engine.distributed import SINGLE_PROCESS, World
from laya_eval.engine.effect_precision import float64_view
from laya_eval.engine.attribution_patching import removal_problem
from laya_eval.engine.gradients import network_gradient_problem
from laya_eval.engine.memory_budget import check_network_budget, gradient_batch_rows, row_cost
from laya_eval.errors import ConfigError, DataError
from laya_eval.loading.feature_cache import Features, backbone_features, caches_features
from laya_eval.models.layered import LayeredModel, padded_rows
from laya_eval.engine.partial import run_key
from laya_eval.engine.plugins import code_identity, load_installed_plugins
from laya_eval.engine.removals import ABLATION_REGISTRY, check_ablations

#: The needs that take gradients (through the backbone at network scope).
GRADIENT_NEEDS = ("gradients", "network_gradients", "probability_gradients")

__all__ = [
    "CHUNK_SIZE",
    "EvalOptions",
    "KeptStates",
    "Plan",
    "check_extra_methods",
    "check_target_class",
    "refuse_next_token",
    "explained_classes",
    "make_plan",
    "plugin_sources",
    "resolved_ig_baseline",
    "with_cached_features",
]


@declared
class EvalOptions:
    """Options of one evaluation: one field per option of ``laya-eval faithfulness``, declared with its default,
    checks and role in :mod:`laya_eval.options` (an invalid value raises ``ConfigError`` naming
    ``EvalOptions.<field>``).

    The role decides the keys: what *decides* the numbers (model and data aside: ``methods``, ``ablation``,
    ``scope``, ``split``, ``limit``, ``target``, the IG settings, ``draws``, ``angular_span``, ``seed``, ``dtype``,
    ``device``, ``max_memory_mb``, ``allow_nonfinite``) joins every resume key (:meth:`Plan.key`) by itself; what
    changes only the finished tables (``bootstrap``, ``tie_rtol``, ``reference``) joins the result key; speed (``batch_size``,
    ``chunk_size``, ``cache``, ``cache_dir``), presentation (``table_format``, ``save_draws``) and permissions (``trust_code``,
    ``download``, ``allow_unverified``) join none. ``device`` and ``max_memory_mb`` decide where and in which row
    chunks the work runs, which changes floating-point rounding, so they are keyed with the numbers.

    ``ablation``: one name or several (a tuple: one pass, one result each); ``None`` is ``gate`` at head scope and
    ``zero`` at network scope. ``cache`` and ``cache_dir``: at head scope, read (and fill) the feature cache of a
    frozen backbone stored by reference instead of running it batch by batch (:func:`with_cached_features`); the
    results are the same bytes either way. ``max_memory_mb``: the working set of network-scope work; at head scope,
    the most the states kept between the two passes may take (:class:`KeptStates`).
    """

    methods: tuple[str, ...] | None
    ablation: str | tuple[str, ...] | None
    scope: str
    split: str
    limit: int | None
    batch_size: int
    seed: int
    bootstrap: int
    reference: str
    device: str
    n_steps: int
    internal_batch_size: int | None
    ig_baseline: str | None
    target: str | int
    context: int
    dtype: str
    chunk_size: int
    tie_rtol: float
    trust_code: bool
    download: bool
    allow_nonfinite: bool
    allow_unverified: bool
    max_memory_mb: int
    draws: int
    angular_span: int
    cache: bool
    cache_dir: str | None
    table_format: str
    save_draws: bool

    def __post_init__(self) -> None:
        load_installed_plugins()  # their methods and ablations are choices too
        check_declared(self)
        if self.ablation is None:
            object.__setattr__(self, "ablation", DEFAULT_ABLATION[self.scope])
        elif len(self.ablation) == 1:
            object.__setattr__(self, "ablation", self.ablation[0])
        check_ablations(self.ablation, self.scope, "EvalOptions.ablation")
        if self.save_draws and not any(ABLATION_SPECS[a].draws_noise for a in self.ablations):
            noisy = [a for a, spec in ABLATION_SPECS.items() if spec.draws_noise]
            raise ConfigError(
                f"EvalOptions.save_draws (--save-draws) writes the noise of {', '.join(noisy)}; got ablation "
                f"{','.join(self.ablations)}: add one of them or leave it off."
            )

    @property
    def ablations(self) -> tuple[str, ...]:
        """The ablations evaluated, in the order given."""
        return (self.ablation,) if isinstance(self.ablation, str) else tuple(self.ablation)


def explained_classes(target: str | int, pred: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The class each row's attributions explain and whose probability its effects measure, (B,): the prediction
    (``"pred"``), the label (``"label"``) or a fixed class index."""
    if target == "pred":
        return pred
    if target == "label":
        return labels.to(pred)
    return torch.full_like(pred, int(target))


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
    #: Bytes of one input's full block outputs (network scope; the planning probe).
    block_bytes: int | None = None

    @property
    def needs_gradients(self) -> bool:
        return any("gradients" in m.needs for m in self.methods)

    @property
    def needs_probability_gradients(self) -> bool:
        return any("probability_gradients" in m.needs for m in self.methods)

    @property
    def starts_at_block(self) -> bool:
        """Whether network-scope removals and IG start at their block from the plain pass's kept block states: a
        backbone that can start at a block, run in float32, whose batch's block outputs fit in ``--max-memory``
        (docs/concepts/ablations.md, "Start at block")."""
        return self.start_refusal is None

    @property
    def start_refusal(self) -> str | None:
        """Why network-scope work runs from the input (``None`` where it starts at a block)."""
        o = self.options
        if o.scope != "network":
            return "head scope"
        if not getattr(self.model.backbone, "starts_at_block", False):
            return f"the backbone ({type(self.model.backbone).__name__}) cannot start at a block"
        if o.dtype != "float32":
            return f"--dtype {o.dtype} (the plain pass runs under autocast)"
        if (self.block_bytes or 0) * padded_rows(self.rows_per_batch) > o.max_memory_mb << 20:
            return f"a batch's block outputs do not fit in --max-memory {o.max_memory_mb} MB"
        return None

    @property
    def rows_per_batch(self) -> int:
        return min(self.options.batch_size, self.batch_rows or self.options.batch_size)

    def key(self) -> str:
        """What changes a record: the model's identity, the data's name, size and content sha256, what the plan
        resolved (methods, ablations, the IG baseline, the device type, the plug-ins' code) and every option whose
        role is ``decides`` (:func:`laya_eval.options.role_fields`: a new deciding option joins the key
        by its record alone). Speed, presentation and permission options stay out: batch size, chunk size, the
        feature cache and the process count leave the records' bytes unchanged."""
        from laya_eval.output.files import data_content_sha256, module_state_sha256

        o = self.options
        model = (
            self.checkpoint
            if self.checkpoint.get("sha256") or self.checkpoint.get("kind")
            else {"in_memory_state_sha256": module_state_sha256(self.model)}
        )
        return run_key(
            {
                "checkpoint": self.checkpoint,
                "model": model,
                "data": self.data.name,
                "n": len(self.data),
                "content_sha256": data_content_sha256(self.data.x, self.data.y),
                "methods": [m.name for m in self.methods],
                "ablations": self.ablations,
                "device_type": self.device.type,
                "resolved_ig_baseline": resolved_ig_baseline(o),
                "plugins": plugin_sources(self),
                "options": _role_values(o, "decides"),
            }
        )

    def result_key(self) -> str:
        """:meth:`key` plus every option that changes only the finished tables (role ``summary``: bootstrap, tie
        tolerance); a result's manifest records it, and ``--resume`` onto a result with another one is refused."""
        return run_key({"run": self.key(), "options": _role_values(self.options, "summary")})


def _role_values(options: EvalOptions, role: str) -> dict[str, Any]:
    """``{field: value}`` of the fields of ``options`` whose role is ``role``."""
    return {name: getattr(options, name) for name in role_fields("EvalOptions", role)}


def _resolve_model(
    model: LayeredModel | str | os.PathLike, device: torch.device, options: EvalOptions, world: World = SINGLE_PROCESS
) -> tuple[LayeredModel, dict]:
    """A model in memory as it is, or a spec (checkpoint path, ``hf:``, ``py:``) through :func:`laya_eval.loading.specs.load_model`."""
    if isinstance(model, LayeredModel):
        return model.to(device).eval(), {"path": None, "sha256": None}
    from laya_eval.loading.specs import load_model

    # Through the feature cache where a head-scope run may read every pooled state from it (with_cached_features):
    # a frozen hf: encoder is then loaded only if a state is missing.
    cached = options.cache and options.scope == "head" and options.dtype == "float32" and world.size == 1
    loaded = load_model(
        model,
        trust_code=options.trust_code,
        download=options.download,
        map_location=device,
        allow_unverified=options.allow_unverified,
        feature_cache=cached,
        cache_dir=options.cache_dir,
    )
    return loaded.model, loaded.provenance


def _resolve_data(model: LayeredModel, data: Dataset | str | None, options: EvalOptions, data_dir: Any) -> Dataset:
    if isinstance(data, Dataset):
        if not options.allow_nonfinite:  # a Dataset built in memory has not passed a loader's check
            check_finite(data)
        return data
    name = data or model.info.dataset
    if not name:
        raise DataError(
            "the checkpoint records no dataset; name one with --data (e.g. --data digits or --data npz:PATH)."
        )
    return load_dataset(
        name, options.split, data_dir=data_dir, download=options.download, allow_nonfinite=options.allow_nonfinite
    )


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


def _check_network_budget(
    model: LayeredModel, data: Dataset, device: torch.device, options: EvalOptions, *, gradients: bool
) -> tuple[int | None, int]:
    """What one input holds in network-scope work (one backbone pass with gradients on one row) sized against
    ``--max-memory``, before any work. With gradients, the rows a batch may have: the methods read every block's
    output and its gradient for the whole batch, so a batch holds no more rows than fit beside their kept states in
    one gradient call. Returns ``(rows, bytes of one row's kept block outputs and inputs)``."""
    first = data.subset(slice(0, 1)).x
    cost = row_cost(model, first.to(device) if isinstance(first, torch.Tensor) else first)
    check_network_budget(cost, options.max_memory_mb, gradients=gradients)
    return (gradient_batch_rows(cost, options.max_memory_mb) if gradients else None), cost.kept


def _check_ablation_needs(ablations: Sequence[str], data: Dataset, options: EvalOptions) -> None:
    """What the ablations' needs ask of the data, checked before any work."""
    for a in ablations:
        needs = ABLATION_SPECS[a].needs
        if "donors" in needs and len(data) < 2:
            raise ConfigError(
                f"ablation {a!r} draws donors from the other samples of the split; '{data.name}' "
                f"has {len(data)} sample (raise --limit)."
            )
        if "tensor_inputs" in needs and options.scope == "network" and not isinstance(data.x, torch.Tensor):
            raise ConfigError(
                f"ablation {a!r} at network scope needs tensor inputs (replacement states of one "
                f"shape per sample); '{data.name}' holds text: use --scope head."
            )


def _check_update_shapes(model: LayeredModel, data: Dataset, device: torch.device, ablations: Sequence[str]) -> None:
    """An ablation that replaces a block's update (``"updates"``) needs every layer's block to take an input of its
    output's shape; a one-row pass reads them, before any work."""
    update_forms = [a for a in ablations if "updates" in ABLATION_SPECS[a].needs]
    if not update_forms:
        return
    first = data.subset(slice(0, 1)).x
    with torch.no_grad():
        _, inputs, outputs = model.block_inputs_and_outputs(
            first.to(device) if isinstance(first, torch.Tensor) else first
        )
    state_forms = [a for a, s in ABLATION_SPECS.items() if "network" in s.scopes and "updates" not in s.needs]
    for name, block_input, out in zip(model.layer_names, inputs, outputs):
        if block_input is None or block_input.shape != out.shape or not block_input.is_floating_point():
            state = f"use an ablation that replaces the state ({', '.join(state_forms)})"
            if block_input is None:  # the layer's module is called without a tensor input (e.g. a named output)
                raise ConfigError(
                    f"ablation {update_forms[0]!r} replaces a block's update (output minus input), but layer "
                    f"{name!r} is given no tensor input, so it has no update to replace: {state}, or name layers "
                    "whose modules take the state they change."
                )
            got = str(tuple(block_input.shape[1:]))
            got += "" if block_input.is_floating_point() else f" of {block_input.dtype}"
            raise ConfigError(
                f"ablation {update_forms[0]!r} replaces a block's update (output minus input), so every layer's "
                f"block must keep its shape; layer {name!r} maps {got} to {tuple(out.shape[1:])}: {state} or a head "
                "on layers whose blocks keep their shape."
            )


def _input_problem(m: AttributionMethod, model: LayeredModel, data: Dataset, options: EvalOptions) -> str | None:
    """Why ``m`` cannot run on this data, scope and these ablations (a sentence), or ``None``."""
    network_text = options.scope == "network" and data.input_shape is None
    if network_text and "tensor_inputs" in m.needs:
        return (
            f"it needs tensor inputs at network scope; '{data.name}' is text (use scope 'head' for its direct effect)."
        )
    if network_text and set(GRADIENT_NEEDS) & set(m.needs):
        problem = network_gradient_problem(model, data.subset(slice(0, 1)).x)
        if problem is not None:
            return f"{problem}."
    if "removal" in m.needs:
        for a in options.ablations:
            problem = removal_problem(a)
            if problem is not None:
                return f"{problem}."
    return None


def _applicable_methods(
    model: LayeredModel, data: Dataset, options: EvalOptions, extra: Sequence[AttributionMethod] = ()
) -> tuple[list, list[str]]:
    """The requested methods that can run, and a note per method skipped.

    A method that does not apply to the head is skipped with a note. One that cannot run on these inputs or
    ablations (tensor inputs or gradients through a backbone that cannot tokenize text at network scope, an
    estimate of an ablation that puts no state in) is skipped with a note among the defaults and refused by name
    when asked for (by name in ``options.methods`` or as an ``extra`` method). No method left is an error: there
    would be nothing to score.
    """
    asked = None if options.methods is None else list(options.methods)
    methods, notes = [], []
    for m in [*resolve_methods(asked), *extra]:
        reason = applicable(m, model)
        if reason is None:
            reason = _input_problem(m, model, data, options)
            if reason is not None and (asked is not None or any(m is e for e in extra)):
                raise ConfigError(f"method {m.name!r}: {reason}")
        (notes.append(f"skipped {m.name}: {reason}") if reason else methods.append(m))
    if not methods:
        raise ConfigError(
            "no requested method applies to this model: " + " ".join(notes) + " Choose others with --methods."
        )
    return methods, notes


def comparison_reference(reference: str, methods: Sequence[str]) -> str:
    """The family of a run's paired tests (docs/concepts/statistics.md): ``reference`` itself (a method of the
    run, or ``"all"``); ``"auto"`` is :data:`~laya_eval.catalog.AUTO_REFERENCE` where the run has it, else its
    first method."""
    if reference == "auto":
        return AUTO_REFERENCE if AUTO_REFERENCE in methods else methods[0]
    if reference != "all" and reference not in methods:
        raise ConfigError(
            f"reference must be 'auto', 'all' or one of this run's methods {{{', '.join(methods)}}}; got {reference!r}."
        )
    return reference


def refuse_next_token(target: str | int) -> None:
    """``next-token`` is a causal LM's own prediction, evaluated by :func:`laya_eval.evaluate_next_token` and
    :func:`laya_eval.prune_next_token`, not a class of a classifier head."""
    if target == "next-token":
        raise ConfigError(
            "target 'next-token' evaluates a causal LM's own next-token prediction on text windows: "
            "laya-eval faithfulness or prune hf:DIR --data text:FILE --target next-token (laya_eval.evaluate_next_token, "
            "laya_eval.prune_next_token); a classifier checkpoint takes --target pred, label or a class index."
        )


def check_target_class(target: str | int, model: LayeredModel) -> None:
    """A class index ``target`` must be one of ``model``'s classes; ``next-token`` is not a class."""
    refuse_next_token(target)
    n = model.head.num_classes
    if isinstance(target, int) and target >= n:
        raise ConfigError(
            f"target must be 'pred', 'label' or a class index below {n} (the model has {n} classes); got {target}."
        )


def plugin_sources(plan: Plan) -> dict[str, str]:
    """The code identity (sha256 of the module source) of every plug-in method and ablation the plan uses."""
    names = [("method", m.name, m.fn) for m in plan.methods]
    # An ablation drawn per sample is its sample fill (its head and network logits are the engine's own).
    names += [
        ("ablation", a, ABLATION_REGISTRY[a].sample_fill or ABLATION_REGISTRY[a].head or ABLATION_REGISTRY[a].network)
        for a in plan.ablations
    ]
    out = {}
    for kind, name, fn in names:
        identity = code_identity(kind, name, fn)
        if identity is not None:
            out[f"{kind}:{name}"] = identity
    return out


def make_plan(
    model: LayeredModel | str | os.PathLike,
    data: Dataset | str | None,
    *,
    options: EvalOptions,
    data_dir: Any = None,
    world: World = SINGLE_PROCESS,
    extra_methods: Sequence[AttributionMethod] = (),
) -> Plan:
    """Resolve model, data, methods and needs; every user error is raised here, before any work.

    ``extra_methods`` are scored after the registered ones, exactly like them (an attribution computed in code,
    e.g. a known ranking of the layers)."""
    extra = check_extra_methods(extra_methods)
    ablations = options.ablations
    device = resolve_device(world.device(options.device))
    model, ckpt = _resolve_model(model, device, options, world)
    if model.n_layers < 2:
        raise ConfigError(
            "the model has a single hidden layer: faithfulness (a rank correlation across layers) is undefined."
        )
    data = _resolve_data(model, data, options, data_dir)
    if options.limit is not None:
        if options.limit > len(data):
            raise ConfigError(
                f"limit {options.limit} is larger than the {len(data)} samples of '{data.name}' ({options.split})."
            )
        data = data.subset(slice(0, options.limit))
    model.check_fits(data)
    _check_ablation_needs(ablations, data, options)
    if options.scope == "network":
        _check_update_shapes(model, data, device, ablations)
    methods, notes = _applicable_methods(model, data, options, extra)
    comparison_reference(options.reference, [m.name for m in methods])
    check_target_class(options.target, model)
    needs = [n for m in methods for n in m.needs] + [n for a in ablations for n in ABLATION_SPECS[a].needs]
    if any("baseline" in m.needs for m in methods):
        needs += baseline_needs(resolved_ig_baseline(options), ablations, explicit=options.ig_baseline is not None)
    stats = tuple(dict.fromkeys(n.split(":", 1)[1] for n in needs if n.startswith("stat:")))
    batch_rows = block_bytes = None
    if options.scope == "network":
        # methods that need gradients or tensor inputs take gradients through the backbone at network scope
        backward = any({"tensor_inputs", *GRADIENT_NEEDS} & set(m.needs) for m in methods)
        batch_rows, block_bytes = _check_network_budget(model, data, device, options, gradients=backward)
    return Plan(
        model,
        data,
        tuple(methods),
        ablations,
        options,
        device,
        stats,
        ckpt,
        tuple(notes),
        effect_model=float64_view(model),
        batch_rows=batch_rows,
        block_bytes=block_bytes,
    )


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
        self.whole = self.whole and all(
            h.dim() == 2 and h.dtype == torch.float32 and h.shape[1] == s.shape[1] for h, s in zip(hidden, self.hidden)
        )
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
    if not (
        o.cache
        and o.scope == "head"
        and o.dtype == "float32"
        and world.size == 1
        and caches_features(plan.model.backbone, vector_states=True)
    ):
        return plan
    features = backbone_features(plan.model.backbone, plan.data, device=str(plan.device), cache_dir=o.cache_dir)
    return dataclasses.replace(plan, features=features)
