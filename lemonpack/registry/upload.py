"""Upload bodies for blob pushes: file slices read from disk and hashed as they are sent.

A registry is not obliged to re-hash what it receives (distribution does; some caches and
proxies do not), so the client checks the bytes itself: :class:`BlobHasher` follows the bytes
of one blob in the order the registry will store them, whatever the upload's shape (one body,
``PATCH`` chunks, a resumed session restarting at an earlier or later offset), and
:meth:`BlobHasher.digest` is compared with the descriptor's digest *before* the closing
``PUT ?digest=`` that makes the registry commit the blob. Each byte is read from disk once
and hashed once while it streams out (``hashlib`` releases the GIL on large updates, so the
hashing overlaps the socket writes of other threads).

Spec: OCI distribution-spec v1.1 ("pushing a blob in chunks": the upload is committed by the
closing ``PUT``; nothing is stored before it).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Callable, Iterator

from lemonpack.errors import StorageError

#: Bytes per read from disk while uploading: large reads keep Python's per-chunk overhead
#: (a hash update, a socket send) small next to the work done outside the GIL.
UPLOAD_READ = 4 << 20


class BlobHasher:
    """The sha256 of the bytes of ``path`` (``size`` bytes) as they are sent.

    :meth:`feed` takes each chunk with its offset in the blob. Chunks normally arrive in
    order; when an upload resumes at a later offset (the registry already holds the bytes
    before it) the gap is hashed from disk, and when it restarts at an earlier offset the
    hash is restarted and rebuilt from disk up to there, so the digest always covers the
    blob exactly once, in order. :meth:`digest` completes any tail not sent (a resumed
    session that already held it) and returns ``sha256:<hex>``."""

    def __init__(self, path: Path, size: int):
        self.path, self.size = path, size
        self._sha = hashlib.sha256()
        self.position = 0

    def _catch_up(self, offset: int) -> None:
        if offset < self.position:
            self._sha, self.position = hashlib.sha256(), 0
        if offset == self.position:
            return
        with open(self.path, "rb") as f:
            f.seek(self.position)
            while self.position < offset:
                chunk = f.read(min(UPLOAD_READ, offset - self.position))
                if not chunk:
                    raise StorageError(f"{self.path}: file shrank while it was being uploaded")
                self._sha.update(chunk)
                self.position += len(chunk)

    def feed(self, offset: int, chunk: bytes) -> None:
        """Account for ``chunk``, sent at ``offset`` of the blob."""
        self._catch_up(offset)
        self._sha.update(chunk)
        self.position += len(chunk)

    def digest(self) -> str:
        """``sha256:<hex>`` of the whole blob (the unsent tail, if any, read from disk)."""
        self._catch_up(self.size)
        return "sha256:" + self._sha.hexdigest()


class FileSlice:
    """An iterable request body: ``length`` bytes of ``path`` from ``offset``, read in
    :data:`UPLOAD_READ` pieces (flat memory); each piece is given to ``hasher`` (when set)
    and counted with ``on_bytes(n)`` before it is sent. ``len()`` gives requests the
    Content-Length. Raises :class:`StorageError` when the file shrank."""

    def __init__(self, path: Path, offset: int, length: int, on_bytes: Callable[[int], None],
                 hasher: BlobHasher | None = None):
        self.path, self.offset, self.length, self.on_bytes, self.hasher = path, offset, length, on_bytes, hasher

    def __len__(self) -> int:
        return self.length

    def __iter__(self) -> Iterator[bytes]:
        left, at = self.length, self.offset
        with open(self.path, "rb", buffering=0) as f:
            f.seek(self.offset)
            while left > 0:
                chunk = f.read(min(UPLOAD_READ, left))
                if not chunk:
                    raise StorageError(f"{self.path}: file shrank while it was being uploaded")
                if self.hasher is not None:
                    self.hasher.feed(at, chunk)
                left -= len(chunk)
                at += len(chunk)
                self.on_bytes(len(chunk))
                yield chunk


__all__ = ["BlobHasher", "FileSlice", "UPLOAD_READ"]
