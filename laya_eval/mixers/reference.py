"""Two small patch-transformer classifiers whose depth is mixed by learned weights, and their checkpoint files.

- ``denseformer``: after block ``i`` a depth-weighted average (:class:`DepthWeightedAverage`, static learned
  weights, initialised to the identity on the newest state) mixes the embedding and every block output so far;
  the next block reads the mix (Pagliardini et al., DenseFormer, NeurIPS 2024).
- ``attnres``: the residual sum is replaced by softmax attention over depth (:class:`DepthSoftmax`): block
  ``i > 1`` reads a softmax-weighted sum of the embedding and the earlier blocks' outputs, with logits from a
  learned query against the RMS-normalised, token-averaged sources (input-dependent weights, one weight per
  input and source; after Attention Residuals, Kimi 2026); a last mixer feeds the classifier.

Images are cut into non-overlapping patches (a strided convolution), blocks are pre-norm self-attention + MLP,
and the classifier reads the mean token after a LayerNorm. A checkpoint is one ``torch.save`` dict of tensors
and plain values (format :data:`CHECKPOINT_FORMAT`), read with ``weights_only=True``; its config is checked and
the model's size bounded by the file's before anything is allocated.
"""

from __future__ import annotations

import io
import math
import os
from pathlib import Path
from typing import Any, Sequence

import torch
from torch import Tensor, nn

from laya_eval.catalog import MIXER_MODEL_KINDS
from laya_eval.checks import check_choice, check_int, check_number, check_positive_int, check_seed
from laya_eval.errors import CheckpointError, ConfigError
from laya_eval.mixers.vocabulary import PAD, check_vocabulary, encode_texts
from laya_eval.output.files import atomic_write_bytes

__all__ = [
    "CHECKPOINT_FORMAT",
    "KINDS",
    "BlockState",
    "DepthClassifier",
    "DepthSoftmax",
    "DepthWeightedAverage",
    "PatchDepthClassifier",
    "TokenDepthClassifier",
    "build_mixer_model",
    "accuracy",
    "fit_mixer_model",
    "load_mixer_model",
    "save_mixer_model",
]

CHECKPOINT_FORMAT = "laya-eval-depth-mixer-model"
KINDS = tuple(MIXER_MODEL_KINDS)
_SHARED_BOUNDS = {"dim": (4, 512), "depth": (1, 32), "heads": (1, 16), "n_classes": (2, 1000), "mlp_ratio": (1, 8)}
_IMAGE_BOUNDS = {"image_size": (4, 256), "channels": (1, 4), "patch": (1, 64)}
_TOKEN_BOUNDS = {"max_len": (1, 512)}


class DepthWeightedAverage(nn.Module):
    """``sum_j w_j s_j`` with static learned weights ``w`` (J,), initialised to pass the newest source through."""

    mixer_softmax = False

    def __init__(self, n_sources: int):
        super().__init__()
        init = torch.zeros(n_sources)
        init[-1] = 1.0
        self.weight = nn.Parameter(init)

    def mixer_logits(self, sources: Sequence[Tensor]) -> Tensor:
        return self.weight

    def forward(self, sources: Sequence[Tensor]) -> Tensor:
        return torch.einsum("j,bj...->b...", self.weight, torch.stack(list(sources), 1))


class DepthScore(nn.Module):
    """Logits over depth, (B, J): a learned query against RMS-normalised token-averaged sources ``(B, J, T, d)``."""

    def __init__(self, dim: int):
        super().__init__()
        self.query = nn.Parameter(torch.zeros(dim))  # zero: uniform weights at the start

    def forward(self, stacked: Tensor) -> Tensor:
        keys = stacked.mean(2)
        keys = keys * torch.rsqrt(keys.pow(2).mean(-1, keepdim=True) + 1e-6)
        return keys @ self.query / math.sqrt(keys.shape[-1])


class DepthSoftmax(nn.Module):
    """``sum_j softmax(score(s))_j s_j``: softmax attention over depth with input-dependent weights."""

    mixer_softmax = True

    def __init__(self, dim: int):
        super().__init__()
        self.score = DepthScore(dim)

    def mixer_logits(self, sources: Sequence[Tensor]) -> Tensor:
        return self.score(torch.stack(list(sources), 1))

    def forward(self, sources: Sequence[Tensor]) -> Tensor:
        stacked = torch.stack(list(sources), 1)
        weights = torch.softmax(self.score(stacked), -1)
        return torch.einsum("bj,bj...->b...", weights, stacked)


class Block(nn.Module):
    """Pre-norm self-attention then MLP; returns the block's update (without the residual)."""

    def __init__(self, dim: int, heads: int, mlp_ratio: int):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_ratio * dim), nn.GELU(), nn.Linear(mlp_ratio * dim, dim))

    def forward(self, x: Tensor) -> Tensor:
        h = self.norm1(x)
        a = self.attn(h, h, h, need_weights=False)[0]
        return a + self.mlp(self.norm2(x + a))


class BlockState(nn.Module):
    """The state block ``i`` adds to the sources of the later mixers, as a named submodule without weights (a point
    a forward hook can read or replace, e.g. ``laya-eval fit-head --layers "block_states.*"``).

    DenseFormer: ``state(h, update) -> h + update``, with ``h`` the block's input (the mix it reads) and ``update``
    what the block computed, so the block's output minus its input is its update and ``skip`` and the update
    removals of ``laya-eval faithfulness`` apply. AttnRes: ``state(update=u) -> u``; the block's update is its state
    (no residual sum), so the state removals act on the update itself, and the update removals, which need the
    block's input, are refused.
    """

    def forward(self, h: Tensor | None = None, *, update: Tensor) -> Tensor:
        return update if h is None else h + update


class DepthClassifier(nn.Module):
    """The part both input kinds share: blocks, depth mixers, LayerNorm and a linear classifier over the mean
    token. A subclass embeds its inputs as tokens ``(B, T, dim)`` and says which tokens the mean reads."""

    def __init__(self, config: dict[str, Any], embed: nn.Module, pos: nn.Parameter):
        super().__init__()  # embed and pos are made first: the initialisation draws them before the blocks
        self.config = config
        self.embed, self.pos = embed, pos
        kind, dim, depth = config["kind"], config["dim"], config["depth"]
        self.blocks = nn.ModuleList(Block(dim, config["heads"], config["mlp_ratio"]) for _ in range(depth))
        self.block_states = nn.ModuleList(BlockState() for _ in range(depth))  # no weights: the files are unchanged
        if kind == "denseformer":  # mixer i follows block i: sources embedding, h_1 .. h_i
            self.mixers = nn.ModuleList(DepthWeightedAverage(i + 2) for i in range(depth))
        else:  # mixer i feeds block i + 1 (the last feeds the classifier): sources embedding, f_1 .. f_i
            self.mixers = nn.ModuleList(DepthSoftmax(dim) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.classifier = nn.Linear(dim, config["n_classes"])

    def embed_tokens(self, x: Tensor) -> tuple[Tensor, Tensor | None]:
        """``(tokens (B, T, dim), weights of the mean over tokens (B, T) or None for a plain mean)``."""
        raise NotImplementedError

    def forward(self, x: Tensor) -> Tensor:
        e, pool = self.embed_tokens(x)
        states, h = [e], e
        for i, block in enumerate(self.blocks):
            if self.config["kind"] == "denseformer":
                states.append(self.block_states[i](h, update=block(h)))
            else:
                states.append(self.block_states[i](update=block(h)))
            h = self.mixers[i](states)
        h = self.norm(h)
        if pool is None:
            return self.classifier(h.mean(1))
        return self.classifier((h * pool[..., None]).sum(1) / pool.sum(1, keepdim=True).clamp(min=1.0))


class PatchDepthClassifier(DepthClassifier):
    """A patch transformer classifier with depth mixers; ``forward(x (B, C, H, W)) -> logits (B, n_classes)``."""

    def __init__(
        self,
        kind: str = "denseformer",
        *,
        image_size: int = 28,
        channels: int = 1,
        patch: int = 7,
        dim: int = 32,
        depth: int = 4,
        heads: int = 2,
        n_classes: int = 10,
        mlp_ratio: int = 2,
    ):
        config = _check_config(
            {
                "kind": kind,
                "image_size": image_size,
                "channels": channels,
                "patch": patch,
                "dim": dim,
                "depth": depth,
                "heads": heads,
                "n_classes": n_classes,
                "mlp_ratio": mlp_ratio,
            }
        )
        tokens = (image_size // patch) ** 2
        embed = nn.Conv2d(channels, dim, patch, stride=patch)
        super().__init__(config, embed, nn.Parameter(torch.randn(1, tokens, dim) * 0.02))

    def embed_tokens(self, x: Tensor) -> tuple[Tensor, None]:
        return self.embed(x).flatten(2).transpose(1, 2) + self.pos, None


class TokenDepthClassifier(DepthClassifier):
    """A token transformer classifier with depth mixers over a word vocabulary stored in its config;
    ``forward(ids (B, max_len) int64) -> logits``; the classifier reads the mean over the non-padding tokens.
    :meth:`encode_texts` turns texts into ids (:mod:`~laya_eval.mixers.vocabulary`)."""

    def __init__(
        self,
        kind: str = "denseformer",
        *,
        vocabulary: Sequence[str],
        max_len: int = 48,
        dim: int = 32,
        depth: int = 4,
        heads: int = 2,
        n_classes: int = 2,
        mlp_ratio: int = 2,
    ):
        config = _check_config(
            {
                "kind": kind,
                "vocabulary": list(vocabulary),
                "max_len": max_len,
                "dim": dim,
                "depth": depth,
                "heads": heads,
                "n_classes": n_classes,
                "mlp_ratio": mlp_ratio,
            }
        )
        embed = nn.Embedding(len(vocabulary) + 2, dim, padding_idx=PAD)
        super().__init__(config, embed, nn.Parameter(torch.randn(1, max_len, dim) * 0.02))

    def embed_tokens(self, x: Tensor) -> tuple[Tensor, Tensor]:
        if x.dtype != torch.int64 or x.dim() != 2 or x.shape[1] != self.config["max_len"]:
            raise ValueError(
                f"expected token ids of shape (B, {self.config['max_len']}) and dtype int64; got "
                f"{tuple(x.shape)} {x.dtype}"
            )
        return self.embed(x) + self.pos, (x != PAD).to(self.pos.dtype)

    def encode_texts(self, texts: Sequence[str]) -> Tensor:
        """Token ids (N, max_len) of ``texts`` under the stored vocabulary."""
        return encode_texts(texts, self.config["vocabulary"], self.config["max_len"])


def build_mixer_model(config: dict[str, Any]) -> DepthClassifier:
    """The classifier a checked config describes (token ids when it holds a vocabulary, images otherwise)."""
    config = _check_config(dict(config))
    args = {k: v for k, v in config.items() if k != "kind"}
    return (TokenDepthClassifier if "vocabulary" in config else PatchDepthClassifier)(config["kind"], **args)


def _check_config(config: dict[str, Any]) -> dict[str, Any]:
    check_choice("kind", config.get("kind"), KINDS)
    tokens = "vocabulary" in config
    bounds = {**_SHARED_BOUNDS, **(_TOKEN_BOUNDS if tokens else _IMAGE_BOUNDS)}
    for key, (low, high) in bounds.items():
        check_int(key, config.get(key), low=low, high=high)
    if tokens:
        config["vocabulary"] = check_vocabulary(config["vocabulary"])
    elif config["image_size"] % config["patch"]:
        raise ConfigError(f"patch must divide image_size {config['image_size']}; got {config['patch']!r}.")
    if config["dim"] % config["heads"]:
        raise ConfigError(f"heads must divide dim {config['dim']}; got {config['heads']!r}.")
    expected = {"kind", *bounds, *(["vocabulary"] if tokens else [])}
    unknown = sorted(set(config) - expected)
    if unknown:
        raise ConfigError(f"unknown model config keys {unknown}; expected {sorted(expected)}.")
    return dict(config)


def save_mixer_model(model: DepthClassifier, path: str | os.PathLike, *, info: dict[str, Any] | None = None) -> Path:
    """Write ``model`` (config, float32 weights, optional JSON-able ``info``) atomically to ``path``."""
    buffer = io.BytesIO()
    state = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in model.state_dict().items()}
    torch.save(
        {"format": CHECKPOINT_FORMAT, "config": dict(model.config), "state_dict": state, "info": dict(info or {})},
        buffer,
    )
    return atomic_write_bytes(path, buffer.getvalue())


def load_mixer_model(path: str | os.PathLike) -> tuple[DepthClassifier, dict[str, Any]]:
    """Read a checkpoint written by :func:`save_mixer_model`: ``(model in eval mode, info)``.

    Raises
    ------
    CheckpointError
        Missing, unreadable or foreign file; a config out of bounds; weights that do not fit the config.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"mixer model file '{path}' does not exist.")
    try:
        raw = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - any unreadable file is one user error
        raise CheckpointError(f"'{path}' is not a readable mixer model file ({type(err).__name__}).") from None
    if not isinstance(raw, dict) or raw.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"'{path}' is not a {CHECKPOINT_FORMAT} file.")
    try:
        config = _check_config(dict(raw.get("config") or {}))
        with torch.device("meta"):  # size the model before allocating it
            n_bytes = 4 * sum(p.numel() for p in build_mixer_model(config).state_dict().values())
    except ConfigError as err:
        raise CheckpointError(f"'{path}': {err}") from None
    if n_bytes > path.stat().st_size:
        raise CheckpointError(f"'{path}': its config asks for {n_bytes} bytes of weights, more than the file holds.")
    model = build_mixer_model(config)
    state = raw.get("state_dict")
    expected = model.state_dict()
    if (
        not isinstance(state, dict)
        or set(state) != set(expected)
        or any(not isinstance(state[k], Tensor) or state[k].shape != expected[k].shape for k in expected)
    ):
        raise CheckpointError(f"'{path}': its weights do not fit the model its config describes.")
    model.load_state_dict(state)
    info = raw.get("info") if isinstance(raw.get("info"), dict) else {}
    return model.eval(), info


@torch.no_grad()
def accuracy(model: nn.Module, x: Tensor, y: Tensor, *, batch_size: int = 512) -> float:
    """Share of ``x`` (N, ...) classified as ``y`` (N,)."""
    model.eval()
    hits = sum(
        int((model(x[i : i + batch_size]).argmax(-1) == y[i : i + batch_size]).sum())
        for i in range(0, len(y), batch_size)
    )
    return hits / max(len(y), 1)


def fit_mixer_model(
    kind: str,
    x: Tensor,
    y: Tensor,
    *,
    epochs: int = 2,
    batch_size: int = 128,
    lr: float = 3e-3,
    seed: int = 0,
    **config: Any,
) -> PatchDepthClassifier:
    """Train a :class:`PatchDepthClassifier` of ``kind`` on images ``x`` (N, C, H, W) and labels ``y`` (N,).

    AdamW (weight decay 0.01 on all but the depth weights), cosine learning rate, cross-entropy; the
    initialisation and the batch order come from ``seed``.
    """
    check_positive_int("epochs", epochs)
    check_positive_int("batch_size", batch_size)
    check_number("lr", lr, low=0.0)
    check_seed("seed", seed)
    torch.manual_seed(seed)
    shape = dict(image_size=int(x.shape[-1]), channels=int(x.shape[1]), n_classes=int(y.max()) + 1)
    model = PatchDepthClassifier(kind, **{**shape, **config})
    depth = [p for n, p in model.named_parameters() if n.startswith("mixers.")]
    rest = [p for n, p in model.named_parameters() if not n.startswith("mixers.")]
    opt = torch.optim.AdamW([{"params": rest, "weight_decay": 0.01}, {"params": depth, "weight_decay": 0.0}], lr=lr)
    steps = epochs * math.ceil(len(y) / batch_size)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.1)
    gen = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(epochs):
        order = torch.randperm(len(y), generator=gen)
        for i in range(0, len(y), batch_size):
            idx = order[i : i + batch_size]
            loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
    return model.eval()
