"""sha256 digests, parsed once: the one place that knows their text forms and hashes bytes
in passing.

A digest is ``algorithm ":" encoded`` (OCI image-spec v1.1 ``descriptor.md``, "Digests");
lemonpack writes and accepts the registered ``sha256`` algorithm only, encoded as 64 lowercase
hex digits, and also uses the bare hex form (cache file names, blob file names under
``blobs/sha256/``, Nix's ``sha256`` attribute, a recipe's ``sha256`` field).

What this module owns (``tests/test_concept_owners.py`` fails on a copy elsewhere):

- the text forms: :class:`Digest` (``Digest.parse(text)``, ``Digest.from_hex(hex)``,
  ``Digest.of_bytes(data)``, ``d.hex``, ``str(d)``) and the two conversions most callers
  need, :func:`sha256_text` (bare hex to ``sha256:<hex>``) and :func:`hex_of` (the other way);
  no other module spells ``"sha256:"`` or splits a digest at its ``:``;
- the checks of either form (:func:`is_sha256_digest`, :func:`is_sha256_hex`; a hex-64 pattern
  elsewhere fails ``tests/test_architecture.py``);
- hashing bytes as they pass: :class:`Hasher` (a write-only file object: the digest and the
  size of what went through, passed on to any number of files, optionally on a thread of its
  own), :class:`HashingReader` (the same on the reading side) and :func:`file_digest`;
- the digest of a file hashed before while its stat facts are unchanged: :class:`FileDigests`
  (the one place that compares a file's stat facts with those recorded when it was hashed).

The general reference grammar (any algorithm, for parsing what others wrote) stays in
:mod:`lemonpack.oci.reference`. ``hashlib`` (OpenSSL) is imported on first use, so importing
this module costs a quick command nothing.
"""

from __future__ import annotations

import os
import queue
import re
import threading
from dataclasses import dataclass
from typing import Any, BinaryIO

#: The one algorithm lemonpack writes and accepts (descriptor.md, "Registered Algorithms").
ALGORITHM = "sha256"
#: Length of a sha256 digest's encoded part (hex digits).
SHA256_HEX_LENGTH = 64
_PREFIX = ALGORITHM + ":"
_HEX = re.compile(r"[0-9a-f]{64}")
_DIGEST = re.compile(r"sha256:([0-9a-f]{64})")
_READ = 1 << 20


def _sha256(data: bytes = b"") -> Any:
    import hashlib

    return hashlib.sha256(data)


def is_sha256_hex(text: object) -> bool:
    """Whether ``text`` is a string of exactly 64 lowercase hex digits (a bare sha256)."""
    return isinstance(text, str) and _HEX.fullmatch(text) is not None


def is_sha256_digest(text: object) -> bool:
    """Whether ``text`` is a string ``sha256:<64 lowercase hex>`` (nothing before or after)."""
    return isinstance(text, str) and _DIGEST.fullmatch(text) is not None


def names_sha256(text: object) -> bool:
    """Whether ``text`` is written as a sha256 digest (starts ``sha256:``), well formed or not:
    what tells a digest from a tag in a manifest reference (a tag holds no ``:``) before the
    digest itself is checked."""
    return isinstance(text, str) and text.startswith(_PREFIX)


@dataclass(frozen=True, slots=True)
class Digest:
    """A sha256 digest. ``str(d)`` is ``sha256:<hex>``; ``d.hex`` the 64 hex digits.

    Build one with :meth:`parse` (text from a file, a registry, a user), :meth:`from_hex`
    (a bare hex string) or :meth:`of_bytes` (hash some bytes); a :class:`Hasher` gives the
    digest of a stream. Raises ``ValueError`` for anything but 64 lowercase hex digits."""

    hex: str

    def __post_init__(self) -> None:
        if not is_sha256_hex(self.hex):
            raise ValueError(f"not 64 lowercase hex digits: {self.hex!r}")

    @property
    def algorithm(self) -> str:
        """Always ``"sha256"`` (the only algorithm lemonpack accepts)."""
        return ALGORITHM

    @classmethod
    def parse(cls, text: object, *, bare: bool = False) -> "Digest":
        """The digest ``text`` spells (``sha256:<64 lowercase hex>``; with ``bare``, a bare
        64-hex string too). Raises ``ValueError`` naming what was given for anything else
        (another algorithm, upper case, a bare hex without ``bare``)."""
        if bare and is_sha256_hex(text):
            return cls(text)  # type: ignore[arg-type]
        m = _DIGEST.fullmatch(text) if isinstance(text, str) else None
        if m is None:
            raise ValueError(f"a digest must be 'sha256:<64 lowercase hex>', got {text!r}")
        return cls(m.group(1))

    @classmethod
    def from_hex(cls, hex_digest: object) -> "Digest":
        """The digest whose encoded part is ``hex_digest``. Raises ``ValueError``."""
        if not is_sha256_hex(hex_digest):
            raise ValueError(f"not a sha256 hex digest (64 lowercase hex digits): {hex_digest!r}")
        return cls(hex_digest)  # type: ignore[arg-type]

    @classmethod
    def of_bytes(cls, data: bytes) -> "Digest":
        """The sha256 digest of ``data``."""
        return cls(_sha256(data).hexdigest())

    def __str__(self) -> str:
        return _PREFIX + self.hex


def sha256_text(hex_digest: object) -> str:
    """``sha256:<hex>`` for the bare hex ``hex_digest`` (a recipe's ``sha256`` field, a cache
    file name). Raises ``ValueError`` unless it is 64 lowercase hex digits."""
    return str(Digest.from_hex(hex_digest))


def hex_of(digest: object) -> str:
    """The 64 hex digits of the digest text ``sha256:<hex>`` (a blob's file name under
    ``blobs/sha256/``). Raises ``ValueError`` for anything else."""
    return Digest.parse(digest).hex


_END = object()


class Hasher:
    """A write-only binary file object: every byte written is sha256-hashed, counted
    (:attr:`size`) and passed on, in order, to each of ``outs`` (none: hash only; two: a tee,
    e.g. a layout's blob and the layer cache's copy). :meth:`digest` is the :class:`Digest` of
    all bytes written so far.

    ``threaded=True`` hands the hashing and the writes to ``outs`` to a thread of its own,
    at most ``ahead`` pieces queued (flat memory), so they overlap the caller's next read from
    a socket (``hashlib`` and file writes release the GIL); each byte is still hashed once.
    Then :meth:`digest` waits for the queue to drain (no write after it), an error of the
    thread (a full disk) is raised by the next :meth:`write` or by :meth:`digest`, and
    :meth:`close` stops the thread without a result (call it on every exit path: a context
    manager does; safe twice). Unthreaded, an error of an out propagates from :meth:`write`.

    Spec: OCI image-spec v1.1 ``descriptor.md`` ("Verification": content is verified against
    its digest as it is read)."""

    def __init__(self, *outs: BinaryIO, threaded: bool = False, ahead: int = 4):
        self.outs = outs
        self.size = 0
        self._sha = _sha256()
        self._thread: threading.Thread | None = None
        if threaded:
            self._pieces: queue.Queue = queue.Queue(maxsize=ahead)
            self._error: BaseException | None = None
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._run, daemon=True, name="lemonpack-hasher")
            self._thread.start()

    def _take(self, data) -> None:
        self._sha.update(data)
        for out in self.outs:
            out.write(data)

    def write(self, data) -> int:
        """Hash ``data`` (bytes or a buffer), count it and pass it on; returns ``len(data)``."""
        self.size += len(data)
        if self._thread is None:
            self._take(data)
        else:
            self._put(bytes(data))
        return len(data)

    def flush(self) -> None:
        """Flush every out that can be (unthreaded: what was written has reached them)."""
        for out in self.outs:
            flush = getattr(out, "flush", None)
            if flush is not None:
                flush()

    def digest(self) -> Digest:
        """The digest of every byte written so far (threaded: once all are hashed and written)."""
        if self._thread is not None:
            self._put(_END)
            self._thread.join()
            if self._error is not None:
                raise self._error
        return Digest(self._sha.hexdigest())

    def close(self) -> None:
        """Stop the thread (what is queued is dropped); nothing to do unthreaded."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()

    def __enter__(self) -> "Hasher":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    item = self._pieces.get(timeout=0.2)
                except queue.Empty:
                    continue
                if item is _END:
                    return
                self._take(item)
        except BaseException as exc:  # noqa: BLE001 - raised in the writing thread
            self._error = exc
            self._stop.set()

    def _put(self, item: object) -> None:
        while True:
            if self._error is not None:
                raise self._error
            if self._stop.is_set():
                raise RuntimeError("Hasher closed")  # a bug: written after close() or digest()
            try:
                self._pieces.put(item, timeout=0.2)
                return
            except queue.Full:
                continue


class HashingReader:
    """A readable binary file object over ``f`` whose :attr:`hasher` (a :class:`Hasher`)
    sees every byte read, in order: the digest of a blob while ``tarfile`` or a decompressor
    reads it."""

    def __init__(self, f: Any):
        self.f, self.hasher = f, Hasher()

    def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes of ``f`` (all that is left when ``n < 0``), hashed."""
        data = self.f.read(n)
        self.hasher.write(data)
        return data


def file_digest(path: str | os.PathLike[str]) -> tuple[Digest, int]:
    """``(digest, size in bytes)`` of the regular file at ``path``, read in 1 MiB chunks
    through :func:`lemonpack.files.open_regular` (a symlink is not followed, a fifo never
    blocks). Raises ``OSError`` when it cannot be read or is not a regular file itself."""
    from lemonpack.files import open_regular

    h = Hasher()
    with open_regular(path) as f:
        while chunk := f.read(_READ):
            h.write(chunk)
    return h.digest(), h.size


#: Files a :class:`FileDigests` record keeps by default (the oldest dropped first).
RECORD_LIMIT = 10000
_ENTRY_BYTES = 256  # a generous bound on one entry's JSON: a record file larger than limit * this is a miss


class FileDigests:
    """The digests of files hashed before, each kept with the stat facts the file had when it
    was hashed: the one answer to "the digest of this path, if it has not changed since it was
    hashed", for the download cache (:mod:`lemonpack.fetch.cache`), the blobs of pulled
    layouts (:mod:`lemonpack.registry.transfer`), the layer cache's blobs and the builder's base
    blobs (:mod:`lemonpack.builder.layercache`, :mod:`lemonpack.builder.baselayers`) and the
    files of ``models push`` (:mod:`lemonpack.runtime.models.push`).

    **The rule.** A file's facts are ``[size, mtime_ns, ctime_ns, inode, device]`` of its
    ``lstat`` (:meth:`facts`), for a regular file only (a symlink, fifo or
    directory has none: never a hit, never recorded). A recorded digest is answered by
    :meth:`known` only while all five are exactly what they were: any write, truncation,
    ``touch``, ``chmod``, rename or copy over it changes at least one, and the ctime catches a
    rewrite that puts the size and mtime back (it cannot be set from user space). Bit rot under
    an unchanged inode is not seen (``lemonpack cache verify`` re-hashes), nor a same-size write
    within the same tick of the file system's coarse clock (a few ms on Linux) as an earlier
    write that the recorded facts already show (git's "racy clean" case). A caller takes the
    facts with :meth:`facts` **before** it reads the bytes it hashes and hands them to
    :meth:`record` after; :meth:`record` keeps the digest only when the file still has exactly
    those facts, so a file changed while it was hashed is never recorded (:meth:`digest_of`
    does all of it for a file hashed here).

    **The record.** One JSON object in the file ``path``: ``{"<device>:<inode>": {"digest":
    "sha256:<hex>", "facts": [size, mtime_ns, ctime_ns, inode, device]}}``, the newest entry
    last, at most ``limit`` entries (the oldest dropped), read once (lazily, at most ``limit`` x
    256 bytes), merged into the file as it is then (re-read) and written atomically by
    :meth:`save` (:func:`lemonpack.files.save_bounded_record`, not fsync-ed: every entry is
    checked when read): concurrent writers may lose each other's entries, never corrupt the
    file. Best effort throughout: a record that is missing,
    unreadable, too large, not ours or of an older shape is a miss (the file is hashed again),
    never an error; a failed write is ignored."""

    def __init__(self, path: str | os.PathLike[str], *, limit: int = RECORD_LIMIT):
        self.path = os.fspath(path)
        self.limit = limit
        self._known: dict | None = None
        self._added: dict[str, dict] = {}
        self._dropped: set[str] = set()
        self._lock = threading.Lock()  # one instance may be shared by threads

    @staticmethod
    def facts(path: str | os.PathLike[str]) -> list[int] | None:
        """``[size, mtime_ns, ctime_ns, inode, device]`` of the regular file at ``path`` (one
        ``lstat``: a symlink is not followed), or None when it is missing, unreadable or not a
        regular file. Take them before hashing the file, for :meth:`record`. Any write,
        truncation, ``touch``, ``chmod``, rename over it or copy in its place changes at least
        one of them (ctime cannot be set from user space); bit rot under an unchanged inode
        does not."""
        import stat as stat_

        try:
            st = os.lstat(path)
        except (OSError, ValueError):
            return None
        if not stat_.S_ISREG(st.st_mode):
            return None
        return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]

    @staticmethod
    def _key(facts: list[int]) -> str:
        return f"{facts[4]}:{facts[3]}"

    def _load(self) -> dict:
        if self._known is None:
            self._known = self._read()
        return self._known

    def _read(self) -> dict:
        import json

        from lemonpack.files import open_regular

        bound = self.limit * _ENTRY_BYTES + 4096
        try:
            with open_regular(self.path) as f:
                data = f.read(bound + 1)
            doc = json.loads(data) if len(data) <= bound else None
        except (OSError, ValueError):
            return {}
        return doc if isinstance(doc, dict) else {}

    def known(self, path: str | os.PathLike[str]) -> str | None:
        """The digest (``sha256:<hex>``) recorded for ``path`` when its facts now are exactly
        those recorded with it, else None (never hashed, changed since, not a regular file, or
        a record that is not one)."""
        facts = self.facts(path)
        if facts is None:
            return None
        key = self._key(facts)
        with self._lock:
            entry = self._added.get(key) or self._load().get(key)
        if isinstance(entry, dict) and entry.get("facts") == facts and is_sha256_digest(entry.get("digest")):
            return entry["digest"]
        return None

    def record(self, path: str | os.PathLike[str], digest: str | Digest, before: list[int] | None) -> bool:
        """Note that ``path`` hashed to ``digest`` (``sha256:<hex>`` or a :class:`Digest`), its
        bytes read after :meth:`facts` gave ``before``. Kept (True) only when the file has exactly
        ``before`` now (so not changed while, or since, it was hashed); written by :meth:`save`.
        Raises ``ValueError`` for a ``digest`` that is not one."""
        digest = str(digest) if isinstance(digest, Digest) else str(Digest.parse(digest))
        if before is None or self.facts(path) != before:
            return False
        key = self._key(before)
        with self._lock:
            self._added.pop(key, None)
            self._added[key] = {"digest": digest, "facts": list(before)}  # re-inserted: the newest last
        return True

    def forget(self, path: str | os.PathLike[str]) -> None:
        """Drop what is recorded for the file now at ``path`` (its digest proved wrong; written
        by :meth:`save`)."""
        facts = self.facts(path)
        if facts is None:
            return
        key = self._key(facts)
        with self._lock:
            self._added.pop(key, None)
            self._load().pop(key, None)
            self._dropped.add(key)

    def digest_of(self, path: str | os.PathLike[str]) -> tuple[Digest, int]:
        """``(digest, size)`` of the regular file ``path``: the recorded digest when
        :meth:`known` has it, else hashed (:func:`file_digest`) and recorded under the facts it
        had before. Raises ``OSError`` as :func:`file_digest` does."""
        before = self.facts(path)
        known = self.known(path)
        if known is not None and before is not None:
            return Digest.parse(known), before[0]
        digest, size = file_digest(path)
        self.record(path, digest, before)
        return digest, size

    def save(self) -> bool:
        """Merge what was recorded and forgotten since the last save into the record file as
        it is now (re-read), bounded to ``limit`` entries, atomically. True when written (or
        nothing to write); False on an ``OSError`` (ignored: the record only saves work)."""
        from lemonpack.files import save_bounded_record

        with self._lock:
            if not self._added and not self._dropped:
                return True
            doc = self._read()
            for key in self._dropped:
                doc.pop(key, None)
            for key, entry in self._added.items():
                doc.pop(key, None)
                doc[key] = entry
            done = save_bounded_record(self.path, doc, self.limit, durable=False)  # checked on every read
            self._known = doc
            self._added.clear()
            self._dropped.clear()
        return done


__all__ = ["ALGORITHM", "Digest", "FileDigests", "Hasher", "HashingReader", "RECORD_LIMIT", "SHA256_HEX_LENGTH", "file_digest", "hex_of",
           "is_sha256_digest", "is_sha256_hex", "names_sha256", "sha256_text"]
