"""OCI image layouts read and verified (image-spec v1.1 ``image-layout.md``): the tags of a
layout, a ``DIR[:TAG]`` argument split, every blob re-hashed and every reference checked. The
writer is :mod:`lemonpack.oci.layout`."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from lemonpack.digest import Digest, Hasher, file_digest, is_sha256_hex, sha256_text
from lemonpack.errors import IntegrityError, LayoutBlobError, LayoutError, LemonpackError
from lemonpack.files import open_regular
from lemonpack.oci.mediatypes import ANNOTATION_REF_NAME, IMAGE_INDEX_TYPES, IMAGE_MANIFEST_TYPES, OCI_LAYOUT_VERSION
from lemonpack.oci.descriptor import Descriptor

_READ = 1 << 20
#: The most bytes of a JSON blob (manifest, index, config) :func:`read_json_blob` reads.
MAX_JSON_BLOB = 4 << 20


def _is_layout(path: Path) -> bool:
    return (path / "oci-layout").is_file()


def blob_path(layout: Path, desc: Descriptor) -> Path:
    """Where the blob ``desc`` names lives in the layout at ``layout``: ``blobs/sha256/<hex>``
    (image-layout.md, "Blobs"). Nothing is checked: read it through :func:`read_blob` or
    :func:`verify_blob`."""
    return Path(layout) / "blobs" / "sha256" / desc.hex


def _open_blob(layout: Path, desc: Descriptor, label: str):
    path = blob_path(layout, desc)
    try:
        return open_regular(path)
    except FileNotFoundError:
        raise LayoutError(f"{label} {desc.digest} is missing from {layout}") from None
    except OSError as exc:  # a symlink, a fifo, a directory planted as the blob
        raise LayoutError(f"{label}: cannot read {desc.digest}: {exc.strerror or exc}") from None


def _check(label: str, desc: Descriptor, actual: str, size: int) -> None:
    if actual != desc.digest:
        raise LayoutBlobError(f"{label} {desc.digest}", desc.digest, actual)
    if size != desc.size:
        raise LayoutBlobError(f"{label} {desc.digest} (size)", f"{desc.size} bytes", f"{size} bytes")


def read_blob(layout: Path, desc: Descriptor, label: str, *, limit: int | None = None) -> bytes:
    """The bytes of the blob ``desc`` names in the layout at ``layout`` (``blobs/sha256/<hex>``,
    a regular file, symlinks refused), checked against the descriptor (image-spec
    ``descriptor.md``: digest and size). For the small JSON blobs (manifests, indexes,
    configs): at most ``min(desc.size, limit) + 1`` bytes are read. ``label`` starts every
    message (e.g. ``"base X: image index"``); a large blob is checked by :func:`verify_blob`.

    Raises :class:`LayoutError` when the blob is missing or not a regular file (a symlink),
    :class:`~lemonpack.errors.LayoutBlobError` (an :class:`IntegrityError` and a
    :class:`LayoutError`) when its digest or size is not the descriptor's, naming the blob."""
    with _open_blob(layout, desc, label) as f:
        try:
            data = f.read((desc.size if limit is None else min(desc.size, limit)) + 1)
        except OSError as exc:
            raise LayoutError(f"{label}: cannot read {desc.digest}: {exc.strerror or exc}") from None
    _check(label, desc, str(Digest.of_bytes(data)), len(data))
    return data


def read_json_blob(layout: Path, desc: Descriptor, label: str, *, limit: int = MAX_JSON_BLOB) -> dict:
    """The JSON object of the small blob ``desc`` (a manifest, an index, a config) in the layout
    at ``layout``, read and checked by :func:`read_blob` (at most ``limit`` bytes, default
    :data:`MAX_JSON_BLOB`). ``label`` starts every message (``"base X: manifest"``).

    Raises what :func:`read_blob` raises, and :class:`LayoutError` naming the blob when its
    bytes are not JSON or not a JSON object."""
    data = read_blob(layout, desc, label, limit=limit)
    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise LayoutError(f"{label} {desc.digest} is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise LayoutError(f"{label} {desc.digest} is not a JSON object")
    return doc


def verify_blob(layout: Path, desc: Descriptor, label: str) -> Path:
    """Check the blob ``desc`` names in the layout at ``layout`` as :func:`read_blob` does
    (a regular file, symlinks refused; size, then digest, streamed in 1 MiB reads: flat memory
    for a layer of any size) and return its path, for a caller that hands the file on (packs
    it into an archive, unpacks it). The check holds for the bytes read here: a caller
    verifies a layout it wrote or pulled itself, or reads it before anyone can change it.

    Raises :class:`LayoutError` (missing, not a regular file, unreadable) or
    :class:`~lemonpack.errors.LayoutBlobError` (another size or digest), naming the blob with
    ``label`` and its digest."""
    with _open_blob(layout, desc, label) as f:
        try:
            size = os.fstat(f.fileno()).st_size
            if size != desc.size:  # known without reading: refuse a wrong size first
                raise LayoutBlobError(f"{label} {desc.digest} (size)", f"{desc.size} bytes", f"{size} bytes")
            h = Hasher()
            while chunk := f.read(_READ):
                h.write(chunk)
        except OSError as exc:
            raise LayoutError(f"{label}: cannot read {desc.digest}: {exc.strerror or exc}") from None
    _check(label, desc, str(h.digest()), h.size)
    return blob_path(layout, desc)


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_bytes())
    except FileNotFoundError:
        raise LayoutError(f"{path}: missing") from None
    except ValueError as exc:
        raise LayoutError(f"{path}: not valid JSON: {exc}") from None


def read_layout(path: str | os.PathLike[str]) -> dict[str, Descriptor]:
    """Read the tags of the OCI layout at ``path``: ``{ref.name: Descriptor}``.

    Only top-level ``index.json`` entries with an ``org.opencontainers.image.ref.name``
    annotation are returned. Raises :class:`LayoutError` when ``oci-layout`` is
    missing, has another ``imageLayoutVersion``, or ``index.json`` is malformed.

    Spec: ``image-layout.md``.
    """
    root = Path(path)
    if not (root / "oci-layout").exists():
        why = "no such directory" if not root.exists() else "not a directory" if not root.is_dir() \
            else "no oci-layout file in it"
        raise LayoutError(f"no OCI image layout at {root} ({why})")
    header = _load_json(root / "oci-layout")
    if not isinstance(header, dict) or header.get("imageLayoutVersion") != OCI_LAYOUT_VERSION:
        raise LayoutError(f"{root}: not an OCI image layout {OCI_LAYOUT_VERSION}")
    index = _load_json(root / "index.json")
    if not isinstance(index, dict) or not isinstance(index.get("manifests"), list):
        raise LayoutError(f"{root}/index.json: not an image index")
    tags: dict[str, Descriptor] = {}
    for obj in index["manifests"]:
        desc = Descriptor.from_json(obj)
        ref = (desc.annotations or {}).get(ANNOTATION_REF_NAME)
        if ref is not None:
            tags[ref] = desc
    return tags


def split_layout_arg(arg: str) -> tuple[str, str | None]:
    """Split ``DIR[:TAG]`` into the layout directory and the tag (``None`` when absent), the way
    the containers tools read ``oci:DIR:TAG``: a tag may itself hold ``:`` and ``/``, since
    ``org.opencontainers.image.ref.name`` may be a full reference (skopeo and podman write
    ``docker.io/x/a:1``; annotations.md).

    The split is at the first ``:`` whose left side is an existing OCI layout and whose right
    side is one of its tags; else ``arg`` itself when it is a layout (no tag); else at the first
    ``:`` after an existing layout (an unknown tag, for the caller to report with the layout's
    tags); else, for a directory that is no layout, at the last ``:`` when what follows holds
    no ``/`` (so the caller can say that ``DIR`` is not a layout).
    """
    colons = [i for i, ch in enumerate(arg) if ch == ":"]
    heads = [(arg[:i], arg[i + 1:]) for i in colons if i and arg[i + 1:]]
    layouts = [(head, tail) for head, tail in heads if _is_layout(Path(head))]
    for head, tail in layouts:
        try:
            if tail in read_layout(head):
                return head, tail
        except LemonpackError:
            continue
    if _is_layout(Path(arg)):
        return arg, None
    if layouts:
        return layouts[0]
    head, sep, tail = arg.rpartition(":")
    if sep and head and tail and "/" not in tail:
        return head, tail
    return arg, None


def split_layout_target(arg: str) -> tuple[str, str | None]:
    """Split a layout to *write*, ``DIR[:TAG]`` (``pull --out``, as skopeo's ``oci:DIR:TAG``),
    into the directory and the tag (``None`` when absent). ``arg`` itself when it exists (a
    directory may have a ``:`` in its name) or when what follows its last ``:`` is no tag of the
    distribution grammar (``[\\w][\\w.-]{0,127}``, :func:`lemonpack.oci.reference.is_tag`: a tag
    holds no ``/``); else ``(DIR, TAG)``. Pure apart from the existence check."""
    from lemonpack.oci.reference import is_tag

    head, sep, tail = arg.rpartition(":")
    if not sep or not head or os.path.lexists(arg) or not is_tag(tail):
        return arg, None
    return head, tail


def verify_layout(path: str | os.PathLike[str]) -> int:
    """Re-hash every blob of the layout at ``path`` and check every reference.

    Checks: each file under ``blobs/sha256/`` hashes to its name; every descriptor
    reachable from ``index.json`` (manifests, nested indexes, configs, layers, subjects
    are not required to be present) names an existing blob of the right size.
    Returns the number of blobs verified. Raises :class:`IntegrityError` on a hash
    mismatch, :class:`LayoutError` on a missing blob, size mismatch or malformed JSON.

    Spec: ``image-layout.md`` (blobs), ``descriptor.md`` (verification).
    """
    root = Path(path)
    read_layout(root)
    blob_dir = root / "blobs" / "sha256"
    count = 0
    for entry in sorted(blob_dir.iterdir()) if blob_dir.is_dir() else []:
        expected = sha256_text(entry.name) if is_sha256_hex(entry.name) else entry.name  # a stray file: no digest
        actual = str(file_digest(entry)[0])
        if actual != expected:
            raise IntegrityError(str(entry), expected, actual)
        count += 1
    index = _load_json(root / "index.json")
    seen: set[str] = set()
    todo = [Descriptor.from_json(d) for d in index.get("manifests", [])]
    while todo:
        desc = todo.pop()
        if desc.digest in seen:
            continue
        seen.add(desc.digest)
        blob = blob_dir / desc.hex
        if not blob.is_file():
            raise LayoutError(f"{root}: blob {desc.digest} ({desc.media_type}) is missing")
        if blob.stat().st_size != desc.size:
            raise LayoutError(f"{root}: blob {desc.digest} has size {blob.stat().st_size}, "
                              f"descriptor says {desc.size}")
        if desc.media_type in IMAGE_MANIFEST_TYPES:
            doc = _load_json(blob)
            todo.append(Descriptor.from_json(doc["config"]))
            todo.extend(Descriptor.from_json(l) for l in doc.get("layers", []))
        elif desc.media_type in IMAGE_INDEX_TYPES:
            doc = _load_json(blob)
            todo.extend(Descriptor.from_json(m) for m in doc.get("manifests", []))
    return count


__all__ = ["blob_path", "read_blob", "read_layout", "split_layout_arg", "split_layout_target", "verify_blob", "verify_layout"]
