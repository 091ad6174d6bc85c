"""Every media type lemonpack writes or reads, and the OCI constants that go with them: the one
place these strings are spelled (``tests/test_concept_owners.py`` fails on a media-type literal
anywhere else in ``lemonpack/``). Readers and writers import the names, as CNCF ModelPack's
``specs-go/v1/mediatype.go`` has them do.

Sources: OCI image-spec v1.1 ``media-types.md`` (OCI types), ``manifest.md`` ("Guidance for an
Empty Descriptor"), ``image-layout.md`` (``oci-layout``), ``annotations.md`` (pre-defined
keys); Docker Image Manifest V2, Schema 2 (the Docker types registries and other tools still
write); cosign's ``specs/SIGNATURE_SPEC.md`` (simple signing) and ``pkg/types/payload.go`` (attestations); lemonpack's own recipe artifact.
Every JSON document lemonpack puts into a layout is encoded by
:func:`lemonpack.canonical.canonical_json`, so the same document has the same digest.
"""

from __future__ import annotations

from lemonpack.digest import sha256_text

# OCI image-spec v1.1, media-types.md
MEDIA_TYPE_IMAGE_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_TYPE_IMAGE_INDEX = "application/vnd.oci.image.index.v1+json"
MEDIA_TYPE_IMAGE_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_TYPE_LAYER_TAR = "application/vnd.oci.image.layer.v1.tar"
MEDIA_TYPE_LAYER_TAR_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
MEDIA_TYPE_LAYER_TAR_ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"
MEDIA_TYPE_EMPTY = "application/vnd.oci.empty.v1+json"
MEDIA_TYPE_LAYOUT_HEADER = "application/vnd.oci.layout.header.v1+json"

# Docker Image Manifest V2, Schema 2 (read, never written)
MEDIA_TYPE_DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
MEDIA_TYPE_DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MEDIA_TYPE_DOCKER_LAYER_TAR = "application/vnd.docker.image.rootfs.diff.tar"
MEDIA_TYPE_DOCKER_LAYER_TAR_GZIP = "application/vnd.docker.image.rootfs.diff.tar.gzip"

# cosign (specs/SIGNATURE_SPEC.md in sigstore/cosign): a signature image's layer is a simple signing payload
MEDIA_TYPE_COSIGN_SIMPLESIGNING = "application/vnd.dev.cosign.simplesigning.v1+json"
# cosign attestations (pkg/types/payload.go): an ``.att`` image's layer is a DSSE envelope
# (secure-systems-lab/dsse ``envelope.md``) whose payloadType is an in-toto statement
# (in-toto/attestation ``spec/v1/envelope.md``)
MEDIA_TYPE_DSSE_ENVELOPE = "application/vnd.dsse.envelope.v1+json"
MEDIA_TYPE_IN_TOTO = "application/vnd.in-toto+json"
#: The layer annotation cosign writes on an attestation (``cmd/cosign/cli/attest/attest.go``).
ANNOTATION_COSIGN_PREDICATE_TYPE = "predicateType"

# lemonpack's recipe artifact (``lemonpack publish RECIPE.json``): artifact type and layer type
MEDIA_TYPE_LEMONPACK_RECIPE = "application/vnd.lemonpack.recipe.v1+json"

#: An image manifest, in either family: what a reader follows to a config and layers.
IMAGE_MANIFEST_TYPES = (MEDIA_TYPE_IMAGE_MANIFEST, MEDIA_TYPE_DOCKER_MANIFEST)
#: An image index (a Docker manifest list is one): what a reader follows to manifests.
IMAGE_INDEX_TYPES = (MEDIA_TYPE_IMAGE_INDEX, MEDIA_TYPE_DOCKER_MANIFEST_LIST)
#: Everything a manifest URL may answer: the ``Accept`` list of a manifest request.
MANIFEST_MEDIA_TYPES = (MEDIA_TYPE_IMAGE_MANIFEST, MEDIA_TYPE_IMAGE_INDEX,
                        MEDIA_TYPE_DOCKER_MANIFEST, MEDIA_TYPE_DOCKER_MANIFEST_LIST)
#: gzip-compressed tar layers.
GZIP_LAYER_TYPES = (MEDIA_TYPE_LAYER_TAR_GZIP, MEDIA_TYPE_DOCKER_LAYER_TAR_GZIP)
#: Uncompressed tar layers.
TAR_LAYER_TYPES = (MEDIA_TYPE_LAYER_TAR, MEDIA_TYPE_DOCKER_LAYER_TAR)
#: Every tar layer a base image may have.
LAYER_TYPES = (*GZIP_LAYER_TYPES, *TAR_LAYER_TYPES, MEDIA_TYPE_LAYER_TAR_ZSTD)

# The empty descriptor (manifest.md, "Guidance for an Empty Descriptor"): the two bytes ``{}``.
EMPTY_JSON = b"{}"
EMPTY_DIGEST = sha256_text("44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a")
EMPTY_SIZE = 2

# Annotation keys (annotations.md, "Pre-Defined Annotation Keys")
ANNOTATION_REF_NAME = "org.opencontainers.image.ref.name"
ANNOTATION_CREATED = "org.opencontainers.image.created"
ANNOTATION_TITLE = "org.opencontainers.image.title"
ANNOTATION_SOURCE = "org.opencontainers.image.source"
ANNOTATION_REVISION = "org.opencontainers.image.revision"
ANNOTATION_VERSION = "org.opencontainers.image.version"

#: ``imageLayoutVersion`` of the ``oci-layout`` file (image-layout.md).
OCI_LAYOUT_VERSION = "1.0.0"


__all__ = [
    "MEDIA_TYPE_IMAGE_MANIFEST", "MEDIA_TYPE_IMAGE_INDEX",
    "MEDIA_TYPE_IMAGE_CONFIG", "MEDIA_TYPE_LAYER_TAR", "MEDIA_TYPE_LAYER_TAR_GZIP",
    "MEDIA_TYPE_LAYER_TAR_ZSTD", "MEDIA_TYPE_EMPTY", "MEDIA_TYPE_LAYOUT_HEADER",
    "MEDIA_TYPE_DOCKER_MANIFEST", "MEDIA_TYPE_DOCKER_MANIFEST_LIST", "MEDIA_TYPE_DOCKER_LAYER_TAR",
    "MEDIA_TYPE_DOCKER_LAYER_TAR_GZIP", "MEDIA_TYPE_COSIGN_SIMPLESIGNING", "MEDIA_TYPE_LEMONPACK_RECIPE",
    "MEDIA_TYPE_DSSE_ENVELOPE", "MEDIA_TYPE_IN_TOTO", "ANNOTATION_COSIGN_PREDICATE_TYPE",
    "IMAGE_MANIFEST_TYPES", "IMAGE_INDEX_TYPES", "MANIFEST_MEDIA_TYPES", "GZIP_LAYER_TYPES", "TAR_LAYER_TYPES",
    "LAYER_TYPES", "EMPTY_JSON", "EMPTY_DIGEST", "EMPTY_SIZE", "ANNOTATION_REF_NAME", "ANNOTATION_CREATED",
    "ANNOTATION_TITLE", "ANNOTATION_SOURCE", "ANNOTATION_REVISION", "ANNOTATION_VERSION", "OCI_LAYOUT_VERSION",
]
