"""The model store: content-addressed blobs of model artifacts, and one directory view per model.

Layout under the root (default ``<cache>/models``, :func:`lemonpack.paths.require_cache_root`)::

    blobs/sha256/<hex>          complete, verified blobs (manifests, configs, layers), read-only
    partial/sha256/<hex>        a blob being written (resumed from its length on the next pull)
    locks/sha256/<hex>          the per-blob lock files (``flock(2)``)
    views/sha256/<hex>/         a model's files under their annotated names (manifest digest)
    headers/sha256/<hex>        the GGUF header prefix of a layer not pulled yet (memory admission)
    refs.json                   reference -> manifest digest of every pull (``--offline`` by tag)

Rules (issue 23, point 1; the verification rule of OCI image-spec ``descriptor.md``):

- A blob is written by :meth:`ModelStore.writer` only: every byte hashed as it is written, never
  more bytes than its descriptor's size (:class:`~lemonpack.errors.IntegrityError` at the first
  byte past it), renamed from ``partial/`` into ``blobs/`` only once size and digest are the
  descriptor's. No half file is ever visible under ``blobs/``.
- Resumable: an interrupted write leaves ``partial/sha256/<hex>``; the next writer of that blob
  hashes what is there and asks the registry for the rest (``Range``). A partial whose final
  digest is wrong is removed, so the next pull starts from byte 0.
- Concurrent pulls of one blob: the writer holds an exclusive ``flock`` on ``locks/sha256/<hex>``
  from the moment it looks at the blob until it is in place; a second writer waits, then finds the
  blob complete and writes nothing (:attr:`BlobWriter.complete`).
- A view (:meth:`ModelStore.view`) is built in a temporary directory beside its place and renamed
  in whole: hard links to the read-only blobs for raw layers (regular files, so engines and
  ``hostPath`` mounts of ``type: File`` take them; relative symlinks where the file system has no
  hard links), the regular files of a tar layer
  extracted (KitOps ModelKits, ModelPack tar layers). Names go through
  :func:`lemonpack.safetree.path_problem`: a name that would escape the view is refused.

What ``lemonpack cache list|verify|clean`` shows of the store is :meth:`ModelStore.list`,
:meth:`ModelStore.verify`, :meth:`ModelStore.clean` (:class:`~lemonpack.paths.CacheItem`, ``cache`` = ``models``).
"""

from __future__ import annotations

import builtins
import errno
import json
import os
import secrets
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, cast

from lemonpack.digest import Digest, Hasher, file_digest, hex_of, is_sha256_hex, sha256_text
from lemonpack.errors import IntegrityError, StorageError, UnsafeContentError
from lemonpack.files import commit, kind_of, lock_fd, locked, remove_tree, replace_file
from lemonpack.paths import CacheItem
from lemonpack.safetree import path_problem

#: Bytes read at once when re-hashing a partial blob before resuming it.
_CHUNK = 4 << 20




class BlobWriter:
    """A blob being written into the store (made by :meth:`ModelStore.writer`; a binary file
    object). ``complete``: the blob is already in the store (nothing to write; :meth:`commit`
    returns its path). ``offset``: bytes already present (a resumed partial): write the bytes
    from there on. :meth:`write` refuses a byte past ``size``; :meth:`commit` checks size and
    digest and renames the blob into place."""

    def __init__(self, store: "ModelStore", digest: str, size: int):
        self.store, self.digest, self.size = store, digest, size
        self.path = store.blob_path(digest)
        self.partial = store.root / "partial" / "sha256" / hex_of(digest)
        self.complete = self.path.is_file() and self.path.stat().st_size == size
        self.offset = 0
        self._file: BinaryIO | None = None
        self._hasher: Hasher | None = None
        if not self.complete:
            self._open_partial()

    def _open_partial(self) -> None:
        self.partial.parent.mkdir(parents=True, exist_ok=True)
        if kind_of(self.partial) not in ("file", "missing"):
            remove_tree(self.partial)
        have = self.partial.stat().st_size if self.partial.is_file() else 0
        if have > self.size:
            self.partial.unlink()
            have = 0
        self._file = open(self.partial, "ab")
        self._hasher = Hasher(cast(BinaryIO, _After(self._file, have)))  # hashed and written as each piece arrives
        if have:
            with open(self.partial, "rb") as old:
                left = have
                while left:
                    piece = old.read(min(_CHUNK, left))
                    if not piece:
                        break
                    self._hasher.write(piece)
                    left -= len(piece)
        self.offset = have

    def write(self, data) -> int:
        """Hash and append ``data``; :class:`IntegrityError` when it would pass ``size``."""
        if self._hasher is None:
            raise RuntimeError(f"blob {self.digest} is complete; nothing may be written")
        if self.offset + len(data) > self.size:
            raise IntegrityError(f"blob {self.digest} (size)", f"{self.size} bytes", f"more than {self.size} bytes")
        self._hasher.write(data)
        self.offset += len(data)
        return len(data)

    def commit(self) -> Path:
        """Check size and digest, put the blob at :attr:`path` (read-only); returns the path.
        A wrong digest or size removes the partial and raises :class:`IntegrityError`."""
        if self.complete:
            return self.path
        assert self._hasher is not None and self._file is not None
        try:
            actual = str(self._hasher.digest())
            self._file.close()
        except OSError as exc:
            raise StorageError(f"writing {self.partial}: {exc.strerror or exc}") from None
        self._hasher = None
        if self.offset != self.size:
            self.partial.unlink(missing_ok=True)
            raise IntegrityError(f"blob {self.digest} (size)", f"{self.size} bytes", f"{self.offset} bytes")
        if actual != self.digest:
            self.partial.unlink(missing_ok=True)
            raise IntegrityError(f"blob {self.digest}", self.digest, actual)
        os.chmod(self.partial, 0o444)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        commit(self.partial, self.path, durable=False)  # content-addressed: checked by digest when verified
        self.complete = True
        return self.path

    def close(self, *, discard: bool = False) -> None:
        """Stop writing; keep the partial for a resume unless ``discard``."""
        if self._hasher is not None:
            self._hasher.close()
            self._hasher = None
        if self._file is not None and not self._file.closed:
            self._file.close()
        if discard:
            self.partial.unlink(missing_ok=True)


class _After:
    """A write-only file object that drops the first ``skip`` bytes written to it (those already
    in the partial file the hasher re-reads) and appends the rest to ``f``."""

    def __init__(self, f: BinaryIO, skip: int):
        self.f, self.skip = f, skip

    def write(self, data) -> int:
        n = len(data)
        if self.skip >= n:
            self.skip -= n
            return n
        if self.skip:
            data = memoryview(data)[self.skip:]
            self.skip = 0
        self.f.write(data)
        return n


class ModelStore:
    """The model store at ``root`` (default ``<cache>/models``; see the module docstring).

    Raises :class:`~lemonpack.errors.StorageError` when the cache root is not a directory."""

    def __init__(self, root: Path | None = None):
        if root is None:
            from lemonpack.paths import require_cache_root

            root = require_cache_root() / "models"
        self.root = Path(root)

    # -- blobs ----------------------------------------------------------------------------
    def blob_path(self, digest: str) -> Path:
        """Where the blob ``digest`` (``sha256:<hex>``) lives (whether or not it is there)."""
        return self.root / "blobs" / "sha256" / Digest.parse(digest).hex

    def has(self, digest: str, size: int | None = None) -> bool:
        """Whether the complete blob ``digest`` is in the store (of ``size`` bytes when given).
        Not re-hashed: blobs are verified when written, and by :meth:`verify`."""
        p = self.blob_path(digest)
        return p.is_file() and not p.is_symlink() and (size is None or p.stat().st_size == size)

    def read(self, digest: str, limit: int = 4 << 20) -> bytes | None:
        """The bytes of a small stored blob (a manifest or a config), re-hashed; None when it is
        not stored. Larger than ``limit`` or another digest: :class:`IntegrityError`."""
        p = self.blob_path(digest)
        if not p.is_file():
            return None
        with open(p, "rb") as f:
            data = f.read(limit + 1)
        if len(data) > limit:
            raise IntegrityError(f"stored blob {digest} (size)", f"at most {limit} bytes", f"more than {limit}")
        actual = str(Digest.of_bytes(data))
        if actual != digest:
            raise IntegrityError(f"stored blob {p}", digest, actual)
        return data

    @contextmanager
    def lock(self, digest: str) -> Iterator[None]:
        """Hold the exclusive lock of blob ``digest`` (blocking until another writer lets go)."""
        path = self.root / "locks" / "sha256" / Digest.parse(digest).hex
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"model store {self.root}: {exc.strerror or exc}") from None
        with locked(path):
            yield

    @contextmanager
    def writer(self, digest: str, size: int) -> Iterator[BlobWriter]:
        """A :class:`BlobWriter` for blob ``digest`` of ``size`` bytes (descriptor values),
        under the blob's lock. On leaving with an exception the partial is kept for a resume,
        except after an :class:`IntegrityError` (bad bytes: removed)."""
        Digest.parse(digest)
        if not isinstance(size, int) or size < 0:
            raise ValueError(f"blob size must be a non-negative int, got {size!r}")
        with self.lock(digest):
            try:
                w = BlobWriter(self, digest, size)
            except OSError as exc:
                raise StorageError(f"model store {self.root}: {exc.strerror or exc}") from None
            try:
                yield w
            except IntegrityError:
                w.close(discard=True)
                raise
            except BaseException:
                w.close()
                raise
            else:
                w.close()

    def put_bytes(self, digest: str, data: bytes) -> Path:
        """Store the small blob ``data`` (a manifest, a config) as ``digest``; returns its path.
        :class:`IntegrityError` when ``data`` is not ``digest``."""
        with self.writer(digest, len(data)) as w:
            if not w.complete:
                w.write(data)
            return w.commit()

    # -- views ----------------------------------------------------------------------------
    def view_path(self, manifest_digest: str) -> Path:
        """Where the view of the model ``manifest_digest`` lives (whether or not it is made)."""
        return self.root / "views" / "sha256" / Digest.parse(manifest_digest).hex

    def view(self, manifest_digest: str) -> Path | None:
        """The directory of the model ``manifest_digest``: each file under its annotated name
        (:class:`~lemonpack.runtime.models.artifact.ModelArtifact` ``files``), made once,
        atomically (module docstring). None when the manifest, its config or a layer is not
        in the store. Raises :class:`UnsafeContentError` for a name that leaves the view,
        :class:`StorageError` when the disk fails, the artifact module's errors for a manifest
        it cannot read."""
        from lemonpack.runtime.models.artifact import read_artifact

        target = self.view_path(manifest_digest)
        if target.is_dir() and not target.is_symlink():
            return target
        manifest = self.read(manifest_digest)
        if manifest is None:
            return None
        from lemonpack.runtime.models.artifact import manifest_config

        config_desc = manifest_config(manifest)
        config = self.read(config_desc.digest)
        if config is None:
            return None
        artifact = read_artifact(manifest, config)
        if not all(self.has(f.digest, f.size) for f in artifact.layers):
            return None
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.parent / f".{target.name}.tmp-{secrets.token_hex(4)}"
        try:
            tmp.mkdir()
            for f in artifact.layers:
                if f.archive is None:
                    _link(self.blob_path(f.digest), _place(tmp, f.name))
                else:
                    _extract(self.blob_path(f.digest), f.archive, tmp, f.name, f.members)
            try:
                os.rename(tmp, target)
            except OSError as exc:
                if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
                remove_tree(tmp)  # another pull made it first: same content
        except OSError as exc:
            remove_tree(tmp)
            raise StorageError(f"making the view {target}: {exc.strerror or exc}") from None
        except BaseException:
            remove_tree(tmp)
            raise
        return target

    # -- references -------------------------------------------------------------------------
    def record(self, reference: str, manifest_digest: str) -> None:
        """Remember that ``reference`` (as the user wrote it, tag or digest) named
        ``manifest_digest`` at its last pull (``refs.json``, replaced atomically)."""
        self.root.mkdir(parents=True, exist_ok=True)
        with locked(self.root / ".refs.lock"):  # two pulls recording at once: neither entry lost
            refs = self.refs()
            refs[reference] = manifest_digest
            replace_file(self.root / "refs.json", json.dumps(refs, indent=1, sort_keys=True).encode() + b"\n")

    def refs(self) -> dict[str, str]:
        """reference -> manifest digest of every recorded pull (``{}`` when none)."""
        try:
            doc = json.loads((self.root / "refs.json").read_bytes())
        except (OSError, ValueError):
            return {}
        return {k: v for k, v in doc.items() if isinstance(k, str) and isinstance(v, str)} \
            if isinstance(doc, dict) else {}

    def header_path(self, digest: str) -> Path:
        """Where the GGUF header prefix of layer ``digest`` is kept (not a blob: a prefix)."""
        return self.root / "headers" / "sha256" / Digest.parse(digest).hex

    # -- cache list | verify | clean -------------------------------------------------------
    def list(self) -> builtins.list[CacheItem]:
        """Every blob, partial blob and view, with sizes; nothing is hashed (a blob whose name is
        no digest or that is no regular file is ``bad``)."""
        items: builtins.list[CacheItem] = []
        for p in _entries(self.root / "blobs" / "sha256"):
            kind = kind_of(p)
            problem = None if kind == "file" and is_sha256_hex(p.name) else \
                (f"not a regular file ({kind})" if kind != "file" else "name is not a sha256 digest")
            items.append(CacheItem("models", _name(p.name), p, _size(p), "bad" if problem else "entry", problem))
        for p in _entries(self.root / "partial" / "sha256"):
            items.append(CacheItem("models", _name(p.name), p, _size(p),
                                   "partial-live" if self._locked(p.name) else "partial-stale"))
        for p in _entries(self.root / "views" / "sha256"):
            if p.name.startswith("."):
                continue
            items.append(CacheItem("models", f"view {_name(p.name)}", p, 0))
        return items

    def verify(self) -> builtins.list[CacheItem]:
        """Re-hash every blob; remove each one that is not what its name says (and the views,
        which may point at it). Returns every blob checked, bad ones with ``problem`` set."""
        out: builtins.list[CacheItem] = []
        bad = False
        for item in self.list():
            if item.name.startswith("view ") or item.state.startswith("partial"):
                continue
            problem = item.problem or _hash_problem(item.path, item.path.name)
            if problem:
                bad = True
                _remove(item.path)
            out.append(CacheItem("models", item.name, item.path, item.size, item.state, problem))
        if bad:
            for p in _entries(self.root / "views" / "sha256"):
                remove_tree(p)
        return out

    def clean(self, partial_only: bool = False) -> builtins.list[CacheItem]:
        """Remove stale partial blobs and, unless ``partial_only``, every blob, view, header and
        the reference record (a partial being written right now stays, and the empty lock
        files). Returns what went."""
        removed: builtins.list[CacheItem] = []
        for item in self.list():
            if item.state == "partial-live":
                continue
            if partial_only and item.state != "partial-stale":
                continue
            with self.lock(_digest_of(item.path.name)) if is_sha256_hex(item.path.name) else _nolock():
                _remove(item.path)
            removed.append(item)
        if not partial_only:
            # lock files stay (empty): one removed while a pull holds it would let a second
            # writer of that blob lock a new file beside the first
            remove_tree(self.root / "headers")
            (self.root / "refs.json").unlink(missing_ok=True)
        return removed

    def _locked(self, hex_name: str) -> bool:
        """Whether a writer holds the lock of blob ``hex_name`` right now."""
        if not is_sha256_hex(hex_name):
            return False
        path = self.root / "locks" / "sha256" / hex_name
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError:
            return False
        try:
            return not lock_fd(fd, wait=False)
        except OSError:
            return True
        finally:
            os.close(fd)


def _link(blob: Path, dest: Path) -> None:
    """``dest`` as a hard link to ``blob`` (a regular file: engines, ``open_regular`` and a
    ``hostPath`` of ``type: File`` take it; read-only as the blob is), or a relative symlink where
    the file system refuses hard links (``EXDEV``, ``EPERM``, ``EMLINK``)."""
    try:
        os.link(blob, dest)
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
            raise
        os.symlink(os.path.relpath(blob, dest.parent), dest)


def _place(root: Path, name: str) -> Path:
    """``root/name`` for a file a view gives the name ``name`` (parents made); refuses a name
    that is not a safe relative path or is already taken."""
    problem = path_problem(name)
    if problem:
        raise UnsafeContentError(f"model file name {name!r}: {problem}")
    dest = root.joinpath(*name.split("/"))
    if os.path.lexists(dest):
        raise UnsafeContentError(f"model file name {name!r} appears twice in the artifact")
    dest.parent.mkdir(parents=True, exist_ok=True)
    return dest


def _extract(blob: Path, archive: str, root: Path, layer_name: str, members: str | None = None) -> None:
    """The files of the tar layer ``blob`` (``tar``, ``tar+gzip``, ``tar+zstd``) into ``root``
    under their member names (only those below ``members`` when given, named relative to it);
    directories made; a relative symlink that stays inside ``root`` made (RamaLama's
    ``models/model.file``); absolute or escaping links, hard links, devices and unsafe names
    refused (:class:`UnsafeContentError`)."""
    with open(blob, "rb") as raw:
        stream: Any = raw
        if archive.endswith("+gzip"):
            import gzip

            stream = gzip.GzipFile(fileobj=raw)
        elif archive.endswith("+zstd"):
            import zstandard

            stream = zstandard.ZstdDecompressor().stream_reader(raw)
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for member in tar:
                name = member.name[2:] if member.name.startswith("./") else member.name.lstrip("/")
                name = name.rstrip("/")
                if members is not None:
                    if not name.startswith(members):
                        continue
                    name = name[len(members):]
                if member.isdir() or not name or name.rsplit("/", 1)[-1].startswith(".wh."):
                    continue
                if member.issym() and _inside_link(name, member.linkname):
                    os.symlink(member.linkname, _place(root, name))
                    continue
                if not member.isfile():
                    raise UnsafeContentError(f"layer {layer_name}: member {member.name!r} is not a regular file "
                                             "(links leaving the model's directory and devices are not model files)")
                dest = _place(root, name)
                src = tar.extractfile(member)
                assert src is not None
                with open(dest, "wb") as out:
                    while piece := src.read(_CHUNK):
                        out.write(piece)
                os.chmod(dest, 0o444)


def _inside_link(name: str, target: str) -> bool:
    """Whether a symlink at ``name`` (relative to a view) to ``target`` stays in the view."""
    if not target or target.startswith("/"):
        return False
    parts = name.split("/")[:-1]
    for part in target.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                return False
            parts.pop()
        else:
            parts.append(part)
    return bool(parts) and path_problem("/".join(parts)) is None


def view_files(directory: Path, prefix: str = "") -> dict[str, Path]:
    """Every file of a view (a regular file, or a symlink to one): ``/``-joined name -> path,
    sorted by name."""
    out: dict[str, Path] = {}
    for p in _entries(directory):
        name = prefix + p.name
        if p.is_dir() and not p.is_symlink():
            out.update(view_files(p, name + "/"))
        elif p.is_file():
            out[name] = p
    return dict(sorted(out.items()))


@contextmanager
def _nolock() -> Iterator[None]:
    yield


def _entries(directory: Path) -> builtins.list[Path]:
    try:
        return sorted(directory.iterdir())
    except OSError:
        return []


def _name(hex_name: str) -> str:
    return sha256_text(hex_name) if is_sha256_hex(hex_name) else hex_name


def _digest_of(hex_name: str) -> str:
    return sha256_text(hex_name)


def _size(p: Path) -> int:
    try:
        return p.lstat().st_size if not p.is_dir() else 0
    except OSError:
        return 0


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        remove_tree(p)
    else:
        try:
            p.unlink()
        except FileNotFoundError:
            pass


def _hash_problem(path: Path, hex_name: str) -> str | None:
    """Why ``path`` is not the blob its name ``hex_name`` says, or None."""
    try:
        actual = file_digest(path)[0].hex
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    return None if actual == hex_name else f"hashes to {sha256_text(actual)}"


__all__ = ["BlobWriter", "ModelStore", "view_files"]
