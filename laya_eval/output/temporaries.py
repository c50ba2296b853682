"""Temporary folders of interrupted result writes: who made them, and removing those no one is writing.

:func:`laya_eval.output.files.write_result_folder` writes ``.OUT.<hex>.tmp`` beside ``OUT`` and, first, an
owner file ``.OUT.<hex>.owner`` holding this host's name, the process id and that process's start time. A
write killed before it finished leaves both; the next write into the same parent removes the folder (and
its ``.old`` twin) when the owner process on this host is gone or its id now names a later process. A
folder without an owner file, one from another host, or one whose owner cannot be read is left alone:
laya-eval never removes what it cannot show it made and abandoned. The feature cache's temporary entries
(:mod:`laya_eval.loading.feature_cache`) carry the same owner record and are judged by :func:`owner_alive`.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import shutil
from pathlib import Path
from typing import Any

__all__ = ["owner_alive", "owner_record", "remove_stale_temporaries"]


def _start_time(pid: int) -> str | None:
    """The start time of process ``pid`` (Linux ``/proc/PID/stat`` field 22), ``None`` where unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()[19]


def owner_record() -> dict[str, Any]:
    return {"host": platform.node(), "pid": os.getpid(), "start": _start_time(os.getpid())}


def owner_alive(record: Any) -> bool:
    """Whether the process that made a temporary folder may still be writing it (unknown counts as alive)."""
    if not isinstance(record, dict) or record.get("host") != platform.node():
        return True  # another machine on a shared folder: its processes cannot be seen from here
    pid = record.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or not 0 < pid < 1 << 31:  # no process has such an id
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # alive, owned by another user
    start = _start_time(pid)
    return start is None or record.get("start") in (None, start)  # a reused id started later


def remove_stale_temporaries(out: str | os.PathLike) -> list[Path]:
    """Remove the temporary folders of interrupted writes of ``out`` (see the module docstring).

    Only ``.OUT.<32 hex>.tmp`` / ``.old`` folders (not links) beside ``out`` with an owner file whose process
    on this host is gone; anything else is left alone. Returns the folders removed.
    """
    out = Path(out)
    pattern = re.compile(rf"^\.{re.escape(out.name)}\.([0-9a-f]{{32}})\.owner$")
    removed = []
    try:
        entries = list(out.parent.iterdir())
    except OSError:
        return removed
    for entry in entries:
        match = pattern.match(entry.name)
        if not match or entry.is_symlink() or not entry.is_file():
            continue
        try:
            record = json.loads(entry.read_text()[:4096])
        except (OSError, ValueError):
            continue
        if owner_alive(record):
            continue
        for suffix in ("tmp", "old"):
            folder = out.parent / f".{out.name}.{match.group(1)}.{suffix}"
            if folder.is_dir() and not folder.is_symlink():
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(folder)
        with contextlib.suppress(OSError):
            entry.unlink()
    return removed
