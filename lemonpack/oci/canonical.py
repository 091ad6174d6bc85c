"""The OCI media types, annotation keys and constants lemonpack writes.

Every JSON document lemonpack puts into an OCI layout (manifests, indexes, configs,
``index.json``, ``oci-layout``) goes through :func:`lemonpack.canonical.canonical_json`
(floats refused), so the same document always has the same bytes and therefore the same
digest.
"""

from __future__ import annotations

# OCI image-spec v1.1, media-types.md
MEDIA_TYPE_IMAGE_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_TYPE_IMAGE_INDEX = "application/vnd.oci.image.index.v1+json"
MEDIA_TYPE_IMAGE_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_TYPE_LAYER_TAR = "application/vnd.oci.image.layer.v1.tar"
MEDIA_TYPE_LAYER_TAR_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
MEDIA_TYPE_LAYER_TAR_ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"
MEDIA_TYPE_EMPTY = "application/vnd.oci.empty.v1+json"
MEDIA_TYPE_LAYOUT_HEADER = "application/vnd.oci.layout.header.v1+json"

# The empty descriptor (manifest.md, "Guidance for an Empty Descriptor"): the two bytes ``{}``.
EMPTY_JSON = b"{}"
EMPTY_DIGEST = "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
EMPTY_SIZE = 2

# Annotation keys (annotations.md, "Pre-Defined Annotation Keys")
ANNOTATION_REF_NAME = "org.opencontainers.image.ref.name"
ANNOTATION_CREATED = "org.opencontainers.image.created"
ANNOTATION_TITLE = "org.opencontainers.image.title"
ANNOTATION_SOURCE = "org.opencontainers.image.source"
ANNOTATION_REVISION = "org.opencontainers.image.revision"
ANNOTATION_VERSION = "org.opencontainers.image.version"

OCI_LAYOUT_VERSION = "1.0.0"


__all__ = [
    "MEDIA_TYPE_IMAGE_MANIFEST", "MEDIA_TYPE_IMAGE_INDEX",
    "MEDIA_TYPE_IMAGE_CONFIG", "MEDIA_TYPE_LAYER_TAR", "MEDIA_TYPE_LAYER_TAR_GZIP",
    "MEDIA_TYPE_LAYER_TAR_ZSTD", "MEDIA_TYPE_EMPTY", "MEDIA_TYPE_LAYOUT_HEADER", "EMPTY_JSON",
    "EMPTY_DIGEST", "EMPTY_SIZE", "ANNOTATION_REF_NAME", "ANNOTATION_CREATED", "ANNOTATION_TITLE",
    "ANNOTATION_SOURCE", "ANNOTATION_REVISION", "ANNOTATION_VERSION", "OCI_LAYOUT_VERSION",
]
