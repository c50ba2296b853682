"""Files laya-eval writes: atomic writes, result folders written as one set, provenance.

The one owner of these chores:

- :func:`atomic_write_bytes` / :func:`atomic_write_text`: a file appears complete or not
  at all (a uniquely named temporary file in the same folder, then one rename).
- :func:`write_result_folder`: every file of a result (its subfolders included) is
  written into a fresh, uniquely named temporary folder beside the target, which then
  takes the target's place in one atomic exchange (Linux ``renameat2(RENAME_EXCHANGE)``;
  elsewhere two renames, the old folder kept until the new one is in place). The old
  result is removed only afterwards. Two runs on one folder cannot mix: each writes its
  own temporary folder and the last exchange wins whole.
- :func:`check_output_folder`: output-path problems are found before any computation.
- :func:`verify_result_folder`: the manifest lists the sha256 of every file of the run,
  so a folder whose files come from different runs is refused.
- :func:`provenance`: versions, machine and command, recorded in every manifest.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import hashlib
import json
import os
import platform
import shutil
import sys
import uuid
from pathlib import Path
from typing import Any, Mapping

from laya_eval.errors import ConfigError, ResultsError

__all__ = [
    "atomic_write_bytes",
    "atomic_write_text",
    "check_output_folder",
    "data_content_sha256",
    "file_sha256",
    "json_sha256",
    "module_state_sha256",
    "provenance",
    "sha256_bytes",
    "state_dict_sha256",
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


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a unique temporary file and one rename."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, _umask_mode())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
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
    if out.exists() and not out.is_dir():
        raise ConfigError(f"output folder '{out}' exists and is not a folder.")
    if out.is_dir() and not _replaceable(out):
        raise ConfigError(f"output folder '{out}' holds files that are not a laya-eval result, and a result replaces "
                          "its folder whole; choose an empty or new folder.")
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
    tag = uuid.uuid4().hex
    tmp = out.parent / f".{out.name}.{tag}.tmp"
    try:
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
        raise ConfigError(f"cannot write the results to '{out}': {exc.strerror or exc}.") from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return [out / rel for rel in files]


def verify_result_folder(folder: str | os.PathLike) -> dict[str, Any]:
    """Read ``folder/manifest.json`` and check that every file it lists has the recorded sha256.

    Returns
    -------
    dict
        The manifest.

    Raises
    ------
    ResultsError
        Missing or unreadable manifest, or a file that differs from the one the run wrote
        (files from different runs mixed in one folder).
    """
    folder = Path(folder)
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except FileNotFoundError:
        raise ResultsError(f"'{folder}' has no {MANIFEST}; it is not a laya-eval result folder.") from None
    except (OSError, ValueError) as exc:
        raise ResultsError(f"'{folder}/{MANIFEST}' is unreadable ({type(exc).__name__}).") from None
    if not isinstance(manifest, dict):
        raise ResultsError(f"'{folder}/{MANIFEST}' is not a JSON object.")
    for rel, digest in (manifest.get("files") or {}).items():
        try:
            got = sha256_bytes((folder / rel).read_bytes())
        except OSError:
            raise ResultsError(f"'{folder}' lacks {rel}, which its run {manifest.get('run_id')} wrote.") from None
        if got != digest:
            raise ResultsError(f"'{folder}/{rel}' is not the file run {manifest.get('run_id')} wrote "
                               "(files of different runs are mixed); rerun the evaluation.")
    return manifest


def _versions() -> dict[str, str]:
    import captum
    import numpy
    import pandas
    import scipy
    import torch

    from laya_eval.version import __version__

    return {"laya_eval": __version__, "python": platform.python_version(), "torch": torch.__version__,
            "captum": captum.__version__, "numpy": numpy.__version__, "scipy": scipy.__version__,
            "pandas": pandas.__version__}


def provenance(device: str | None = None) -> dict[str, Any]:
    """Versions, machine and command line of this process, for a manifest or a benchmark result."""
    import torch

    machine = {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
               "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads()}
    if device and str(device).startswith("cuda") and torch.cuda.is_available():
        machine["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return {"versions": _versions(), "machine": machine, "command": " ".join(sys.argv)}
