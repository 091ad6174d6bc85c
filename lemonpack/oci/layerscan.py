"""One read of a base image's layer tar: its ``diff_id`` (checked against the config's
``rootfs.diff_ids``: a wrong one makes an image unloadable) and the entries that could hide or
redirect a path lemonpack writes (every whiteout, and every entry at or under ``opt/``);
:func:`shadow_problem` judges those entries against the engine's directory. The base image
itself is read by :mod:`lemonpack.oci.base`.

Spec: OCI image-spec v1.1 ``layer.md`` (whiteouts), ``config.md`` (``rootfs.diff_ids``).
"""

from __future__ import annotations

import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

from zlib_ng import zlib_ng  # the layers' own deflater; inflates in about 40 % of zlib's CPU

from lemonpack.digest import Hasher, HashingReader, is_sha256_digest
from lemonpack.oci.mediatypes import GZIP_LAYER_TYPES, LAYER_TYPES, MEDIA_TYPE_LAYER_TAR_ZSTD

_READ = 1 << 20
_CORRUPT = cast("type[Exception]", zlib_ng.error)  # a corrupt deflate stream (its stub calls the class an instance)


WHITEOUT = ".wh."


OPAQUE = ".wh..wh..opq"


@dataclass(frozen=True)
class LayerFacts:
    """What one read of a base layer found: ``diff_id`` (``sha256:<hex>`` of the tar) and
    ``entries``: ``(path, kind)`` of every whiteout and every entry at or under ``opt``
    (``kind``: ``dir``, ``file``, ``symlink``, ``link``, ``other``, ``whiteout``)."""

    diff_id: str
    entries: tuple[tuple[str, str], ...] = ()
    digest: str | None = None  # of the compressed bytes read (None: taken from a record)

    def to_json(self) -> dict:
        """``{"diff_id", "entries": [[path, kind], ...]}``."""
        return {"diff_id": self.diff_id, "entries": [list(e) for e in self.entries]}

    @classmethod
    def from_json(cls, doc: Any) -> "LayerFacts":
        """The inverse of :meth:`to_json`; ``ValueError`` when malformed."""
        try:
            diff_id = doc["diff_id"]
            entries = tuple((str(p), str(k)) for p, k in doc["entries"])
        except (KeyError, TypeError, ValueError):
            raise ValueError("malformed layer facts") from None
        if not is_sha256_digest(diff_id):
            raise ValueError("malformed layer facts")
        return cls(diff_id, entries)


class _HashingReader:
    """A raw file object that decompresses ``f`` (per media type) and sha256-hashes the
    decompressed bytes as ``tarfile`` reads them."""

    def __init__(self, f, media_type: str):
        self.f, self.tar, self.buf, self.pos = f, Hasher(), b"", 0
        self.inflate = None
        self.zstd = None
        if media_type in GZIP_LAYER_TYPES:
            self.inflate = zlib_ng.decompressobj(wbits=31)
        elif media_type == MEDIA_TYPE_LAYER_TAR_ZSTD:
            import zstandard

            self.zstd = zstandard.ZstdDecompressor().stream_reader(f, read_size=_READ)
        self.done = False

    def _more(self) -> bytes:
        if self.zstd is not None:
            return self.zstd.read(_READ)
        raw = self.f.read(_READ)
        if self.inflate is None:
            return raw
        out = b""
        while not out:
            if not raw:
                if self.inflate.eof:
                    return b""
                out = self.inflate.flush()
                if not self.inflate.eof:
                    raise _CORRUPT("truncated gzip stream")
                return out
            if self.inflate.eof:  # a second gzip member (gzip allows concatenation)
                rest = self.inflate.unused_data + raw
                self.inflate = zlib_ng.decompressobj(wbits=31)
                raw = rest
            out = self.inflate.decompress(raw)
            if not out:
                raw = self.f.read(_READ)
        return out

    def read(self, n: int = -1) -> bytes:
        """Up to ``n`` decompressed bytes (all that is left when ``n < 0``); ``b""`` at the end."""
        have = len(self.buf) - self.pos
        if n >= 0 and have >= n:  # the common case: served from the current chunk, no copy of the rest
            out = self.buf[self.pos:self.pos + n]
            self.pos += n
            return out
        parts = [self.buf[self.pos:]]
        self.buf, self.pos = b"", 0
        while (n < 0 or have < n) and not self.done:
            more = self._more()
            if not more:
                self.done = True
                break
            self.tar.write(more)
            if n >= 0 and have + len(more) > n:
                take = n - have
                parts.append(more[:take])
                self.buf, self.pos = more, take
                have = n
                break
            parts.append(more)
            have += len(more)
        return b"".join(parts)

    def drain(self) -> None:
        """Read (and hash) what is left: the tar's end blocks and padding."""
        while self.read(_READ):
            pass


def _kind(m: tarfile.TarInfo) -> str:
    return ("dir" if m.isdir() else "symlink" if m.issym() else "link" if m.islnk() else
            "file" if m.isreg() else "other")


def scan_layer(path: Path, media_type: str) -> LayerFacts:
    """Read the layer blob at ``path`` once (decompressing per ``media_type``, gzip, zstd or
    plain tar): its ``diff_id``, the whiteout and ``opt`` entries, and the ``digest`` of
    the bytes read (:class:`LayerFacts`). Memory stays flat. Raises :class:`BadLayer` (a
    ``ValueError`` carrying the digest) when the bytes are not a readable tar in that
    compression, ``ValueError`` for a media type that is not a tar layer, ``OSError``."""
    if media_type not in LAYER_TYPES:
        raise ValueError(f"layer media type {media_type} is not a tar layer lemonpack reads")
    entries: list[tuple[str, str]] = []
    with open(path, "rb") as raw_f:
        f = HashingReader(raw_f)
        reader = _HashingReader(f, media_type)
        try:
            with tarfile.open(fileobj=cast(IO[bytes], reader), mode="r|") as tar:  # reads through read() only
                for m in tar:
                    name = m.name.lstrip("/")
                    while name.startswith("./"):
                        name = name[2:]
                    name = name.rstrip("/")
                    base = name.rsplit("/", 1)[-1]
                    if base.startswith(WHITEOUT):
                        entries.append((name, "whiteout"))
                    elif name == "opt" or name.startswith("opt/"):
                        entries.append((name, _kind(m)))
            reader.drain()
            while f.read(_READ):  # bytes after the compressed stream still count for the digest
                pass
        except (tarfile.TarError, _CORRUPT, EOFError) as exc:
            while f.read(_READ):
                pass
            raise BadLayer(f"not a readable tar layer: {exc}", str(f.hasher.digest())) from None
        except Exception as exc:  # zstandard.ZstdError
            if type(exc).__name__ == "ZstdError":
                while f.read(_READ):
                    pass
                raise BadLayer(f"not a readable zstd tar layer: {exc}", str(f.hasher.digest())) from None
            raise
    return LayerFacts(str(reader.tar.digest()), tuple(entries), str(f.hasher.digest()))


class BadLayer(ValueError):
    """A layer blob that is not a readable tar; ``digest``: what its bytes hash to."""

    def __init__(self, message: str, digest: str):
        super().__init__(message)
        self.digest = digest


def shadow_problem(facts: LayerFacts, prefix: str) -> str | None:
    """Why a base layer's entries would hide or redirect the in-image directory ``prefix``
    (``opt/lemonpack/<recipe>``, no leading slash), or None: a whiteout of ``prefix``, of a
    parent of it or of something inside it; an opaque whiteout in such a directory; a
    non-directory at ``prefix`` or one of its parents (a symlink ``opt`` would send the
    engine's files elsewhere); any entry inside ``prefix`` (the base would mix files into
    the engine's directory)."""
    parts = prefix.strip("/").split("/")
    chain = {"/".join(parts[:i]) for i in range(1, len(parts) + 1)}
    inside = prefix.strip("/") + "/"
    for path, kind in facts.entries:
        if kind == "whiteout":
            parent, _, base = path.rpartition("/")
            hidden = parent if base == OPAQUE else (f"{parent}/" if parent else "") + base[len(WHITEOUT):]
            if hidden in chain or hidden.startswith(inside) or (base == OPAQUE and (parent in chain or not parent)):
                return f"whiteout /{path} hides /{hidden}, over the engine's directory /{prefix}"
            continue
        if path in chain and kind != "dir":
            return f"/{path} is a {kind}, so the engine's directory /{prefix} would not be where the image says"
        if path.startswith(inside):
            return f"it already holds /{path} inside the engine's directory /{prefix}"
    return None


__all__ = ["LAYER_TYPES", "OPAQUE", "WHITEOUT", "BadLayer", "LayerFacts", "scan_layer", "shadow_problem"]
