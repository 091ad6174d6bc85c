"""Reading files that must be regular files themselves (below every room, stdlib only):
what cache entries, layout blobs, layer records and discovered recipe files are read through,
so a symlink, a fifo or a directory planted where a file is expected is refused, never
followed or blocked on."""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from typing import BinaryIO

_READ = 1 << 20


def kind_of(path: str | os.PathLike[str]) -> str:
    """What is at ``path``, by ``lstat`` (symlinks not followed): ``file``, ``directory``,
    ``symlink``, ``fifo``, ``socket``, ``device``, ``missing``."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return "missing"
    except NotADirectoryError:
        return "missing"
    for test, name in ((stat.S_ISREG, "file"), (stat.S_ISDIR, "directory"), (stat.S_ISLNK, "symlink"),
                       (stat.S_ISFIFO, "fifo"), (stat.S_ISSOCK, "socket")):
        if test(mode):
            return name
    return "device"


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """Open ``path`` for reading only if it is a regular file itself: not followed when a
    symlink (``O_NOFOLLOW``), never blocking on a fifo (``O_NONBLOCK``), checked with
    ``fstat`` on the open file (so a swap after a check cannot slip through). Raises
    ``OSError`` (``ELOOP`` for a symlink, ``EISDIR`` for a directory, ``EINVAL`` for any
    other non-regular file, or whatever ``open`` raised)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            code = errno.EISDIR if stat.S_ISDIR(mode) else errno.EINVAL
            raise OSError(code, f"not a regular file ({kind_of(path)})", os.fspath(path))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb", buffering=0)
    except BaseException:
        os.close(fd)
        raise


def hash_file(path: str | os.PathLike[str]) -> tuple[str, int]:
    """``(sha256 hex, size in bytes)`` of the regular file at ``path``, read in 1 MiB
    chunks through :func:`open_regular` (a symlink is not followed, a fifo never blocks).
    Raises ``OSError`` when it cannot be read or is not a regular file itself."""
    sha, size = hashlib.sha256(), 0
    with open_regular(path) as f:
        while chunk := f.read(_READ):
            sha.update(chunk)
            size += len(chunk)
    return sha.hexdigest(), size


__all__ = ["hash_file", "kind_of", "open_regular"]
