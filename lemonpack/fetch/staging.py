"""Temp files and directories that say whether their writer is still alive.

A download or a build writes into a temp file (or directory) beside its final place and
renames it in when done. A writer killed with SIGKILL, or a power loss, leaves the temp
behind; engine archives are often several GB, so such leftovers must go, but never a temp
that another process is still writing.

The writer holds an exclusive ``flock(2)`` on its temp for as long as it writes it (the
kernel drops the lock when the process dies, whatever killed it). A temp is **stale**
exactly when that lock can be taken: :func:`sweep` takes it, checks that the name still
refers to the inode it locked, removes it and lets go. A writer that lost the race between
creating its temp and locking it notices (the name no longer refers to its inode) and
starts over with a new temp. ``flock`` locks live on the open file description, so they
also work on directories (Linux ``flock(2)``; not on NFS before Linux 2.6.12).
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import BinaryIO

from lemonpack.files import kind_of, lock_fd, open_regular, remove_tree


def _same(fd: int, path: str) -> bool:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    own = os.fstat(fd)
    return (st.st_ino, st.st_dev) == (own.st_ino, own.st_dev)


def locked_temp_file(directory: Path, prefix: str = ".tmp-") -> tuple[BinaryIO, Path]:
    """Create ``directory/<prefix><random>`` (mode 0600), lock it; return ``(file, path)``.

    The lock lasts until ``file`` is closed (or the process dies), so close it only after
    the temp was renamed to its final name or removed. Raises ``OSError``.
    """
    directory.mkdir(parents=True, exist_ok=True)
    while True:
        fd, name = tempfile.mkstemp(dir=directory, prefix=prefix)
        lock_fd(fd)
        if _same(fd, name):
            return os.fdopen(fd, "wb"), Path(name)
        os.close(fd)  # a sweeper removed it between mkstemp and flock: try again


class LockedDir:
    """A temp directory ``path`` whose lock is held until :meth:`close` (see the module
    docstring). Use as a context manager; closing does not remove the directory."""

    def __init__(self, directory: Path, prefix: str):
        directory.mkdir(parents=True, exist_ok=True)
        while True:
            name = tempfile.mkdtemp(dir=directory, prefix=prefix)
            fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY)
            lock_fd(fd)
            if _same(fd, name):
                self.path = Path(name)
                self._fd: int | None = fd
                return
            os.close(fd)

    def close(self) -> None:
        """Release the lock (idempotent)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "LockedDir":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def remove_entry(path: str | os.PathLike[str]) -> None:
    """Remove whatever is at ``path`` without following it: a directory tree
    (:func:`remove_tree`), or a file, symlink, fifo or socket (``unlink``); missing is fine.
    Raises ``OSError`` when it cannot be removed."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        remove_tree(path)
        if os.path.lexists(path):
            os.rmdir(path)  # raises the reason it could not go
    else:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def clear_non_regular(path: str | os.PathLike[str]) -> str | None:
    """Before a file is renamed to ``path``: remove whatever is there if it is not a
    regular file (a directory would make ``os.replace`` fail; a symlink or fifo is not an
    entry). Returns what was removed (:func:`kind_of`) or None."""
    kind = kind_of(path)
    if kind in ("file", "missing"):
        return None
    remove_entry(path)
    return kind


def ensure_dir(path: Path, base: Path) -> list[Path]:
    """``mkdir -p path``, where ``path`` lies under ``base`` (which must be a directory or
    absent): any component below ``base`` that exists but is not a directory (nor a
    symlink to one) is removed first. Returns what was removed. Raises ``OSError``."""
    removed = []
    cur = Path(base)
    for part in Path(path).relative_to(base).parts:
        cur = cur / part
        if os.path.lexists(cur) and not cur.is_dir():
            remove_entry(cur)
            removed.append(cur)
    Path(path).mkdir(parents=True, exist_ok=True)
    return removed


def is_stale(path: Path) -> bool:
    """True when nobody holds the lock of the temp ``path`` right now (a snapshot)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        return lock_fd(fd, wait=False)
    finally:
        os.close(fd)


def partials(directory: Path, prefixes: tuple[str, ...]) -> list[Path]:
    """The temps (files or directories) in ``directory`` whose names start with one of
    ``prefixes``, live or stale, sorted; ``[]`` when ``directory`` is missing (or not a
    directory)."""
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(directory / n for n in names if n.startswith(prefixes))


def sweep(directory: Path, prefixes: tuple[str, ...]) -> list[tuple[Path, int]]:
    """Remove the stale temps of ``directory`` (see :func:`partials`); live ones (their
    lock is held) are left alone. Returns ``[(path, bytes freed)]`` of what was removed.
    Symlinks with those names are removed without being followed."""
    removed = []
    for path in partials(directory, prefixes):
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(st.st_mode):
            path.unlink(missing_ok=True)
            removed.append((path, 0))
            continue
        flags = os.O_RDONLY | os.O_NOFOLLOW | (os.O_DIRECTORY if stat.S_ISDIR(st.st_mode) else 0)
        try:
            fd = os.open(path, flags)
        except OSError:
            continue
        try:
            if not lock_fd(fd, wait=False):
                continue  # a live writer
            if not _same(fd, str(path)):
                continue  # renamed into place or replaced meanwhile
            if stat.S_ISDIR(st.st_mode):
                size = tree_size(path)
                remove_tree(path)
            else:
                size = st.st_size
                path.unlink(missing_ok=True)
            removed.append((path, size))
        finally:
            os.close(fd)
    return removed


def tree_size(path: Path) -> int:
    """Bytes of the regular files under ``path`` (or of ``path`` itself), symlinks not followed."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return 0
    if not stat.S_ISDIR(st.st_mode):
        return st.st_size if stat.S_ISREG(st.st_mode) else 0
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                s = os.lstat(os.path.join(root, f))
            except OSError:
                continue
            if stat.S_ISREG(s.st_mode):
                total += s.st_size
    return total


__all__ = ["locked_temp_file", "LockedDir", "sweep", "partials", "is_stale", "tree_size", "remove_tree",
           "remove_entry", "kind_of", "open_regular", "clear_non_regular", "ensure_dir"]
