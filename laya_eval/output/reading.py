"""Reading files laya-eval wrote back in, as data: regular files only, bounded in size.

A cache entry or a partial result is read only when it is a regular file (a FIFO would block the
reader, a symlink could point anywhere, a folder or a device is not a file laya-eval writes) and
only up to a size the caller knows the file can have. Both are checked on the open descriptor,
before a byte is read, so a hostile file cannot hang the reader or make it allocate more than its
schema allows; memory is taken for the bytes the file holds, never for the bound itself (a bound computed
from a declared shape can be far larger than the file).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["UnsafeFile", "read_regular_file"]

#: Bytes read per call once a file has grown past the size it had when opened.
_READ_CHUNK = 1 << 20


class UnsafeFile(Exception):
    """A file that is not read: missing, not a regular file, or larger than allowed (the message says which)."""


def read_regular_file(path: str | os.PathLike, max_bytes: int, *, follow_symlinks: bool = False) -> bytes:
    """The bytes of ``path`` if it is a regular file (not a symlink) of at most ``max_bytes`` bytes.

    ``follow_symlinks``: a symlink is read as the file it points to, which must then be a regular file within the
    bound (for a file the user names, such as a sweep config, rather than one laya-eval wrote).

    Raises
    ------
    UnsafeFile
        Naming what the path is instead (missing, a symlink, a FIFO, a folder, too large, unreadable).
    """
    path = Path(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | (0 if follow_symlinks else getattr(os, "O_NOFOLLOW", 0))
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise UnsafeFile(f"'{path}' does not exist") from None
    except OSError as exc:  # ELOOP: a symlink under O_NOFOLLOW
        what = "a symlink" if os.path.islink(path) else (exc.strerror or str(exc))
        raise UnsafeFile(f"'{path}' is not readable as a file ({what})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeFile(f"'{path}' is not a regular file")
        if info.st_size > max_bytes:
            raise UnsafeFile(f"'{path}' has {info.st_size} bytes; at most {max_bytes} are expected")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            # The buffer is sized by the bytes the file holds, never by the bound: a bound taken from a declared
            # shape may be far larger than the file (a read of max_bytes allocates max_bytes before reading).
            data = fh.read(info.st_size + 1)
            if len(data) > info.st_size:  # the file grew after fstat: read on, in chunks, up to the bound
                parts, total = [data], len(data)
                while total <= max_bytes and (more := fh.read(min(_READ_CHUNK, max_bytes + 1 - total))):
                    parts.append(more)
                    total += len(more)
                data = b"".join(parts)
        if len(data) > max_bytes:
            raise UnsafeFile(f"'{path}' grew past {max_bytes} bytes while read")
        return data
    except OSError as exc:
        raise UnsafeFile(f"'{path}' cannot be read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
