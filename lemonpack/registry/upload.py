"""Upload bodies for blob pushes: file slices read from disk and hashed as they are sent.

A registry is not obliged to re-hash what it receives (distribution does; some caches and
proxies do not), so the client checks the bytes itself: :class:`UploadDigest` follows the bytes
of one blob in the order the registry will store them, whatever the upload's shape (one body,
``PATCH`` chunks, a resumed session restarting at an earlier or later offset), hashing them
through the one hashing sink (:class:`lemonpack.digest.Hasher`), and
:meth:`UploadDigest.digest` is compared with the descriptor's digest *before* the closing
``PUT ?digest=`` that makes the registry commit the blob. Each byte is read from disk once
and hashed once while it streams out (``hashlib`` releases the GIL on large updates, so the
hashing overlaps the socket writes of other threads).

Spec: OCI distribution-spec v1.1 ("pushing a blob in chunks": the upload is committed by the
closing ``PUT``; nothing is stored before it).
"""

from __future__ import annotations

import queue
import threading
from pathlib import Path
from typing import Callable, Iterator

from lemonpack.digest import Hasher
from lemonpack.errors import StorageError

#: Bytes per read from disk while uploading: large enough that Python's per-piece overhead (a
#: hash update, a socket send) stays small next to the work done outside the GIL, small enough
#: that each piece is a reused heap block rather than a fresh mapping faulted in page by page
#: (measured here, 128 MiB pushes: 1 MiB pieces 0.26-0.27 s of CPU, 4 MiB 0.30-0.31 s; 256 MiB
#: pushes, bench/publish.py: 512 KiB pieces with 2 ahead take no more CPU than 1 MiB with 4, and
#: hold 2 MiB instead of 6, which was most of publish's peak RSS above its imports).
UPLOAD_READ = 512 << 10
#: Pieces read (and hashed) ahead of the one being sent.
AHEAD = 2


class UploadDigest:
    """The sha256 of the bytes of ``path`` (``size`` bytes) as they are sent, in blob order.

    :meth:`feed` takes each chunk with its offset in the blob. Chunks normally arrive in
    order; when an upload resumes at a later offset (the registry already holds the bytes
    before it) the gap is hashed from disk, and when it restarts at an earlier offset the
    hash is restarted and rebuilt from disk up to there, so the digest always covers the
    blob exactly once, in order (:attr:`position`: the bytes hashed so far). :meth:`digest`
    completes any tail not sent (a resumed session that already held it) and returns
    ``sha256:<hex>``.

    Each request body claims the hasher (:meth:`claim`) before feeding it; a body abandoned
    by a failed request (its reader thread possibly still running) holds a stale claim, and
    its feeds raise :class:`StaleBody` instead of touching the hash. Thread-safe."""

    def __init__(self, path: Path, size: int):
        self.path, self.size = path, size
        self._hash = Hasher()
        self._lock = threading.Lock()
        self._claim = 0

    def claim(self) -> int:
        """A new claim: feeds with an older one are refused from now on."""
        with self._lock:
            self._claim += 1
            return self._claim

    @property
    def position(self) -> int:
        """Bytes of the blob hashed so far (from its start, in order)."""
        return self._hash.size

    def _catch_up(self, offset: int) -> None:
        if offset < self.position:
            self._hash = Hasher()
        if offset == self.position:
            return
        with open(self.path, "rb") as f:
            f.seek(self.position)
            while self.position < offset:
                chunk = f.read(min(UPLOAD_READ, offset - self.position))
                if not chunk:
                    raise StorageError(f"{self.path}: file shrank while it was being uploaded")
                self._hash.write(chunk)

    def feed(self, offset: int, chunk: bytes, claim: int | None = None) -> None:
        """Account for ``chunk``, sent at ``offset`` of the blob (``claim``: the body's, from
        :meth:`claim`; a stale one raises :class:`StaleBody`)."""
        with self._lock:
            if claim is not None and claim != self._claim:
                raise StaleBody()
            self._catch_up(offset)
            self._hash.write(chunk)

    def digest(self) -> str:
        """``sha256:<hex>`` of the whole blob (the unsent tail, if any, read from disk)."""
        with self._lock:
            self._claim += 1  # no body feeds it any more
            self._catch_up(self.size)
            return str(self._hash.digest())


class StaleBody(Exception):
    """A request body fed a :class:`UploadDigest` another body has claimed since."""


_END = object()


class FileSlice:
    """An iterable request body: ``length`` bytes of ``path`` from ``offset``, in
    :data:`UPLOAD_READ` pieces (flat memory: at most :data:`AHEAD` + 2 pieces held).

    A reader thread reads each piece and gives it to ``hasher`` (when set) while the request
    sends the pieces before it: reading and hashing overlap the socket writes (both release the
    GIL). Each piece is counted with ``on_bytes(n)`` as it goes out. ``len()`` is the
    Content-Length the client sends (httpx is given it as a header: an iterable body would
    otherwise go chunked). Iterable again for each attempt (httpx re-sends it after a 401). Raises :class:`StorageError` when the file shrank. A body the request
    stops reading (a failed request) stops its thread when closed or when its claim on the
    hasher goes stale."""

    def __init__(self, path: Path, offset: int, length: int, on_bytes: Callable[[int], None],
                 hasher: UploadDigest | None = None):
        self.path, self.offset, self.length, self.on_bytes, self.hasher = path, offset, length, on_bytes, hasher

    def __len__(self) -> int:
        return self.length

    def _read(self, out: queue.Queue, stop: threading.Event, claim: int | None) -> None:
        def put(item) -> bool:
            while not stop.is_set():
                try:
                    out.put(item, timeout=0.2)
                    return True
                except queue.Full:
                    continue
            return False

        try:
            left, at = self.length, self.offset
            with open(self.path, "rb", buffering=0) as f:
                f.seek(self.offset)
                while left > 0:
                    chunk = f.read(min(UPLOAD_READ, left))
                    if not chunk:
                        raise StorageError(f"{self.path}: file shrank while it was being uploaded")
                    if self.hasher is not None:
                        self.hasher.feed(at, chunk, claim)
                    left -= len(chunk)
                    at += len(chunk)
                    if not put(chunk):
                        return
            put(_END)
        except StaleBody:
            return
        except BaseException as exc:  # noqa: BLE001 - handed to the sending thread
            put(exc)

    def __iter__(self) -> Iterator[bytes]:
        pieces: queue.Queue = queue.Queue(maxsize=AHEAD)
        stop = threading.Event()
        claim = self.hasher.claim() if self.hasher is not None else None
        reader = threading.Thread(target=self._read, args=(pieces, stop, claim), daemon=True,
                                  name="lemonpack-upload-reader")
        reader.start()
        try:
            while True:
                item = pieces.get()
                if item is _END:
                    return
                if isinstance(item, BaseException):
                    raise item
                self.on_bytes(len(item))
                yield item
        finally:
            stop.set()
            reader.join()


__all__ = ["UploadDigest", "FileSlice", "StaleBody", "UPLOAD_READ"]
