"""A causal language model with its own head, loaded from ``hf:DIR``, and its blocks run with replacements.

:func:`load_causal_lm` loads a transformers causal LM (``AutoModelForCausalLM``, safetensors only, no remote
code, offline unless ``download``) and finds its embeddings, block stack, final norm and LM head by structure
(:func:`laya_eval.models.backbones.hf_layout.find_decoder_parts`). :func:`run_windows` runs the model itself
(transformers' own forward, masks and positions) with forward hooks on the blocks that replace block ``i``'s
output per row: ``out_i := fill_i + scale[b, i] * (out_i - fill_i)``, where the fill is ``coef * in_i + const_i``
(``skip``: the block's input, the update removed; ``zero``: 0; ``mean``: the dataset mean of the block's output;
``mean-update``: the input plus the dataset mean of the update). ``scale`` 1 keeps the block, 0 removes it,
values between give the path Integrated Gradients integrates along. The hooks can also keep every block's input
and output, with their gradients.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import numpy as np
import torch
from torch import Tensor, nn

from laya_eval.errors import ConfigError
from laya_eval.models.backbones.hf import no_progress_bars
from laya_eval.models.backbones.hf_files import (
    locate_hf_model,
    model_file_hashes,
    refuse_missing_tokenizer,
    refuse_remote_code,
    resolve_hf_model,
    weight_file_hashes,
)
from laya_eval.models.backbones.hf_causal import is_causal_lm_type
from laya_eval.models.backbones.hf_causal import load_causal_lm as load_pretrained_causal_lm
from laya_eval.models.backbones.hf_layout import DecoderParts, find_decoder_parts

#: Files one of which a model folder's tokenizer is read from.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer.model",
    "vocab.json",
    "vocab.txt",
    "spiece.model",
    "tokenizer_config.json",
)

__all__ = ["CausalLM", "Fill", "RunOutput", "load_causal_lm", "padded_batch", "run_windows", "window_losses"]


@dataclass
class CausalLM:
    """A loaded causal LM: the transformers model (eval mode), its tokenizer, its parts and its identity."""

    model: nn.Module
    tokenizer: Any
    parts: DecoderParts
    spec: str
    identity: dict[str, Any]
    max_positions: int | None

    @property
    def n_layers(self) -> int:
        return len(self.parts.blocks)


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _refuse_non_causal(config: Any, spec: str) -> None:
    """A causal LM by its config's ``model_type`` (:func:`~laya_eval.models.backbones.hf_causal.is_causal_lm_type`)."""
    kind = getattr(config, "model_type", None)
    if not is_causal_lm_type(kind):
        raise ConfigError(
            f"--target next-token needs a causal language model with its LM head; {spec} is a {kind or 'unknown'} "
            "model (an encoder or a model without a next-token head)."
        )


def load_causal_lm(
    spec: str, *, download: bool = False, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32
) -> CausalLM:
    """Load ``hf:DIR`` (or ``hf:ID`` with ``download``) as a causal LM with its tokenizer, its weights in ``dtype``
    (whatever precision they were saved in) on ``device``.

    Raises
    ------
    ConfigError
        Not an ``hf:`` spec, custom code asked for, not a causal LM, no tokenizer, no safetensors weights.
    """
    from transformers import AutoConfig

    spec = str(spec)
    if not spec.startswith("hf:"):
        raise ConfigError(
            f"--target next-token evaluates a causal language model given as hf:DIR; got {spec!r} (a laya-eval "
            "checkpoint has a classifier head: use --target pred or label)."
        )
    path = locate_hf_model(spec[3:], local_files_only=not download)
    refuse_remote_code(path)
    kwargs = {"local_files_only": not download, "trust_remote_code": False}
    try:
        with no_progress_bars():
            config = AutoConfig.from_pretrained(path, **kwargs)
    except (OSError, ValueError) as err:
        raise ConfigError(f"could not read a Hugging Face model config from {path!r}: {_first_line(err)}") from None
    _refuse_non_causal(config, spec)
    refuse_missing_tokenizer(path)
    try:
        with no_progress_bars():
            model, tokenizer = load_pretrained_causal_lm(path, kwargs)
    except (OSError, ValueError, TypeError) as err:
        raise ConfigError(f"could not load {spec} as a causal LM (safetensors only): {_first_line(err)}") from None
    model.eval().to(device=device, dtype=dtype).requires_grad_(False)  # evaluated, never trained: weights frozen
    parts = find_decoder_parts(model, int(config.num_hidden_layers))
    if parts.lm_head is None:
        raise ConfigError(f"{spec}: the model has no LM head (get_output_embeddings() is None).")
    positions = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    identity = {
        "spec": f"hf:{resolve_hf_model(path)}",
        "weights": weight_file_hashes(path),
        "files": model_file_hashes(path),
        "model_type": config.model_type,
        "block_path": parts.block_path,
    }
    return CausalLM(model, tokenizer, parts, spec, identity, int(positions) if positions else None)


@dataclass(frozen=True)
class Fill:
    """What a removed block's output becomes: ``coef * block input + const[i]``. ``const`` holds one (d,) per block,
    the same for every window, or, for a fill drawn per window (``resample``, ``noise``: :mod:`~laya_eval.language.draws`),
    one (B, T, d) per block whose row b is the fill of the run's row b (:meth:`rows` picks a run's rows)."""

    coef: float
    const: Sequence[Tensor] | None = None

    def of(self, i: int, inp: Tensor) -> Tensor:
        base = inp * self.coef if self.coef else torch.zeros_like(inp)
        return base if self.const is None else base + self.const[i].to(inp.dtype)

    @property
    def per_window(self) -> bool:
        """Whether the fill differs between windows (one (B, T, d) per block)."""
        return self.const is not None and self.const[0].dim() > 1

    def rows(self, index: Tensor | slice) -> Fill:
        """The fill of the rows ``index`` of the windows it was drawn for (itself when it is the same for all)."""
        return Fill(self.coef, [c[index] for c in self.const]) if self.per_window else self


SKIP = Fill(1.0)


@dataclass
class RunOutput:
    """One run: logits (B, T, V); with ``keep``, every block's input and output (each (B, T, d), outputs after the
    replacement and with ``retain_grad`` when gradients were asked for)."""

    logits: Tensor
    inputs: list[Tensor] = field(default_factory=list)
    outputs: list[Tensor] = field(default_factory=list)


def _hidden(value: Any) -> Tensor:
    return value[0] if isinstance(value, tuple) else value


@contextlib.contextmanager
def _block_hooks(blocks: nn.ModuleList, scale: Tensor | None, fill: Fill, out: RunOutput, keep: bool) -> Iterator[None]:
    handles = []

    def hook(i: int):
        def run(module, args, kwargs, result):
            inp = args[0] if args else kwargs["hidden_states"]
            h = _hidden(result)
            if scale is not None:
                s = scale[:, i].to(h.dtype)[:, None, None]
                base = fill.of(i, inp)
                h = base + s * (h - base)
            replaced = scale is not None
            if keep:
                if torch.is_grad_enabled() and not h.requires_grad:
                    # The weights are frozen: the first block's output becomes the leaf gradients flow back to.
                    h, replaced = h.detach().requires_grad_(True), True
                elif h.requires_grad:
                    h.retain_grad()
                out.inputs.append(inp)
                out.outputs.append(h)
            if not replaced:
                return None
            return (h, *result[1:]) if isinstance(result, tuple) else h

        return run

    try:
        for i, block in enumerate(blocks):
            handles.append(block.register_forward_hook(hook(i), with_kwargs=True))
        yield
    finally:
        for handle in handles:
            handle.remove()


def padded_batch(windows: Sequence[np.ndarray], length: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """Right-padded ids (B, length) and attention mask (B, length) of windows of at most ``length`` tokens."""
    ids = np.zeros((len(windows), length), np.int64)
    mask = np.zeros((len(windows), length), np.int64)
    for b, w in enumerate(windows):
        ids[b, : w.size] = w
        mask[b, : w.size] = 1
    return torch.tensor(ids, device=device), torch.tensor(mask, device=device)


def run_windows(
    lm: CausalLM,
    ids: Tensor,
    mask: Tensor,
    *,
    scale: Tensor | None = None,
    fill: Fill = SKIP,
    keep: bool = False,
    start: tuple[int, Sequence[Tensor]] | None = None,
    first_removed: bool = False,
) -> RunOutput:
    """The model on right-padded windows with block ``i`` of row ``b`` scaled by ``scale[b, i]`` towards its fill.

    Parameters
    ----------
    ids, mask : Tensor of int64, (B, T)
    scale : Tensor, (B, L), optional
        1 keeps a block, 0 replaces its output by ``fill``; None runs the model as it is.
    keep : bool
        Keep every block's input and output (``RunOutput.inputs``, ``outputs``); under ``torch.enable_grad()``
        the outputs keep their gradients (``.grad`` after a backward pass) even where the weights are frozen.
    start : (int, list of Tensor), optional
        ``(f, outputs)``: start at block ``f``, blocks ``0 .. f-1`` giving ``outputs[j]`` (B, T, d), their outputs
        in the intact pass of the same rows, without running (every row must keep those blocks). Only the
        embeddings and blocks ``f ..`` run.
    first_removed : bool
        Every row removes block ``f`` (``start``'s, 0 without it) whole (``scale`` 0): it gives ``fill`` of its
        input without running.
    """
    out = RunOutput(logits=torch.empty(0))
    with (
        _block_hooks(lm.parts.blocks, scale, fill, out, keep),
        _started(lm.parts.blocks, start, fill if first_removed else None),
    ):
        out.logits = lm.model(input_ids=ids, attention_mask=mask, use_cache=False).logits
    return out


def _plain_attributes(stand_in: nn.Module, block: nn.Module) -> None:
    """Copy the block's plain attributes (``attention_type``, ``layer_idx`` …), which some families read while
    looping over their blocks, onto the module standing in for it."""
    for key, value in vars(block).items():
        if not key.startswith("_") and not isinstance(value, (nn.Module, Tensor)):
            setattr(stand_in, key, value)


class _KeptOutput(nn.Module):
    """Stands in for a block before the first removed one: returns that block's output from the intact pass
    (the same rows), so the model's own forward skips the block's work."""

    def __init__(self, block: nn.Module, output: Tensor) -> None:
        super().__init__()
        _plain_attributes(self, block)
        self.output = output

    def forward(self, *args: Any, **kwargs: Any) -> Tensor:
        return self.output


class _Filled(nn.Module):
    """Stands in for the first removed block where every row of the call removes it whole: returns the fill of its
    input (``skip``: the input itself) without running the block, whose output would be replaced anyway."""

    def __init__(self, block: nn.Module, fill: Fill, index: int) -> None:
        super().__init__()
        _plain_attributes(self, block)
        self.fill, self.index = fill, index

    def forward(self, *args: Any, **kwargs: Any) -> Tensor:
        return self.fill.of(self.index, args[0] if args else kwargs["hidden_states"])


@contextlib.contextmanager
def _started(
    blocks: nn.ModuleList, start: tuple[int, Sequence[Tensor]] | None, removed: Fill | None = None
) -> Iterator[None]:
    """Blocks ``0 .. f-1`` replaced by their kept outputs for ``start = (f, outputs)``, and block ``f`` by its fill
    where ``removed`` gives it (entered after the hooks, so the stand-ins carry none); the blocks are put back on
    exit."""
    first, outputs = start if start is not None else (0, [])
    stand_ins = {j: _KeptOutput(blocks[j], outputs[j]) for j in range(first)}
    if removed is not None:
        stand_ins[first] = _Filled(blocks[first], removed, first)
    originals = {j: blocks[j] for j in stand_ins}
    try:
        for j, stand_in in stand_ins.items():
            blocks[j] = stand_in
        yield
    finally:
        for j, block in originals.items():
            blocks[j] = block


#: Bytes of one float64 copy of log-probabilities the loss holds at a time (rows are taken a few at a time).
LOSS_BYTES = 16 << 20


def window_losses(logits: Tensor, ids: Tensor, mask: Tensor) -> Tensor:
    """Mean next-token negative log-likelihood of each window, in nats, float64 (B,): the logits at position t
    predict token t + 1, over the window's real tokens."""
    # float64 copies of a few rows at a time (each row's arithmetic is the same for any number of rows)
    step = max(1, LOSS_BYTES // max(1, 8 * logits.shape[1] * logits.shape[2]))
    out = []
    for s in range(0, logits.shape[0], step):
        logp = torch.log_softmax(logits[s : s + step, :-1].double(), dim=-1)
        nll = -logp.gather(-1, ids[s : s + step, 1:, None]).squeeze(-1)
        real = (mask[s : s + step, 1:] * mask[s : s + step, :-1]).double()
        out.append((nll * real).sum(1) / real.sum(1))
    return torch.cat(out)
