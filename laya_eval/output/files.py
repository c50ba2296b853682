"""Files laya-eval writes: atomic writes, result folders written as one set, sha256 of files and tensors.

The one owner of these chores:

- :func:`atomic_write_bytes` / :func:`atomic_write_text`: a file appears complete or not
  at all (a uniquely named temporary file in the same folder, then one rename).
- :func:`write_result_folder`: every file of a result (its subfolders included) is
  written into a fresh, uniquely named temporary folder beside the target, which then
  takes the target's place in one atomic exchange (Linux ``renameat2(RENAME_EXCHANGE)``;
  elsewhere two renames, the old folder kept until the new one is in place). The old
  result is removed only afterwards. Two runs on one folder cannot mix: each writes its
  own temporary folder and the last exchange wins whole.
- ``--out`` given as a symbolic link: the result is written into the link's target folder, as one set (the
  link itself is left as it is, still pointing at the new result).
- Temporary folders of an interrupted write (``.OUT.<hex>.tmp`` / ``.old``) are removed by the next write
  into the same parent, but only those laya-eval made and no live process is still writing: each has an
  owner file beside it (``.OUT.<hex>.owner``: host, process id and that process's start time), and a folder
  is removed only when its owner process on this host is gone (or its id now belongs to another process).
- :func:`check_output_folder`: output-path problems are found before any computation.
- :func:`verify_result_folder`: the manifest lists the sha256 of every file of the run,
  so a folder whose files come from different runs is refused.

Provenance (versions, machine, command, laya-eval's code) is :mod:`laya_eval.output.origin`'s.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import ctypes.util
import hashlib
import json
import os
import shutil
import stat
import sys
import uuid
from pathlib import Path
from typing import Any, Iterator, Mapping

from laya_eval.errors import ConfigError, ResultsError, StorageError
from laya_eval.output.temporaries import owner_record, remove_stale_temporaries

__all__ = [
    "STORAGE_ERRNOS",
    "atomic_write_bytes",
    "atomic_write_text",
    "check_output_folder",
    "data_content_sha256",
    "file_sha256",
    "json_sha256",
    "module_state_sha256",
    "read_manifest",
    "sha256_bytes",
    "state_dict_sha256",
    "storage_error",
    "unfinished_removed_on_storage_failure",
    "verify_result_folder",
    "write_result_folder",
]

MANIFEST = "manifest.json"


def sha256_bytes(data: bytes) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def file_sha256(path: str | os.PathLike) -> str:
    """Hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def state_dict_sha256(state: Mapping[str, Any]) -> str:
    """Hex SHA-256 over the names, dtypes, shapes and bytes of ``state``'s tensors, in sorted key order."""
    import torch

    digest = hashlib.sha256()
    for key in sorted(state):
        tensor = state[key].detach().cpu().contiguous()
        digest.update(f"{key}\0{tensor.dtype}\0{tuple(tensor.shape)}\0".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy())
    return digest.hexdigest()


def json_sha256(value: Any) -> str:
    """Hex SHA-256 of ``value``'s JSON (sorted keys; other objects as ``str``): the digest of a cache or run key."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def module_state_sha256(module: Any) -> str:
    """Hex SHA-256 over a module's state dict (names, dtypes, shapes and bytes, in the state dict's order).

    The identity a by-reference backbone records (``state_sha256``); its byte layout is fixed, so the
    hashes stored in existing checkpoints stay valid.
    """
    import torch

    digest = hashlib.sha256()
    for key, value in module.state_dict().items():
        t = value.detach().cpu().contiguous()
        digest.update(f"{key}|{t.dtype}|{tuple(t.shape)}|".encode())
        digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return digest.hexdigest()


def data_content_sha256(x: Any, y: Any) -> str:
    """Hex SHA-256 of a split's inputs (a tensor, or a sequence of texts) and labels (a tensor)."""
    import torch

    digest = hashlib.sha256()
    if isinstance(x, torch.Tensor):
        digest.update(str((x.dtype, tuple(x.shape))).encode())
        digest.update(x.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    else:
        for text in x:
            digest.update(text.encode("utf-8", "surrogatepass") + b"\0")
    digest.update(y.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def _umask_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


_STORAGE_ERRORS = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "the disk quota is exhausted",
    errno.EROFS: "the file system is read-only",
}


#: The errno values of a write that failed for lack of room or permission to change the file system.
STORAGE_ERRNOS = frozenset(_STORAGE_ERRORS)


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n} bytes"


def storage_error(exc: OSError, folder: Path, needed: int, *, intact: bool = True) -> StorageError:
    """One line for a failed write: the folder, what went wrong, and, for a full disk, the space it needs
    (``needed`` bytes; 0: unknown). ``intact``: the writer left what was there unchanged, and says so."""
    kept = " (nothing there was changed)" if intact else ""
    what = _STORAGE_ERRORS.get(exc.errno)
    if what is None:
        return StorageError(f"cannot write to '{folder}': {exc.strerror or exc}.")
    if exc.errno == errno.EROFS:
        return StorageError(f"cannot write to '{folder}': {what}; write elsewhere{kept}.")
    try:
        free = f", {_size(shutil.disk_usage(folder if folder.exists() else folder.parent).free)} free"
    except OSError:
        free = ""
    need = f"{_size(needed)} needed" if needed else "more space needed"
    return StorageError(f"cannot write to '{folder}': {what} ({need}{free}); free some space or write elsewhere{kept}.")


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a unique temporary file and one rename.

    Raises
    ------
    ConfigError
        The write failed (a full disk, a quota, a read-only file system, ...): one line naming the folder and,
        for a full disk, the space needed. ``path`` keeps its old content.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, _umask_mode())
        os.replace(tmp, path)
    except OSError as exc:
        raise storage_error(exc, path.parent, len(data)) from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """:func:`atomic_write_bytes` for UTF-8 text."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def check_output_folder(out: str | os.PathLike) -> Path:
    """Make sure ``out`` can be written as a result folder, before any work is done.

    Creates the parent folder if needed and writes (then removes) a probe file there.

    Raises
    ------
    ConfigError
        ``out`` is empty, an existing file, under a file, or its parent is not writable.
    """
    if str(out) == "":
        raise ConfigError("the output folder must be a path; got ''.")
    out = Path(out)
    if out.is_symlink():
        # The link's target is the folder written (one set); replacing the link would strand the old result.
        out = Path(os.path.realpath(out))
    if out.exists() and not out.is_dir():
        raise ConfigError(f"output folder '{out}' exists and is not a folder.")
    if out.is_dir() and not _replaceable(out):
        raise ConfigError(
            f"output folder '{out}' holds files that are not a laya-eval result, and a result replaces "
            "its folder whole; choose an empty or new folder."
        )
    parent = out.resolve().parent
    probe = parent / f".{out.name}.{uuid.uuid4().hex}.probe"
    try:
        parent.mkdir(parents=True, exist_ok=True)
        with open(probe, "wb") as fh:
            fh.write(b"0")
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        raise ConfigError(f"cannot write the output folder '{out}': {exc.strerror or exc}.") from None
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()
    return out


#: Files a run over several subfolders writes beside them (the operator-sensitivity table of several ablations).
RUN_LEVEL_FILES = ("operators.csv",)


def _replaceable(folder: Path) -> bool:
    """An existing folder may be replaced when it is empty or an earlier result (a manifest at the top or in
    each subfolder, with the run-level files beside them), hidden partial files aside."""
    entries = [p for p in folder.iterdir() if not p.name.startswith(".")]
    if not entries or (folder / MANIFEST).is_file():
        return True
    subfolders = [p for p in entries if p.name not in RUN_LEVEL_FILES or not p.is_file()]
    return bool(subfolders) and all(p.is_dir() and (p / MANIFEST).is_file() for p in subfolders)


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    rc = renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange)
    return rc == 0


def write_result_folder(out: str | os.PathLike, files: Mapping[str, bytes]) -> list[Path]:
    """Write ``files`` (relative path -> bytes) as the whole content of folder ``out``.

    The folder is replaced whole or not at all: see the module docstring.

    Returns
    -------
    list of Path
        The written files, in the order given.
    """
    out = check_output_folder(out)
    remove_stale_temporaries(out)
    tag = uuid.uuid4().hex
    tmp = out.parent / f".{out.name}.{tag}.tmp"
    owner = out.parent / f".{out.name}.{tag}.owner"
    try:
        owner.write_text(json.dumps(owner_record()))
        tmp.mkdir()
        for rel, data in files.items():
            target = tmp / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(target, _umask_mode())
        if out.exists():
            if not _exchange(tmp, out):
                old = out.parent / f".{out.name}.{tag}.old"
                os.replace(out, old)
                os.replace(tmp, out)
                tmp = old
        else:
            os.replace(tmp, out)
    except OSError as exc:
        raise storage_error(exc, out, sum(len(b) for b in files.values())) from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
        if not tmp.exists():
            with contextlib.suppress(OSError):
                owner.unlink()
    return [out / rel for rel in files]


@contextlib.contextmanager
def unfinished_removed_on_storage_failure(out: str | os.PathLike | None, partial: str) -> Iterator[None]:
    """Run a job that keeps partial files in ``out/partial`` and then writes the result folder ``out``; when a write
    fails for lack of room or permission (:class:`~laya_eval.errors.StorageError`, or an ``OSError`` of
    :data:`STORAGE_ERRNOS`), remove what the job made there before the error goes on: the partial folder (unless
    it was there before, from an interrupted run that ``--resume`` may still use) and ``out`` itself when the job
    created it and nothing else is in it. The error then says what is true: nothing there was changed."""
    if out is None:
        yield
        return
    out = Path(out)
    out_existed, partial_existed = os.path.lexists(out), os.path.lexists(out / partial)
    try:
        yield
    except (StorageError, OSError) as err:
        if isinstance(err, StorageError) or err.errno in STORAGE_ERRNOS:
            folder = out / partial
            if not partial_existed and folder.is_dir() and not folder.is_symlink():
                shutil.rmtree(folder, ignore_errors=True)
            if not out_existed:
                with contextlib.suppress(OSError):
                    out.rmdir()  # only when empty: nothing but the partial files was there
        raise


#: The largest manifest a result folder's reader takes (the options, provenance and one sha256 per file).
MAX_MANIFEST_BYTES = 64 << 20


def read_manifest(folder: str | os.PathLike) -> dict[str, Any]:
    """``folder/manifest.json`` as a dict, read through the regular-file and size guard.

    Raises
    ------
    ResultsError
        Missing, not a regular file, larger than :data:`MAX_MANIFEST_BYTES`, not JSON (nested too deeply
        included), or not a JSON object: one line naming the file.
    """
    from laya_eval.output.reading import UnsafeFile, read_regular_file

    path = Path(folder) / MANIFEST
    if not os.path.lexists(path):
        raise ResultsError(f"'{folder}' has no {MANIFEST}; it is not a laya-eval result folder.")
    try:
        manifest = json.loads(read_regular_file(path, MAX_MANIFEST_BYTES, follow_symlinks=True))
    except UnsafeFile as exc:
        raise ResultsError(f"{exc}; it cannot be read as a manifest.") from None
    except RecursionError:
        raise ResultsError(f"'{path}' is unreadable (JSON nested too deeply).") from None
    except ValueError as exc:
        raise ResultsError(f"'{path}' is unreadable ({type(exc).__name__}).") from None
    if not isinstance(manifest, dict):
        raise ResultsError(f"'{path}' is not a JSON object.")
    return manifest


def verify_result_folder(folder: str | os.PathLike) -> dict[str, Any]:
    """Read ``folder/manifest.json`` and check that every file it lists has the recorded sha256.

    Returns
    -------
    dict
        The manifest.

    Raises
    ------
    ResultsError
        Missing or unreadable manifest (:func:`read_manifest`), a listed name that is not a file inside the
        folder, or a file that differs from the one the run wrote (files from different runs mixed in one folder).
    """
    folder = Path(folder)
    manifest = read_manifest(folder)
    files = manifest.get("files") or {}
    if not isinstance(files, dict):
        raise ResultsError(f"'{folder}/{MANIFEST}': 'files' must map file names to sha256 digests.")
    root = folder.resolve()
    run = f"run {manifest['run_id']}" if manifest.get("run_id") else "its run"
    for rel, digest in files.items():
        path = (folder / str(rel)).resolve()
        if not path.is_relative_to(root) or path == root:
            raise ResultsError(f"'{folder}/{MANIFEST}' lists {str(rel)[:100]!r}, which is not a file of the folder.")
        try:
            if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO or a device would block or never end
                raise OSError
            got = file_sha256(path)
        except OSError:
            raise ResultsError(f"'{folder}' lacks {rel}, which {run} wrote.") from None
        if got != digest:
            raise ResultsError(
                f"'{folder}/{rel}' is not the file {run} wrote "
                "(files of different runs are mixed); rerun the evaluation."
            )
    return manifest
