"""``prune``: remove the layers a method ranks least important, with and without retraining the head."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from laya_eval.checks import offset_seed
from laya_eval.engine.methods import resolve_methods
from laya_eval.engine.plan import check_target_class
from laya_eval.data import Dataset
from laya_eval.errors import ConfigError
from laya_eval.loading.feature_cache import Features
from laya_eval.models.layered import LayeredModel
from laya_eval.pruning.auc import pruning_comparisons, pruning_summary
from laya_eval.pruning.cost import depth_latency, is_chain
from laya_eval.pruning.curves import evaluate_masks, greedy_order, prefix_masks, removal_fill, removal_order
from laya_eval.pruning.early_exit import early_exit_table
from laya_eval.pruning.options import LATENCY_COLUMNS, PRUNING_COLUMNS, PruneOptions
from laya_eval.pruning.output import _write_prune
from laya_eval.pruning.refit import RefitCache
from laya_eval.sanity_checks.cached import attribute_features
from laya_eval.stats import ModelState, model_state
from laya_eval.training.features import encode_features
from laya_eval.training.features import batch_inputs

__all__ = ["PruneResult", "prune"]

_RANDOM = "random"


@dataclass
class PruneResult:
    """What :func:`prune` measured.

    Attributes
    ----------
    pruning : DataFrame
        :data:`~laya_eval.pruning.options.PRUNING_COLUMNS`, one row per (method, ranking, ablation, k_removed).
    summary, comparisons : DataFrame
        Area under each curve and paired differences (:mod:`laya_eval.pruning.auc`).
    early_exit : DataFrame or None
    latency : DataFrame or None
        Seconds per depth (depth 0: the whole model); None when not timed or not a chain.
    meta : dict
        The model (``label``, ``checkpoint``: its provenance), dataset, options and what was measured (sizes,
        layers, methods, heads trained); the manifest of the folder holds it.
    files : list of Path
        The files written (``manifest.json`` last); empty without ``out``.
    warnings : list of str
        One line per warning about the run, as on every verb's result: a model at chance or predicting one class
        on the test split (:meth:`laya_eval.stats.ModelState.notes`).
    wall_time_s : float or None
        Seconds from the first encoding to the last table (loading and writing left out).
    model_state : ModelState or None
        The model's accuracy on the test split beside chance (``meta["model_state"]`` holds its record).
    """

    pruning: pd.DataFrame
    summary: pd.DataFrame
    comparisons: pd.DataFrame
    early_exit: pd.DataFrame | None
    latency: pd.DataFrame | None
    meta: dict[str, Any] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    wall_time_s: float | None = None
    model_state: ModelState | None = None


class _Context:
    """Everything the rows need: features, scores, the refit cache, depth costs."""

    def __init__(
        self,
        model: LayeredModel,
        features: dict[str, Features],
        options: PruneOptions,
        latency: np.ndarray | None,
        chain: bool,
        on_head: Callable | None,
    ):
        self.model, self.f, self.options, self.latency, self.chain = model, features, options, latency, chain
        self.labels = features["test"].y.numpy()
        self.refit = RefitCache(
            model.head, features["train"], features["val"], features["test"], options.train, on_train=on_head
        )
        self.seeds = [offset_seed(options.train.seed, r) for r in range(options.seeds)]

    def depth_cost(self, masks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean deepest kept layer and mean latency ratio per k, over the inputs; NaN unless a chain."""
        n_k = masks.shape[-2]
        if not self.chain:
            return np.full(n_k, np.nan), np.full(n_k, np.nan)
        kept = masks >= 1
        deepest = masks.shape[-1] - np.argmax(kept[..., ::-1], axis=-1)  # 1-based, (..., K)
        deepest = deepest.reshape(-1, n_k)
        ratio = np.full(n_k, np.nan) if self.latency is None else (self.latency[deepest] / self.latency[-1]).mean(0)
        return deepest.mean(0).astype(np.float64), ratio

    def refit_curve(self, orders: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Refit accuracy mean and std per k, and per-sample mean correctness (N, K), over seeds (one order) or
        over orders (``random``: the r-th order with the r-th seed, cycling)."""
        if not self.seeds:
            return None
        n_layers = len(orders[0])
        runs = (
            [(order, seed) for order in orders for seed in self.seeds]
            if len(orders) == 1
            else [(order, self.seeds[r % len(self.seeds)]) for r, order in enumerate(orders)]
        )
        correct = np.stack(
            [np.stack([self.refit.correct(order[k:], seed) for k in range(n_layers)], 1) for order, seed in runs]
        )  # (R, N, K)
        acc = correct.mean(1)
        std = acc.std(0, ddof=1) if len(runs) > 1 else np.full(n_layers, np.nan)
        return acc.mean(0), std, correct.mean(0)


def _rows(
    method: str,
    ranking: str,
    ablation: str,
    kept: list[str],
    acc: np.ndarray,
    conf: np.ndarray,
    refit: tuple | None,
    depth: np.ndarray,
    ratio: np.ndarray,
) -> list[dict]:
    nan = np.full(len(acc), np.nan)
    r_acc, r_std = (refit[0], refit[1]) if refit is not None else (nan, nan)
    return [
        {
            "method": method,
            "ranking": ranking,
            "ablation": ablation,
            "k_removed": k,
            "layers_kept": kept[k],
            "accuracy": acc[k],
            "confidence": conf[k],
            "accuracy_refit": r_acc[k],
            "accuracy_refit_std": r_std[k],
            "depth": depth[k],
            "latency_ratio": ratio[k],
        }
        for k in range(len(acc))
    ]


def _kept_names(order: np.ndarray) -> list[str]:
    return [",".join(str(i + 1) for i in sorted(order[k:])) for k in range(len(order))]


def _dataset_rows(ctx: _Context, method: str, ablation: str, orders: list[np.ndarray], fill, curves: dict) -> list:
    """Rows of a dataset-level ranking (several orders: their mean, as for ``random``)."""
    test = ctx.f["test"]
    correct, conf, depth, ratio = [], [], [], []
    for order in orders:
        masks = prefix_masks(order)
        pred, c = evaluate_masks(ctx.model.head, test.hidden, masks, ablation, fill, batch_size=ctx.options.batch_size)
        correct.append(pred == ctx.labels[:, None])
        conf.append(c)
        d, r = ctx.depth_cost(masks)
        depth.append(d)
        ratio.append(r)
    correct_mean = np.mean(correct, 0)
    curves[(method, "dataset", ablation, "accuracy")] = correct_mean
    refit_orders = orders if len(orders) == 1 else orders[: ctx.options.n_random_refit]
    refit = ctx.refit_curve(refit_orders) if refit_orders else None
    if refit is not None:
        curves[(method, "dataset", ablation, "refit")] = refit[2]
    kept = (
        _kept_names(orders[0])
        if len(orders) == 1
        else [f"{len(orders[0]) - k} of {len(orders[0])} (random)" for k in range(len(orders[0]))]
    )
    return _rows(
        method,
        "dataset",
        ablation,
        kept,
        correct_mean.mean(0),
        np.mean(conf, 0).mean(0),
        refit,
        np.mean(depth, 0),
        np.mean(ratio, 0),
    )


def _input_rows(ctx: _Context, method: str, ablation: str, scores: np.ndarray, fill, curves: dict) -> list:
    masks = prefix_masks(removal_order(scores))
    pred, conf = evaluate_masks(
        ctx.model.head, ctx.f["test"].hidden, masks, ablation, fill, batch_size=ctx.options.batch_size
    )
    correct = pred == ctx.labels[:, None]
    curves[(method, "input", ablation, "accuracy")] = correct
    depth, ratio = ctx.depth_cost(masks)
    n = scores.shape[1]
    kept = [f"{n - k} of {n} (per input)" for k in range(n)]
    return _rows(method, "input", ablation, kept, correct.mean(0), conf.mean(0), None, depth, ratio)


def _weights_vary(model: LayeredModel, test: Features, batch_size: int) -> bool:
    """Whether the head's layer weights depend on the input (LAYA's alpha): then renormalising over layers 1..d
    still needs every layer's state."""
    from laya_eval.models.trace import trace_from_hidden

    device = next(model.head.parameters()).device
    tr = trace_from_hidden(model.head, [h[:batch_size].to(device) for h in test.hidden])
    w = tr.layer_weights
    return w is not None and bool((w.max(0).values - w.min(0).values).max() > 0)


def _early_exit(ctx: _Context, scores: dict[str, np.ndarray], dataset_level: set[str]) -> pd.DataFrame:
    test, n_layers = ctx.f["test"], ctx.model.n_layers
    prefix = np.tril(np.ones((n_layers, n_layers), np.float32))  # row d-1 keeps layers 1..d
    pred, conf = evaluate_masks(
        ctx.model.head, test.hidden, prefix, "gate-renorm", None, batch_size=ctx.options.batch_size
    )
    partial_pred, partial_conf = {"gate-renorm": pred}, {"gate-renorm": conf}
    needs = {"gate-renorm": _weights_vary(ctx.model, test, ctx.options.batch_size)}
    if ctx.seeds:
        cols = [ctx.refit.predict(range(d), ctx.seeds[0]) for d in range(1, n_layers)]
        partial_pred["refit"] = np.stack([c[0] for c in cols] + [pred[:, -1]], 1)
        partial_conf["refit"] = np.stack([c[1] for c in cols] + [conf[:, -1]], 1)
        needs["refit"] = False
    return early_exit_table(
        partial_pred, partial_conf, needs, pred[:, -1], ctx.labels, scores, dataset_level, ctx.latency
    )


def _prune_layers(
    model: LayeredModel,
    train: Dataset,
    val: Dataset,
    test: Dataset,
    options: PruneOptions,
    *,
    on_head: Callable[[tuple[int, ...], int], None] | None,
    cache_dir: Any,
) -> PruneResult:
    """Every method's pruning curves, the bounds and the early-exit what-if on ``model`` (see :func:`prune`)."""
    if model.n_layers < 2:
        raise ConfigError(f"pruning needs at least 2 layers; the model has {model.n_layers}.")
    check_target_class(options.target, model)
    for d in (train, val, test):
        model.check_fits(d)
    model.eval()
    f = {
        name: encode_features(model, d, batch_size=options.batch_size, cache_dir=cache_dir)
        for name, d in (("train", train), ("val", val), ("test", test))
    }
    names = list(options.methods) if options.methods is not None else [m.name for m in resolve_methods(None)]
    scores, _ = attribute_features(
        model,
        f["test"],
        list(dict.fromkeys([*names, _RANDOM])),
        seed=options.seed,
        batch_size=options.batch_size,
        target=options.target,
    )
    random_scores = scores.pop(_RANDOM)  # the random rows are always there: they bound every method
    dataset_level = {m for m, s in scores.items() if float(np.ptp(s, axis=0).max()) == 0.0}
    example = batch_inputs(test.x, slice(0, min(options.timing_batch, len(test))), next(model.parameters()).device)
    chain = is_chain(model, example)
    latency = depth_latency(model, example, repeats=options.timing_repeats) if (chain and options.timing) else None
    ctx = _Context(model, f, options, latency, chain, on_head)
    rng = np.random.default_rng(options.seed)
    random_orders = [rng.permutation(model.n_layers) for _ in range(options.n_random)]
    rows: list[dict] = []
    curves: dict = {}
    for ablation in options.ablations:
        fill = removal_fill(f["test"].hidden, ablation)
        for method, s in scores.items():
            rows += _dataset_rows(ctx, method, ablation, [removal_order(s.mean(0))], fill, curves)
            if method not in dataset_level:
                rows += _input_rows(ctx, method, ablation, s, fill, curves)
        rows += _dataset_rows(ctx, _RANDOM, ablation, random_orders, fill, curves)
        rows += _input_rows(ctx, _RANDOM, ablation, random_scores, fill, curves)
        oracle = greedy_order(model.head, f["val"].hidden, f["val"].y, ablation, fill, batch_size=options.batch_size)
        rows += _dataset_rows(ctx, "oracle", ablation, [oracle], fill, curves)
    table = pd.DataFrame(rows, columns=PRUNING_COLUMNS)
    early = _early_exit(ctx, {**scores, _RANDOM: random_scores}, dataset_level) if options.early_exit else None
    lat = (
        None
        if latency is None
        else pd.DataFrame(
            {"depth": np.arange(len(latency)), "seconds": latency, "latency_ratio": latency / latency[-1]},
            columns=LATENCY_COLUMNS,
        )
    )
    full, _ = evaluate_masks(
        model.head,
        f["test"].hidden,
        np.ones((1, model.n_layers), np.float32),
        "gate",
        None,
        batch_size=options.batch_size,
    )  # a mask that keeps every layer: the model's own prediction
    state = model_state(ctx.labels, full[:, 0], model.info.num_classes)
    meta = {
        "model_state": state.record(),
        "n_test": len(test),
        "n_train": len(train),
        "n_val": len(val),
        "n_layers": model.n_layers,
        "layer_names": list(model.layer_names),
        "head": model.head.name,
        "chain": chain,
        "methods": list(scores),
        "dataset_level_methods": sorted(dataset_level),
        "refit_heads_trained": len(ctx.refit),
        "timed": latency is not None,
    }
    return PruneResult(
        pruning=table,
        summary=pruning_summary(curves, n_resamples=options.bootstrap, seed=options.seed),
        comparisons=pruning_comparisons(curves, n_resamples=options.bootstrap, seed=options.seed),
        early_exit=early,
        latency=lat,
        meta=meta,
        warnings=state.notes(),
        model_state=state,
    )


def prune(
    model: LayeredModel | str | os.PathLike,
    data: str | Mapping[str, Dataset] | None = None,
    *,
    out: str | os.PathLike | None = None,
    options: PruneOptions | None = None,
    data_dir: str | os.PathLike | None = None,
    limit: int | None = None,
    cache_dir: Any = None,
    device: str = "cpu",
    trust_code: bool = False,
    download: bool = False,
    allow_unverified: bool = False,
    fmt: str | None = None,
    style: str = "default",
    on_start: Callable[[str], None] | None = None,
    on_head: Callable[[tuple[int, ...], int], None] | None = None,
) -> PruneResult:
    """Prune layers by every method's ranking; accuracy without and with retraining, depth and latency
    (``laya-eval prune``).

    ``out``, ``fmt`` and ``style`` are checked before anything is loaded, the model and the data before the
    backbone runs. The backbone encodes each split once (pooled head inputs); everything after that is head-only,
    except the latency measurement, which times the real backbone truncated at each depth.

    Parameters
    ----------
    model : LayeredModel or model spec
        A model, or a checkpoint, ``hf:`` or ``py:`` spec (:func:`laya_eval.loading.specs.load_model`, onto
        ``device``).
    data : str, mapping or None
        A dataset name, or a mapping with the Datasets ``train`` and ``val`` (for the refit heads; ``val`` also for
        the oracle's greedy search and early stopping) and ``test`` (where every accuracy is measured and the
        methods' scores are computed); ``None``: the checkpoint's dataset.
    out : path, optional
        The folder to write, replaced whole: :data:`~laya_eval.pruning.output.PRUNE_FILES` (tables not computed,
        such as the latency without timing, are left out), ``pruning.<fmt>``, ``early_exit.<fmt>`` and
        ``manifest.json`` (:attr:`PruneResult.meta` and the sha256 of every file); ``None``: nothing is written.
    options : PruneOptions, optional
    data_dir : path, optional
    limit : int, optional
        Keep the first ``limit`` test samples (the heads still train on all of train and val).
    cache_dir : path, optional
        Feature cache for frozen pretrained backbones (default: :func:`laya_eval.loading.feature_cache.cache_root`).
    device : str
        Where a spec is loaded (a LayeredModel stays where it is).
    trust_code, download, allow_unverified : bool
        As :func:`laya_eval.loading.specs.load_model`'s.
    fmt : {"png", "svg", "pdf"}, optional
        The figures' format: png, or pdf in paper style.
    style : {"default", "paper"}
        Paper style: the figures carry no titles and each caption is written beside its figure as
        ``NAME.caption.txt``.
    on_start : callable, optional
        Receives one line saying what is about to run (the CLI prints it).
    on_head : callable, optional
        Called with ``(layers kept, seed)`` after each refit head is trained (progress bars).

    Returns
    -------
    PruneResult

    Raises
    ------
    ConfigError
        ``out`` cannot be written, a bad ``fmt`` or ``style``, a model of fewer than 2 layers, a target class the
        model does not have, data the model does not take.
    """
    from laya_eval.data import load_splits
    from laya_eval.figures import check_format, check_style
    from laya_eval.loading.specs import load_model
    from laya_eval.models.devices import resolve_device
    from laya_eval.output.files import check_output_folder

    options = options or PruneOptions()
    if out is not None:
        check_output_folder(out)
    check_style(style)
    if fmt is not None:
        check_format(fmt)
    if isinstance(model, LayeredModel):
        net, provenance, label = model, {"path": None, "sha256": None}, "<in-memory>"
    else:
        loaded = load_model(
            model,
            trust_code=trust_code,
            download=download,
            map_location=resolve_device(device),
            allow_unverified=allow_unverified,
        )
        net, provenance, label = loaded.model, loaded.provenance, str(model)
    name, splits = load_splits(data or net.info.dataset, data_dir=data_dir, download=download, test_limit=limit)
    start = time.perf_counter()
    if on_start is not None:
        on_start(
            f"{label}: {net.head.name} head, {name}, L = {net.n_layers}; encoding "
            f"{sum(len(s) for s in splits)} samples once, then head-only work"
        )
    result = _prune_layers(net, *splits, options, on_head=on_head, cache_dir=cache_dir)
    result.wall_time_s = time.perf_counter() - start
    result.meta = {
        "label": label,
        "checkpoint": provenance,
        "dataset": name,
        "split": "test",
        "ablations": list(options.ablations),
        "seeds": options.seeds,
        "train": dataclasses.asdict(options.train),
        "n_random": options.n_random,
        "n_random_refit": options.n_random_refit,
        "seed": options.seed,
        "bootstrap": options.bootstrap,
        "target": options.target,
        **result.meta,
    }
    if out is not None:
        result.files = _write_prune(result, out, fmt=fmt, style=style)
    return result
