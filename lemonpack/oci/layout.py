"""OCI image layouts: the atomic writer (the reader and verifier are
:mod:`lemonpack.oci.layout_reader`, the descriptor :mod:`lemonpack.oci.descriptor`).

A layout is a directory (OCI image-spec v1.1 ``image-layout.md``)::

    oci-layout            {"imageLayoutVersion":"1.0.0"}
    index.json            the top-level image index; tags are descriptors annotated with
                          org.opencontainers.image.ref.name
    blobs/sha256/<hex>    content-addressed blobs: layers, configs, manifests, indexes

:class:`LayoutWriter` builds into a temporary sibling directory and renames it into place
only when the ``with`` block succeeds, so a reader never sees a half-written layout and a
failed build leaves the old one untouched. Every JSON document goes through
:func:`~lemonpack.canonical.canonical_json`, so the same inputs give the same digests.
Blobs are written through a temporary file in ``blobs/sha256/`` and renamed to their
digest name, so even a big layer is streamed once and never held in memory.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import secrets
import shutil
import time
from pathlib import Path
from typing import Any, BinaryIO, Callable, Mapping, Sequence, cast

from lemonpack.digest import Digest, Hasher, hex_of
from lemonpack.errors import IntegrityError, LayoutError, OutputError
from lemonpack.files import commit, copy_file, non_directory_parent, replace_directory, replace_file
from lemonpack.oci.mediatypes import ANNOTATION_REF_NAME, EMPTY_DIGEST, EMPTY_JSON, EMPTY_SIZE, MEDIA_TYPE_EMPTY, MEDIA_TYPE_IMAGE_CONFIG, MEDIA_TYPE_IMAGE_INDEX, MEDIA_TYPE_IMAGE_MANIFEST, MEDIA_TYPE_LAYER_TAR, MEDIA_TYPE_LAYER_TAR_GZIP, OCI_LAYOUT_VERSION
from lemonpack.canonical import canonical_json
from lemonpack.oci.descriptor import Descriptor, _plain
from lemonpack.oci.layer import CHUNK, LayerInfo
from lemonpack.oci.layout_reader import _is_layout, _load_json, read_layout

# annotations.md: org.opencontainers.image.ref.name
_REF_COMPONENT = r"[A-Za-z0-9]+(?:(?:[-._:@+]|--)[A-Za-z0-9]+)*"
_REF_NAME_RE = re.compile(rf"^{_REF_COMPONENT}(?:/{_REF_COMPONENT})*$")


def rfc3339(epoch: int) -> str:
    """Seconds since the epoch as an RFC 3339 UTC timestamp, ``"1970-01-01T00:00:00Z"``."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(epoch)))


class LayoutWriter:
    """Build an OCI image layout at ``path`` atomically.

    Use as a context manager::

        with LayoutWriter(out_dir) as lw:
            layer = lw.add_blob_file(MEDIA_TYPE_LAYER_TAR_GZIP,
                                     lambda f: write_dir_layer(src, "opt/x", f, mtime=0))
            image = lw.add_image_manifest({"architecture": "amd64", "os": "linux",
                                           "config": {"Entrypoint": ["/opt/x/run"]}},
                                          [layer], created=0)
            lw.set_tags({"latest": image})

    Content goes to ``<path>.tmp-<random>``; on success ``oci-layout`` and ``index.json``
    are written and the directory renamed to ``path`` (an existing layout at ``path`` is
    renamed aside, replaced, then deleted). On any exception the temporary directory is
    removed and ``path`` is untouched. Entering raises :class:`OutputError` (and
    changes nothing) if ``path`` exists and is a non-empty directory that is not an OCI
    layout, or is not a directory.

    ``merge=True``: an existing layout at ``path`` is added to instead of replaced, as
    ``skopeo copy ... oci:DIR:TAG`` does: the new blobs are moved into its ``blobs/sha256/``
    (each verified one renamed over a same-named file), then its ``index.json`` is rewritten
    atomically with every entry kept except those whose ``ref.name`` is one of the new tags
    (a tag names one manifest: the new one replaces it), followed by the new tags; other
    files (``nix/``, the user's) are not touched. ``replaced`` then maps each new tag that
    was already there to the digest it named before.

    Spec: OCI image-spec v1.1 ``image-layout.md``, ``annotations.md`` (``ref.name``).
    """

    def __init__(self, path: str | os.PathLike[str], *, merge: bool = False):
        self.path = Path(path)
        self.merge = merge
        self._tmp: Path | None = None
        self._tags: dict[str, Descriptor] = {}
        self._diff_ids: dict[str, str] = {}
        #: After a merge: ``{tag: previous digest}`` for each new tag the layout had already.
        self.replaced: dict[str, str] = {}
        #: After a merge: how many tags the layout kept besides the new ones.
        self.kept = 0
        #: True once the content went into an existing layout (``merge``) rather than a new one.
        self.merged = False

    # -- lifecycle ----------------------------------------------------------------
    def __enter__(self) -> "LayoutWriter":
        self._check_target()
        parent = self.path.parent
        parent.mkdir(parents=True, exist_ok=True)
        self._tmp = parent / f"{self.path.name}.tmp-{secrets.token_hex(6)}"
        (self._tmp / "blobs" / "sha256").mkdir(parents=True)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        tmp, self._tmp = self._tmp, None
        if tmp is None:
            return
        if exc_type is not None:
            shutil.rmtree(tmp, ignore_errors=True)
            return
        try:
            self._write_index(tmp)
            self._install(tmp)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def _check_target(self) -> None:
        p = self.path
        blocker = non_directory_parent(p)
        if blocker is not None:  # its mkdir would say "File exists"
            raise OutputError(f"cannot write {p}: {blocker} is not a directory")
        if p.is_symlink() or (p.exists() and not p.is_dir()):
            raise OutputError(f"{p}: exists and is not a directory; refusing to replace it")
        if p.is_dir() and not _is_layout(p) and any(p.iterdir()):
            raise OutputError(f"{p}: exists, is not empty and is not an OCI image layout; "
                              "refusing to replace it")
        if self.merge and _is_layout(p):
            read_layout(p)  # one we can add to (version, index.json), or refused before any work

    def _install(self, tmp: Path) -> None:
        self._check_target()
        p = self.path
        if self.merge and p.is_dir() and _is_layout(p):
            self._merge_into(tmp, p)
            return
        if p.is_dir() and not _is_layout(p):
            p.rmdir()  # empty (checked above)
        replace_directory(tmp, p)

    def _merge_into(self, tmp: Path, p: Path) -> None:
        """Add the staged blobs and tags of ``tmp`` to the existing layout ``p`` (see the class
        doc), then remove ``tmp``. The index is written last: until then the layout's tags are
        the old ones and the new blobs are merely unreferenced."""
        read_layout(p)  # a layout we understand, or LayoutError before anything moves
        index = _load_json(p / "index.json")
        names = set(self._tags)
        kept = []
        for entry in index["manifests"]:
            ref = (entry.get("annotations") or {}).get(ANNOTATION_REF_NAME) if isinstance(entry, dict) else None
            if ref in names:
                self.replaced[ref] = entry.get("digest")
            else:
                kept.append(entry)
                self.kept += ref is not None
        blobs = p / "blobs" / "sha256"
        blobs.mkdir(parents=True, exist_ok=True)
        for blob in (tmp / "blobs" / "sha256").iterdir():
            commit(blob, blobs / blob.name, durable=False)
        new = json.loads(self._index_bytes())["manifests"]
        index["manifests"] = kept + new
        replace_file(p / "index.json", canonical_json(index))
        self.merged = True
        shutil.rmtree(tmp, ignore_errors=True)

    def _index_bytes(self) -> bytes:
        manifests = [d.with_annotations({**(d.annotations or {}), ANNOTATION_REF_NAME: tag}).to_json()
                     for tag, d in sorted(self._tags.items())]
        return canonical_json({"schemaVersion": 2, "mediaType": MEDIA_TYPE_IMAGE_INDEX, "manifests": manifests})

    def _write_index(self, root: Path) -> None:
        (root / "oci-layout").write_bytes(canonical_json({"imageLayoutVersion": OCI_LAYOUT_VERSION}))
        (root / "index.json").write_bytes(self._index_bytes())

    @property
    def staging_dir(self) -> Path:
        """The temporary directory being built (inside the ``with`` block only). Extra
        files written under it (e.g. ``nix/``) are installed atomically with the layout."""
        return self._root()

    def _root(self) -> Path:
        if self._tmp is None:
            raise RuntimeError("LayoutWriter must be used inside a 'with' block")  # a bug, not the input
        return self._tmp

    def _blob_path(self, digest: str) -> Path:
        return self._root() / "blobs" / "sha256" / hex_of(digest)

    def _tmp_blob(self) -> Path:
        return self._root() / "blobs" / "sha256" / f".tmp-{secrets.token_hex(8)}"

    # -- blobs --------------------------------------------------------------------
    def add_blob_bytes(self, media_type: str, data: bytes,
                       annotations: Mapping[str, str] | None = None) -> Descriptor:
        """Store ``data`` as a blob; return its :class:`Descriptor` (size in bytes).

        Idempotent: the same bytes twice give the same blob. Spec: ``image-layout.md``
        (blobs), ``descriptor.md``.
        """
        digest = str(Digest.of_bytes(data))
        dest = self._blob_path(digest)
        if not dest.exists():
            tmp = self._tmp_blob()
            tmp.write_bytes(data)
            commit(tmp, dest, durable=False)
        return Descriptor(media_type, digest, len(data), annotations)

    def add_blob_file(self, media_type: str,
                      source: str | os.PathLike[str] | Callable[[BinaryIO], Any],
                      annotations: Mapping[str, str] | None = None, *,
                      tee: Sequence[BinaryIO] = ()) -> Descriptor:
        """Stream a blob into ``blobs/sha256/`` and return its :class:`Descriptor`.

        ``source`` is either a file path (copied in 1 MiB chunks) or a callback
        ``write(f)`` that writes the blob to the binary file object ``f`` (e.g.
        ``lambda f: write_dir_layer(src, prefix, f, mtime=0)``). The bytes go to a temporary
        file next to the blobs and are renamed to their digest name; the digest is always
        computed here. If the callback returns a :class:`LayerInfo`, its digest and size
        must match (else :class:`IntegrityError`) and its ``diff_id`` is remembered for
        :meth:`add_image_manifest`. ``tee``: files that get a copy of every byte of the blob
        as it is written (e.g. the layer cache's entry); their errors propagate. The hashing
        and the writes run in a thread of their own (:class:`~lemonpack.digest.Hasher`,
        ``threaded``), overlapping the callback's work (a layer's reads and deflate); an
        error of theirs is raised by the callback's next write or here.
        """
        tmp = self._tmp_blob()
        result = None
        try:
            with open(tmp, "wb") as raw, Hasher(raw, *tee, threaded=True) as hf:
                if callable(source):
                    result = source(cast(BinaryIO, hf))  # a write-only file object
                else:
                    with open(source, "rb") as src:
                        while chunk := src.read(CHUNK):
                            hf.write(chunk)
                digest = str(hf.digest())  # every byte hashed and written
            if isinstance(result, LayerInfo):
                if result.digest != digest:
                    raise IntegrityError("layer written by callback", result.digest, digest)
                if result.size != hf.size:
                    raise LayoutError(f"layer size mismatch: callback said {result.size}, wrote {hf.size}")
                self._diff_ids[digest] = result.diff_id
            commit(tmp, self._blob_path(digest), durable=False)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return Descriptor(media_type, digest, hf.size, annotations)

    def copy_blob(self, path: str | os.PathLike[str], descriptor: Descriptor, *,
                  diff_id: str | None = None, verify: bool = True) -> Descriptor:
        """Copy the prebuilt blob at ``path`` (e.g. from a cache) into the layout, checking it.

        The bytes are hashed while they are copied (one read); the copy must match
        ``descriptor.digest`` and ``descriptor.size`` or it is discarded and
        :class:`IntegrityError` (digest) / :class:`LayoutError` (size) is raised, so a
        layout never holds a blob that is not what its name says. Never a hard link: a
        layout is the user's output (edited, pushed, deleted), and a hard link would let a
        write or a ``chmod`` there change the cache entry it shares an inode with.
        ``diff_id`` (for layers) is remembered for :meth:`add_image_manifest`. Returns
        ``descriptor``. ``verify=False`` is for a caller that verified the bytes itself (a
        cache entry whose stat facts are the ones recorded when it was hashed): the file is
        copied by :func:`lemonpack.files.copy_file` (a copy-on-write reflink on XFS and btrfs,
        no data moved; a kernel copy elsewhere) and only the size is checked.
        """
        src = Path(path)
        tmp = self._tmp_blob()
        try:
            if verify:
                with open(src, "rb") as f, open(tmp, "wb") as raw:
                    hf = Hasher(raw)
                    while chunk := f.read(CHUNK):
                        hf.write(chunk)
                actual = str(hf.digest())
                if actual != descriptor.digest:
                    raise IntegrityError(str(src), descriptor.digest, actual)
                size = hf.size
            else:
                size = copy_file(src, tmp)
            if size != descriptor.size:
                raise LayoutError(f"{src}: size {size} does not match descriptor size {descriptor.size}")
            commit(tmp, self._blob_path(descriptor.digest), durable=False)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        if diff_id is not None:
            self._diff_ids[descriptor.digest] = diff_id
        return descriptor

    def receive_blob(self, descriptor: Descriptor, fill: Callable[[BinaryIO], Any]) -> Descriptor:
        """Store a blob that ``fill(f)`` writes *and verifies*: ``fill`` must write exactly
        ``descriptor``'s bytes to the binary file ``f`` and raise unless they hash to
        ``descriptor.digest`` with ``descriptor.size`` bytes (e.g.
        :meth:`lemonpack.registry.client.RegistryClient.read_blob`, which hashes as it
        downloads). The bytes are not hashed a second time here; the file is renamed to its
        digest name only when ``fill`` returned. On any exception nothing is left. Returns
        ``descriptor``."""
        tmp = self._tmp_blob()
        try:
            with open(tmp, "wb") as f:
                fill(f)
            commit(tmp, self._blob_path(descriptor.digest), durable=False)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return descriptor

    # -- manifests ----------------------------------------------------------------
    def _diff_id(self, layer: Descriptor) -> str:
        known = self._diff_ids.get(layer.digest)
        if known:
            return known
        if layer.media_type == MEDIA_TYPE_LAYER_TAR:
            return layer.digest
        if layer.media_type != MEDIA_TYPE_LAYER_TAR_GZIP:
            raise LayoutError(f"cannot compute the diff_id of a {layer.media_type} layer; "
                              "pass a LayerInfo or diff_id when adding it")
        tar = Hasher()
        with gzip.open(self._blob_path(layer.digest), "rb") as f:
            while chunk := f.read(CHUNK):
                tar.write(chunk)
        diff_id = str(tar.digest())
        self._diff_ids[layer.digest] = diff_id
        return diff_id

    def add_image_manifest(self, config: Mapping[str, Any], layers: Sequence[Descriptor],
                           annotations: Mapping[str, str] | None = None, *,
                           created: int | None = None,
                           config_annotations: Mapping[str, str] | None = None) -> Descriptor:
        """Write an image config and image manifest; return the manifest's descriptor.

        ``config``: the image config without ``rootfs`` (``architecture`` and ``os``
        required; optional ``variant``, ``config`` with ``Entrypoint``/``Cmd``/``Env``/
        ``WorkingDir``/``Labels``..., ``history`` kept as given). ``rootfs`` is set to
        ``{"type": "layers", "diff_ids": [...]}`` from ``layers`` (diff_ids remembered from
        :meth:`add_blob_file`/:meth:`copy_blob`, else computed by decompressing
        the blob). ``created``: seconds since the epoch written as RFC 3339 (omitted when
        ``None``). ``layers`` must already be blobs of this layout. The returned
        descriptor carries ``platform`` (architecture, os, variant) for use in an index.

        Raises :class:`LayoutError` when ``architecture``/``os`` are missing or
        ``rootfs`` is given. Spec: ``manifest.md``, ``config.md``.
        """
        cfg = _plain(dict(config))
        for key in ("architecture", "os"):
            if not isinstance(cfg.get(key), str) or not cfg[key]:
                raise LayoutError(f"image config needs a non-empty {key!r}")
        if "rootfs" in cfg:
            raise LayoutError("image config must not set 'rootfs'; it is computed from the layers")
        for layer in layers:
            self._require_blob(layer)
        cfg["rootfs"] = {"type": "layers", "diff_ids": [self._diff_id(l) for l in layers]}
        if created is not None:
            cfg["created"] = rfc3339(created)
        config_desc = self.add_blob_bytes(MEDIA_TYPE_IMAGE_CONFIG, canonical_json(cfg), config_annotations)
        manifest: dict[str, Any] = {
            "schemaVersion": 2, "mediaType": MEDIA_TYPE_IMAGE_MANIFEST,
            "config": config_desc.to_json(), "layers": [l.to_json() for l in layers],
        }
        if annotations:
            manifest["annotations"] = dict(annotations)
        platform = {k: cfg[k] for k in ("architecture", "os", "variant") if k in cfg}
        desc = self.add_blob_bytes(MEDIA_TYPE_IMAGE_MANIFEST, canonical_json(manifest))
        return Descriptor(desc.media_type, desc.digest, desc.size, None, platform)

    def add_artifact_manifest(self, artifact_type: str, layers: Sequence[Descriptor],
                              annotations: Mapping[str, str] | None = None, *,
                              subject: Descriptor | None = None) -> Descriptor:
        """Write an OCI 1.1 artifact manifest; return its descriptor (with ``artifact_type``).

        The config is the empty descriptor (``application/vnd.oci.empty.v1+json``, data
        ``{}``, :data:`EMPTY_DIGEST`, size 2), ``artifactType`` is ``artifact_type`` (a
        media type, e.g. ``application/vnd.lemonpack.recipe.v1+json``). With no
        ``layers``, the empty descriptor is the single layer (manifest.md guidance).
        ``subject`` makes this a referrer of another manifest (signatures, SBOMs).

        Spec: ``manifest.md`` ("Guidelines for Artifact Usage", "Guidance for an Empty
        Descriptor"), ``descriptor.md``.
        """
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*", artifact_type):
            raise LayoutError(f"artifactType must be a media type (type/subtype), got {artifact_type!r}")
        empty = self.add_blob_bytes(MEDIA_TYPE_EMPTY, EMPTY_JSON)
        assert empty.digest == EMPTY_DIGEST and empty.size == EMPTY_SIZE
        for layer in layers:
            self._require_blob(layer)
        manifest: dict[str, Any] = {
            "schemaVersion": 2, "mediaType": MEDIA_TYPE_IMAGE_MANIFEST,
            "artifactType": artifact_type, "config": empty.to_json(),
            "layers": [l.to_json() for l in layers] or [empty.to_json()],
        }
        if subject is not None:
            manifest["subject"] = subject.to_json()
        if annotations:
            manifest["annotations"] = dict(annotations)
        desc = self.add_blob_bytes(MEDIA_TYPE_IMAGE_MANIFEST, canonical_json(manifest))
        return Descriptor(desc.media_type, desc.digest, desc.size, None, None, artifact_type)

    def add_index(self, manifests: Sequence[Descriptor],
                  annotations: Mapping[str, str] | None = None) -> Descriptor:
        """Write a nested image index blob listing ``manifests`` (in the order given:
        clients pick the first matching platform); return its descriptor.

        Spec: ``image-index.md``.
        """
        for m in manifests:
            self._require_blob(m)
        index: dict[str, Any] = {"schemaVersion": 2, "mediaType": MEDIA_TYPE_IMAGE_INDEX,
                                 "manifests": [m.to_json() for m in manifests]}
        if annotations:
            index["annotations"] = dict(annotations)
        desc = self.add_blob_bytes(MEDIA_TYPE_IMAGE_INDEX, canonical_json(index))
        return Descriptor(desc.media_type, desc.digest, desc.size)

    def set_tags(self, tags: Mapping[str, Descriptor]) -> None:
        """Tag manifests or indexes in the top-level ``index.json``.

        Each tag becomes the descriptor's ``org.opencontainers.image.ref.name`` annotation;
        entries are sorted by tag. A tag must match the annotations.md ``ref`` grammar
        (``ValueError`` otherwise). Setting a tag again to a different descriptor raises
        :class:`LayoutError` naming both; the same descriptor again is a no-op.

        Spec: ``image-layout.md`` (index.json), ``annotations.md``.
        """
        for tag, desc in tags.items():
            if not _REF_NAME_RE.match(tag):
                raise ValueError(f"tag {tag!r} does not match the ref.name grammar")
            self._require_blob(desc)
            old = self._tags.get(tag)
            if old is not None and old != desc:
                raise LayoutError(f"tag {tag!r} already points at {old.digest}; refusing to "
                                  f"repoint it at {desc.digest}")
            self._tags[tag] = desc

    def _require_blob(self, desc: Descriptor) -> None:
        if not self._blob_path(desc.digest).is_file():
            raise LayoutError(f"{desc.digest} is not a blob of this layout; add it first")


__all__ = ["LayoutWriter", "rfc3339"]
