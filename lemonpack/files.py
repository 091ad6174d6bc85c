"""Files and directories, below every room (stdlib only).

Reading files that must be regular files themselves: what cache entries, layout blobs, layer
records and discovered recipe files are read through, so a symlink, a fifo or a directory
planted where a file is expected is refused, never followed or blocked on. Replacing a
directory tree in one step (:func:`replace_directory`): what OCI layouts, release
directories and installs are put in place with, so a reader sees the old tree or the new
one, never none or half of one. Advisory file locks (:func:`locked`, :func:`lock_fd`): the one
place that calls ``flock(2)``."""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import os
import secrets
import shutil
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
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


def non_directory_parent(path: str | os.PathLike[str]) -> Path | None:
    """The nearest existing ancestor of ``path`` (``path`` itself excluded, symlinks followed)
    that is not a directory, as the user wrote it (``afile`` for ``afile/sub``), or ``None``:
    what made creating ``path`` fail with ``EEXIST``/``ENOTDIR`` when its parent is a file."""
    p = Path(path)
    for parent in reversed(p.parents):
        if str(parent) in ("", ".", "/"):
            continue
        if os.path.lexists(parent) and not parent.is_dir():
            return parent
    return None


def os_error_reason(exc: OSError, path: str | os.PathLike[str]) -> str:
    """One clause saying why ``exc`` stopped a write at ``path``: ``afile is not a directory``
    when a parent of ``path`` is a file (:func:`non_directory_parent`; the ``File exists`` or
    ``Not a directory`` the OS says then names no culprit), else the OS's ``strerror``."""
    if exc.errno in (errno.EEXIST, errno.ENOTDIR):
        blocker = non_directory_parent(path)
        if blocker is not None:
            return f"{blocker} is not a directory"
    return str(exc.strerror or exc)


def _kind_of_mode(mode: int) -> str:
    for test, name in ((stat.S_ISREG, "file"), (stat.S_ISDIR, "directory"), (stat.S_ISLNK, "symlink"),
                       (stat.S_ISFIFO, "fifo"), (stat.S_ISSOCK, "socket")):
        if test(mode):
            return name
    return "device"


def open_regular(path: str | os.PathLike[str], *, follow_symlinks: bool = False) -> BinaryIO:
    """Open ``path`` for reading only if it is a regular file: not followed when a symlink
    (``O_NOFOLLOW``) unless ``follow_symlinks`` (a path the user named: a symlinked key or
    config is followed, what it points at must be a regular file), never blocking on a fifo
    (``O_NONBLOCK``), checked with ``fstat`` on the open file (so a swap after a check
    cannot slip through). Raises ``OSError`` (``ELOOP`` for a symlink, ``EISDIR`` for a
    directory, ``EINVAL`` for any other non-regular file, or whatever ``open`` raised)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_symlinks else os.O_NOFOLLOW)
    fd = os.open(path, flags)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            code = errno.EISDIR if stat.S_ISDIR(mode) else errno.EINVAL
            raise OSError(code, f"not a regular file (a {_kind_of_mode(mode)})", os.fspath(path))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb", buffering=0)
    except BaseException:
        os.close(fd)
        raise


def read_user_file(path: str | os.PathLike[str], what: str = "file") -> bytes:
    """The bytes of a file the user named (a key, a credentials file, a recipe, a
    definition, a host-facts file): symlinks followed, anything but a regular file refused
    without blocking (:func:`open_regular`). Raises :class:`lemonpack.errors.UnreadableFileError`
    (exit 1) with one line naming ``what`` and the path: ``cannot read key file /tmp/k:
    not a regular file (a fifo)``."""
    from lemonpack.errors import UnreadableFileError

    try:
        with open_regular(path, follow_symlinks=True) as f:
            return f.read()
    except OSError as e:
        reason = {errno.ENOENT: "no such file", errno.EACCES: "permission denied",
                  errno.ENOTDIR: "a parent is not a directory",
                  errno.EISDIR: "is a directory, not a file"}.get(e.errno or 0)
        if reason is None:
            reason = str(e.strerror or e)
        raise UnreadableFileError(f"cannot read {what} {os.fspath(path)}: {reason}") from None


def copy_file(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> int:
    """Copy the regular file ``src`` (a symlink there is refused, never followed: ``OSError``
    ``ELOOP``) to the new file ``dst``; returns the bytes copied. By ``copy_file_range(2)``:
    on a file system that shares extents (XFS with reflink, btrfs) that is a reflink, no data
    copied and copy-on-write, so a later write to either file leaves the other as it was (unlike
    a hard link); elsewhere the kernel copies the bytes, none through Python. Falls back to
    ``shutil.copyfile`` where the call is refused (``EXDEV``, ``ENOSYS``, ``EINVAL``,
    ``EOPNOTSUPP``). Raises ``OSError``."""
    fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as s, open(dst, "xb") as d:
        size = os.fstat(s.fileno()).st_size
        done = 0
        try:
            while done < size:
                n = os.copy_file_range(s.fileno(), d.fileno(), size - done)
                if n == 0:
                    break
                done += n
            return done
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                raise
        s.seek(0)
        d.seek(0)
        d.truncate()
        shutil.copyfileobj(s, d, _READ)
        return d.tell()


def remove_tree(path: str | os.PathLike[str]) -> None:
    """Remove a directory tree even where an archive made directories read-only. A
    symlink at ``path`` is removed itself, never followed (nothing outside is touched)."""
    if os.path.islink(path):
        os.unlink(path)
        return
    for root, dirs, _files in os.walk(path):
        for d in dirs:
            p = os.path.join(root, d)
            if not os.path.islink(p):
                try:
                    os.chmod(p, 0o700)
                except OSError:
                    pass
    shutil.rmtree(path, ignore_errors=True)


_RENAME_EXCHANGE = 2  # linux/fs.h


def exchange(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> None:
    """Swap the directory entries ``a`` and ``b`` atomically (Linux ``renameat2(2)`` with
    ``RENAME_EXCHANGE``, since 3.15). Raises OSError (``ENOSYS``/``EINVAL`` where the C
    library or the file system lacks it)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fn = getattr(libc, "renameat2", None)
    if fn is None:
        raise OSError(errno.ENOSYS, "renameat2 is not available")
    at_fdcwd = -100
    if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), _RENAME_EXCHANGE) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), os.fspath(a))


def replace_directory(new: Path, target: Path) -> None:
    """Put the directory ``new`` at ``target`` (same file system), then remove what was there.

    ``target`` absent: one ``rename``. ``target`` present: one :func:`exchange`, so ``target``
    names the old tree or the new one at every instant; the old tree, now at ``new``, is then
    removed (:func:`remove_tree`). Where the exchange is unsupported (``ENOSYS``, ``EINVAL``):
    ``target`` renamed aside, ``new`` renamed in (renamed back if that fails), the old tree
    removed. Raises OSError; on failure ``target`` is as it was and ``new`` is left in place."""
    if not os.path.lexists(target):
        os.rename(new, target)
        return
    try:
        exchange(new, target)
    except OSError as e:
        if e.errno not in (errno.ENOSYS, errno.EINVAL):
            raise
    else:
        remove_tree(new)
        return
    old = target.parent / f".{target.name}.old-{secrets.token_hex(6)}"
    os.rename(target, old)
    try:
        os.rename(new, target)
    except BaseException:
        os.rename(old, target)
        raise
    remove_tree(old)


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """``fsync`` the directory ``path`` so that a rename into it survives a crash (POSIX leaves
    a rename's durability to the directory's own sync). Errors from file systems that cannot
    sync a directory (``EINVAL``, ``ENOTSUP``, ``EBADF``) are ignored; others raise OSError."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def commit(tmp: str | os.PathLike[str], dest: str | os.PathLike[str], *, durable: bool) -> None:
    """Put the fully written temporary file or directory ``tmp`` at ``dest`` in one ``rename``
    (same file system; an existing file at ``dest`` is replaced, a directory only if empty):
    readers see the old ``dest`` or the new, never part of it. The one place lemonpack renames
    a finished write into place; the durability is the caller's explicit choice:

    - ``durable=True``: ``tmp``'s data is ``fsync``-ed before the rename and the directory
      after it, so after a crash ``dest`` is the old or the new content, complete. For what a
      user keeps (keys, registries, lock files, fetched files).
    - ``durable=False``: no ``fsync``. For content that is checked on every read or rebuilt on
      demand (content-addressed blobs, cache records): a crash can leave a short file, which
      its reader refuses by digest or size, never a wrong one under a right name.

    Raises OSError; ``tmp`` is left in place on failure (the caller removes it)."""
    if durable and os.path.isfile(tmp) and not os.path.islink(tmp):
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    os.replace(tmp, dest)
    if durable:
        fsync_dir(os.path.dirname(os.path.abspath(dest)))


def replace_file(path: str | os.PathLike[str], data: bytes, *, mode: int | None = None) -> None:
    """Write ``data`` to ``path`` atomically and durably: a temporary file beside it (created
    with mode 0600, so a secret is never readable by others, written, given ``mode``), then
    :func:`commit` with ``durable=True``. A reader sees the old content or the new, never
    part of either. ``mode``: the new file's permissions (default: those of the file
    replaced, else 0o644). Raises OSError; on failure ``path`` is as it was and no temporary
    file is left."""
    path = Path(path)
    tmp = path.parent / f".{path.name}.tmp-{secrets.token_hex(4)}"
    if mode is None:
        try:
            mode = path.stat().st_mode & 0o7777
        except FileNotFoundError:
            mode = 0o644
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def save_bounded_record(path: str | os.PathLike[str], doc: dict, limit: int, *, durable: bool = True) -> bool:
    """Write the JSON object ``doc`` to ``path`` as a best-effort cache record: its oldest keys
    (first in insertion order) dropped until at most ``limit`` remain (``doc`` is trimmed in
    place), the parent directory created, the bytes (compact separators) written to a
    temporary file beside it and put in place by one rename, so a reader sees the old record or
    the new. ``durable``: by :func:`replace_file` (fsync-ed); ``durable=False``: by
    :func:`commit` without fsync, for a record every reader checks (a crash may leave it short,
    which reads as no record). Returns True when written; an ``OSError`` is swallowed (False),
    since such a record only saves work and is rebuilt by whoever misses it."""
    while len(doc) > limit:
        doc.pop(next(iter(doc)))
    path = Path(path)
    data = json.dumps(doc, separators=(",", ":")).encode()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if durable:
            replace_file(path, data)
            return True
        tmp = path.parent / f".{path.name}.tmp-{secrets.token_hex(4)}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            commit(tmp, path, durable=False)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    except OSError:
        return False
    return True


def lock_fd(fd: int, *, shared: bool = False, wait: bool = True) -> bool:
    """Take an advisory ``flock(2)`` on the open file ``fd``: exclusive, or shared when
    ``shared`` (any number of shared holders, no exclusive one beside them). With ``wait``
    (the default) it blocks until the lock is granted, with no timeout, and returns True; with
    ``wait=False`` it returns False at once when another open file description holds a
    conflicting lock. The lock belongs to the open file description: it goes when every
    descriptor of it is closed, or when the process dies, whatever killed it. Raises
    ``OSError`` (``EBADF``, ``ENOLCK``, ``EINTR`` is retried by Python). Use :func:`locked` for a
    lock file; this is for a file opened for another reason (a temp that is locked while it is
    written, a probe of whether its writer lives)."""
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if wait else fcntl.LOCK_NB))
    except OSError as exc:
        if not wait and exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return False
        raise
    return True


@contextmanager
def locked(path: str | os.PathLike[str], *, shared: bool = False) -> Iterator[None]:
    """Hold an advisory ``flock(2)`` lock on ``path`` for the ``with`` block.

    ``path`` is a lock file, created empty (mode 0600) when missing (its directory must exist;
    a symlink there is refused, not followed), or an existing directory, which is locked itself
    (a staging directory that :func:`lemonpack.fetch.staging.sweep` must leave alone). The lock
    is exclusive, or shared when ``shared`` (readers that exclude only a writer). Entering
    blocks until the lock is granted, with no timeout. It is released when the block exits,
    however it exits, and by the kernel when the process dies (SIGKILL included), so a killed
    holder never leaves it taken; the lock file itself stays (removing it while another process
    waits on it would let a third lock a new file beside the first). Advisory only: it excludes
    other holders of a lock on the same file, not readers or writers that take none. Not
    re-entrant: a second ``locked`` of the same path in the same process opens another file
    description and waits for the first (a deadlock when nested). Semantics are Linux
    ``flock(2)``'s (on NFS, since Linux 2.6.12, emulated with ``fcntl`` byte-range locks).

    Raises :class:`lemonpack.errors.StorageError` (exit 1) naming the path when it cannot be
    opened or locked (a missing directory, a denied permission, a read-only file system, a
    symlink); exceptions raised inside the block pass through unchanged."""
    from lemonpack.errors import StorageError

    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        try:
            fd = os.open(path, flags | os.O_CREAT, 0o600)
        except IsADirectoryError:
            fd = os.open(path, flags | os.O_DIRECTORY)
    except OSError as exc:
        raise StorageError(f"cannot lock {os.fspath(path)}: {exc.strerror or exc}") from None
    try:
        try:
            lock_fd(fd, shared=shared)
        except OSError as exc:
            raise StorageError(f"cannot lock {os.fspath(path)}: {exc.strerror or exc}") from None
        yield
    finally:
        os.close(fd)


__all__ = ["commit", "copy_file", "exchange", "fsync_dir", "kind_of", "lock_fd", "locked", "open_regular",
           "read_user_file", "remove_tree", "replace_directory", "replace_file", "save_bounded_record"]
