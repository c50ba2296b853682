"""The audit of a model's depth mixers: does a mixer's weight over its sources say which sources the
prediction uses?

For every mixer and evaluated input, each method of :data:`~laya_eval.mixers.attributions.MIXER_METHODS`
scores the mixer's sources, and each source is removed from that mixer in turn
(:data:`~laya_eval.mixers.protocol.REMOVALS`), its effect measured at the model output. Each (mixer, method)
is then scored as the layer attributions are (:func:`laya_eval.engine.results.score_method`: faithfulness =
mean Spearman rho between scores and tie-aware effects, Deletion@1, top-1 hit rate, AOPC, bootstrap
intervals, the exact null p-value), and methods are compared pairwise per mixer
(:func:`laya_eval.stats.compare_methods`).

Tables (``sources``, ``samples``, ``summary``, ``comparisons``, ``map``) carry a ``mixer`` column; ``map`` is the
mixer x source grid of mean mass and mean effect side by side. Given ``out``, :func:`audit_mixers` writes them as a
result folder (``laya-eval mixers``).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import Tensor, nn

from laya_eval.options import check_declared, declared
from laya_eval.data import Dataset, load_dataset
from laya_eval.models.layered import padded_rows
from laya_eval.engine.interventions import donor_ids
from laya_eval.engine.results import score_method
from laya_eval.errors import ConfigError
from laya_eval.figures.mixers import mixer_map_figure
from laya_eval.figures.style import figure_bytes
from laya_eval.loading.references import call_factory
from laya_eval.loading.specs import parse_spec
from laya_eval.mixers.attributions import MIXER_METHODS, MixerContext, deletion_effects, leave_one_source_out
from laya_eval.mixers.protocol import REMOVALS, capture_mixers, find_mixers
from laya_eval.mixers.reference import load_mixer_model
from laya_eval.output.files import check_output_folder, file_sha256, sha256_bytes, write_result_folder
from laya_eval.output.origin import provenance
from laya_eval.output.tables import table_bytes
from laya_eval.stats import COMPARISON_COLUMNS, compare_methods, tie_effects

__all__ = ["MixerAudit", "MixerOptions", "audit_mixers", "load_mixer_spec"]

TABLES = ("sources", "samples", "summary", "comparisons", "map")


@declared
class MixerOptions:
    """Options of a mixer audit (each declared in :mod:`laya_eval.options`); :meth:`check` says what is wrong before
    any work."""

    removal: str
    methods: tuple[str, ...]
    split: str
    limit: int | None
    batch_size: int
    seed: int
    bootstrap: int
    ig_steps: int
    draws: int
    trust_code: bool

    def check(self) -> MixerOptions:
        check_declared(self)
        return self


@dataclass
class MixerAudit:
    """The tables of a mixer audit (see the module docstring), its manifest, and the files written (``files``,
    ``manifest.json`` last; empty without ``out``). ``warnings``: one line per warning about the run, as on every
    verb's result (an audit has none of its own yet)."""

    sources: pd.DataFrame
    samples: pd.DataFrame
    summary: pd.DataFrame
    comparisons: pd.DataFrame
    map: pd.DataFrame
    manifest: dict[str, Any] = field(default_factory=dict)
    donors: pd.DataFrame | None = None
    files: list[Path] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def load_mixer_spec(spec: str | os.PathLike, *, trust_code: bool = False) -> tuple[nn.Module, dict[str, Any]]:
    """A model with depth mixers from a mixer model file or ``py:MODULE:CALLABLE`` (imported only with
    ``trust_code``): ``(model in eval mode, description for the manifest)``."""
    kind, value = parse_spec(spec)
    if kind == "hf":
        raise ConfigError(f"mixer audits take a mixer model file or py:MODULE:CALLABLE; got {spec!r}.")
    if kind == "py":
        if not trust_code:
            raise ConfigError(
                f"{spec!r} runs Python code from module {value.rpartition(':')[0]!r}; pass "
                "--trust-code (trust_code=True) if you trust that code."
            )
        model = call_factory(value)
        if not isinstance(model, nn.Module):
            raise ConfigError(f"py:{value} must return a torch.nn.Module; got {type(model).__name__}.")
        return model.eval(), {"spec": str(spec)}
    model, info = load_mixer_model(value)
    return model, {"path": str(value), "sha256": file_sha256(value), "config": dict(model.config), "info": info}


def _batches(n: int, size: int):
    for start in range(0, n, size):
        yield torch.arange(start, min(start + size, n))


def _padded(x: Tensor, ids: Tensor) -> tuple[Tensor, int]:
    """A multiple of MIN_BATCH_ROWS rows (copies of the batch's own rows): CPU kernels round small batches and
    partial row tiles differently, and the results must not depend on the batch size."""
    n = len(ids)
    if padded_rows(n) == n:
        return x, n
    reps = torch.arange(padded_rows(n)) % n
    return x[reps], n


@torch.no_grad()
def _source_means(model, mixers, data: Dataset, batch_size: int) -> dict[str, list[Tensor]]:
    """Each mixer's sources averaged over the evaluated data (float64 sums, rounded once)."""
    sums: dict[str, list[Tensor]] = {}
    for idx in _batches(len(data), batch_size):
        x, n = _padded(data.x[idx], idx)
        with capture_mixers(mixers) as calls:
            model(x)
        for name in mixers:
            batch = [s[:n].double().sum(0) for s in _single_call(name, calls[name]).sources]
            sums[name] = batch if name not in sums else [a + b for a, b in zip(sums[name], batch)]
    return {name: [s.div(len(data)).float() for s in v] for name, v in sums.items()}


def _single_call(name, calls):
    if len(calls) != 1:
        raise ConfigError(
            f"depth mixer {name!r} ran {len(calls)} times in one forward pass; the audit needs "
            "exactly one call per pass."
        )
    return calls[0]


@torch.no_grad()
def _donor_fills(model, mixers, data: Dataset, ids: Tensor, options: MixerOptions) -> tuple[dict[str, tuple], Tensor]:
    """Each mixer's sources in the donors of the batch's samples, one fill per draw, and the donors (B, K).

    Donor ``k`` of sample ``g`` comes from (seed, ``g``, ``k``) alone (the engine's ``resample`` ablation draws
    them the same way), and one pass over the donors' inputs (draw-major) gives their sources."""
    donors = donor_ids(options.seed, ids, len(data), options.draws)
    batch = len(ids)
    with capture_mixers(mixers) as calls:
        model(data.x[donors.T.reshape(-1)])
    fills = {}
    for name in mixers:
        sources = _single_call(name, calls[name]).sources
        fills[name] = tuple([s[k * batch : (k + 1) * batch] for s in sources] for k in range(options.draws))
    return fills, donors


def _collect(model, mixers, data: Dataset, options: MixerOptions, means, progress) -> dict[str, Any]:
    names = list(mixers)
    out: dict[str, Any] = {
        "sample": [],
        "label": [],
        "pred": [],
        "confidence": [],
        "donors": [],
        "mixers": {
            n: {"scores": {m: [] for m in options.methods}, "effects": [], "deletion": {m: [] for m in options.methods}}
            for n in names
        },
    }
    for idx in _batches(len(data), options.batch_size):
        x, n = _padded(data.x[idx], idx)
        ids = torch.cat([idx, idx[torch.arange(len(x) - n) % n]]) if len(x) > n else idx
        with torch.no_grad(), capture_mixers(mixers) as calls:
            probs = torch.softmax(model(x), -1)
        pred = probs.argmax(-1)
        conf = probs.gather(1, pred[:, None]).squeeze(1)
        for key, value in (("sample", idx), ("label", data.y[idx]), ("pred", pred[:n]), ("confidence", conf[:n])):
            out[key].append(value.numpy())
        if options.removal == "resample":
            drawn, donors = _donor_fills(model, mixers, data, ids, options)
            out["donors"].append(donors[:n].numpy())
        fills = {name: drawn[name] if options.removal == "resample" else (means.get(name),) for name in names}
        for k, name in enumerate(names):
            call, mixer, rec = _single_call(name, calls[name]), mixers[name], out["mixers"][name]
            context = MixerContext(ids, k, len(names), options.seed, options.ig_steps)
            rec["effects"].append(
                leave_one_source_out(model, mixer, x, call, pred, conf, options.removal, fills[name])[:n].numpy()
            )
            for m in options.methods:
                scores = MIXER_METHODS[m][1](model, mixer, call, x, target=pred, context=context)
                rec["scores"][m].append(scores[:n].double().numpy())
                rec["deletion"][m].append(
                    deletion_effects(model, mixer, x, scores, pred, conf, options.removal, fills[name])[:n].numpy()
                )
        if progress is not None:
            progress.update(n)
    return out


def _tables(collected, mixers, options: MixerOptions, described: dict[str, Any], dataset: str) -> MixerAudit:
    cat = lambda parts: np.concatenate(parts)  # noqa: E731
    sample, label, pred, conf = (cat(collected[k]) for k in ("sample", "label", "pred", "confidence"))
    rows: dict[str, list] = {t: [] for t in TABLES}
    for k, name in enumerate(mixers):
        rec = collected["mixers"][name]
        effects = cat(rec["effects"]).astype(np.float64)
        n, n_src = effects.shape
        ties = tie_effects(effects)
        per_sample = []
        for j, m in enumerate(options.methods):
            scores, deletion = cat(rec["scores"][m]), cat(rec["deletion"][m]).astype(np.float64)
            scored = score_method(
                scores, effects, deletion, bootstrap=options.bootstrap, seed=[options.seed, k, j], ties=ties
            )
            rows["sources"].append(
                pd.DataFrame(
                    {
                        "sample": np.repeat(sample, n_src),
                        "mixer": name,
                        "method": m,
                        "source": np.tile(np.arange(1, n_src + 1), n),
                        "attribution": scores.reshape(-1),
                        "effect": effects.reshape(-1),
                    }
                )
            )
            per_sample.append(
                pd.DataFrame(
                    {
                        "sample": sample,
                        "label": label,
                        "pred": pred,
                        "confidence": conf,
                        "mixer": name,
                        "method": m,
                        "spearman": scored.spearman,
                        "deletion_at_1": deletion[:, 0],
                        "top1_hit": scored.top1_hit,
                        "n_tied_effects": ties.n_tied_effects,
                    }
                )
            )
            summary = {
                k2: v
                for k2, v in scored.summary.items()
                if not k2.startswith("deletion_at_") or k2.startswith("deletion_at_1")
            }
            rows["summary"].append(
                {
                    "dataset": dataset,
                    "mixer": name,
                    "n_sources": n_src,
                    "method": m,
                    "removal": options.removal,
                    **summary,
                }
            )
        samples = pd.concat(per_sample, ignore_index=True)
        rows["samples"].append(samples)
        if len(options.methods) > 1:
            comp = compare_methods(samples, n_resamples=options.bootstrap, seed=options.seed, reference="all")
            rows["comparisons"].append(comp.assign(mixer=name)[["mixer", *comp.columns]])
        mass = cat(rec["scores"]["mass"]) if "mass" in options.methods else np.full((n, n_src), np.nan)
        rows["map"].append(
            pd.DataFrame(
                {
                    "mixer": name,
                    "source": np.arange(1, n_src + 1),
                    "n": n,
                    "mean_mass": mass.mean(0),
                    "mean_effect": effects.mean(0),
                    "mean_abs_effect": np.abs(effects).mean(0),
                }
            )
        )
    comparisons = (
        pd.concat(rows["comparisons"], ignore_index=True)
        if rows["comparisons"]
        else pd.DataFrame(columns=["mixer", *COMPARISON_COLUMNS])
    )
    manifest = {
        **provenance(),
        "model": described,
        "dataset": dataset,
        "split": options.split,
        "n_samples": int(len(sample)),
        "mixers": {name: type(m).__name__ for name, m in mixers.items()},
        "options": asdict(options),
        "methods": {m: MIXER_METHODS[m][0] for m in options.methods},
        "removal": REMOVALS[options.removal],
        "effect": (
            "p_c(x) - p_c(x with the source removed from that mixer), c = class predicted on the "
            "intact input, every later part of the network recomputed (total effect at the output)"
        ),
        "sources": "1-based position in the mixer's list of sources",
    }
    donors = None
    if collected["donors"]:
        drawn = cat(collected["donors"])
        n_draws = drawn.shape[1]
        donors = pd.DataFrame(
            {
                "sample": np.repeat(sample, n_draws),
                "draw": np.tile(np.arange(n_draws), len(sample)),
                "donor": drawn.reshape(-1).astype(np.int64),
            }
        )
        manifest["donors"] = (
            "donors.csv: for each sample and draw, the global index (in the evaluated data) of the "
            "sample whose source states replaced its own; the effect averages p_c over the draws"
        )
    return MixerAudit(
        sources=pd.concat(rows["sources"], ignore_index=True),
        donors=donors,
        samples=pd.concat(rows["samples"], ignore_index=True),
        summary=pd.DataFrame(rows["summary"]),
        comparisons=comparisons,
        map=pd.concat(rows["map"], ignore_index=True),
        manifest=manifest,
    )


def _prepared(model, data, options: MixerOptions, data_dir):
    options = options.check()
    model, described = (
        (model, {"spec": "<in-memory>"})
        if isinstance(model, nn.Module)
        else load_mixer_spec(model, trust_code=options.trust_code)
    )
    mixers = find_mixers(model)
    if not mixers:
        raise ConfigError(
            "the model has no depth mixer (a module with a bool mixer_softmax and mixer_logits); "
            "see docs/concepts/mixers.md."
        )
    if data is None:  # the data the model file records (its training data), as for a checkpoint
        data = (described.get("info") or {}).get("dataset")
        if not isinstance(data, str) or not data:
            raise ConfigError(
                f"the model {described.get('path') or described.get('spec')} records no dataset; "
                "name one with --data (data=...)."
            )
    dataset = data if isinstance(data, Dataset) else load_dataset(data, options.split, data_dir=data_dir)
    if options.limit is not None:
        dataset = dataset.subset(slice(0, options.limit))
    if not isinstance(dataset.x, Tensor):
        if not callable(getattr(model, "encode_texts", None)):
            raise ConfigError(
                f"dataset {dataset.name!r} holds texts and the model has no encode_texts(texts) to "
                "turn them into tensors."
            )
        dataset = replace(dataset, x=model.encode_texts(dataset.x))
    if options.removal == "resample" and len(dataset) < 2:
        raise ConfigError(
            f"removal 'resample' draws donors from the other samples; '{dataset.name}' has {len(dataset)} sample."
        )
    try:
        with torch.no_grad():
            model.eval()(dataset.x[:1])
    except (RuntimeError, ValueError, TypeError) as err:
        raise ConfigError(
            f"the model cannot take the inputs of {dataset.name!r} (one sample of shape "
            f"{tuple(dataset.x.shape[1:])}): {str(err).splitlines()[0]}"
        ) from None
    return model.eval(), described, mixers, dataset, options


def audit_mixers(
    model: nn.Module | str | os.PathLike,
    data: str | Dataset | None = None,
    *,
    out: str | os.PathLike | None = None,
    options: MixerOptions | None = None,
    data_dir: str | os.PathLike | None = None,
    progress: Any = None,
) -> MixerAudit:
    """Audit every depth mixer of ``model`` (a module, a mixer model file or ``py:MODULE:CALLABLE``) on ``data``
    (``laya-eval mixers``; None: the dataset the mixer model file records, its training data).

    ``options`` and ``out`` are checked before any work. Given ``out``, the folder is written whole:
    ``sources.csv, samples.csv, summary.csv, comparisons.csv, map.csv``, the figure ``map.png`` (mass and effect
    per mixer and source), with ``removal="resample"`` also ``donors.csv``, and ``manifest.json`` (the sha256 of
    every file).

    Returns
    -------
    MixerAudit
        Its ``summary`` has one row per (mixer, method): ``faithfulness`` with its 95% interval, Deletion@1,
        top-1 hit rate, AOPC, ``n``, ``n_undefined`` and ties.

    Raises
    ------
    ConfigError
        Bad options, ``out`` cannot be written, a model without depth mixers, data it cannot take.
    """
    options = (options or MixerOptions()).check()
    if out is not None:
        check_output_folder(out)
    model, described, mixers, dataset, options = _prepared(model, data, options, data_dir)
    means = _source_means(model, mixers, dataset, options.batch_size) if options.removal == "mean" else {}
    collected = _collect(model, mixers, dataset, options, means, progress)
    audit = _tables(collected, mixers, options, described, dataset.name)
    audit.manifest["split_rule"] = dataset.preprocessing.get("split_rule")
    if out is not None:
        audit.files = _write_audit(audit, out)
    return audit


def _write_audit(audit: MixerAudit, out: str | os.PathLike) -> list[Path]:
    files = {f"{t}.csv": table_bytes(getattr(audit, t), "csv") for t in TABLES}
    if audit.donors is not None:
        files["donors.csv"] = table_bytes(audit.donors, "csv")
    files["map.png"] = figure_bytes(mixer_map_figure(audit.map), "png")
    # Each file's sha256 in the manifest: a report refuses a folder whose files come from different audits.
    manifest = {**audit.manifest, "files": {name: sha256_bytes(data) for name, data in files.items()}}
    files["manifest.json"] = (json.dumps(manifest, indent=2, sort_keys=True, default=str) + "\n").encode()
    return write_result_folder(out, files)
