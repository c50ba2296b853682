"""Training loop that produces checkpoints (the paper's reference protocol).

Adam (lr 3e-4), batch 128, up to 50 epochs, early stopping on validation
accuracy with patience 5, best weights restored. When the backbone is frozen
its hidden states are computed once (pooled, as the heads pool them) and the
head trains on that cache, so a frozen encoder runs once, not once per epoch.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import Tensor

from laya_eval.options import check_declared, declared
from laya_eval.training.build import build_model
from laya_eval.training.features import batch_inputs as _inputs, batch_slices, encode_features
from laya_eval.data import Dataset
from laya_eval.models.devices import resolve_device
from laya_eval.errors import DataError, TrainingError
from laya_eval.models.heads import LayerHead, make_head
from laya_eval.models.layered import LayeredModel

__all__ = [
    "TrainOptions",
    "TrainResult",
    "build_model",
    "classification_metrics",
    "fresh_head",
    "predict",
    "resolve_device",
    "train_head",
    "train_in_place",
    "training_record",
]


@declared
class TrainOptions:
    """Training hyper-parameters; the defaults are the paper's reference protocol (each field declared with its
    default and checks in :mod:`laya_eval.options`).

    ``freeze_backbone``: None freezes the backbone exactly when it is pretrained (stored by reference, or a module
    given to :func:`build_model`); True/False forces it.
    """

    epochs: int
    batch_size: int
    lr: float
    patience: int
    seed: int
    device: str
    freeze_backbone: bool | None

    def __post_init__(self) -> None:
        check_declared(self)


@dataclass
class TrainResult:
    """What :func:`train_in_place` did: epochs run, the best epoch and the per-epoch history."""

    epochs_run: int
    best_epoch: int
    best_val_accuracy: float
    wall_time_s: float
    history: list[dict[str, float]] = field(default_factory=list)


@torch.no_grad()
def predict(model: LayeredModel, data: Dataset, *, batch_size: int = 256) -> Tensor:
    """Predicted classes (N,) over ``data``."""
    device = next(model.parameters()).device
    model.eval()
    preds = [model(_inputs(data.x, sl, device)).argmax(-1).cpu() for sl in batch_slices(len(data), batch_size)]
    return torch.cat(preds)


def classification_metrics(y_true: Tensor, y_pred: Tensor) -> dict[str, float]:
    """Accuracy and macro-F1 (scikit-learn)."""
    from sklearn.metrics import accuracy_score, f1_score

    yt, yp = y_true.numpy(), y_pred.numpy()
    return {"accuracy": float(accuracy_score(yt, yp)), "macro_f1": float(f1_score(yt, yp, average="macro"))}


def _is_frozen(model: LayeredModel, options: TrainOptions) -> bool:
    if options.freeze_backbone is not None:
        return bool(options.freeze_backbone)
    return bool(getattr(model.backbone, "stored_by_reference", False) or getattr(model, "pretrained_backbone", False))


def _diverged(what: str, epoch: int, options: TrainOptions) -> TrainingError:
    return TrainingError(
        f"training diverged: {what} at epoch {epoch} (lr={options.lr:g}); nothing was saved. "
        "Lower the learning rate (--lr) or check the inputs for NaN/inf."
    )


def _check_finite_weights(module: torch.nn.Module, epoch: int, options: TrainOptions) -> None:
    bad = next((name for name, p in module.named_parameters() if not bool(torch.isfinite(p).all())), None)
    if bad is not None:
        raise _diverged(f"weight {bad!r} is not finite", epoch, options)


def _fit(
    module: torch.nn.Module,
    params: Sequence[torch.nn.Parameter],
    train_batches: Callable[[Tensor], Iterator[tuple[Tensor, Tensor]]],
    val_logits: Callable[[slice], Tensor],
    labels: tuple[Tensor, Tensor],
    options: TrainOptions,
    *,
    frozen: torch.nn.Module | None = None,
    on_epoch: Callable[[dict[str, float]], None] | None = None,
) -> TrainResult:
    """The reference loop: Adam, shuffled mini-batches, early stopping on validation accuracy.

    ``train_batches(order)`` yields ``(logits, labels)`` batch by batch over the epoch's permutation
    ``order`` of the training rows; ``val_logits(slice)``: logits of validation rows; ``module``'s state at
    the best epoch is restored at the end; ``frozen`` (if any) is kept in eval mode.
    """
    gen = torch.Generator().manual_seed(options.seed)
    optimizer = torch.optim.Adam(params, lr=options.lr)
    y_train, y_val = labels
    best_acc, best_epoch, best_state, history = -math.inf, 0, None, []
    start = time.perf_counter()
    for epoch in range(1, options.epochs + 1):
        module.train()
        if frozen is not None:
            frozen.eval()
        # A CPU generator draws the same permutation on every device; train_batches moves its rows.
        order = torch.randperm(len(y_train), generator=gen, device="cpu")
        total, count = 0.0, 0
        for logits, y in train_batches(order):
            loss = torch.nn.functional.cross_entropy(logits, y)
            if not bool(torch.isfinite(loss.detach())):
                raise _diverged(f"the loss is {loss.detach().item()}", epoch, options)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total += float(loss.detach()) * len(y)
            count += len(y)
        _check_finite_weights(module, epoch, options)
        module.eval()
        with torch.no_grad():
            correct = sum(int((val_logits(sl).argmax(-1) == y_val[sl]).sum()) for sl in batch_slices(len(y_val), 512))
        val_acc = correct / len(y_val)
        record = {"epoch": epoch, "train_loss": total / count, "val_accuracy": val_acc}
        history.append(record)
        if on_epoch is not None:
            on_epoch(record)
        if val_acc > best_acc:
            best_acc, best_epoch = val_acc, epoch
            best_state = copy.deepcopy(module.state_dict())
        elif epoch - best_epoch >= options.patience:
            break
    if best_state is not None:
        module.load_state_dict(best_state)
    module.eval()
    return TrainResult(
        epochs_run=len(history),
        best_epoch=best_epoch,
        best_val_accuracy=best_acc,
        wall_time_s=time.perf_counter() - start,
        history=history,
    )


def fresh_head(head: LayerHead, layer_dims: Sequence[int], seed: int) -> LayerHead:
    """A newly initialised head of ``head``'s kind and hyper-parameters over layers of sizes ``layer_dims``.

    Built as :func:`laya_eval.training.head_fit.fit_head` builds its head (``torch.manual_seed(seed)``, then
    :func:`laya_eval.models.heads.make_head`), so ``fresh_head(h, dims, s)`` trained with :func:`train_head` and
    ``TrainOptions(seed=s)`` is the head ``fit-head --seed s`` trains. The global RNG state is left as it was.

    Parameters
    ----------
    head : LayerHead
        Gives the kind (``head.config()``) and the number of classes; its weights are not used.
    layer_dims : sequence of int
        Feature size of each layer the new head reads (fewer than ``head``'s for layer-ROAR or pruning).
    seed : int

    Returns
    -------
    LayerHead
        In training mode, on the CPU.
    """
    config = head.config()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return make_head(config["name"], list(layer_dims), head.num_classes, **config["kwargs"])


def train_head(
    head: LayerHead,
    train_features: Any,
    val_features: Any,
    options: TrainOptions = TrainOptions(),
    *,
    on_epoch: Callable[[dict[str, float]], None] | None = None,
) -> TrainResult:
    """Train a head in place on cached hidden states (the reference protocol, no backbone).

    Parameters
    ----------
    head : LayerHead
    train_features, val_features : laya_eval.loading.feature_cache.Features
        Anything with ``hidden`` (list of Tensor, each (N, d_i)) and ``y`` (N,), e.g.
        the splits of :func:`laya_eval.loading.feature_cache.extract_features`.
    options : TrainOptions
        ``epochs``, ``batch_size``, ``lr``, ``patience``, ``seed``, ``device``.
    on_epoch : callable, optional
        Called after every epoch with ``{"epoch", "train_loss", "val_accuracy"}``.

    Returns
    -------
    TrainResult
        The head holds the weights of the best validation epoch.
    """
    device = resolve_device(options.device)
    head.to(device)
    torch.manual_seed(options.seed)
    train_cache = [h.to(device) for h in train_features.hidden]
    val_cache = [h.to(device) for h in val_features.hidden]
    if len(train_cache) != head.n_layers:
        raise DataError(f"the features hold {len(train_cache)} layers; the head aggregates {head.n_layers}.")
    labels = (train_features.y.to(device), val_features.y.to(device))
    rows_per_chunk = _gather_rows(train_cache, options.batch_size)

    def train_batches(order: Tensor) -> Iterator[tuple[Tensor, Tensor]]:
        # One gather per chunk of consecutive batches instead of one per batch: the rows and their order
        # are the same, so the batches hold the same values (and the trained head the same bits). index_select
        # copies the same rows as h[rows], several times faster on CPU.
        for lo in range(0, len(order), rows_per_chunk):
            rows = order[lo : lo + rows_per_chunk].to(device)
            hidden, y = [h.index_select(0, rows) for h in train_cache], labels[0][rows]
            for sl in batch_slices(len(rows), options.batch_size):
                yield head([h[sl] for h in hidden]), y[sl]

    def val_logits(sl: slice) -> Tensor:
        return head([h[sl] for h in val_cache])

    return _fit(head, list(head.parameters()), train_batches, val_logits, labels, options, on_epoch=on_epoch)


#: :func:`train_head` gathers at most this many batches of cached features at once (and at most 64 MiB).
_GATHER_BATCHES = 32


def _gather_rows(cache: Sequence[Tensor], batch_size: int) -> int:
    row_bytes = sum(h[:1].numel() * h.element_size() for h in cache)
    return max(1, min(_GATHER_BATCHES, 2**26 // max(1, row_bytes * batch_size))) * batch_size


def train_in_place(
    model: LayeredModel,
    train_data: Dataset,
    val_data: Dataset,
    options: TrainOptions = TrainOptions(),
    *,
    on_epoch: Callable[[dict[str, float]], None] | None = None,
) -> TrainResult:
    """Train ``model`` in place and restore the weights of the best validation epoch.

    A frozen backbone (``options.freeze_backbone``; by default frozen when the backbone
    is pretrained: stored by reference or passed to :func:`build_model` as a module) is
    encoded once and the head trains on the cache (:func:`train_head`).

    Parameters
    ----------
    model : LayeredModel
    train_data, val_data : Dataset
    options : TrainOptions
    on_epoch : callable, optional
        Called after every epoch with ``{"epoch", "train_loss", "val_accuracy"}``
        (the CLI draws its progress bar from it).
    """
    for d in (train_data, val_data):
        model.check_fits(d)
    device = resolve_device(options.device)
    model.to(device)
    frozen = _is_frozen(model, options)
    if frozen:
        model.backbone.requires_grad_(False)
        batch = max(256, options.batch_size)
        cached = [encode_features(model, d, batch_size=batch) for d in (train_data, val_data)]
        result = train_head(model.head, *cached, options, on_epoch=on_epoch)
    else:
        torch.manual_seed(options.seed)
        y_train, y_val = train_data.y.to(device), val_data.y.to(device)

        def train_batches(order: Tensor) -> Iterator[tuple[Tensor, Tensor]]:
            for sl in batch_slices(len(order), options.batch_size):
                idx = order[sl]
                yield model(_inputs(train_data.x, idx, device)), y_train[idx.to(device)]

        def val_logits(sl: slice) -> Tensor:
            return model(_inputs(val_data.x, sl, device))

        params = [p for p in model.parameters() if p.requires_grad]
        result = _fit(model, params, train_batches, val_logits, (y_train, y_val), options, on_epoch=on_epoch)
    model.eval()
    # Wall time stays out of the checkpoint: the same seed must give the same bytes.
    model.info.training = training_record(options, result, frozen)
    return result


def training_record(options: TrainOptions, result: TrainResult, frozen: bool) -> dict[str, Any]:
    """What a checkpoint records about training (no wall time: same seed, same bytes)."""
    return {
        **asdict(options),
        "freeze_backbone": bool(frozen),
        "epochs_run": result.epochs_run,
        "best_epoch": result.best_epoch,
        "best_val_accuracy": result.best_val_accuracy,
        "history": result.history,
    }
