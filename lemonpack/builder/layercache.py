"""Built artifact layers, cached by what they were built from, so a warm rebuild does not
unpack and recompress an artifact again.

Layout, beside the artifact store (``<cache root>/layers``, :mod:`lemonpack.paths`)::

    <key>.json          {"format", "artifact", "prefix", "epoch", "level",   (the inputs)
                         "digest": "sha256:..", "diff_id": "sha256:..", "size": N,
                         "executables": [[path, [kind, [archs], machine]], ...]}
    blobs/<hex>         the tar+gzip layer, named by its digest (mode 0444)
    blobs/.tmp-*        a layer being written (locked; stale once its lock is free)
    bases/<hex>.json    what reading a base layer found (its LayerFacts), by the layer's digest
    digests/blobs.json  the digests of cached and base blobs with their stat facts (FileDigests)
    .rec-*              a record being written (locked)
    .scratch-*          a build's scratch directory (locked)

``key`` is the sha256 of (the format: :data:`LAYER_FORMAT` and, for gzip, the deflater
and its version, :func:`lemonpack.oci.layer.deflater`; artifact sha256, in-layer prefix,
epoch, gzip level). Entries are written blob first, then record, both by rename.

A record states every input its key hashes, and the reader recomputes the key from them
(:meth:`LayerCache.get`): a record that is not the one for its own name (copied over from
another recipe's key, an older format) is never used; the layer is rebuilt. What this
cannot tell apart is a record deliberately rewritten to state this key's inputs *and* name
another recipe's blob: nothing short of rebuilding links a layer's bytes to the artifact
(the tar holds the artifact's files, not its digest). The cache belongs to its user, like
``~/.cache/pip`` or a container store; ``lemonpack cache clean`` or a fresh
``LEMONPACK_CACHE_DIR`` rebuilds every layer from verified artifacts.

Trust on a hit: **the digest recorded with the stat facts the blob had when it was hashed**
(:class:`lemonpack.digest.FileDigests`, its rule and record: ``<root>/digests/blobs.json``, at
most :data:`RECORDED` blobs, the base layers' blobs of :mod:`lemonpack.builder.baselayers` too). A blob is recorded right after it was written and hashed, or after it
was re-hashed (its ``[size, mtime_ns, ctime_ns, inode, device]`` taken before the read, kept
only when unchanged after). A hit whose blob still has exactly those facts, and whose recorded
digest is the record's, is copied into the layout with the kernel's copy, without reading it
in Python: any write, truncation, ``touch``, ``chmod``, replacement or restore changes the
ctime at least (it cannot be set from user space), so what those catch is caught. Any other
hit is **re-hashed while it is copied** (:func:`read_layer`): the compressed bytes must hash to
the record's digest and size and the decompressed tar to its ``diff_id`` (a wrong one makes an
image unloadable); then the blob is recorded. What stat facts cannot see is bit rot under an
unchanged inode: ``lemonpack cache verify`` re-hashes every entry. A bad entry is dropped and
the layer rebuilt from the (verified) artifact. (A ``stat`` kept in records by earlier
releases is not read: a re-hash.)
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator, cast

from lemonpack.digest import Digest, FileDigests, Hasher, hex_of, is_sha256_hex
from lemonpack.exe_header import Executable
from lemonpack.files import commit
from lemonpack.oci.layer import deflater
from lemonpack.fetch.staging import (LockedDir, clear_non_regular, ensure_dir, kind_of, locked_temp_file,
                                     open_regular, partials, remove_entry, sweep, tree_size)

log = logging.getLogger(__name__)

#: Bumped whenever the bytes of an artifact layer would change for the same inputs (3: gzip
#: layers deflated by zlib-ng, incompressible blocks stored; the deflater's version is part of
#: the format too).
LAYER_FORMAT = "3"

_READ = 1 << 20
#: Blobs (cached layers and base layers) whose digest ``<root>/digests/blobs.json`` remembers
#: (the oldest dropped first).
RECORDED = 8192
PARTIAL_PREFIXES = (".tmp-", ".rec-", ".scratch-")


@dataclass(frozen=True)
class LayerFacts:
    """What one read of a layer blob found: ``digest`` and ``diff_id`` (``sha256:<hex>``;
    ``diff_id`` is None when the bytes are not one complete gzip stream) and ``size``."""

    digest: str
    diff_id: str | None
    size: int


def read_layer(path: Path, out: BinaryIO | None = None, zstd: bool = False) -> LayerFacts:
    """Hash the gzip (or, with ``zstd``, zstd) layer at ``path`` and its decompressed tar in
    one pass, copying the bytes to ``out`` when given. Memory stays flat (1 MiB reads,
    bounded inflation). Raises ``OSError`` when ``path`` cannot be read or is not a regular
    file itself (:func:`lemonpack.fetch.staging.open_regular`); errors writing to ``out``
    propagate."""
    feed, finish = _zstd_inflater() if zstd else _gzip_inflater()
    raw, diff = Hasher(*(() if out is None else (out,))), Hasher()
    good = True
    with open_regular(path) as f:
        while chunk := f.read(_READ):
            raw.write(chunk)
            if good:
                good = feed(chunk, diff.write)
    good = good and finish(diff.write)
    return LayerFacts(str(raw.digest()), str(diff.digest()) if good else None, raw.size)


def _gzip_inflater():
    """``(feed, finish)`` for one gzip member (RFC 1952): ``feed(chunk, emit)`` passes the
    inflated bytes to ``emit`` and says whether the stream is still good (bytes after the
    member are not what lemonpack writes); ``finish(emit)`` says whether it ended whole."""
    from zlib_ng import zlib_ng  # the layers' own deflater: about 40 % of zlib's CPU to inflate

    inflate = zlib_ng.decompressobj(wbits=31)
    corrupt = cast("type[Exception]", zlib_ng.error)  # its stub calls the class an instance

    def feed(chunk: bytes, emit) -> bool:
        try:
            data = chunk
            while data and not inflate.eof:
                emit(inflate.decompress(data, _READ))  # bounded inflation per step
                data = inflate.unconsumed_tail
        except corrupt:
            return False
        return not (inflate.eof and (inflate.unused_data or data))

    def finish(emit) -> bool:
        try:
            emit(inflate.flush())
        except corrupt:
            return False
        return inflate.eof

    return feed, finish


def _zstd_inflater():
    """``(feed, finish)`` for a zstd stream, as :func:`_gzip_inflater`."""
    import zstandard

    dctx = zstandard.ZstdDecompressor().decompressobj()

    def feed(chunk: bytes, emit) -> bool:
        try:
            emit(dctx.decompress(chunk))
        except zstandard.ZstdError:
            return False
        return True

    return feed, lambda emit: dctx.eof


def recorded_executables(record: dict) -> list[tuple[str, Executable]] | None:
    """The executables a cached layer's record says its tree holds (``executables``: what
    :meth:`LayerCache.commit` was given), or None when it does not say (a record written before
    lemonpack checked them: the layer is rebuilt) or says it in another shape."""
    try:
        return [(rel, Executable.from_json(exe)) for rel, exe in record["executables"] if isinstance(rel, str)]
    except (KeyError, TypeError, ValueError):
        return None


@dataclass(frozen=True)
class LayerEntry:
    """One cached layer: ``key`` (hex), ``blob`` path, ``record`` (the inputs and
    {digest, diff_id, size}; ``{}`` when unusable), ``size`` of the blob on disk (0 when
    missing), ``problem``: why the record or its blob cannot be used, found without
    hashing (None when it looks usable; :meth:`LayerCache.check` re-reads the blob)."""

    key: str
    blob: Path
    record: dict
    size: int
    problem: str | None = None


_INPUTS = ("format", "artifact", "prefix", "epoch", "level")


class LayerCache:
    """The built-layer cache at ``root`` (see the module docstring). Nothing is created
    until the first write."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self._digests: FileDigests | None = None

    @property
    def digests(self) -> FileDigests:
        """``<root>/digests/blobs.json`` (:class:`lemonpack.digest.FileDigests`): the digests of
        the cached layers' blobs and of base layers' blobs, each with its stat facts when it was
        hashed (module docstring)."""
        if self._digests is None:
            self._digests = FileDigests(self.root / "digests" / "blobs.json", limit=RECORDED)
        return self._digests

    def hashed(self, blob: Path, digest: str, before: list[int] | None) -> None:
        """Record that ``blob`` hashed to ``digest``, its bytes read after its facts were
        ``before`` (:meth:`FileDigests.facts`; kept only when it still has them). Never raises:
        the record only saves a later read."""
        if self.digests.record(blob, digest, before) and not self.digests.save():
            log.warning("cannot record the digest of cached layer %s in %s", blob, self.digests.path)

    @property
    def blobs(self) -> Path:
        """``<root>/blobs``."""
        return self.root / "blobs"

    @staticmethod
    def inputs(artifact_sha: str, prefix: str, epoch: int, level: int, compression: str = "gzip") -> dict:
        """The inputs a layer is built from, as its record states them: ``{"format":
        LAYER_FORMAT and the deflater (``"3 zlib-ng 2.3.3"``; ``"3+zstd"`` for a zstd layer),
        "artifact": "sha256:<hex>", "prefix", "epoch", "level"}``. ``artifact_sha``: the
        artifact's sha256, hex (with or without ``sha256:``)."""
        artifact = Digest.parse(artifact_sha, bare=True)
        fmt = f"{LAYER_FORMAT} {deflater()}" if compression == "gzip" else f"{LAYER_FORMAT}+{compression}"
        return {"format": fmt, "artifact": str(artifact), "prefix": prefix, "epoch": epoch, "level": level}

    @staticmethod
    def key_of(inputs: dict) -> str:
        """Hex sha256 of :meth:`inputs`' values (the record's name); ValueError when a
        value is missing or of the wrong type."""
        try:
            fmt, art, prefix, epoch, level = (inputs[k] for k in _INPUTS)
        except (KeyError, TypeError):
            raise ValueError("record does not state every input of its key") from None
        if not (isinstance(fmt, str) and isinstance(art, str) and isinstance(prefix, str)
                and type(epoch) is int and type(level) is int):
            raise ValueError("record states inputs of the wrong type")
        try:
            art_hex = Digest.parse(art).hex
        except ValueError:
            raise ValueError("record states inputs of the wrong type") from None
        return Digest.of_bytes(f"{fmt}\0{art_hex}\0{prefix}\0{epoch}\0{level}".encode()).hex

    @classmethod
    def key(cls, artifact_sha: str, prefix: str, epoch: int, level: int) -> str:
        """Hex sha256 naming the layer built from these inputs (and :data:`LAYER_FORMAT`):
        ``key_of(inputs(...))``."""
        return cls.key_of(cls.inputs(artifact_sha, prefix, epoch, level))

    def _load(self, key: str) -> tuple[Path | None, dict, str | None]:
        """``(blob, record, problem)`` of ``key``'s record, without hashing the blob."""
        rec = self.root / f"{key}.json"
        try:
            with open_regular(rec) as f:
                info = json.loads(f.read(1 << 16).decode())
            digest, size = info["digest"], info["size"]
            hex_ = hex_of(digest)
            if not (type(size) is int and isinstance(info["diff_id"], str)):
                return None, {}, "record is malformed"
        except FileNotFoundError:
            return None, {}, "record is missing"
        except OSError as exc:
            return None, {}, f"record cannot be read ({exc.strerror or exc})"
        except (ValueError, KeyError, TypeError, AttributeError, IndexError):
            return None, {}, "record is malformed"
        try:
            stated = self.key_of(info)
        except ValueError as exc:
            return None, {}, str(exc)
        if stated != key:
            return None, {}, (f"record states the inputs of another layer ({stated}: artifact "
                              f"{info['artifact']}, prefix {info['prefix']!r}), not of its name")
        blob = self.blobs / hex_
        kind = kind_of(blob)
        if kind != "file":
            return blob, {}, f"blob {hex_} is {'missing' if kind == 'missing' else 'a ' + kind}"
        return blob, info, None

    def get(self, key: str) -> tuple[Path, dict] | None:
        """``(blob path, record)`` for ``key``, or None when absent or unusable: malformed,
        stating other inputs than ``key`` hashes (the key is recomputed from the record),
        or naming a blob that is not a regular file. An unusable record is logged.

        The blob's bytes are not verified here: callers check them while they copy it
        (:func:`read_layer`) and :meth:`drop` it when it is not what the record says.
        """
        blob, info, problem = self._load(key)
        if problem is None and blob is not None:  # a usable record always names its blob
            return blob, info
        if problem != "record is missing":
            log.warning("cached layer %s not used: %s; rebuilding it", key, problem)
        return None

    def drop(self, key: str) -> None:
        """Remove ``key``'s record, and its blob when the record is this key's own (a
        record that names another key's blob leaves that blob alone); whatever either is
        (a directory, a symlink: removed, never followed). Missing is fine."""
        blob, info, _problem = self._load(key)
        remove_entry(self.root / f"{key}.json")
        if blob is not None and (info or kind_of(blob) not in ("file", "missing")):
            remove_entry(blob)

    def staging(self) -> tuple[BinaryIO, Path]:
        """A locked temp file for a new blob (stale temps are swept first; a ``layers`` or
        ``blobs`` that is not a directory is removed)."""
        for bad in ensure_dir(self.blobs, self.root.parent):
            log.warning("%s was not a directory; removed", bad)
        self.sweep()
        return locked_temp_file(self.blobs, ".tmp-")

    def commit(self, inputs: dict, fh: BinaryIO, tmp: Path, digest: str, diff_id: str, size: int,
               facts: dict | None = None) -> Path:
        """Name the temp ``tmp`` (written through ``fh``) by its ``digest`` (mode 0444),
        then write the record of ``inputs`` (:meth:`inputs`) at ``<key_of(inputs)>.json``;
        returns the blob path. The caller computed the facts while writing; ``facts``: more
        of them kept in the record (the pipeline's ``executables``: what a hit is checked
        against). Whatever is not a regular file at either name (a directory ...) is removed first."""
        key = self.key_of(inputs)
        fh.flush()
        os.chmod(tmp, 0o444)
        blob = self.blobs / hex_of(digest)
        clear_non_regular(blob)
        commit(tmp, blob, durable=False)  # content-addressed: checked by stat facts and digest
        fh.close()
        self._write_record(key, {**(facts or {}), **inputs, "digest": digest, "diff_id": diff_id, "size": size})
        self.hashed(blob, digest, self.digests.facts(blob))  # hashed by its writer, ours from its rename on
        return blob

    def _write_record(self, key: str, doc: dict) -> None:
        rfh, rtmp = locked_temp_file(self.root, ".rec-")
        with rfh:
            rfh.write(json.dumps(doc).encode())
            rfh.flush()
            clear_non_regular(self.root / f"{key}.json")
            commit(rtmp, self.root / f"{key}.json", durable=False)

    @staticmethod
    def discard(fh: BinaryIO, tmp: Path) -> None:
        """Remove an unfinished temp, then release its lock."""
        tmp.unlink(missing_ok=True)
        fh.close()

    def scratch(self) -> LockedDir:
        """A locked scratch directory ``<root>/.scratch-*`` for one build (a ``layers``
        that is not a directory is removed first)."""
        for bad in ensure_dir(self.root, self.root.parent):
            log.warning("%s was not a directory; removed", bad)
        self.sweep()
        return LockedDir(self.root, ".scratch-")

    def entries(self) -> Iterator[LayerEntry]:
        """Every record (sorted by key), with its blob; nothing is re-hashed. Unusable
        ones (see :meth:`get`) come with ``problem`` set and ``record`` ``{}``; their
        ``blob`` is the one they name, or ``<root>/<key>.json`` when they name none."""
        if not self.root.is_dir():
            return
        for rec in sorted(self.root.glob("*.json")):
            key = rec.stem
            if not is_sha256_hex(key):
                continue
            blob, info, problem = self._load(key)
            if problem is None and blob is not None:
                yield LayerEntry(key, blob, info, tree_size(blob))
            else:
                yield LayerEntry(key, rec, {}, tree_size(rec), problem)

    def orphans(self) -> list[Path]:
        """Blobs no usable record names (left by a crash between blob and record, or
        named by a bad record), whatever they are (a directory at a blob's name too)."""
        named = {e.blob.name for e in self.entries() if e.problem is None}
        try:
            names = os.listdir(self.blobs)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(self.blobs / n for n in names if is_sha256_hex(n) and n not in named)

    def check(self, entry: LayerEntry) -> str | None:
        """Why ``entry`` is not what its record says (re-reads the blob), or None."""
        if entry.problem is not None or not entry.record:
            return entry.problem or "record is malformed or its blob is missing"
        try:
            facts = read_layer(entry.blob, zstd=str(entry.record.get("format", "")).endswith("+zstd"))
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

    # -- facts of base image layers ---------------------------------------------------
    @property
    def bases(self) -> Path:
        """``<root>/bases``: what reading each base layer found, by the layer's digest."""
        return self.root / "bases"

    def base_facts(self, digest: str) -> dict | None:
        """The facts recorded for the base layer ``digest`` (``sha256:<hex>``; a JSON object,
        :class:`lemonpack.oci.layerscan.LayerFacts` form), or None when absent or unreadable.

        Trust: the facts are a function of the layer's bytes, which are hashed against
        ``digest`` every time they are copied into a layout; the record itself is as
        trusted as the rest of this cache (its user's)."""
        try:
            hex_ = Digest.parse(digest, bare=True).hex
        except ValueError:
            return None
        try:
            with open_regular(self.bases / f"{hex_}.json") as f:
                doc = json.loads(f.read(1 << 22).decode())
        except (OSError, ValueError):
            return None
        return doc if isinstance(doc, dict) else None

    def put_base_facts(self, digest: str, doc: dict) -> None:
        """Record ``doc`` for the base layer ``digest`` (temp + rename; errors are logged,
        never raised: the facts are only a shortcut); ``ValueError`` for a malformed ``digest``."""
        hex_ = Digest.parse(digest, bare=True).hex
        try:
            for bad in ensure_dir(self.bases, self.root.parent):
                log.warning("%s was not a directory; removed", bad)
            fh, tmp = locked_temp_file(self.bases, ".rec-")
            with fh:
                fh.write(json.dumps(doc).encode())
                fh.flush()
                clear_non_regular(self.bases / f"{hex_}.json")
                commit(tmp, self.bases / f"{hex_}.json", durable=False)
        except OSError as exc:
            log.warning("cannot record the facts of base layer %s: %s", digest, exc)

    def partials(self) -> list[Path]:
        """Temps of builds: blobs and records being written, scratch directories."""
        return partials(self.blobs, (".tmp-",)) + partials(self.root, (".rec-", ".scratch-"))

    def sweep(self) -> list[tuple[Path, int]]:
        """Remove the stale temps (their writer is gone); ``[(path, bytes)]``."""
        return sweep(self.blobs, (".tmp-",)) + sweep(self.root, (".rec-", ".scratch-"))


__all__ = ["LayerCache", "LayerEntry", "LayerFacts", "read_layer", "LAYER_FORMAT"]
