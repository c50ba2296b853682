"""``faithfulness --target next-token``: a causal LM's layer scores against the cost of removing each block.

A sample is a window of text tokens (:mod:`laya_eval.language.text`). The effect of removing block ``i`` from a
window is the increase of the window's mean next-token loss, in nats: ``loss(window, block i removed) -
loss(window)``. Loss rather than the probability of one class: a language model predicts a distribution over the
vocabulary at every position, the loss scores all of them (the probability of the one observed next token,
averaged in log space over the window), it is what training minimised and what pruning reports (perplexity =
exp(loss)); a probability difference would be dominated by the few positions the model is sure of.

The scores of each method (:mod:`laya_eval.language.methods`) are then judged exactly as a classifier's:
per-window Spearman faithfulness, Deletion@k (the loss increase when the k top-ranked blocks are removed
together), the top-1 hit, bootstrap intervals and paired tests (:func:`laya_eval.engine.results.score_method`,
:func:`laya_eval.stats.compare_methods`), written as the four tables of ``faithfulness``.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any

import numpy as np
import pandas as pd
import torch

from laya_eval.catalog import ABLATION_SPECS, NEXT_TOKEN_METHODS
from laya_eval.engine.distributed import SINGLE_PROCESS, World
from laya_eval.engine.outcome import Evaluation, write_evaluation
from laya_eval.engine.plan import EvalOptions, comparison_reference
from laya_eval.engine.results import TIE_RULE, EvaluationResult, score_method
from laya_eval.errors import ConfigError, DataError
from laya_eval.models.devices import resolve_device
from laya_eval.language.decoder import CausalLM, load_causal_lm, run_windows, window_losses
from laya_eval.language.draws import check_draws, donor_table, drawn_fill, is_drawn, noise_draw_arrays
from laya_eval.language.methods import NEXT_TOKEN_REGISTRY, IntactPass
from laya_eval.language.passes import (
    FILL_STATISTICS,
    ablation_fill,
    batch_rows,
    batches,
    deletion_scales,
    release_free_memory,
    removal_scales,
    row_chunk,
    shared_losses,
    update_statistics,
)
from laya_eval.language.text import TextWindows, read_documents, windows
from laya_eval.stats import COMPARISON_COLUMNS, EFFECT_FLOOR, compare_methods, tie_effects, typical_largest_effect
from laya_eval.stats.metrics import rank_layers

__all__ = ["EFFECT_MEANING", "check_next_token_options", "evaluate_next_token", "intact_pass", "load_text_windows"]

EFFECT_MEANING = (
    "loss(window, block i removed) - loss(window), the mean next-token negative log-likelihood over the window's "
    "tokens in nats; ablation {ablation!r}, scope 'network' (every later block recomputed)"
)
#: Added to the effect's meaning for an ablation drawn per window.
DRAWN_MEANING = "; the mean over {draws} seeded draws per window of that rise"
#: The methods whose scores start from the ablation's fill (for a drawn ablation: the mean over its draws).
FILL_METHODS = ("atp", "ig")


def check_next_token_options(options: EvalOptions, data: Any) -> tuple[str, ...]:
    """The methods of a next-token run, after checking what is knowable from the options (one line each)."""
    if options.target != "next-token":
        raise ConfigError(f"EvalOptions.target must be 'next-token' here; got {options.target!r}.")
    if options.scope != "network":
        raise ConfigError(
            "--target next-token removes blocks inside the model (the LM is its own head): use --scope network; "
            f"got {options.scope!r}."
        )
    for a in options.ablations:
        if a not in FILL_STATISTICS:
            raise ConfigError(
                f"--ablation with --target next-token must be among {{{', '.join(FILL_STATISTICS)}}}; got {a!r}."
            )
    return check_methods_and_text(options.methods or NEXT_TOKEN_METHODS, data)


def check_methods_and_text(methods, data) -> tuple[str, ...]:
    """``methods`` among the next-token methods and ``data`` a ``text:`` source (faithfulness and prune)."""
    for m in methods:
        if m not in NEXT_TOKEN_REGISTRY:
            raise ConfigError(
                f"--methods with --target next-token must be among {{{', '.join(NEXT_TOKEN_REGISTRY)}}}; got {m!r}."
            )
    if not isinstance(data, str) or not data.startswith("text:") or len(data) == 5:
        raise DataError(f"--target next-token reads text: --data text:FILE or text:rotten-tomatoes; got {data!r}.")
    return tuple(methods)


def load_text_windows(lm: CausalLM, data: str, *, split: str, context: int, data_dir=None, download=False):
    """The windows of ``split`` of ``data`` (``text:FILE`` or ``text:NAME``), after checking the context."""
    if lm.max_positions is not None and context > lm.max_positions:
        raise ConfigError(f"--context must be at most the model's {lm.max_positions} positions; got {context}.")
    documents, source = read_documents(data[5:], data_dir, download)
    return windows(documents, lm.tokenizer, split=split, context=context, name=data[5:], source=source)


def intact_pass(
    lm: CausalLM, batch, rows: int, *, seed: int, n_steps: int, fill, gradients: bool = True
) -> tuple[IntactPass, torch.Tensor]:
    """The intact pass of one batch with every block's states and, with ``gradients``, the gradients of each
    window's loss (a backward pass; without, ``IntactPass.grads`` is empty), and the windows' losses (B,)."""
    parts = []
    for s in range(0, batch.ids.shape[0], rows):
        ids, mask = batch.ids[s : s + rows], batch.mask[s : s + rows]
        with torch.set_grad_enabled(gradients):
            run = run_windows(lm, ids, mask, keep=True)
            loss = window_losses(run.logits, ids, mask)
            if gradients:
                loss.sum().backward()
        run.logits = torch.empty(0)  # the states and gradients are kept, the chunk's logits are not
        parts.append((run, loss.detach()))
    cat = lambda pick: [torch.cat([pick(r)[i].detach() for r, _ in parts]) for i in range(lm.n_layers)]  # noqa: E731
    intact = IntactPass(
        lm=lm,
        ids=batch.ids,
        mask=batch.mask,
        inputs=cat(lambda r: r.inputs),
        outputs=cat(lambda r: r.outputs),
        grads=cat(lambda r: [h.grad for h in r.outputs]) if gradients else [],
        sample_ids=batch.sample_ids,
        fill=fill,
        seed=seed,
        n_steps=n_steps,
        rows=rows,
    )
    return intact, torch.cat([loss for _, loss in parts])


def _mean(values) -> Any:
    """The mean of an iterable of tensors (or of equal-length lists of tensors), summed in order: one value is
    itself, exactly."""
    total, n = None, 0
    for v in values:
        total = v if total is None else ([t + u for t, u in zip(total, v)] if isinstance(v, list) else total + v)
        n += 1
    return [t / n for t in total] if isinstance(total, list) else total / n


def _collect(
    lm: CausalLM, data: TextWindows, options: EvalOptions, methods, progress, world: World = SINGLE_PROCESS
) -> dict[str, Any]:
    """Every window's intact loss, scores, effects and deletion curves; under several processes this rank's
    contiguous shard of the windows (indices, padding and draws those of the whole set; statistics summed over
    the ranks)."""
    device = next(lm.model.parameters()).device
    length = max(w.size for w in data.ids)
    rows = row_chunk(lm, length, options.max_memory_mb)
    grad_rows = row_chunk(lm, length, options.max_memory_mb, gradients=True)
    drawn = [a for a in options.ablations if is_drawn(a)]
    size = batch_rows(lm, length, options.max_memory_mb, options.batch_size, copies=4 if drawn else 3)
    parts = batches(data, size, device, shard=world.shard(len(data)))
    needs = {FILL_STATISTICS[a] for a in options.ablations} - {None}
    statistics = update_statistics(lm, parts, grad_rows, world.sum_tensors) if needs else None
    fixed = {a: ablation_fill(a, statistics) for a in options.ablations if a not in drawn}

    def fills(a, batch):  # the fixed fill, or each draw's fill of this batch's windows, drawn when it is needed
        if a in fixed:
            return [fixed[a]]
        kw = dict(seed=options.seed, draws=options.draws, statistics=statistics, rows=grad_rows)
        return (drawn_fill(a, lm, data, batch.sample_ids, length, j, **kw) for j in range(options.draws))

    got: dict[str, Any] = {"loss": [], "scores": {}, "effects": {}, "deletion": {}}
    for batch in parts:
        first, loss = intact_pass(
            lm,
            batch,
            grad_rows,
            seed=options.seed,
            n_steps=options.n_steps,
            fill=fixed.get(options.ablations[0]),
            gradients=any(NEXT_TOKEN_REGISTRY[m].gradients for m in methods),
        )
        got["loss"].append(loss.cpu().numpy())
        for a in options.ablations:
            n = batch.ids.shape[0]
            orders = {}
            for m in methods:
                # Methods that start from the removed state (attribution patching, IG) depend on the ablation.
                key = f"{m}@{a}" if m in FILL_METHODS else m
                if key not in got["scores"] or len(got["scores"][key]) < len(got["loss"]):
                    fn = NEXT_TOKEN_REGISTRY[m].fn
                    with torch.no_grad():
                        if m in FILL_METHODS:
                            scores = _mean(fn(dataclasses.replace(first, fill=f)).double() for f in fills(a, batch))
                        else:
                            scores = fn(first).double()
                    got["scores"].setdefault(key, []).append(scores.detach().cpu().numpy())
                orders[m] = deletion_scales(rank_layers(got["scores"][key][-1]), device)
            scales = [removal_scales(n, lm.n_layers, device), *orders.values()]
            rises = _mean(
                [x - loss[:, None] for x in shared_losses(lm, batch, scales, f, rows, kept=first.outputs)]
                for f in fills(a, batch)
            )
            removed, *curves = rises
            got["effects"].setdefault(a, []).append(removed.cpu().numpy())
            for m, curve in zip(orders, curves):
                got["deletion"].setdefault((a, m), []).append(curve.cpu().numpy())
        if progress is not None:
            progress.update(int(batch.ids.shape[0]))
        # the batch's kept states go before the next batch's are made (else two batches' would be held at once)
        del first, loss
        release_free_memory()
    cat = lambda d: {k: np.concatenate(v) for k, v in d.items()}  # noqa: E731
    out = {"loss": np.concatenate(got["loss"]), **{k: cat(got[k]) for k in ("scores", "effects", "deletion")}}
    return {**out, "statistics": statistics, "length": length}


def _gathered(shards: list[dict[str, Any]]) -> dict[str, Any]:
    """The ranks' results (in rank order: contiguous shards) as one: every per-window array concatenated."""
    if len(shards) == 1:
        return shards[0]
    cat = lambda key: {k: np.concatenate([g[key][k] for g in shards]) for k in shards[0][key]}  # noqa: E731
    out = {key: cat(key) for key in ("scores", "effects", "deletion")}
    return {**shards[0], **out, "loss": np.concatenate([g["loss"] for g in shards])}


#: Tokens of the training split the unigram baseline of a next-token run is fitted on, at most.
UNIGRAM_TOKENS = 1_000_000


def _unigram_loss(fit: TextWindows, data: TextWindows, vocab: int) -> float:
    """Mean loss over the evaluated windows' predicted tokens (token-weighted, as the model's) of a unigram model
    fitted on the first :data:`UNIGRAM_TOKENS` tokens of ``fit``'s windows, add-one smoothed over the vocabulary
    (no token has probability 0)."""
    counts, seen = np.zeros(vocab, np.float64), 0
    for w in fit.ids:
        if seen >= UNIGRAM_TOKENS:
            break
        counts += np.bincount(w, minlength=vocab)[:vocab]
        seen += w.size
    logp = np.log((counts + 1.0) / (counts.sum() + vocab))
    return float(-logp[np.concatenate([w[1:] for w in data.ids])].mean())


def _unigram_fit(lm: CausalLM, data: str, options: EvalOptions, text: TextWindows, data_dir) -> tuple:
    """The windows the unigram baseline is fitted on, and how (the training split, held out from the evaluated
    windows unless they are the training split themselves)."""
    if options.split != "train":
        try:
            train = load_text_windows(lm, data, split="train", context=options.context, data_dir=data_dir)
            return (
                train,
                f"add-one smoothed token frequencies of the first {UNIGRAM_TOKENS:,} tokens of the train split",
            )
        except DataError:
            pass
    return text, "add-one smoothed token frequencies of the evaluated windows themselves (in-sample: optimistic)"


def _result(lm, data, options, methods, got, ablation: str, model_record) -> EvaluationResult:
    # --save-draws belongs to the noise ablations' folders (EvalOptions refuses it for any other alone)
    saves = options.save_draws and ABLATION_SPECS[ablation].draws_noise
    opts = dataclasses.replace(options, ablation=ablation, save_draws=saves)
    drawn = is_drawn(ablation)
    effects, loss, n_layers = got["effects"][ablation], got["loss"], lm.n_layers
    ties = tie_effects(effects, rtol=opts.tie_rtol)
    largest = typical_largest_effect(effects)
    judged = [
        r
        for r, bad in (("model-at-chance", model_record["at_chance"]), ("negligible-effects", largest < EFFECT_FLOOR))
        if bad
    ]
    judged = ";".join(judged) or "ok"
    sample = np.arange(len(data), dtype=np.int64)
    layers, samples, summary = [], [], []
    for k, m in enumerate(methods):
        scores = got["scores"].get(f"{m}@{ablation}", got["scores"].get(m))
        deletion = got["deletion"][(ablation, m)]
        scored = score_method(scores, effects, deletion, bootstrap=opts.bootstrap, seed=[opts.seed, k], ties=ties)
        layers.append(
            pd.DataFrame(
                {
                    "sample": np.repeat(sample, n_layers),
                    "method": m,
                    "layer": np.tile(np.arange(1, n_layers + 1), len(sample)),
                    "attribution": scores.reshape(-1),
                    "effect": effects.reshape(-1),
                }
            )
        )
        samples.append(
            pd.DataFrame(
                {
                    "sample": sample,
                    "document": data.document,
                    "offset": data.offset,
                    "tokens": np.array([w.size for w in data.ids], np.int64),
                    "loss": loss,
                    "method": m,
                    "spearman": scored.spearman,
                    "deletion_at_1": deletion[:, 0],
                    "top1_hit": scored.top1_hit,
                    "n_tied_effects": ties.n_tied_effects,
                }
            )
        )
        summary.append(
            {
                "checkpoint": lm.spec,
                "head": "lm_head",
                "dataset": f"text:{data.name}",
                "method": m,
                "ablation": ablation,
                "scope": "network",
                "verdict": judged,
                **scored.summary,
            }
        )
    samples_df = pd.concat(samples, ignore_index=True)
    comparisons = (
        compare_methods(
            samples_df,
            n_resamples=opts.bootstrap,
            seed=opts.seed,
            reference=comparison_reference(opts.reference, list(methods)),
        )
        if len(methods) > 1
        else pd.DataFrame(columns=COMPARISON_COLUMNS)
    )
    warnings = []
    if model_record["at_chance"]:
        warnings.append(
            f"the model's mean next-token loss ({model_record['loss']:.4g} nats) is not below the unigram baseline "
            f"({model_record['unigram_loss']:.4g}): it has not learned this text, and its layer ranking means little."
        )
    if largest < EFFECT_FLOOR:
        warnings.append(
            f"the effects are negligible: on a typical window the largest block effect is {largest:.2g} nats "
            f"(below {EFFECT_FLOOR:g})."
        )
    from laya_eval.output.origin import provenance

    manifest = {
        **provenance(opts.device),
        "checkpoint": lm.identity,
        "model": model_record,
        "head": "lm_head",
        "dataset": f"text:{data.name}",
        "split": opts.split,
        "data": data.preprocessing,
        "n_samples": len(data),
        "n_layers": n_layers,
        "layer_names": [f"{lm.parts.block_path}.{i}" for i in range(n_layers)],
        "seed": opts.seed,
        "options": dataclasses.asdict(opts),
        "methods": {m: NEXT_TOKEN_REGISTRY[m].description for m in methods},
        "effect": EFFECT_MEANING.format(ablation=ablation) + (DRAWN_MEANING.format(draws=opts.draws) if drawn else ""),
        "target": {"option": "next-token", "meaning": "the model's own next-token prediction over each window"},
        "ties": {"rtol": ties.rtol, "rule": TIE_RULE},
        "verdict": {"value": judged, "typical_largest_effect": largest, "effect_floor": EFFECT_FLOOR},
        "warnings": warnings,
    }
    donors = noise = None
    if drawn and "donors" in ABLATION_SPECS[ablation].needs:
        donors = donor_table(len(data), seed=opts.seed, draws=opts.draws)
    elif saves:
        dtype = next(lm.model.parameters()).dtype
        noise = noise_draw_arrays(
            ablation, got["statistics"], len(data), got["length"], seed=opts.seed, draws=opts.draws, dtype=dtype
        )
    return EvaluationResult(
        layers=pd.concat(layers, ignore_index=True),
        samples=samples_df,
        summary=pd.DataFrame(summary),
        manifest=manifest,
        comparisons=comparisons,
        warnings=warnings,
        verdict=judged,
        donors=donors,
        noise_draws=noise,
    )


def evaluate_next_token(
    model: str,
    data: str,
    *,
    options: EvalOptions | None = None,
    out: str | os.PathLike | None = None,
    data_dir: str | os.PathLike | None = None,
    progress: Any = None,
    resume: bool = False,
    world: World = SINGLE_PROCESS,
) -> Evaluation | None:
    """Score layer scores of a causal LM against the loss increase of removing each block, per text window.

    Parameters
    ----------
    model : str
        ``hf:DIR`` (``hf:ID`` with ``options.download``): a causal LM with its LM head and tokenizer.
    data : str
        ``text:FILE`` or ``text:rotten-tomatoes`` (:mod:`laya_eval.language.text`); ``options.split`` and
        ``options.limit`` pick the windows, ``options.context`` sizes them.
    options : EvalOptions
        ``target="next-token"``, ``scope="network"``, ``ablation`` among skip, zero, mean, mean-update and the
        drawn resample, noise, resample-update, noise-update (``draws`` each; default here: ``skip``); ``dtype``:
        the precision the model's weights run in (losses and effects are float64 from the logits).
    out : path, optional
        The result folder (checked before any work, replaced whole at the end).
    resume : bool
        Refused: a next-token run keeps no partial results.
    world : laya_eval.engine.distributed.World
        Under ``torchrun``: each rank evaluates its contiguous shard of the windows, rank 0 gathers them, writes
        and returns the evaluation; the other ranks return None. The tables are those of one process.

    Returns
    -------
    Evaluation or None
        One result per ablation with the tables of ``faithfulness``; ``samples`` also records each window's
        ``document``, ``offset``, ``tokens`` and intact ``loss``.
    """
    options = options or EvalOptions(target="next-token", scope="network", ablation="skip")
    methods = check_next_token_options(options, data)
    if resume:
        raise ConfigError(
            "--resume is not available with --target next-token: a next-token run keeps no partial results."
        )
    if out is not None:
        from laya_eval.output.files import check_output_folder

        check_output_folder(out)
    torch.manual_seed(options.seed)
    dtype = getattr(torch, options.dtype)
    lm = load_causal_lm(
        model, download=options.download, device=resolve_device(world.device(options.device)), dtype=dtype
    )
    text = load_text_windows(
        lm, data, split=options.split, context=options.context, data_dir=data_dir, download=options.download
    ).take(options.limit)
    check_draws(options.ablations, len(text))
    if progress is not None:
        first, stop = world.shard(len(text))
        progress.total = stop - first  # this rank's windows
    if len(text) < world.size:
        raise ConfigError(f"{len(text)} window(s) cannot be shared by {world.size} processes: evaluate more windows.")
    got = _gathered(world.gather_objects(_collect(lm, text, options, methods, progress, world)))
    if not world.is_main:
        return None
    mean_loss = float(np.average(got["loss"], weights=[w.size - 1 for w in text.ids]))
    fit, fitted_on = _unigram_fit(lm, data, options, text, data_dir)
    vocab = max(int(lm.model.get_output_embeddings().weight.shape[0]), max(int(w.max()) for w in fit.ids) + 1)
    unigram = _unigram_loss(fit, text, vocab)
    record = {
        "loss": mean_loss,
        "perplexity": math.exp(mean_loss),
        "unigram_loss": unigram,
        "uniform_loss": math.log(int(lm.model.get_output_embeddings().weight.shape[0])),
        "unigram_fit": fitted_on,
        "at_chance": bool(mean_loss >= unigram),
        "loss_rule": "token-weighted mean over the evaluated windows of the mean next-token loss (nats)",
    }
    results = {a: _result(lm, text, options, methods, got, a, record) for a in options.ablations}
    evaluation = Evaluation(results)
    if out is not None:
        evaluation.files = write_evaluation(evaluation, out, table_format=options.table_format)
    return evaluation
