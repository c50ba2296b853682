"""LayeredModel: a backbone that yields hidden states and a head that aggregates them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from torch import Tensor, nn

from laya_eval.errors import DataError
from laya_eval.models.backbones.base import BlockInputReplacement
from laya_eval.models.heads import LayerHead

__all__ = ["MIN_BATCH_ROWS", "LayeredModel", "ModelInfo", "padded_rows"]

#: Rows of a model call come in multiples of this (at least this many): CPU matrix kernels compute rows in
#: tiles (four rows for float64 here) and round the rows of a last, partial tile differently, and one to three
#: rows differently again; so every batch is padded with copies of its own rows to a multiple of 16 (the
#: evaluation engine, the feature cache, the mixer audit), and a sample's numbers do not depend on the batch.
MIN_BATCH_ROWS = 16


def padded_rows(n: int) -> int:
    """The rows a batch of ``n`` samples runs with: ``n`` rounded up to a multiple of :data:`MIN_BATCH_ROWS`."""
    return -(-max(int(n), 1) // MIN_BATCH_ROWS) * MIN_BATCH_ROWS


@dataclass
class ModelInfo:
    """What a checkpoint records besides weights.

    Attributes
    ----------
    num_classes : int
    class_names : tuple of str
    input_shape : tuple of int or None
        Per-sample input shape; ``None`` for text; ``-1`` marks a size of any length
        (``(-1,)``: waveforms of any length).
    dataset : str or None
        Registry name of the dataset the model was trained on.
    preprocessing : dict
    training : dict
        Training options and history (epochs, wall time, ...).
    metrics : dict
        Test metrics (accuracy, macro-F1, ...).
    """

    num_classes: int
    class_names: tuple[str, ...] = ()
    input_shape: tuple[int, ...] | None = None
    dataset: str | None = None
    preprocessing: dict[str, Any] = field(default_factory=dict)
    training: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)


def _shape_fits(got: Any, expected: Any) -> bool:
    return len(got) == len(expected) and all(e == -1 or int(g) == int(e) for g, e in zip(got, expected))


class LayeredModel(nn.Module):
    """``model(x) = head(backbone(x))``.

    Parameters
    ----------
    backbone : laya_eval.models.backbones.Backbone
        Returns the hidden states ``[h_1 ... h_L]``.
    head : LayerHead
    info : ModelInfo, optional
    """

    def __init__(self, backbone: nn.Module, head: LayerHead, info: ModelInfo | None = None) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = head
        self.info = info if info is not None else ModelInfo(num_classes=head.num_classes)

    @property
    def n_layers(self) -> int:
        """Number of hidden states ``L``."""
        return self.head.n_layers

    @property
    def layer_names(self) -> list[str]:
        """Human-readable names of the hidden states, ``layer 1 .. L`` when the backbone has none."""
        names = getattr(self.backbone, "layer_names", None)
        return list(names) if names else [f"layer {i + 1}" for i in range(self.n_layers)]

    def hidden_states(self, x: Any, replace: Mapping[int, Callable[[Tensor], Tensor]] | None = None) -> list[Tensor]:
        """Hidden states ``[h_1 ... h_L]``, each (B, d_i) or (B, C_i, *spatial).

        ``replace`` maps a 0-based layer index to a function applied to that
        block's full output inside the backbone; later blocks see the result
        (network-scope removal).
        """
        if replace:
            return list(self.backbone(x, replace=replace))
        return list(self.backbone(x))

    def block_outputs(self, x: Any) -> tuple[list[Tensor], list[Tensor]]:
        """Hidden states and each block's full output (what ``replace[i]`` acts on), in one pass.

        The read-only twin of ``replace``: every block's output is recorded and passed on
        unchanged. Returns ``(hidden, outputs)``, ``outputs[i]`` e.g. (B, C, H, W) or (B, T, D).
        """
        outputs: dict[int, Tensor] = {}

        def record(i: int) -> Callable[[Tensor], Tensor]:
            def keep_and_pass(t: Tensor) -> Tensor:
                outputs[i] = t
                return t

            return keep_and_pass

        hidden = self.hidden_states(x, {i: record(i) for i in range(self.n_layers)})
        return hidden, [outputs[i] for i in range(self.n_layers)]

    def block_inputs_and_outputs(
        self, x: Any, *, on_graph: bool = False
    ) -> tuple[list[Tensor], list[Tensor | None], list[Tensor]]:
        """Hidden states, each block's input and each block's full output, in one pass.

        The read-only twin of a :class:`~laya_eval.models.backbones.base.BlockInputReplacement`: a block's update
        is ``outputs[i] - inputs[i]`` where the two have one shape. Returns ``(hidden, inputs, outputs)``;
        ``inputs[i]`` is ``None`` where block ``i`` is not called with one tensor (an embedding layer's token ids
        are not a tensor of its output's kind either: compare shapes and dtypes before subtracting). With
        ``on_graph``, a block output that is not on the autograd graph (the first block of a frozen encoder fed token
        ids) becomes a leaf that every later block output depends on, so each has a gradient.
        """
        inputs: dict[int, Tensor | None] = {}
        outputs: dict[int, Tensor] = {}

        def record(i: int) -> BlockInputReplacement:
            def keep_and_pass(block_input: Tensor | None, t: Tensor) -> Tensor:
                if on_graph and not t.requires_grad:
                    t = t.detach().requires_grad_(True)
                inputs[i], outputs[i] = block_input, t
                return t

            return BlockInputReplacement(keep_and_pass)

        hidden = self.hidden_states(x, {i: record(i) for i in range(self.n_layers)})
        n = self.n_layers
        return hidden, [inputs[i] for i in range(n)], [outputs[i] for i in range(n)]

    def forward(self, x: Any, keep: Tensor | None = None) -> Tensor:
        """Logits (B, C); ``keep`` (B, L) gates the head's per-layer terms."""
        return self.head(self.hidden_states(x), keep)

    def check_fits(self, data: Any) -> None:
        """Raise :class:`DataError` if ``data`` (a Dataset) does not fit this model's inputs or classes."""
        expected = self.info.input_shape
        got = getattr(data, "input_shape", None)
        if (expected is None) != (got is None) or (expected is not None and not _shape_fits(got, expected)):
            raise DataError(
                f"dataset '{data.name}' has samples of shape {'text' if got is None else tuple(got)}; "
                f"the model expects {'text' if expected is None else tuple(expected)}."
            )
        if len(data) and int(data.y.max()) >= self.info.num_classes:
            raise DataError(
                f"dataset '{data.name}' has label {int(data.y.max())}; the model has {self.info.num_classes} classes."
            )
