"""The evaluation engine: plan -> collect -> merge -> summarize.

``plan`` resolves the model, the data, the applicable methods and what they and the
ablations *need* (shared gradients, dataset statistics) from their catalog entries: no
method or ablation is named here. ``collect`` runs a shard of the data batch by batch —
one backbone pass per batch (network scope re-runs it once per distinct removal set of a sample) — and returns
per-sample :class:`~laya_eval.engine.records.Records` keyed by global sample index, after a
statistics pass when something needs a dataset statistic (reduced over every process).
Records from batches, chunks, resumed runs and processes merge exactly;
``summarize`` turns them into metrics, intervals, tables and the manifest
(:mod:`laya_eval.engine.results`). See ``docs/architecture.md``.

At head scope a frozen backbone stored by reference whose states are vectors (``hf:``, ``py:``, a ``fit-head``
model) is not run batch by batch: its pooled states come from the on-disk feature cache that ``fit-head``,
``sanity`` and ``prune`` share (:func:`laya_eval.loading.feature_cache.backbone_features`), encoded into it once
when missing. The cache encodes in batches of the default batch size, padded as here, so the tables are the
same bytes with and without it. Other backbones with vector states run once: the statistics pass keeps their states
for the main pass where they fit in ``max_memory_mb`` (:class:`~laya_eval.engine.plan.KeptStates`).

Batch-size invariance: every model call sees a multiple of :data:`MIN_BATCH_ROWS` rows (batches
are padded with copies of their own samples, marked with sample id -1 and dropped), because
CPU matrix kernels round tiny batches and the rows of a last, partial tile differently; per-sample
randomness is a function of (seed, sample id). With a fixed thread count the CSVs are
then the same bytes for any batch size, chunking or number of processes.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Iterator, Sequence

import numpy as np
import torch
from torch import Tensor

from laya_eval.engine.gradients import gradient_pass
from laya_eval.engine.methods import AttributionMethod, MethodContext, baseline_states
from laya_eval.errors import ConfigError, DataError
from laya_eval.catalog import ABLATION_SPECS
from laya_eval.data import Dataset
from laya_eval.engine.dataset_stats import STATISTICS, BlockOutputs, DatasetStatistics, batch_statistics
from laya_eval.models.devices import backbone_precision
from laya_eval.engine.distributed import SINGLE_PROCESS, World, serial_map
from laya_eval.engine.effect_precision import float64_trace
from laya_eval.engine.memory_budget import held_bytes, replacement_rows, row_chunks, row_cost
from laya_eval.models.layered import MIN_BATCH_ROWS, LayeredModel, padded_rows
from laya_eval.engine.partial import PARTIAL_FOLDER, PartialStore, chunk_grid
from laya_eval.engine.interventions import SampleFills, donor_ids
from laya_eval.engine.removals import batch_fill, deletion_masks, layer_ranking, leave_one_out_masks, removal_effects
from laya_eval.engine.plan import (
    CHUNK_SIZE,
    EvalOptions,
    KeptStates,
    Plan,
    explained_classes,
    refuse_next_token,
    make_plan,
    resolved_ig_baseline,
    with_cached_features,
)
from laya_eval.engine.records import Records, merge_records
from laya_eval.engine.outcome import Evaluation, write_evaluation
from laya_eval.engine.results import SUMMARY_COLUMNS, EvaluationResult, MethodScore, build_result, score_method
from laya_eval.engine.saved_draws import noise_draws
from laya_eval.output.files import unfinished_removed_on_storage_failure
from laya_eval.output.tables import check_table_format
from laya_eval.models.heads import pool_hidden
from laya_eval.models.trace import Trace, trace_from_hidden

__all__ = [
    "CHUNK_SIZE",
    "MIN_BATCH_ROWS",
    "SUMMARY_COLUMNS",
    "EvalOptions",
    "Evaluation",
    "EvaluationResult",
    "MethodScore",
    "Plan",
    "collect",
    "evaluate",
    "make_plan",
    "score_method",
    "summarize",
]


def _batches(plan: Plan, start: int, stop: int) -> Iterator[tuple[Any, Tensor, Tensor, Tensor]]:
    """``(x, labels, sample_ids, index)``, each padded to a multiple of MIN_BATCH_ROWS rows (ids -1): the first three on
    the plan's device, ``index`` (the rows of ``plan.data``, padding included) on the CPU."""
    data, size = plan.data, plan.rows_per_batch
    for lo in range(start, stop, size):
        hi = min(lo + size, stop)
        index = torch.arange(lo, hi)
        if padded_rows(hi - lo) != hi - lo:
            index = index[torch.arange(padded_rows(hi - lo)) % (hi - lo)]
        ids = torch.where(torch.arange(len(index)) < hi - lo, index, torch.full_like(index, -1))
        part = data.subset(index)
        x = part.x.to(plan.device) if isinstance(part.x, Tensor) else part.x
        yield x, part.y.to(plan.device), ids.to(plan.device), index


def _cached_states(plan: Plan, rows: Tensor) -> list[Tensor]:
    """Rows ``rows`` (CPU indices into ``plan.data``) of the cached pooled states, on the plan's device."""
    return [h[rows].to(plan.device) for h in plan.features.hidden]


def _trace(
    plan: Plan, x: Any, y: Tensor, ids: Tensor, index: Tensor, *, record_blocks: bool = False, with_inputs: bool = False
) -> tuple[Trace, list[Tensor] | None]:
    """One backbone pass (or the cached states of rows ``index``); with ``record_blocks`` also each block's full
    output, and ``with_inputs`` each block's input of the same pass (network-scope statistics of updates)."""
    outputs = None
    if plan.features is not None and not record_blocks:
        hidden = _cached_states(plan, index)
        return trace_from_hidden(plan.model.head, hidden, labels=y, inputs=x, sample_ids=ids), outputs
    with torch.no_grad(), backbone_precision(plan.device, plan.options.dtype):
        if record_blocks and with_inputs:
            hidden, inputs, outputs = plan.model.block_inputs_and_outputs(x)
            outputs = BlockOutputs(outputs, inputs)
        elif record_blocks:
            hidden, outputs = plan.model.block_outputs(x)
        else:
            hidden = plan.model.hidden_states(x)
    hidden = [h.float() if h.is_floating_point() else h for h in hidden]
    return trace_from_hidden(plan.model.head, hidden, labels=y, inputs=x, sample_ids=ids), outputs


def collect_statistics(
    plan: Plan,
    start: int,
    stop: int,
    *,
    world: World = SINGLE_PROCESS,
    partial: PartialStore | None = None,
    progress: Any = None,
    keep: KeptStates | None = None,
) -> dict[str, list[Tensor]]:
    """The dataset statistics the plan needs, over every process's shard; ``{}`` when none is needed; ``keep``
    keeps the pass's states (none when the statistics come from ``partial``)."""
    if not plan.statistics:
        return {}
    stats = partial.load_statistics() if partial is not None else None
    if stats is None:
        stats = DatasetStatistics()
        network = plan.options.scope == "network"
        inputs = network and any(STATISTICS[name].block_inputs for name in plan.statistics)
        for x, y, ids, index in _batches(plan, start, stop):
            tr, outputs = _trace(plan, x, y, ids, index, record_blocks=network, with_inputs=inputs)
            if keep is not None:
                keep.add(tr.hidden, ids, index)
            with torch.no_grad():
                stats = stats.merged(batch_statistics(plan.statistics, tr, plan.model, plan.options.scope, outputs))
            if progress is not None:
                progress(int((ids >= 0).sum()))
        stats = world.all_reduce(stats.to_cpu() if plan.device.type == "cpu" else stats)
        if partial is not None and world.is_main:
            partial.save_statistics(stats)
        world.barrier()
    return {name: [m.to(plan.device) for m in means] for name, means in stats.means().items()}


def _float64(values: list[Tensor] | SampleFills | None) -> list[Tensor] | SampleFills | None:
    if isinstance(values, SampleFills):
        return values.double()
    return None if values is None else [v.double() for v in values]


def _donor_states(plan: Plan, donors: Tensor, *, updates: bool = False) -> list[Tensor]:
    """The donors' states, draw-major ((K * B, ...) per layer): pooled at head scope, block outputs at network
    scope (in row chunks within ``--max-memory``; with ``updates`` each block's output minus its input), from
    backbone passes over the donors' inputs (at head scope, from the feature cache when the plan has one)."""
    if plan.features is not None and plan.options.scope == "head":
        return _cached_states(plan, donors.T.reshape(-1).cpu())
    part = plan.data.subset(donors.T.reshape(-1).cpu())
    x = part.x.to(plan.device) if isinstance(part.x, Tensor) else part.x
    with torch.no_grad(), backbone_precision(plan.device, plan.options.dtype):
        if plan.options.scope == "network":
            rows = replacement_rows(row_cost(plan.model, x), plan.options.max_memory_mb)
            chunks = [_block_states(plan.model, x[sl], updates) for sl in row_chunks(len(x), rows)]
            states = [torch.cat(layer) for layer in zip(*chunks)]
        else:
            states = [pool_hidden(h) for h in plan.model.hidden_states(x)]
    return [s.float() if s.is_floating_point() else s for s in states]


def _block_states(model: LayeredModel, x: Any, updates: bool) -> list[Tensor]:
    """Every block's full output, or with ``updates`` its update (output minus input; planning checked the shapes)."""
    if not updates:
        return model.block_outputs(x)[1]
    _, inputs, outputs = model.block_inputs_and_outputs(x)
    return [out - block_input.to(out) for block_input, out in zip(inputs, outputs)]


def _batch_fills(plan: Plan, ids: Tensor, means: dict[str, list[Tensor]]) -> tuple[dict, dict[str, np.ndarray]]:
    """Every ablation's replacement values for one batch (float64), and the donor ids of those that draw donors."""
    o = plan.options
    fills, donors_out = {}, {}
    for a in plan.ablations:
        donors, states = None, None
        if "donors" in ABLATION_SPECS[a].needs:
            donors = donor_ids(o.seed, ids, len(plan.data), o.draws)
            states = _donor_states(plan, donors, updates="updates" in ABLATION_SPECS[a].needs)
            donors_out[a] = donors[ids >= 0].cpu().numpy()
        fills[a] = _float64(batch_fill(a, means, ids, seed=o.seed, draws=o.draws, donor_states=states, donors=donors))
    return fills, donors_out


def _estimates_updates(plan: Plan) -> bool:
    """Whether a method estimates the effect of an ablation that replaces a block's update (it reads block inputs)."""
    removal = any("removal" in m.needs for m in plan.methods)
    return removal and any("updates" in ABLATION_SPECS[a].needs for a in plan.ablations)


def _to_numpy(t: Tensor, rows: Tensor) -> np.ndarray:
    return t[rows].detach().double().cpu().numpy()


def _target(plan: Plan, tr: Trace, y: Tensor) -> Tensor | None:
    """The class the scores and effects are for, (B,); ``None`` for the predicted class."""
    target = plan.options.target
    return None if target == "pred" else explained_classes(target, tr.pred, y)


def _batch_records(
    plan: Plan, x: Any, y: Tensor, ids: Tensor, index: Tensor, means: dict[str, list[Tensor]]
) -> Records:
    """Scores, effects and deletion curves of one (padded) batch; only the real rows are kept."""
    o, model = plan.options, plan.model
    tr, blocks = _trace(plan, x, y, ids, index, record_blocks=plan.starts_at_block, with_inputs=plan.starts_at_block)
    if blocks is not None:  # removals and IG start at their block from these states (engine/network_passes.py)
        tr = dataclasses.replace(tr, block_outputs=tuple(blocks), block_inputs=tuple(blocks.inputs))
    rows = ids >= 0
    # Effects in float64 at the head (laya_eval.engine.effect_precision); scores from the model as it is.
    model64 = plan.effect_model
    tr64 = float64_trace(tr, model64)
    target = _target(plan, tr, y)
    explained = tr.pred if target is None else target
    fills, donors = _batch_fills(plan, ids, means)
    lolo = leave_one_out_masks(model.n_layers, device=plan.device)
    # Network scope: replacement passes in row chunks within --max-memory (laya_eval.engine.memory_budget).
    max_rows = (
        replacement_rows(
            row_cost(model, tr.inputs), o.max_memory_mb, held=held_bytes(tr.block_outputs, tr.block_inputs)
        )
        if o.scope == "network"
        else None
    )

    def effects_of(a: str, masks: Tensor) -> Tensor:
        return removal_effects(
            tr64, model64, masks, ablation=a, scope=o.scope, fill=fills[a], max_rows=max_rows, target=target
        )

    # Network scope: one call per ablation for the removals and every deletion curve (they share removal sets).
    shared = {a: {"": lolo.expand(len(ids), *lolo.shape)} for a in plan.ablations} if o.scope == "network" else {}
    effects = {} if shared else {a: _to_numpy(effects_of(a, lolo), rows) for a in plan.ablations}
    ctx = MethodContext(
        scope=o.scope,
        n_steps=o.n_steps,
        internal_batch_size=o.internal_batch_size,
        seed=o.seed,
        statistics=means,
        max_memory_mb=o.max_memory_mb,
        angular_span=o.angular_span,
        target=explained,
    )
    if plan.needs_gradients or plan.needs_probability_gradients:
        # one backward pass for every gradient the methods asked for (laya_eval.engine.gradients)
        backward = gradient_pass(
            tr,
            model,
            explained,
            o.scope,
            max_memory_mb=o.max_memory_mb,
            logit=plan.needs_gradients,
            probability=plan.needs_probability_gradients,
            with_inputs=o.scope == "network" and _estimates_updates(plan),
        )
        logit = None if backward.logit is None else (backward.activations, backward.logit)
        ctx = dataclasses.replace(ctx, gradients=logit, backward=backward)
    needs_baseline = any("baseline" in m.needs for m in plan.methods)
    baselines = (
        baseline_states(resolved_ig_baseline(o), tr, model, o.scope, plan.ablations, means)
        if needs_baseline
        else {"": None}
    )
    scores, deletion, diagnostics = {}, {a: {} for a in plan.ablations}, {}
    for m in plan.methods:
        # A method that starts from a baseline is run once per distinct baseline: with the removed state, each
        # ablation's own, stored under "method@ablation" when the run has several ablations.
        # A method that estimates an ablation's effect ("removal") is run once per ablation, with its fill.
        runs = baselines if "baseline" in m.needs else {"": None}
        runs = {a: None for a in plan.ablations} if "removal" in m.needs else runs
        for owner, baseline in runs.items():
            mctx = dataclasses.replace(ctx, layer_baseline=baseline)
            if "removal" in m.needs:
                mctx = dataclasses.replace(mctx, ablation=owner, removal_fill=fills[owner])
            s = m.fn(tr, model, target=explained, context=mctx).detach().to(tr.terms.dtype)
            key = m.name if not owner or len(plan.ablations) == 1 else f"{m.name}@{owner}"
            scores[key] = _to_numpy(s, rows)
            masks = deletion_masks(layer_ranking(s))
            for a in [owner] if owner else plan.ablations:
                if shared:
                    shared[a][m.name] = masks
                else:
                    deletion[a][m.name] = _to_numpy(effects_of(a, masks), rows)
            if m.diagnostic is not None:
                value = m.diagnostic(tr, model, s, mctx)
                if value is not None:
                    diagnostics[key] = _to_numpy(value, rows)
    for a, groups in shared.items():
        effects[a], *curves = (
            _to_numpy(e, rows) for e in effects_of(a, torch.cat([*groups.values()], 1)).split(model.n_layers, 1)
        )
        deletion[a].update(zip(list(groups)[1:], curves))
    return Records(
        sample=ids[rows].cpu().numpy(),
        label=y[rows].cpu().numpy().astype(np.int64),
        pred=tr.pred[rows].cpu().numpy().astype(np.int64),
        confidence=_to_numpy(tr.confidence, rows),
        scores=scores,
        effects=effects,
        deletion=deletion,
        diagnostics=diagnostics,
        donors=donors,
    )


def collect(
    plan: Plan,
    means: dict[str, list[Tensor]],
    start: int,
    stop: int,
    *,
    partial: PartialStore | None = None,
    progress: Any = None,
) -> Records:
    """Per-sample records of samples ``[start, stop)``, chunk by chunk (each kept in ``partial`` when given)."""
    parts = []
    for lo, hi in chunk_grid(start, stop, plan.options.chunk_size):
        chunk = partial.load_chunk(lo, hi) if partial is not None else None
        if chunk is None:
            chunk = merge_records(
                _batch_records(plan, x, y, ids, index, means) for x, y, ids, index in _batches(plan, lo, hi)
            )
            if partial is not None:
                partial.save_chunk(lo, hi, chunk)
        parts.append(chunk)
        if progress is not None:
            progress(hi - lo)
    return merge_records(parts)


def summarize(
    records: Records, plan: Plan, *, world_size: int = 1, map_items=serial_map, paired_tests: bool = True
) -> dict[str, EvaluationResult]:
    """Metrics, intervals, tables and manifest per ablation, from merged records; ``map_items`` computes the
    per-method scores and the paired comparisons (:meth:`World.map` shares them over the ranks)."""
    return {
        a: build_result(records, plan, a, world_size=world_size, map_items=map_items, paired_tests=paired_tests)
        for a in plan.ablations
    }


def evaluate(
    model: LayeredModel | str | os.PathLike,
    data: Dataset | str | None = None,
    *,
    options: EvalOptions | None = None,
    out: str | os.PathLike | None = None,
    resume: bool = False,
    data_dir: str | os.PathLike | None = None,
    progress: Any = None,
    world: World = SINGLE_PROCESS,
    extra_methods: Sequence[AttributionMethod] = (),
    paired_tests: bool = True,
) -> Evaluation | None:
    """Score layer attributions against leave-one-layer-out effects, for one ablation or several from one pass
    (attributions, IG above all, are computed once).

    Parameters
    ----------
    model : LayeredModel or a model spec
        A model in memory, a checkpoint path, ``hf:ID_OR_DIR`` or ``py:MODULE:CALLABLE``.
    data : Dataset, dataset name, or None
        ``None`` uses the dataset recorded in the model (split ``options.split``).
    options : EvalOptions
        Every option of ``laya-eval faithfulness`` (``options.ablation``: one ablation or several).
    out : path, optional
        Write the result folder there (checked before any work, replaced whole at the end; one subfolder per
        ablation and ``operators.csv`` when several), keeping per-chunk records under ``out/.partial`` while the run
        lasts so that an interrupted run can resume.
    resume : bool
        With ``out``: reuse the partial records of an earlier attempt with the same deciding options (another
        deciding option is refused; speed options such as ``batch_size`` may differ: the result is the same bytes).
    data_dir : path, optional
        Where to look for the dataset files.
    progress : tqdm-like, optional
        Its ``total`` is set to the number of samples times the number of passes, and ``update(n)`` is called as
        the work advances.
    world : laya_eval.engine.distributed.World
        This process's rank among several (torchrun); each evaluates its shard and rank 0 writes.
    extra_methods : sequence of AttributionMethod
        Attributions computed in code, scored after the registered methods exactly like them. Their code is not
        part of a run key, so they cannot be combined with ``out``.
    paired_tests : bool
        Compare every pair of methods (``comparisons``); False leaves that table empty, every other table the same.

    Returns
    -------
    Evaluation or None
        One result per ablation (with one ablation its tables read directly: ``evaluation.summary``); ``None`` on
        ranks other than 0.

    Examples
    --------
    >>> result = evaluate("ckpt.pt", options=EvalOptions(limit=500))  # doctest: +SKIP
    >>> result.summary[["method", "faithfulness", "deletion_at_1"]]  # doctest: +SKIP
    >>> both = evaluate("ckpt.pt", options=EvalOptions(ablation=("gate", "mean")), out="runs/both")  # doctest: +SKIP
    >>> both["mean"].summary, both.operators.kendall_w  # doctest: +SKIP
    """
    options = options or EvalOptions()
    refuse_next_token(options.target)
    if isinstance(data, str) and data.startswith("text:"):
        raise DataError(
            f"--data {data} holds text windows for a causal LM's own next-token prediction: add --target next-token "
            "(laya_eval.evaluate_next_token); a classifier takes a labelled dataset."
        )
    if out is not None:
        from laya_eval.output.files import check_output_folder

        if extra_methods:
            raise ConfigError(
                "extra methods cannot be kept as partial results (their code is not part of the run "
                "key): evaluate them without out and write the tables yourself."
            )
        check_output_folder(out)
        check_table_format(options.table_format)  # an unusable table format fails before any work
    # A full disk leaves no partial files behind in a folder the run created (the error says nothing was changed).
    with unfinished_removed_on_storage_failure(out, PARTIAL_FOLDER):
        results = _evaluate(
            model,
            data,
            options=options,
            data_dir=data_dir,
            progress=progress,
            world=world,
            partial_dir=out,
            resume=resume,
            extra_methods=extra_methods,
            paired_tests=paired_tests,
        )
        evaluation = None
        if results is not None:
            evaluation = Evaluation(results)
            if out is not None:
                evaluation.files = write_evaluation(evaluation, out, table_format=options.table_format)
    if out is not None:
        world.barrier()
    return evaluation


def _evaluate(
    model,
    data,
    *,
    options: EvalOptions,
    data_dir,
    progress,
    world: World,
    partial_dir,
    resume: bool,
    extra_methods: Sequence[AttributionMethod],
    paired_tests: bool,
) -> dict[str, EvaluationResult] | None:
    """Plan, collect (with partial records under ``partial_dir``), merge over the ranks and summarize."""
    plan = make_plan(model, data, options=options, data_dir=data_dir, world=world, extra_methods=extra_methods)
    plan = with_cached_features(plan, world)
    start, stop = world.shard(len(plan.data))
    partial = (
        None
        if partial_dir is None
        else PartialStore(
            partial_dir, plan.key(), resume=resume, result_key=plan.result_key(), n_layers=plan.model.n_layers
        )
    )
    tick = None
    if progress is not None:
        progress.total = (stop - start) * (2 if plan.statistics else 1)
        progress.refresh()
        tick = progress.update
    keep = KeptStates.for_plan(plan, world)
    means = collect_statistics(plan, start, stop, world=world, partial=partial, progress=tick, keep=keep)
    if world.size == 1:  # the main pass reads the kept states; the manifest records only the feature cache
        records = collect(plan if keep is None else keep.into(plan), means, start, stop, partial=partial, progress=tick)
        return _with_noise_draws(summarize(records, plan, paired_tests=paired_tests), plan, means, records.sample)
    # Every rank gets the merged records and scores its share of the methods and pairs; rank 0 keeps the tables.
    records = world.all_gather(collect(plan, means, start, stop, partial=partial, progress=tick))
    results = summarize(records, plan, world_size=world.size, map_items=world.map, paired_tests=paired_tests)
    return _with_noise_draws(results, plan, means, records.sample) if world.is_main else None


def _with_noise_draws(
    results: dict[str, EvaluationResult], plan: Plan, means: dict[str, list[Tensor]], sample: np.ndarray
) -> dict[str, EvaluationResult]:
    """With ``save_draws``, each noise ablation's drawn states (``noise_draws.npz``) added to its result."""
    o = plan.options
    if o.save_draws:
        for a, result in results.items():
            if ABLATION_SPECS[a].draws_noise:
                result.noise_draws = noise_draws(a, means, sample, seed=o.seed, draws=o.draws)
    return results
