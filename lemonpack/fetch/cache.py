"""A content-addressed artifact cache: ``<root>/sha256/<hex>``.

Where it lives: ``$LEMONPACK_CACHE_DIR/artifacts`` if that variable is set (it replaces the
whole lemonpack cache root), else ``platformdirs.user_cache_dir("lemonpack")/artifacts``
(on Linux that is ``$XDG_CACHE_HOME/lemonpack/artifacts``, default
``~/.cache/lemonpack/artifacts``, per the XDG Base Directory Specification).

An entry only ever appears complete and verified: the bytes are written to a temp file in
the same directory (so the rename cannot cross file systems), fsynced, hashed by the
writer, and only then ``os.replace``-d to their digest's name. A crash leaves at most a
``.tmp-*`` file, never a wrong or partial entry. The writer holds a lock on its temp
(:mod:`lemonpack.fetch.staging`); temps whose lock can be taken are stale and are removed
by the next :meth:`ArtifactCache.staging` and by ``lemonpack cache clean``.

Trust on a hit: **the digest recorded with the stat facts the entry had when it was hashed**
(:meth:`ArtifactCache.verified`, through :class:`lemonpack.digest.FileDigests`, whose rule and
record shape it is: ``[size, mtime_ns, ctime_ns, inode, device]`` all unchanged). When an entry
is committed (its bytes hashed by the writer) or re-hashed (its facts taken before the read),
its digest is recorded in ``<root>/digests.json``, at most :data:`RECORDED` entries. A hit whose
file still has exactly those facts is used without reading it again; any other hit is
re-hashed (and recorded when good and unchanged while read). A user's edit, a copy or restore
in its place, a truncation, a ``touch`` or ``chmod`` all change the ctime at least (it cannot be
set from user space), so they are caught; bit rot under an unchanged inode is not: ``lemonpack
cache verify`` re-hashes every entry. A bad entry is removed and the caller downloads it again.
(The per-entry ``<root>/stat/<hex>`` files of earlier releases are not read: a miss, a re-hash.)
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator

from lemonpack.digest import FileDigests, file_digest, is_sha256_hex, sha256_text
from lemonpack.files import commit
from lemonpack.fetch.staging import (clear_non_regular, ensure_dir, kind_of, locked_temp_file,
                                     partials, remove_entry, sweep, tree_size)
from lemonpack.paths import require_cache_root

log = logging.getLogger(__name__)

PARTIAL_PREFIXES = (".tmp-",)
"""Names of in-flight (or, once their lock is free, stale) downloads in the store."""

#: Entries whose digest ``<root>/digests.json`` remembers (the oldest dropped first).
RECORDED = 4096


def default_cache_root() -> Path:
    """The lemonpack cache root (not the artifact store): :func:`lemonpack.paths.cache_root`,
    i.e. ``$LEMONPACK_CACHE_DIR`` or ``platformdirs.user_cache_dir("lemonpack")``. Raises
    ``StorageError`` when it is not a directory (:func:`lemonpack.paths.require_cache_root`)."""
    return require_cache_root()


def _check_hex(hex_digest: str) -> str:
    if not isinstance(hex_digest, str) or not is_sha256_hex(hex_digest):
        raise ValueError(f"not a sha256 hex digest (64 lowercase hex characters): {hex_digest!r}")
    return hex_digest


@dataclass(frozen=True)
class Entry:
    """One cache entry: ``path``, ``digest`` (``sha256:<hex>``, from its name; the bare
    name when that is not a digest), ``size`` bytes, ``problem``: None for a regular file
    named by a digest, else why it is a *bad* entry that is never used (a directory, a
    symlink, a fifo ..., or a name that is not a digest)."""

    path: Path
    digest: str
    size: int
    problem: str | None = None


class ArtifactCache:
    """Content-addressed store of verified files at ``<root>/sha256/<hex>``.

    ``root`` defaults to ``default_cache_root() / "artifacts"``. Nothing is created until
    the first write. Entries are read-only (mode 0444); :meth:`verified` re-hashes an
    entry on a hit unless its recorded digest still holds by its stat facts (module docstring).
    """

    def __init__(self, root: Path | str | None = None):
        self.root = Path(root) if root is not None else default_cache_root() / "artifacts"
        self._digests: FileDigests | None = None

    @property
    def directory(self) -> Path:
        """``<root>/sha256``: where entries and in-flight temp files live."""
        return self.root / "sha256"

    def path_for(self, hex_digest: str) -> Path | None:
        """Path of the entry for ``hex_digest`` (64 lowercase hex), or None if absent.

        An entry is a regular file by ``lstat``: anything else at that name (a directory,
        a symlink even to a good copy, a fifo) is a bad entry, removed here (warning
        logged) and reported absent, so the caller fetches again. Raises ``ValueError`` on
        a malformed digest. Does not re-hash the file.
        """
        path = self.directory / _check_hex(hex_digest)
        kind = kind_of(path)
        if kind == "file":
            return path
        if kind != "missing":
            log.warning("cache entry %s is a %s, not a regular file; dropped", path, kind)
            self.drop(hex_digest)
        return None

    def verified(self, hex_digest: str) -> Path | None:
        """Path of the entry for ``hex_digest`` after re-hashing it, or None.

        None when there is no entry, or when the entry's bytes no longer hash to its name:
        such an entry is removed (and a warning logged) so the caller fetches it again.
        Raises ``ValueError`` on a malformed digest.
        """
        path = self.path_for(hex_digest)
        if path is None:
            return None
        digests = self.digests
        if digests.known(path) == sha256_text(hex_digest):
            return path
        before = digests.facts(path)
        try:
            actual = file_digest(path)[0].hex
        except OSError as exc:
            log.warning("cache entry %s cannot be read (%s); dropped", path, exc.strerror or exc)
            self.drop(hex_digest)
            return None
        if actual == hex_digest:
            self._record(hex_digest, path, before)
            return path
        log.warning("cache entry %s does not hash to its name (sha256:%s); dropped", path, actual)
        self.drop(hex_digest)
        return None

    @property
    def digests(self) -> FileDigests:
        """``<root>/digests.json`` (:class:`lemonpack.digest.FileDigests`): the entries' digests,
        each with its stat facts when it was hashed."""
        if self._digests is None:
            self._digests = FileDigests(self.root / "digests.json", limit=RECORDED)
        return self._digests

    def _record(self, hex_digest: str, path: Path, before: list[int] | None) -> None:
        """Record that ``path`` hashed to ``hex_digest``, its bytes read after its facts were
        ``before`` (kept only if it still has them; a failed write is only a later re-hash)."""
        if self.digests.record(path, sha256_text(hex_digest), before) and not self.digests.save():
            log.warning("cannot record the digest of cache entry %s in %s", path, self.digests.path)

    def drop(self, hex_digest: str) -> None:
        """Remove the entry for ``hex_digest``, whatever it is (a directory tree, a
        symlink itself, never its target); missing is fine. Raises ``OSError``."""
        remove_entry(self.directory / _check_hex(hex_digest))

    def entries(self) -> Iterator[Entry]:
        """Every entry (not temps), sorted by name; nothing is re-hashed. Bad ones (see
        :class:`Entry`) are included with their ``problem``: what ``lemonpack cache`` lists,
        verifies and cleans."""
        try:
            names = sorted(os.listdir(self.directory))
        except (FileNotFoundError, NotADirectoryError):
            return
        for name in names:
            if name.startswith(PARTIAL_PREFIXES):
                continue
            p = self.directory / name
            kind = kind_of(p)
            if kind == "missing":
                continue
            digest = sha256_text(name) if is_sha256_hex(name) else name
            size = tree_size(p) if kind in ("file", "directory") else 0
            if not is_sha256_hex(name):
                yield Entry(p, digest, size, "name is not a sha256 digest")
            elif kind != "file":
                what = f"symlink to {os.readlink(p)}" if kind == "symlink" else kind
                yield Entry(p, digest, size, f"not a regular file ({what})")
            else:
                yield Entry(p, digest, size)

    def remove(self, entry: Entry) -> None:
        """Remove ``entry`` (good or bad) without following it. Raises ``OSError``."""
        remove_entry(entry.path)

    def partials(self) -> list[Path]:
        """Temp files of downloads in the store: live ones and stale ones."""
        return partials(self.directory, PARTIAL_PREFIXES)

    def sweep(self) -> list[tuple[Path, int]]:
        """Remove stale partial downloads (their writer is gone); ``[(path, bytes)]``."""
        return sweep(self.directory, PARTIAL_PREFIXES)

    def staging(self) -> tuple[BinaryIO, Path]:
        """Open a new, locked temp file in the store directory: ``(file, path)``.

        Stale temps of killed downloads are removed first (:meth:`sweep`). The caller
        writes, then calls :meth:`commit` with the digest it computed, or :meth:`discard`
        on any failure; the lock is held until then.
        """
        for bad in ensure_dir(self.directory, self.root.parent):
            log.warning("%s was not a directory; removed", bad)
        for path, size in self.sweep():
            log.info("removed the stale partial download %s (%d bytes)", path, size)
        return locked_temp_file(self.directory, ".tmp-")

    def commit(self, fh: BinaryIO, tmp: Path, hex_digest: str) -> Path:
        """Flush, fsync and close ``fh``, then move ``tmp`` to the entry of ``hex_digest``.

        ``hex_digest`` must be the sha256 of the bytes written, already verified by the
        caller. Returns the entry's path. Idempotent: an existing entry is replaced by
        identical bytes.
        """
        _check_hex(hex_digest)
        try:
            fh.flush()
            os.fsync(fh.fileno())
            os.chmod(tmp, 0o444)
            final = self.directory / hex_digest
            kind = clear_non_regular(final)  # a rename cannot replace a directory
            if kind:
                log.warning("cache entry %s was a %s; replaced", final, kind)
            commit(tmp, final, durable=True)
            fh.close()  # releases the temp's lock only once it has its final name
        except BaseException:
            self.discard(fh, tmp)
            raise
        # the writer hashed these bytes; the entry is theirs from its rename on
        self._record(hex_digest, final, self.digests.facts(final))
        return final

    @staticmethod
    def discard(fh: BinaryIO, tmp: Path) -> None:
        """Delete ``tmp`` (missing is fine), then close ``fh`` (which releases its lock)."""
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        fh.close()


__all__ = ["ArtifactCache", "Entry", "default_cache_root", "PARTIAL_PREFIXES"]
