"""A content-addressed artifact cache: ``<root>/sha256/<hex>``.

Where it lives: ``$LEMONPACK_CACHE_DIR/artifacts`` if that variable is set (it replaces the
whole lemonpack cache root), else ``platformdirs.user_cache_dir("lemonpack")/artifacts``
(on Linux that is ``$XDG_CACHE_HOME/lemonpack/artifacts``, default
``~/.cache/lemonpack/artifacts``, per the XDG Base Directory Specification).

An entry only ever appears complete and verified: the bytes are written to a temp file in
the same directory (so the rename cannot cross file systems), fsynced, hashed by the
writer, and only then ``os.replace``-d to their digest's name. A crash leaves at most a
``.tmp-*`` file, never a wrong or partial entry.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import BinaryIO

from lemonpack.paths import cache_root


_HEX64 = re.compile(r"[0-9a-f]{64}")


def default_cache_root() -> Path:
    """The lemonpack cache root (not the artifact store): :func:`lemonpack.paths.cache_root`,
    i.e. ``$LEMONPACK_CACHE_DIR`` or ``platformdirs.user_cache_dir("lemonpack")``."""
    return cache_root()


def _check_hex(hex_digest: str) -> str:
    if not isinstance(hex_digest, str) or not _HEX64.fullmatch(hex_digest):
        raise ValueError(f"not a sha256 hex digest (64 lowercase hex characters): {hex_digest!r}")
    return hex_digest


class ArtifactCache:
    """Content-addressed store of verified files at ``<root>/sha256/<hex>``.

    ``root`` defaults to ``default_cache_root() / "artifacts"``. Nothing is created until
    the first write. Entries are read-only by convention (mode 0444); callers must not
    modify them.
    """

    def __init__(self, root: Path | str | None = None):
        self.root = Path(root) if root is not None else default_cache_root() / "artifacts"

    @property
    def directory(self) -> Path:
        """``<root>/sha256``: where entries and in-flight temp files live."""
        return self.root / "sha256"

    def path_for(self, hex_digest: str) -> Path | None:
        """Path of the entry for ``hex_digest`` (64 lowercase hex), or None if absent.

        Raises ``ValueError`` on a malformed digest. Does not re-hash the file.
        """
        path = self.directory / _check_hex(hex_digest)
        return path if path.is_file() else None

    def staging(self) -> tuple[BinaryIO, Path]:
        """Open a new temp file in the store directory for writing: ``(file, path)``.

        The caller writes, then calls :meth:`commit` with the digest it computed, or
        :meth:`discard` on any failure.
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=self.directory, prefix=".tmp-")
        return os.fdopen(fd, "wb"), Path(name)

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
            fh.close()
            os.chmod(tmp, 0o444)
            final = self.directory / hex_digest
            os.replace(tmp, final)
        except BaseException:
            self.discard(fh, tmp)
            raise
        _fsync_dir(self.directory)
        return final

    @staticmethod
    def discard(fh: BinaryIO, tmp: Path) -> None:
        """Close ``fh`` and delete ``tmp`` (missing is fine)."""
        fh.close()
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass


def _fsync_dir(path: Path) -> None:
    """fsync a directory so a rename in it survives a crash (best effort)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


__all__ = ["ArtifactCache", "default_cache_root"]
