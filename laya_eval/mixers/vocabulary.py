"""A word vocabulary for the token depth-mixer classifiers: built from a training split, stored in the model file.

Texts are lower-cased and cut into words (runs of letters, digits and apostrophes) and single punctuation
marks (:data:`WORD_PATTERN`). The vocabulary is the words seen at least ``min_count`` times in the training
texts, most frequent first (ties in alphabetical order), at most ``max_size`` of them: the same texts give the
same list on every machine. Id 0 is padding, id 1 an unknown word, word ``k`` of the list is id ``k + 2``; a
text longer than ``max_len`` words keeps its first ``max_len``.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Sequence

import torch
from torch import Tensor

from laya_eval.checks import check_positive_int
from laya_eval.errors import ConfigError

__all__ = ["PAD", "UNKNOWN", "WORD_PATTERN", "build_vocabulary", "check_vocabulary", "encode_texts", "words"]

PAD, UNKNOWN = 0, 1
WORD_PATTERN = re.compile(r"[a-z0-9']+|[^\sa-z0-9']")
MAX_WORD_CHARS = 64
MAX_VOCABULARY = 100_000


def words(text: str) -> list[str]:
    """The words of ``text`` as the vocabulary counts them."""
    return WORD_PATTERN.findall(text.lower())


def build_vocabulary(texts: Sequence[str], *, max_size: int = 20_000, min_count: int = 2) -> list[str]:
    """The words of ``texts`` seen at least ``min_count`` times, most frequent first, at most ``max_size``."""
    check_positive_int("max_size", max_size)
    check_positive_int("min_count", min_count)
    counts = Counter(w for text in texts for w in words(text))
    ranked = sorted(
        (w for w, c in counts.items() if c >= min_count and len(w) <= MAX_WORD_CHARS), key=lambda w: (-counts[w], w)
    )
    if not ranked:
        raise ConfigError(
            f"no word occurs {min_count} times in the {len(texts)} training texts; the vocabulary would be empty."
        )
    return ranked[:max_size]


def check_vocabulary(vocabulary) -> list[str]:
    """``vocabulary`` as a list of distinct non-empty words without white space, or a :class:`ConfigError`."""
    if not isinstance(vocabulary, (list, tuple)):
        raise ConfigError(f"vocabulary must be a list of words; got {type(vocabulary).__name__}.")
    if not 1 <= len(vocabulary) <= MAX_VOCABULARY:
        raise ConfigError(f"vocabulary must hold 1 to {MAX_VOCABULARY} words; got {len(vocabulary)}.")
    bad = next(
        (
            w
            for w in vocabulary
            if not isinstance(w, str) or not 0 < len(w) <= MAX_WORD_CHARS or any(c.isspace() for c in w)
        ),
        None,
    )
    if bad is not None or len(set(vocabulary)) != len(vocabulary):
        raise ConfigError(
            f"vocabulary must hold distinct words of 1 to {MAX_WORD_CHARS} characters without white "
            f"space; got {bad!r}" + ("." if bad is not None else " (a repeated word).")
        )
    return list(vocabulary)


def encode_texts(texts: Sequence[str], vocabulary: Sequence[str], max_len: int) -> Tensor:
    """Token ids (N, max_len), int64: padding 0, unknown 1, word ``k`` of ``vocabulary`` ``k + 2``."""
    if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
        raise ConfigError("texts must be a list of strings.")
    index = {w: k + 2 for k, w in enumerate(vocabulary)}
    out = torch.full((len(texts), max_len), PAD, dtype=torch.int64)
    for i, text in enumerate(texts):
        ids = [index.get(w, UNKNOWN) for w in words(text)[:max_len]]
        out[i, : len(ids)] = torch.tensor(ids, dtype=torch.int64)
    return out
