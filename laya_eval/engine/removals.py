"""Removing layers: leave-one-layer-out (LOLO) and deletion@k effects.

The effect of removing a set of layers is ``p_c(x) - p_c(x with them removed)``,
``c`` the class predicted on the intact input. Removal follows docs/architecture.md ("Heads and removal"):

``gate``        drop the layers' terms; all else (alpha included) unchanged.
``gate-renorm`` drop the terms and renormalise the remaining layer weights
                (LAYA, ScalarMix; for heads without weights it equals ``gate``).
``zero``/``mean`` replace ``h_i`` at the head input with zeros / the mean of
                ``h_i`` over the evaluated data, then recompute the whole head.
``skip``/``mean-update``/``resample-update``/``noise-update`` (network scope) replace the block's *update*
                ``h_i - h_{i-1}`` instead: by nothing (``h_i := h_{i-1}``), its dataset mean, a donor's update or
                noise of its moments, added to the block's input (specs that need ``"updates"``).
``resample``/``noise`` replace it with another sample's state / Gaussian noise of the layer's
                own scale, per sample, averaged over seeded draws (:mod:`laya_eval.engine.interventions`).
                An ablation drawn per sample (spec ``needs`` ``"draws"`` or ``"donors"``) is registered
                with its *sample fill*, which draws one batch's replacement states (:func:`batch_fill`).

With scope ``head`` every removal is computed from the cached trace: ``gate``
and ``gate-renorm`` from the per-layer terms (no head call at all), ``zero``
and ``mean`` in one batched head call over all removals. With scope
``network`` the replacement happens inside the backbone and every later layer
is recomputed (one backbone run per removal set).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch import Tensor

from laya_eval.catalog import ABLATION_SPECS, ABLATIONS, SCOPES, AblationSpec, add_ablation_spec, fixed_ablation_names
from laya_eval.checks import check_choice, fail
from laya_eval.engine.fixed_ablations import (
    fill_state,
    gate_logits,
    gate_renorm_logits,
    mean_head_logits,
    mean_network_logits,
    mean_update_network_logits,
    skip_network_logits,
    zero_head_logits,
    zero_network_logits,
    zero_state,
)
from laya_eval.engine.interventions import (
    SampleFills,
    drawn_head_logits,
    drawn_network_logits,
    drawn_update_network_logits,
    noise_sample_fill,
    noise_update_sample_fill,
    resample_sample_fill,
    sample_fill_probs,
)
from laya_eval.engine.network_passes import network_replacement_logits
from laya_eval.engine.plugins import load_installed_plugins, plugin_function
from laya_eval.errors import ConfigError
from laya_eval.models.heads import LayerHead
from laya_eval.models.layered import LayeredModel
from laya_eval.models.trace import Trace

__all__ = [
    "ABLATIONS",
    "ABLATION_REGISTRY",
    "SCOPES",
    "Ablation",
    "network_replacement_logits",
    "register_ablation",
    "removed_states",
    "ablation_fill",
    "batch_fill",
    "check_ablation",
    "check_fixed_ablation",
    "check_ablations",
    "deletion_masks",
    "head_removal_logits",
    "layer_ranking",
    "leave_one_out_masks",
    "removal_effects",
    "removal_probs",
]


def check_ablation(ablation: str, scope: str, name: str = "ablation") -> None:
    """Validate an (ablation, scope) pair (installed plug-ins loaded first); errors name the ablation ``name``."""
    load_installed_plugins()
    check_choice("scope", scope, SCOPES)
    check_choice(name, ablation, ABLATION_SPECS)
    if scope not in ABLATION_SPECS[ablation].scopes:
        allowed = [a for a, spec in ABLATION_SPECS.items() if scope in spec.scopes]
        why = (
            f"{ablation} acts on the head's terms, not inside the backbone"
            if scope == "network"
            else f"{ablation} acts inside the backbone: use scope 'network'"
        )
        raise fail(name, f"an ablation defined at {scope} scope ({', '.join(allowed)}: {why})", ablation)


def check_fixed_ablation(ablation: str, where: str) -> None:
    """Refuse an ablation drawn per sample (``resample``, ``noise``) where only cached head inputs are used."""
    fixed = fixed_ablation_names()
    if ablation not in fixed:
        raise ConfigError(
            f"{where} applies only ablations with one fill for every sample ({', '.join(fixed)}); "
            f"got {ablation!r} (random per-sample replacements are scored by faithfulness)."
        )


def check_ablations(ablations: Sequence[str] | str, scope: str, name: str = "ablations") -> tuple[str, ...]:
    """Validate a list of ablations (duplicates dropped, order kept); at least one."""
    if isinstance(ablations, str):
        ablations = (ablations,)
    ablations = tuple(dict.fromkeys(ablations))
    if not ablations:
        raise fail(name, f"at least one ablation among {{{', '.join(ABLATION_SPECS)}}}", ablations)
    for a in ablations:
        check_ablation(a, scope, name)
    return ablations


def ablation_fill(ablation: str, statistics: dict[str, list[Tensor]]) -> list[Tensor] | None:
    """The replacement values an ablation needs: the dataset statistic its catalog entry declares, else None."""
    stats = [n.split(":", 1)[1] for n in ABLATION_SPECS[ablation].needs if n.startswith("stat:")]
    return statistics[stats[0]] if stats else None


def batch_fill(
    ablation: str,
    statistics: dict[str, list[Tensor]],
    sample_ids: Tensor,
    *,
    seed: int,
    draws: int,
    donor_states: Sequence[Tensor] | None = None,
    donors: Tensor | None = None,
) -> list[Tensor] | SampleFills | None:
    """One batch's replacement values for ``ablation``: :func:`ablation_fill` for a fixed fill; for an ablation
    drawn per sample, the :class:`~laya_eval.engine.interventions.SampleFills` its registered sample fill draws
    (see :class:`Ablation`; ``donor_states``, each (K * B, ...) draw-major, and ``donors`` (B, K) are the donors
    the engine drew and ran through the model when the spec needs ``"donors"``, else ``None``).

    Raises
    ------
    ConfigError
        If the sample fill returns anything but a ``SampleFills`` of ``draws`` draws.
    """
    entry = ABLATION_REGISTRY[ablation]
    if entry.sample_fill is None:
        return ablation_fill(ablation, statistics)
    fills = entry.sample_fill(statistics, sample_ids, seed=seed, draws=draws, donor_states=donor_states, donors=donors)
    if not isinstance(fills, SampleFills):
        raise ConfigError(
            f"ablation {ablation!r}: its sample_fill must return a SampleFills; got {type(fills).__name__}."
        )
    if len(fills.draws) != draws:
        raise ConfigError(
            f"ablation {ablation!r}: its sample_fill must return {draws} draws (--draws); got {len(fills.draws)}."
        )
    return fills


def leave_one_out_masks(n_layers: int, device: torch.device | str | None = None) -> Tensor:
    """Keep masks for the ``L`` single-layer removals: row ``k`` drops layer ``k``. Shape (L, L)."""
    return 1.0 - torch.eye(n_layers, device=device)


def layer_ranking(scores: Tensor) -> Tensor:
    """Layer indices by descending score, ties broken by the lowest layer index, (B, L), on the scores' device.

    The same order as :func:`laya_eval.stats.metrics.rank_layers` (a stable sort of ``-scores``).
    """
    return torch.argsort(-scores, dim=1, stable=True)


def deletion_masks(ranking: Tensor) -> Tensor:
    """Keep masks that remove the ``k`` top-ranked layers, k = 1..L.

    Parameters
    ----------
    ranking : Tensor of int, (B, L)
        Layer indices by descending attribution.

    Returns
    -------
    Tensor, (B, L, L)
        ``masks[b, k-1, i] == 0`` iff layer ``i`` is among the ``k`` top-ranked.
    """
    batch, n = ranking.shape
    position = torch.empty_like(ranking)
    position.scatter_(1, ranking, torch.arange(n, device=ranking.device).expand(batch, n))
    k = torch.arange(1, n + 1, device=ranking.device)
    return (position[:, None, :] >= k[None, :, None]).float()


def _expand_masks(masks: Tensor, batch: int) -> Tensor:
    return masks.expand(batch, *masks.shape) if masks.dim() == 2 else masks


def head_removal_logits(
    tr: Trace, head: LayerHead, masks: Tensor, ablation: str, fill: Sequence[Tensor] | None = None
) -> Tensor:
    """Head-scope logits after each removal in ``masks`` (K, L) or (B, K, L), from the cached trace: (B, K, C).

    ``tr`` is a trace of ``head`` (its terms and adapter outputs are reused, not recomputed).

    ``fill``: the values the ablation declared (``stat:<name>``; the pooled mean of every hidden state for
    ``mean``). Any set of layers may be removed at once (pruning removes several).
    """
    entry = ABLATION_REGISTRY[ablation]
    if entry.head is None:
        raise ConfigError(f"ablation {ablation!r} is not defined at head scope.")
    return entry.head(tr, head, _expand_masks(masks.to(tr.terms.dtype), tr.n_samples), fill)


@dataclass(frozen=True)
class Ablation:
    """A registered ablation: its catalog entry, its logits at each scope it is defined for and, for one drawn
    per sample, the sample fill that draws its replacement states.

    Attributes
    ----------
    spec : laya_eval.catalog.AblationSpec
    head : callable or None
        ``head(trace, head, masks, fill) -> Tensor (B, K, C)``: logits after each removal, ``masks`` (B, K, L)
        keep masks (0 removes a layer) in the trace's dtype and device; ``fill`` the dataset statistic the
        entry declares (``stat:<name>``: a list of per-layer tensors, pooled), else ``None``.
    network : callable or None
        ``network(trace, model, masks, fill) -> Tensor (B, K, C)``: the same with the layer replaced inside the
        backbone (``fill`` then holds full block outputs); :func:`network_replacement_logits` does the replacing.
    removed_state : callable or None
        ``removed_state(state, layer, fill) -> Tensor`` of ``state``'s shape: the state the ablation puts in
        place of ``state`` (pooled (B, d) at head scope, the block output at network scope), where
        Integrated Gradients starts with ``ig_baseline="removed"``; ``None`` for an ablation that replaces no
        state (``gate``).
    sample_fill : callable or None
        For an ablation drawn per sample (``spec.drawn_per_sample``), ``sample_fill(statistics, sample_ids, *,
        seed, draws, donor_states, donors) -> SampleFills``: one batch's replacement states, ``draws`` of them per
        sample, each the same function of ``(seed, sample_ids[b])`` in any batch. ``statistics`` holds the run's
        dataset statistics (``stat:<name>`` needs; per layer, pooled at head scope, full block outputs at
        network scope); ``sample_ids`` (B,) are global indices, ``-1`` on padding rows (dropped later);
        ``donor_states`` (each (draws * B, ...), draw-major) and ``donors`` (B, draws) are set when the spec
        needs ``"donors"``, else ``None``. The engine puts each draw's states in place of the removed layers
        (``head`` and ``network`` are then :mod:`laya_eval.engine.interventions`' drawn replacement) and
        averages the probabilities over the draws. ``None`` for a fixed ablation.
    """

    spec: AblationSpec
    head: Callable[..., Tensor] | None = None
    network: Callable[..., Tensor] | None = None
    removed_state: Callable[..., Tensor] | None = None
    sample_fill: Callable[..., SampleFills] | None = None

    @property
    def name(self) -> str:
        return self.spec.name


#: Every registered ablation by name: the built-ins below and plug-ins, all through :func:`register_ablation`.
ABLATION_REGISTRY: dict[str, Ablation] = {}


def register_ablation(
    spec: AblationSpec,
    *,
    head: Callable[..., Tensor] | None = None,
    network: Callable[..., Tensor] | None = None,
    removed_state: Callable[..., Tensor] | None = None,
    sample_fill: Callable[..., SampleFills] | None = None,
) -> Ablation:
    """Register an ablation, the path every ablation takes (see :class:`Ablation` for the signatures).

    A fixed ablation gives one logits function per scope it declares (``head``, ``network``). An ablation drawn
    per sample (``spec.needs`` has ``"draws"`` or ``"donors"``) gives its ``sample_fill`` instead: the engine puts
    the drawn states in place of the removed layers at each declared scope.

    Raises
    ------
    ConfigError
        If the name is taken, a declared scope has no function, a function is given for an undeclared scope, a
        spec drawn per sample comes without a sample fill (or with ``head``/``network``), or a sample fill comes
        with a spec that draws nothing.
    """
    if not isinstance(spec, AblationSpec):
        raise ConfigError(f"an ablation is registered with a catalog.AblationSpec; got {type(spec).__name__}.")
    # a plug-in's functions, registered while it loads, raise one line naming the plug-in
    head, network, removed_state, sample_fill = (
        plugin_function("ablation", spec.name, f) for f in (head, network, removed_state, sample_fill)
    )
    if spec.drawn_per_sample:
        head, network = _drawn_logits(spec, head, network, sample_fill)
    elif sample_fill is not None:
        raise ConfigError(
            f"ablation {spec.name!r}: sample_fill= is for an ablation drawn per sample (needs "
            f"'draws' or 'donors'); its needs are {tuple(spec.needs)!r}."
        )
    given = {"head": head, "network": network}
    for scope, fn in given.items():
        if (scope in tuple(spec.scopes)) != (fn is not None) or (fn is not None and not callable(fn)):
            raise ConfigError(
                f"ablation {spec.name!r}: give a callable {scope}= exactly when its scopes "
                f"{tuple(spec.scopes)!r} include {scope!r}."
            )
    try:
        add_ablation_spec(spec)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    if spec.name in ABLATION_REGISTRY:
        raise ConfigError(f"ablation {spec.name!r} is already registered; choose another name.")
    entry = Ablation(spec, head, network, removed_state, sample_fill)
    ABLATION_REGISTRY[spec.name] = entry
    return entry


def _drawn_logits(spec: AblationSpec, head, network, sample_fill) -> tuple[Callable | None, Callable | None]:
    """The head and network logits of an ablation drawn per sample: the drawn replacement at each declared
    scope, after checking that its sample fill, and nothing in place of it, was given."""
    if sample_fill is None:
        raise ConfigError(
            f"ablation {spec.name!r} needs {tuple(n for n in spec.needs if n in ('draws', 'donors'))!r}: "
            "register it with sample_fill=, the callable that draws each batch's replacement states; "
            "got none."
        )
    if not callable(sample_fill):
        raise ConfigError(f"ablation {spec.name!r}: sample_fill must be callable; got {type(sample_fill).__name__}.")
    for scope, fn in (("head", head), ("network", network)):
        if fn is not None:
            raise ConfigError(
                f"ablation {spec.name!r} is drawn per sample: the engine puts its sample_fill's states "
                f"in place at every scope, so it takes no {scope}=; got {getattr(fn, '__name__', fn)!r}."
            )
    network_logits = drawn_update_network_logits if "updates" in spec.needs else drawn_network_logits
    return (
        drawn_head_logits if "head" in spec.scopes else None,
        network_logits if "network" in spec.scopes else None,
    )


register_ablation(ABLATION_SPECS["gate"], head=gate_logits)
register_ablation(ABLATION_SPECS["gate-renorm"], head=gate_renorm_logits)
register_ablation(ABLATION_SPECS["zero"], head=zero_head_logits, network=zero_network_logits, removed_state=zero_state)
register_ablation(ABLATION_SPECS["mean"], head=mean_head_logits, network=mean_network_logits, removed_state=fill_state)
# Drawn per sample: no single removed state, so IG at network scope starts from zeros for resample (refused with an
# explicit --ig-baseline removed); noise's draws have the dataset mean as their expectation, where IG starts.
register_ablation(ABLATION_SPECS["resample"], sample_fill=resample_sample_fill)
register_ablation(ABLATION_SPECS["noise"], sample_fill=noise_sample_fill, removed_state=fill_state)
# Update forms (network scope): the block's update h_i - h_{i-1} replaced, added back to its input. No single state
# in place of a layer's output (skip's is the block's input), so IG at network scope starts from zeros for them.
register_ablation(ABLATION_SPECS["skip"], network=skip_network_logits)
register_ablation(ABLATION_SPECS["mean-update"], network=mean_update_network_logits)
register_ablation(ABLATION_SPECS["resample-update"], sample_fill=resample_sample_fill)
register_ablation(ABLATION_SPECS["noise-update"], sample_fill=noise_update_sample_fill)
# Ablations come only through register_ablation; the catalog names each one the engine can run.
if set(ABLATION_REGISTRY) != set(ABLATION_SPECS):
    raise ImportError(f"catalog ablations without logits: {sorted(set(ABLATION_SPECS) - set(ABLATION_REGISTRY))}")


def removed_states(ablation: str, states: Sequence[Tensor], fill: Sequence[Tensor] | None) -> list[Tensor] | None:
    """The state ``ablation`` puts in place of each of ``states`` (one per layer), or ``None`` when it replaces
    no state."""
    fn = ABLATION_REGISTRY[ablation].removed_state
    return None if fn is None else [fn(s, i, fill) for i, s in enumerate(states)]


@torch.no_grad()
def removal_probs(
    tr: Trace,
    model: LayeredModel,
    masks: Tensor,
    *,
    ablation: str = "gate",
    scope: str = "head",
    fill: Sequence[Tensor] | None = None,
    max_rows: int | None = None,
    target: Tensor | None = None,
) -> Tensor:
    """``p_t`` after each removal in ``masks``, ``t`` = ``target`` (B,) or the predicted class.

    Parameters
    ----------
    tr : Trace
    model : LayeredModel
    masks : Tensor, (K, L) or (B, K, L)
        Keep masks; 0 removes a layer.
    ablation : str
        A registered ablation (:data:`ABLATION_REGISTRY`).
    scope : {"head", "network"}
    fill : list of Tensor, or SampleFills, optional
        For ``mean``: the mean of each hidden state over the evaluated data
        (pooled, (d_i,), for scope head; the full block output for scope network).
        For an ablation drawn per sample (``resample``, ``noise``, a plug-in's): the batch's draws
        (:func:`batch_fill`); the result is the mean over them.
    max_rows : int, optional
        At network scope, the most inputs one backbone pass carries (:mod:`laya_eval.engine.memory_budget`);
        all at once when ``None``.

    Returns
    -------
    Tensor, (B, K)
    """
    check_ablation(ablation, scope)
    if isinstance(fill, SampleFills):
        on_update = "updates" in ABLATION_SPECS[ablation].needs
        return sample_fill_probs(tr, model, masks, fill, scope, target=target, max_rows=max_rows, on_update=on_update)
    if scope == "head":
        logits = head_removal_logits(tr, model.head, masks, ablation, fill)
    else:
        logits = ABLATION_REGISTRY[ablation].network(
            tr, model, _expand_masks(masks, tr.n_samples), fill, max_rows=max_rows
        )
    probs = torch.softmax(logits, -1)
    target = tr.pred if target is None else target
    index = target[:, None, None].expand(-1, probs.shape[1], 1)
    return probs.gather(2, index).squeeze(2)


def removal_effects(tr: Trace, model: LayeredModel, masks: Tensor, **kwargs) -> Tensor:
    """Effects ``p_t(x) - p_t(x removed)`` for each removal in ``masks``, (B, K). Options as :func:`removal_probs`
    (``t`` the predicted class unless ``target`` is given)."""
    probs = removal_probs(tr, model, masks, **kwargs)
    target = kwargs.get("target")
    before = tr.confidence if target is None else tr.probs.gather(1, target[:, None]).squeeze(1)
    return before[:, None] - probs
