"""Download sinks: blob bytes hashed and written by a thread of their own while the next bytes
are read from the socket (``hashlib`` and file writes release the GIL, so the two overlap), each
byte hashed once.

Spec: OCI image-spec v1.1 ``descriptor.md`` ("verification": content is verified against its
digest as it is read).
"""

from __future__ import annotations

import hashlib
import queue
import threading
from typing import BinaryIO

#: Pieces queued for the writer thread ahead of the one being written (flat memory).
AHEAD = 4

_END = object()


class HashingSink:
    """``write(chunk)`` hands ``chunk`` to a thread that hashes it (sha256) and writes it to the
    binary file ``out``; :meth:`finish` waits for the thread and returns ``sha256:<hex>``.
    An error of the thread (a full disk) is raised by the next :meth:`write` or by
    :meth:`finish`. :meth:`close` stops the thread without a result (used on every exit path;
    safe to call twice). Use as a context manager."""

    def __init__(self, out: BinaryIO):
        self.out = out
        self._sha = hashlib.sha256()
        self._pieces: queue.Queue = queue.Queue(maxsize=AHEAD)
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="lemonpack-download-writer")
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    item = self._pieces.get(timeout=0.2)
                except queue.Empty:
                    continue
                if item is _END:
                    return
                self._sha.update(item)
                self.out.write(item)
        except BaseException as exc:  # noqa: BLE001 - raised in the reading thread
            self._error = exc
            self._stop.set()

    def _put(self, item) -> None:
        while True:
            if self._error is not None:
                raise self._error
            if self._stop.is_set():
                raise RuntimeError("download sink closed")
            try:
                self._pieces.put(item, timeout=0.2)
                return
            except queue.Full:
                continue

    def write(self, chunk: bytes) -> None:
        """Queue ``chunk`` (raises the writer thread's error, if it had one)."""
        self._put(chunk)

    def finish(self) -> str:
        """Wait until every chunk is hashed and written; ``sha256:<hex>`` of them all."""
        self._put(_END)
        self._thread.join()
        if self._error is not None:
            raise self._error
        return "sha256:" + self._sha.hexdigest()

    def close(self) -> None:
        """Stop the writer thread (what is queued is dropped)."""
        self._stop.set()
        self._thread.join()

    def __enter__(self) -> "HashingSink":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["HashingSink", "AHEAD"]
