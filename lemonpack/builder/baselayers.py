"""A base image's layers copied into a layout being built (each blob once, hashed against its
digest while copied) and checked once against the engine's directory, their facts remembered
in the layer cache. Used by every image on a base: ``lemonpack build --base``
(:mod:`lemonpack.builder.pipeline`) and the release images (:mod:`lemonpack.release`).

Trust on a later build: as the caches' own entries, **the digest recorded with the stat facts
the blob had when it was hashed** (:class:`lemonpack.digest.FileDigests`, its rule). A blob of
the base layout whose bytes hashed to its digest while copied has that digest recorded, under
the ``[size, mtime_ns, ctime_ns, inode, device]`` taken before the copy read it (kept only when
unchanged after), in the layer cache's record (:attr:`LayerCache.digests
<lemonpack.builder.layercache.LayerCache.digests>`, ``<layers>/digests/blobs.json``); a later
build that finds the blob with exactly those facts copies it without hashing it again
(:meth:`~lemonpack.oci.layout.LayoutWriter.copy_blob` ``verify=False``: a reflink or a kernel
copy, the size checked). Any write, truncation, ``touch``, ``chmod`` or replacement of the blob
changes its ctime at least, so it is hashed again (and refused when it no longer matches its
digest)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from lemonpack.builder.layercache import LayerCache
from lemonpack.digest import FileDigests
from lemonpack.errors import IntegrityError, LayoutError, LemonpackError
from lemonpack.oci import Descriptor, LayoutWriter
from lemonpack.oci.base import BaseImage
from lemonpack.oci.layerscan import LayerFacts, scan_layer


def base_layer_facts(layers: LayerCache) -> Callable[[Descriptor, Path], LayerFacts]:
    """``facts_of(desc, path)`` for :meth:`lemonpack.oci.base.BaseImage.check`: the facts
    recorded in the layer cache for ``desc.digest``, else one read of the blob (recorded
    afterwards, once its bytes hash to ``desc.digest``)."""
    def facts_of(desc: Descriptor, path: Path) -> LayerFacts:
        doc = layers.base_facts(desc.digest)
        if doc is not None:
            try:
                return LayerFacts.from_json(doc)
            except ValueError:
                pass
        facts = scan_layer(path, desc.media_type)
        if facts.digest == desc.digest:  # facts of other bytes are never recorded under this digest
            layers.put_base_facts(desc.digest, facts.to_json())
        return facts
    return facts_of


class BaseLayers:
    """The base layers copied into one layout ``lw`` (each blob once, hashed against its
    digest while copied; the layers' facts checked once, remembered in ``layers``)."""

    def __init__(self, lw: LayoutWriter, layers: LayerCache):
        self.lw, self.layers = lw, layers
        self.digests: FileDigests = layers.digests
        self.copied: set[str] = set()
        self.checked: set[tuple[str, tuple[str, ...]]] = set()

    def put(self, image: BaseImage, prefixes: tuple[str, ...]) -> list[Descriptor]:
        """Check ``image`` against ``prefixes`` and copy its layers; their descriptors."""
        key = (image.digest, prefixes)
        if key not in self.checked:
            image.check(prefixes, base_layer_facts(self.layers))
            self.checked.add(key)
        for desc, diff_id in zip(image.layers, image.diff_ids):
            if desc.digest in self.copied:
                continue
            path = image.blob(desc)
            hashed_before = self.digests.known(path) == desc.digest
            before = None if hashed_before else self.digests.facts(path)  # taken before the copy reads it
            try:
                self.lw.copy_blob(path, desc, diff_id=diff_id, verify=not hashed_before)
            except IntegrityError as exc:
                raise IntegrityError(f"base {image.name}: layer blob {image.blob(desc)}", exc.expected,
                                     exc.actual) from None
            except FileNotFoundError:
                raise LayoutError(f"base {image.name}: layer {desc.digest} is missing from "
                                  f"{image.layout}") from None
            except LemonpackError as exc:
                raise LayoutError(f"base {image.name}: {exc}") from None
            if not hashed_before:
                self.layers.hashed(path, desc.digest, before)
            self.copied.add(desc.digest)
        return list(image.layers)


__all__ = ["BaseLayers", "base_layer_facts"]
