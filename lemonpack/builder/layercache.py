"""Built artifact layers, cached by what they were built from, so a warm rebuild does not
unpack and recompress an artifact again.

Layout, beside the artifact store (``<cache root>/layers``, :mod:`lemonpack.paths`)::

    <key>.json          {"digest": "sha256:..", "diff_id": "sha256:..", "size": N}
    blobs/<hex>         the tar+gzip layer, named by its digest (mode 0444)
    blobs/.tmp-*        a layer being written (locked; stale once its lock is free)
    .rec-*              a record being written (locked)
    .scratch-*          a build's scratch directory (locked)

``key`` is the sha256 of (:data:`LAYER_FORMAT`, artifact sha256, in-layer prefix, epoch,
gzip level). Entries are written blob first, then record, both by rename.

Trust on a hit: **re-hash every time, while copying into the layout**
(:func:`read_layer`): the compressed bytes must hash to the record's digest and size, and
the decompressed tar, hashed in the same pass, must give the record's ``diff_id`` (a wrong
``diff_id`` makes an image unloadable). Not stat facts: the blob is copied into the layout
in full anyway (never hard-linked, so nothing done to a layout reaches the cache), so
hashing costs only CPU in a read that happens regardless, and it also catches bit rot,
which leaves stat facts unchanged. A bad entry is dropped and the layer rebuilt from the
(re-verified) artifact.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator

from lemonpack.fetch.staging import LockedDir, locked_temp_file, partials, sweep

log = logging.getLogger(__name__)

#: Bumped whenever the bytes of an artifact layer would change for the same inputs.
LAYER_FORMAT = "1"

_HEX64 = re.compile(r"[0-9a-f]{64}")
_READ = 1 << 20
PARTIAL_PREFIXES = (".tmp-", ".rec-", ".scratch-")


@dataclass(frozen=True)
class LayerFacts:
    """What one read of a layer blob found: ``digest`` and ``diff_id`` (``sha256:<hex>``;
    ``diff_id`` is None when the bytes are not one complete gzip stream) and ``size``."""

    digest: str
    diff_id: str | None
    size: int


def read_layer(path: Path, out: BinaryIO | None = None) -> LayerFacts:
    """Hash the gzip layer at ``path`` and its decompressed tar in one pass, copying the
    bytes to ``out`` when given. Memory stays flat (1 MiB reads, bounded inflation).
    Raises ``OSError`` when ``path`` cannot be read."""
    sha, diff, size = hashlib.sha256(), hashlib.sha256(), 0
    inflate = zlib.decompressobj(wbits=31)  # gzip container (RFC 1952)
    good = True
    with open(path, "rb", buffering=0) as f:
        while chunk := f.read(_READ):
            sha.update(chunk)
            size += len(chunk)
            if out is not None:
                out.write(chunk)
            if not good:
                continue
            try:
                data = chunk
                while data and not inflate.eof:
                    diff.update(inflate.decompress(data, _READ))
                    data = inflate.unconsumed_tail
                if inflate.eof and (inflate.unused_data or data):
                    good = False  # bytes after the gzip member: not what we write
            except zlib.error:
                good = False
    if good:
        try:
            diff.update(inflate.flush())
        except zlib.error:
            good = False
    good = good and inflate.eof
    return LayerFacts("sha256:" + sha.hexdigest(), "sha256:" + diff.hexdigest() if good else None, size)


@dataclass(frozen=True)
class LayerEntry:
    """One cached layer: ``key`` (hex), ``blob`` path, ``record`` ({digest, diff_id,
    size}), ``size`` of the blob on disk (0 when missing)."""

    key: str
    blob: Path
    record: dict
    size: int


class LayerCache:
    """The built-layer cache at ``root`` (see the module docstring). Nothing is created
    until the first write."""

    def __init__(self, root: Path):
        self.root = Path(root)

    @property
    def blobs(self) -> Path:
        """``<root>/blobs``."""
        return self.root / "blobs"

    @staticmethod
    def key(artifact_sha: str, prefix: str, epoch: int, level: int) -> str:
        """Hex sha256 naming the layer built from these inputs (and :data:`LAYER_FORMAT`)."""
        return hashlib.sha256(f"{LAYER_FORMAT}\0{artifact_sha}\0{prefix}\0{epoch}\0{level}".encode()).hexdigest()

    def get(self, key: str) -> tuple[Path, dict] | None:
        """``(blob path, record)`` for ``key`` or None when absent or malformed.

        Not verified here: callers check the blob while they copy it
        (:func:`read_layer`) and :meth:`drop` it when it is not what the record says.
        """
        try:
            info = json.loads((self.root / f"{key}.json").read_text())
            digest, size = info["digest"], info["size"]
            hex_ = digest.split(":", 1)[1]
            if not (digest.startswith("sha256:") and _HEX64.fullmatch(hex_) and isinstance(size, int)
                    and isinstance(info["diff_id"], str)):
                return None
        except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError):
            return None
        blob = self.blobs / hex_
        return (blob, info) if blob.is_file() else None

    def drop(self, key: str) -> None:
        """Remove ``key``'s record and its blob (missing is fine)."""
        hit = self.get(key)
        (self.root / f"{key}.json").unlink(missing_ok=True)
        if hit is not None:
            hit[0].unlink(missing_ok=True)

    def staging(self) -> tuple[BinaryIO, Path]:
        """A locked temp file for a new blob (stale temps are swept first)."""
        self.blobs.mkdir(parents=True, exist_ok=True)
        self.sweep()
        return locked_temp_file(self.blobs, ".tmp-")

    def commit(self, key: str, fh: BinaryIO, tmp: Path, digest: str, diff_id: str, size: int) -> Path:
        """Name the temp ``tmp`` (written through ``fh``) by its ``digest`` (mode 0444),
        then write ``key``'s record; returns the blob path. The caller computed the facts
        while writing."""
        fh.flush()
        os.chmod(tmp, 0o444)
        blob = self.blobs / digest.split(":", 1)[1]
        os.replace(tmp, blob)
        fh.close()
        rfh, rtmp = locked_temp_file(self.root, ".rec-")
        with rfh:
            rfh.write(json.dumps({"digest": digest, "diff_id": diff_id, "size": size}).encode())
            rfh.flush()
            os.replace(rtmp, self.root / f"{key}.json")
        return blob

    @staticmethod
    def discard(fh: BinaryIO, tmp: Path) -> None:
        """Remove an unfinished temp, then release its lock."""
        tmp.unlink(missing_ok=True)
        fh.close()

    def scratch(self) -> LockedDir:
        """A locked scratch directory ``<root>/.scratch-*`` for one build."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.sweep()
        return LockedDir(self.root, ".scratch-")

    def entries(self) -> Iterator[LayerEntry]:
        """Every record (sorted by key), with its blob; nothing is re-hashed."""
        if not self.root.is_dir():
            return
        for rec in sorted(self.root.glob("*.json")):
            key = rec.stem
            if not _HEX64.fullmatch(key):
                continue
            hit = self.get(key)
            if hit is None:
                yield LayerEntry(key, self.blobs / "?", {}, 0)
            else:
                yield LayerEntry(key, hit[0], hit[1], hit[0].stat().st_size)

    def orphans(self) -> list[Path]:
        """Blobs no record names (left by a crash between blob and record)."""
        named = {e.blob.name for e in self.entries()}
        if not self.blobs.is_dir():
            return []
        return sorted(p for p in self.blobs.iterdir() if _HEX64.fullmatch(p.name) and p.name not in named)

    def check(self, entry: LayerEntry) -> str | None:
        """Why ``entry`` is not what its record says (re-reads the blob), or None."""
        if not entry.record:
            return "record is malformed or its blob is missing"
        try:
            facts = read_layer(entry.blob)
        except OSError as exc:
            return f"blob unreadable: {exc}"
        rec = entry.record
        if facts.digest != rec["digest"]:
            return f"blob hashes to {facts.digest}, record says {rec['digest']}"
        if facts.size != rec["size"]:
            return f"blob has {facts.size} bytes, record says {rec['size']}"
        if facts.diff_id != rec["diff_id"]:
            return f"uncompressed tar hashes to {facts.diff_id}, record says {rec['diff_id']}"
        return None

    def partials(self) -> list[Path]:
        """Temps of builds: blobs and records being written, scratch directories."""
        return partials(self.blobs, (".tmp-",)) + partials(self.root, (".rec-", ".scratch-"))

    def sweep(self) -> list[tuple[Path, int]]:
        """Remove the stale temps (their writer is gone); ``[(path, bytes)]``."""
        return sweep(self.blobs, (".tmp-",)) + sweep(self.root, (".rec-", ".scratch-"))


__all__ = ["LayerCache", "LayerEntry", "LayerFacts", "read_layer", "LAYER_FORMAT"]
