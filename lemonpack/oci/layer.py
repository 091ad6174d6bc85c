"""Deterministic, streaming tar+gzip layers.

Input: a directory tree (:func:`write_dir_layer`) or a few in-memory files
(:func:`write_files_layer`). Output: a gzip-compressed tar stream written to a binary file
object, plus its :class:`LayerInfo` (``digest`` of the compressed bytes, ``diff_id`` of
the uncompressed tar, compressed ``size``), as OCI image-spec v1.1 ``layer.md`` and
``config.md`` (``rootfs.diff_ids``) define them.

Same tree, same bytes. Everything that varies between machines is normalised by one filter,
:func:`_normalise`, applied to every entry:

- entries sorted by their in-layer path (UTF-8 bytes), so parents precede children; the
  parent directories of ``prefix`` are emitted too;
- ``mtime`` from a parameter (callers pass ``SOURCE_DATE_EPOCH`` or 0), uid/gid 0,
  uname/gname ``""``;
- modes: directories 0755, regular files 0755 if any execute bit is set else 0644,
  symlinks 0777 (setuid/setgid/sticky bits are dropped);
- tar format ``tarfile.PAX_FORMAT`` always; PAX extended headers appear only for long
  names/targets, non-ASCII names or files >= 8 GiB, never for times;
- hard links are stored as regular files (each path carries its own content), like
  nixpkgs ``stream_layered_image.py``;
- gzip header with mtime 0, no file name, OS byte 255 (as ``gzip.GzipFile``); the deflate
  stream is cut every :data:`BLOCK` input bytes, whatever the number of threads.

The hard part is keeping memory flat and the CPU spent per byte below ``gzip -1``'s: the tar
stream is produced in the calling thread (file reads, the diff_id hash and CRC-32 release the
GIL) and cut into 1 MiB blocks that a pool of threads deflates independently (each primed
with the previous block's last 32 KiB, as ``pigz`` does), written in order through the
digest hash (the caller's :class:`~lemonpack.digest.Hasher` when it hands one in: each
compressed byte is hashed once). ``zstd`` layers (``tar+zstd``) use libzstd's own workers.
No layer is ever held in memory.

The deflater is zlib-ng's (through the ``zlib-ng`` package, pinned in ``pyproject.toml``),
at level :data:`DEFAULT_COMPRESSLEVEL` by default: output within 1 % of zlib's level 1 for
about two thirds of its CPU per byte (measured on shared libraries: 162 vs 110 MiB/s per
core; zlib-ng's own level 1 is faster still but a fifth bigger). A block whose samples do not
shrink (:func:`_incompressible`: already compressed data, random bytes) is stored instead of
deflated, as a deflater would end up storing it, without spending the CPU to find that out.
Byte-reproducibility holds for the same deflater (:func:`deflater`: zlib-ng's version):
measured identical on x86-64 without SSE4.2, with SSE4.2, AVX2 and AVX-512, and on arm64
(the compressed bytes of one corpus under qemu's CPU models), while ISA-L, evaluated too, gives
other bytes on arm64 and on x86 without SSE4.2. The ``diff_id`` never depends on compression.
The layer cache keys its entries by the deflater, so a layer from another one is never reused.

Refused (:class:`~lemonpack.errors.UnsafeContentError`, naming the path inside the tree,
never the directory it was read from): device files, fifos, sockets, names that are not
UTF-8, names with the OCI whiteout prefix ``.wh.`` and symlinks that resolve outside the
source root, both judged by :mod:`lemonpack.safetree`, the same rule the extractor applies
(so what ``install`` accepts, an image can hold, and the other way round).
"""

from __future__ import annotations

import os
import stat
import struct
import tarfile
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator, Literal, Sequence

from lemonpack.digest import Hasher
from lemonpack.errors import StorageError, UnsafeContentError
from lemonpack.safetree import component_problem, name_problem, path_problem, symlink_problem
from lemonpack.oci.mediatypes import MEDIA_TYPE_LAYER_TAR_GZIP, MEDIA_TYPE_LAYER_TAR_ZSTD

CHUNK = 1 << 20
"""Read and queue granularity in bytes (1 MiB)."""

DEFAULT_COMPRESSLEVEL = 2
"""Default gzip level (zlib-ng's levels): 2 compresses as ``gzip -1`` does, within 1 %, at
about two thirds of its CPU per byte; zlib-ng's level 1 (``deflate_quick``, fixed Huffman
codes) is faster but a fifth bigger on executables, and levels 6-9 gain a few percent for
3-5x the CPU time (layers are usually binaries and model runtimes)."""

_QUEUE_DEPTH = 8
_TAR_FORMAT: Literal[2] = tarfile.PAX_FORMAT  # tobuf's format argument is typed as the literal
_BLOCK = tarfile.BLOCKSIZE
_RECORD = tarfile.RECORDSIZE


@dataclass(frozen=True)
class LayerInfo:
    """What a layer writer produced.

    ``digest``: ``"sha256:<hex>"`` of the compressed bytes (the layer descriptor's digest);
    ``diff_id``: ``"sha256:<hex>"`` of the uncompressed tar (config ``rootfs.diff_ids``);
    ``size``: compressed size in bytes (the descriptor's size); ``media_type``: ``...tar+gzip``
    (default) or ``...tar+zstd``.
    Spec: OCI image-spec v1.1 ``layer.md``, ``config.md`` ("Layer DiffID").
    """

    digest: str
    diff_id: str
    size: int
    media_type: str = MEDIA_TYPE_LAYER_TAR_GZIP


@dataclass(frozen=True)
class _Entry:
    """One member to emit. ``path`` is relative, no leading or trailing slash."""

    path: str
    kind: str  # "dir" | "file" | "symlink"
    mode: int = 0o755
    size: int = 0
    source: str | None = None  # file on disk to stream
    data: bytes | None = None  # in-memory content
    linkname: str = ""


# --- the one normalisation filter ----------------------------------------------------

def _normalise(entry: _Entry, mtime: int) -> tarfile.TarInfo:
    """Build the normalised tar header for ``entry``: the only place metadata is decided."""
    info = tarfile.TarInfo(entry.path)
    info.mtime = int(mtime)
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if entry.kind == "dir":
        info.type, info.mode, info.size = tarfile.DIRTYPE, 0o755, 0
    elif entry.kind == "symlink":
        info.type, info.mode, info.size = tarfile.SYMTYPE, 0o777, 0
        info.linkname = entry.linkname
    else:
        info.type, info.size = tarfile.REGTYPE, entry.size
        info.mode = 0o755 if entry.mode & 0o111 else 0o644
    return info


def _header(entry: _Entry, mtime: int) -> bytes:
    return _normalise(entry, mtime).tobuf(_TAR_FORMAT, "utf-8", "strict")


# --- the streaming pipeline ----------------------------------------------------------

BLOCK = 1 << 20
"""Input bytes per deflate block: the tar stream is cut at every multiple of this, whatever
the writes, so the compressed bytes do not depend on how the tar was produced."""

_DICT = 32 * 1024
COMPRESSIONS = ("gzip", "zstd")
ZSTD_LEVEL = 3
"""zstd level of ``tar+zstd`` layers (zstd's own default)."""

_ZSTD_JOB = 4 << 20  # input bytes per zstd job: fixed (the bytes do not depend on it changing), and it bounds memory


def _workers() -> int:
    return max(1, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


_PROBE = 4096  # bytes per sample of _incompressible


def _deflate_module():
    """The zlib-compatible module every gzip layer is deflated with: ``zlib_ng.zlib_ng``."""
    from zlib_ng import zlib_ng

    return zlib_ng


def deflater() -> str:
    """Which deflater writes gzip layers, with its version (``"zlib-ng 2.3.3"``): with the
    input and the level, what the compressed bytes depend on (module docstring); the layer
    cache keys its entries by it. Raises ``ImportError`` when ``zlib-ng`` is missing."""
    return f"zlib-ng {_deflate_module().ZLIBNG_VERSION}"


def _incompressible(z, block) -> bool:
    """Whether ``block`` is stored rather than deflated: each of four :data:`_PROBE`-byte
    samples (at 0, 1/4, 1/2 and 3/4 of the block) deflated alone at level 1 saves less than
    1/64 of its size. A pure function of the bytes (and the deflater), so the stream stays
    reproducible; it costs about 1 % of deflating the block."""
    step = len(block) // 4
    if step < _PROBE:
        return False
    for off in range(0, 4 * step, step):
        c = z.compressobj(1, z.DEFLATED, -15, 8, z.Z_DEFAULT_STRATEGY)
        if len(c.compress(block[off:off + _PROBE]) + c.flush(z.Z_SYNC_FLUSH)) < _PROBE - _PROBE // 64:
            return False
    return True


class _ParallelGzip:
    """A gzip member made of independently compressed deflate blocks, as ``pigz`` does.

    Block *i* (:data:`BLOCK` input bytes) is raw-deflated by zlib-ng at ``level`` (memory
    level 8, window 32 KiB) with the last 32 KiB of block *i-1* as its preset dictionary, or
    stored when :func:`_incompressible` says so, and ends with a sync flush (an empty stored
    block, byte-aligned), so the blocks concatenate into one valid deflate stream (RFC 1951);
    an empty final block closes it, then the CRC-32 and size (RFC 1952). Blocks are
    compressed by a pool of threads (zlib-ng releases the GIL) and written in order. The
    bytes depend only on the input, the level and the deflater (:func:`deflater`), never on
    the thread count or timing. Header: mtime 0, no name, XFL as ``gzip.GzipFile`` sets it,
    OS 255."""

    def __init__(self, sink, level: int, workers: int):
        self.sink, self.level = sink, level
        self.z = _deflate_module()
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="lemonpack-deflate")
        self.pending: deque = deque()
        self.depth = 2 * workers
        self.crc, self.size, self.tail = 0, 0, b""
        xfl = 2 if level == 9 else 4 if level == 1 else 0
        sink.write(b"\x1f\x8b\x08\x00" + b"\x00\x00\x00\x00" + bytes([xfl, 255]))

    def _deflate(self, block: bytes, zdict: bytes) -> bytes:
        z = self.z
        if self.level and _incompressible(z, block):
            c = z.compressobj(0, z.DEFLATED, -15, 8, z.Z_DEFAULT_STRATEGY)
        elif zdict:
            c = z.compressobj(self.level, z.DEFLATED, -15, 8, z.Z_DEFAULT_STRATEGY, zdict)
        else:
            c = z.compressobj(self.level, z.DEFLATED, -15, 8, z.Z_DEFAULT_STRATEGY)
        return c.compress(block) + c.flush(z.Z_SYNC_FLUSH)

    def add(self, block: bytes) -> None:
        self.crc = self.z.crc32(block, self.crc)  # zlib's CRC-32 (RFC 1952), with PCLMULQDQ
        self.size += len(block)
        self.pending.append(self.pool.submit(self._deflate, block, self.tail))
        self.tail = bytes(block[-_DICT:])
        while len(self.pending) > self.depth:
            self.sink.write(self.pending.popleft().result())

    def close(self) -> None:
        while self.pending:
            self.sink.write(self.pending.popleft().result())
        self.pool.shutdown()
        self.sink.write(b"\x03\x00")  # a final, empty block with fixed codes (what zlib's Z_FINISH writes)
        self.sink.write(struct.pack("<II", self.crc & 0xFFFFFFFF, self.size & 0xFFFFFFFF))

    def abort(self) -> None:
        for f in self.pending:
            f.cancel()
        self.pool.shutdown(wait=True)


class _Zstd:
    """A zstd frame (RFC 8878) written by libzstd's own worker threads (at least one, so
    the bytes are the same whatever the count: zstd's multi-threaded output does not
    depend on the number of workers), level :data:`ZSTD_LEVEL`, 4 MiB jobs (about 30 MiB of
    buffers on 2 cores), no checksum, no content size."""

    def __init__(self, sink, workers: int):
        import zstandard

        params = zstandard.ZstdCompressionParameters.from_level(
            ZSTD_LEVEL, threads=max(1, workers), job_size=_ZSTD_JOB, write_checksum=False, write_content_size=False)
        self.w = zstandard.ZstdCompressor(compression_params=params).stream_writer(sink, closefd=False)

    def add(self, block: bytes) -> None:
        self.w.write(block)

    def close(self) -> None:
        self.w.flush(1)  # zstandard.FLUSH_FRAME
        self.w.close()

    def abort(self) -> None:
        try:
            self.w.close()
        except Exception:  # noqa: BLE001 (already failing)
            pass


class _Pipeline:
    """Tar bytes in, compressed bytes and both hashes out.

    ``write`` cuts the tar stream into :data:`BLOCK`-sized blocks, hashes them for the
    diff_id and hands them to the compressor (:class:`_ParallelGzip` or :class:`_Zstd`),
    whose output passes through the digest hash to ``out``. Memory: a few blocks per
    worker (about 10 MiB on 2 cores).
    """

    def __init__(self, out: BinaryIO, compresslevel: int, compression: str = "gzip"):
        if not 0 <= compresslevel <= 9:
            raise ValueError(f"compresslevel must be 0..9, got {compresslevel}")
        if compression not in COMPRESSIONS:
            raise ValueError(f"compression must be one of {', '.join(COMPRESSIONS)}, got {compression!r}")
        self._diff = Hasher()
        self._buf = bytearray()
        # a fresh Hasher handed in (add_blob_file's) hashes every byte out: the only hash of them
        self._sink = out if isinstance(out, Hasher) and out.size == 0 else Hasher(out)
        workers = _workers()
        self._z = _ParallelGzip(self._sink, compresslevel, workers) if compression == "gzip" else \
            _Zstd(self._sink, workers)
        self.tar_size = 0

    def _push(self, block) -> None:
        self._diff.write(block)
        self._z.add(block)

    def write(self, data: bytes) -> None:
        self.tar_size += len(data)
        view = memoryview(data)
        if self._buf:  # complete the block started by earlier writes
            need = BLOCK - len(self._buf)
            self._buf += view[:need]
            view = view[need:]
            if len(self._buf) < BLOCK:
                return
            self._push(bytes(self._buf))
            self._buf.clear()
        whole = len(view) - len(view) % BLOCK
        for off in range(0, whole, BLOCK):  # full blocks straight from the caller's bytes
            self._push(view[off:off + BLOCK] if isinstance(data, bytes) else bytes(view[off:off + BLOCK]))
        if whole < len(view):
            self._buf += view[whole:]

    def finish(self) -> tuple[str, str, int]:
        """Flush, close the compressed stream; return ``(diff_id, digest, size)``."""
        if self._buf:
            self._push(bytes(self._buf))
            self._buf.clear()
        self._z.close()
        self._sink.flush()
        return str(self._diff.digest()), str(self._sink.digest()), self._sink.size

    def abort(self) -> None:
        """Stop the compressor after an error in the producer."""
        self._z.abort()


def _emit(entries: Iterator[_Entry], out: BinaryIO, mtime: int, compresslevel: int,
          compression: str = "gzip") -> LayerInfo:
    """Write ``entries`` (already sorted and validated) as a compressed tar stream to ``out``."""
    pipe = _Pipeline(out, compresslevel, compression)
    try:
        for entry in entries:
            pipe.write(_header(entry, mtime))
            if entry.kind != "file":
                continue
            if entry.data is not None:
                pipe.write(entry.data)
            else:
                _stream_file(entry, pipe)
            pad = -entry.size % _BLOCK
            if pad:
                pipe.write(b"\0" * pad)
        end = b"\0" * (2 * _BLOCK)
        total = pipe.tar_size + len(end)
        pipe.write(end + b"\0" * (-total % _RECORD))
        diff_id, digest, size = pipe.finish()
    except BaseException:
        pipe.abort()
        raise
    return LayerInfo(digest=digest, diff_id=diff_id, size=size,
                     media_type=MEDIA_TYPE_LAYER_TAR_GZIP if compression == "gzip" else MEDIA_TYPE_LAYER_TAR_ZSTD)


def _stream_file(entry: _Entry, pipe: _Pipeline) -> None:
    assert entry.source is not None, "a file entry without data has a source"
    remaining = entry.size
    with open(entry.source, "rb", buffering=0) as f:
        while remaining:
            data = f.read(min(CHUNK, remaining))
            if not data:
                raise StorageError(f"{entry.source}: file shrank while being archived")
            remaining -= len(data)
            pipe.write(data)
        if f.read(1):
            raise StorageError(f"{entry.source}: file grew while being archived")


# --- entry collection ----------------------------------------------------------------

def _clean_prefix(prefix: str) -> str:
    parts = [p for p in prefix.strip("/").split("/") if p]
    for part in parts:
        why = component_problem(part)
        if why:
            raise UnsafeContentError(f"layer prefix {prefix!r}: {why}")
    return "/".join(parts)


def _parents(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def _check_name(name: str, where: str) -> None:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise UnsafeContentError(f"{where!r}: file name is not valid UTF-8") from None


def _scan(src: Path, prefix: str) -> list[_Entry]:
    """Walk ``src`` (never following symlinks) into a sorted entry list under ``prefix``."""
    entries: list[_Entry] = []
    if prefix:
        entries.extend(_Entry(p, "dir") for p in _parents(prefix + "/x"))
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        abs_dir = os.path.join(src, rel_dir) if rel_dir else str(src)
        with os.scandir(abs_dir) as it:
            for de in it:
                rel = f"{rel_dir}/{de.name}" if rel_dir else de.name
                _check_name(rel, rel)
                why = component_problem(de.name) or name_problem(rel)  # as the extractor: no backslash
                if why:
                    raise UnsafeContentError(f"{rel!r}: {why}")
                st = de.stat(follow_symlinks=False)
                inlayer = f"{prefix}/{rel}" if prefix else rel
                mode = st.st_mode
                if stat.S_ISDIR(mode):
                    entries.append(_Entry(inlayer, "dir"))
                    stack.append(rel)
                elif stat.S_ISREG(mode):
                    entries.append(_Entry(inlayer, "file", mode=stat.S_IMODE(mode),
                                          size=st.st_size, source=de.path))
                elif stat.S_ISLNK(mode):
                    target = os.readlink(de.path)
                    _check_name(target, rel)
                    why = symlink_problem(src, rel)
                    if why:
                        raise UnsafeContentError(f"{rel!r}: {why}")
                    entries.append(_Entry(inlayer, "symlink", linkname=target))
                else:
                    kind = ("device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else
                            "fifo" if stat.S_ISFIFO(mode) else
                            "socket" if stat.S_ISSOCK(mode) else "special file")
                    raise UnsafeContentError(f"{rel!r}: refusing to archive a {kind}")
    entries.sort(key=lambda e: e.path.encode("utf-8"))
    return entries


# --- public API ----------------------------------------------------------------------

def write_dir_layer(src_dir: Path, prefix: str, out: BinaryIO, *, mtime: int,
                    compresslevel: int = DEFAULT_COMPRESSLEVEL, compression: str = "gzip") -> LayerInfo:
    """Write the tree of ``src_dir`` as a deterministic tar+gzip layer to ``out``.

    ``src_dir``: a directory (symlinks inside it are archived as symlinks, never followed).
    ``prefix``: in-layer directory the tree goes under, e.g. ``"opt/lemonpack/myrecipe"``
    (leading/trailing slashes ignored; ``""`` puts the tree at the layer root); its
    parent directories get their own entries (``opt/``, ``opt/lemonpack/``, ...).
    ``out``: a writable binary file object; only ``write`` (and ``flush`` if present) is used.
    ``mtime``: seconds since the epoch stamped on every entry (``SOURCE_DATE_EPOCH`` or 0).
    ``compresslevel``: gzip level 0-9, default 1 (see :data:`DEFAULT_COMPRESSLEVEL`);
    ``compression``: ``gzip`` (default, ``tar+gzip``) or ``zstd`` (``tar+zstd``, level
    :data:`ZSTD_LEVEL`; needs the ``zstandard`` package).

    Returns :class:`LayerInfo`. Memory stays flat (files are read in 1 MiB chunks).
    Raises :class:`UnsafeContentError` (naming the path inside ``src_dir``) for devices,
    fifos, sockets, symlinks resolving outside ``src_dir``, whiteout (``.wh.``) and
    non-UTF-8 names and names holding a backslash (:mod:`lemonpack.safetree`), ``.``/``..`` in
    ``prefix``; :class:`StorageError` when
    a file changes size while being read; ``NotADirectoryError``/``OSError`` from the OS.

    Spec: OCI image-spec v1.1 ``layer.md`` (tar+gzip changesets) and ``config.md`` (diff_ids).
    """
    src = Path(src_dir)
    if not src.is_dir():
        raise NotADirectoryError(f"{src}: not a directory")
    entries = _scan(src.resolve(), _clean_prefix(prefix))
    return _emit(iter(entries), out, mtime, compresslevel, compression)


def write_files_layer(files: Sequence[tuple[str, bytes, int]], out: BinaryIO, *, mtime: int,
                      compresslevel: int = DEFAULT_COMPRESSLEVEL, compression: str = "gzip") -> LayerInfo:
    """Write small in-memory files as a deterministic tar+gzip layer to ``out``.

    ``files``: ``(path, content, mode)`` triples; ``path`` is the in-layer path
    (``"etc/lemonpack/recipe.json"``, a leading ``/`` is ignored), ``content`` bytes,
    ``mode`` only decides executable (0755) or not (0644). Parent directories are added
    as 0755 entries. Same normalisation and ordering as :func:`write_dir_layer`.

    Returns :class:`LayerInfo`. Raises :class:`UnsafeContentError` for a path the one
    path-component rule refuses (:func:`lemonpack.safetree.path_problem`: empty, ``.`` or
    ``..`` components, a backslash or NUL) and ``ValueError`` for a path given twice or a path that is
    both a file and a parent directory.

    Spec: OCI image-spec v1.1 ``layer.md``.
    """
    entries: dict[str, _Entry] = {}
    dirs: set[str] = set()
    for path, content, mode in files:
        clean = path.lstrip("/")
        why = path_problem(clean)
        if why:
            raise UnsafeContentError(f"in-layer path {path!r}: {why}")
        if clean in entries:
            raise ValueError(f"in-layer path {clean!r} given twice")
        entries[clean] = _Entry(clean, "file", mode=mode, size=len(content), data=bytes(content))
        dirs.update(_parents(clean))
    clash = dirs & entries.keys()
    if clash:
        raise ValueError(f"in-layer path {sorted(clash)[0]!r} is both a file and a directory")
    for d in dirs:
        entries[d] = _Entry(d, "dir")
    ordered = sorted(entries.values(), key=lambda e: e.path.encode("utf-8"))
    return _emit(iter(ordered), out, mtime, compresslevel, compression)


__all__ = ["LayerInfo", "write_dir_layer", "write_files_layer", "deflater", "CHUNK", "BLOCK", "COMPRESSIONS",
           "DEFAULT_COMPRESSLEVEL", "ZSTD_LEVEL"]
