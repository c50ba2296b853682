"""Accuracy with sets of layers removed, from cached head inputs: no backbone pass, no retraining.

A *removal order* lists the layers least important first; removing the ``k`` least important layers
(k = 0 … L-1) keeps the rest. Dataset-level orders are one order for every input (the method's mean score per
layer); per-input orders are one order per input (that input's own scores). Ties in the scores keep the
lower layer first in the order, i.e. the lower layer is removed first (a stable sort, as everywhere else).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from laya_eval.models.heads import LayerHead
from laya_eval.engine.removals import head_removal_logits
from laya_eval.models.trace import trace_from_hidden

__all__ = ["evaluate_masks", "greedy_order", "intact_logits", "prefix_masks", "removal_fill", "removal_order"]


def removal_order(scores: np.ndarray) -> np.ndarray:
    """Layer indices, least important (lowest score) first; ties: lower layer first. (L,) or (N, L)."""
    return np.argsort(np.asarray(scores, np.float64), axis=-1, kind="stable")


def prefix_masks(order: np.ndarray) -> np.ndarray:
    """Keep masks that remove the first ``k`` layers of ``order``, k = 0 … L-1.

    Parameters
    ----------
    order : ndarray of int, (L,) or (N, L)

    Returns
    -------
    ndarray of float32, (L, L) or (N, L, L)
        ``masks[..., k, i] == 0`` iff layer ``i`` is among the first ``k`` of the order.
    """
    order = np.asarray(order)
    n_layers = order.shape[-1]
    position = np.empty_like(order)
    np.put_along_axis(position, order, np.broadcast_to(np.arange(n_layers), order.shape), axis=-1)
    k = np.arange(n_layers)
    return (position[..., None, :] >= k[:, None]).astype(np.float32)


def removal_fill(features_hidden: Sequence[Tensor], ablation: str) -> list[Tensor] | None:
    """The ``mean`` ablation's fill: the mean pooled state of each layer (float64 sum, rounded once)."""
    return [h.double().mean(0).to(h.dtype) for h in features_hidden] if ablation == "mean" else None


@torch.no_grad()
def intact_logits(head: LayerHead, hidden: Sequence[Tensor]) -> Tensor:
    """The head's own forward pass: what the model predicts with nothing removed."""
    return head(list(hidden))


@torch.no_grad()
def evaluate_masks(
    head: LayerHead,
    hidden: Sequence[Tensor],
    masks: np.ndarray,
    ablation: str,
    fill: Sequence[Tensor] | None,
    *,
    batch_size: int = 256,
) -> tuple[np.ndarray, np.ndarray]:
    """Prediction and confidence of the head with the layers of each mask removed.

    Parameters
    ----------
    head : LayerHead
    hidden : list of Tensor, each (N, d_i)
        Pooled head inputs.
    masks : ndarray, (K, L) or (N, K, L)
        Keep masks, shared by every input or one set per input. A row that keeps every layer is evaluated with
        the head's own forward pass, so "nothing removed" is exactly the model's prediction.
    ablation : {"gate", "gate-renorm", "zero", "mean"}
    fill : list of Tensor, optional
        For ``mean`` (:func:`removal_fill`).
    batch_size : int
        The batches are those of :func:`laya_eval.training.trainer.predict` (same size, same boundaries), so the intact
        rows reproduce the model's recorded predictions bit for bit.

    Returns
    -------
    pred : ndarray of int, (N, K)
        The predicted class after each removal.
    confidence : ndarray of float64, (N, K)
        Its probability.
    """
    head.eval()
    n = int(hidden[0].shape[0])
    device = next((p.device for p in head.parameters()), torch.device("cpu"))
    masks_t = torch.as_tensor(masks, dtype=torch.float32, device=device)
    fill = None if fill is None else [v.to(device) for v in fill]
    preds, confidence = [], []
    for start in range(0, n, batch_size):
        batch = [h[start : start + batch_size].to(device) for h in hidden]  # the cached features live on the CPU
        m = masks_t if masks_t.dim() == 2 else masks_t[start : start + batch_size]
        tr = trace_from_hidden(head, batch)
        logits = head_removal_logits(tr, head, m, ablation, fill)  # (B, K, C)
        whole = (m >= 1).all(-1)  # (K,) or (B, K)
        whole = whole.expand(logits.shape[0], -1) if whole.dim() == 1 else whole
        if bool(whole.any()):
            logits = torch.where(whole[..., None], intact_logits(head, batch)[:, None, :], logits)
        pred = logits.argmax(-1)
        conf = torch.softmax(logits.double(), -1).gather(-1, pred[..., None]).squeeze(-1)
        preds.append(pred.cpu().numpy())
        confidence.append(conf.cpu().numpy())
    return np.concatenate(preds), np.concatenate(confidence)


def greedy_order(
    head: LayerHead,
    hidden: Sequence[Tensor],
    labels: Tensor,
    ablation: str,
    fill: Sequence[Tensor] | None,
    *,
    batch_size: int = 256,
) -> np.ndarray:
    """The oracle's removal order: greedy search for the best k-subset on (validation) data.

    At step k the layer whose removal, together with the k-1 already removed, leaves the highest accuracy is
    removed next (ties: the lower layer); the order is nested, so it is a ranking like any method's.

    Returns
    -------
    ndarray of int, (L,)
    """
    n_layers = len(hidden)
    removed: list[int] = []
    for _ in range(n_layers - 1):
        remaining = [i for i in range(n_layers) if i not in removed]
        masks = np.ones((len(remaining), n_layers), np.float32)
        for row, cand in enumerate(remaining):
            masks[row, removed + [cand]] = 0.0
        pred, _ = evaluate_masks(head, hidden, masks, ablation, fill, batch_size=batch_size)
        accuracy = (pred == labels.numpy()[:, None]).mean(0)
        removed.append(remaining[int(np.argmax(accuracy))])
    return np.array(removed + [i for i in range(n_layers) if i not in removed])
