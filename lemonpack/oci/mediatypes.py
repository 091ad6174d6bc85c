"""Every media type lemonpack writes or reads, and the OCI constants that go with them: the one
place these strings are spelled (``tests/test_concept_owners.py`` fails on a media-type literal
anywhere else in ``lemonpack/``). Readers and writers import the names, as CNCF ModelPack's
``specs-go/v1/mediatype.go`` has them do.

Sources: OCI image-spec v1.1 ``media-types.md`` (OCI types), ``manifest.md`` ("Guidance for an
Empty Descriptor"), ``image-layout.md`` (``oci-layout``), ``annotations.md`` (pre-defined
keys); Docker Image Manifest V2, Schema 2 (the Docker types registries and other tools still
write); cosign's ``specs/SIGNATURE_SPEC.md`` (simple signing); lemonpack's own recipe artifact.
Model artifacts (:mod:`lemonpack.runtime.models.artifact` reads and writes them): CNCF ModelPack
(modelpack/model-spec ``specs-go/v1/mediatype.go``, ``specs-go/v1/annotations.go``), Docker
Model Runner (docker/model-runner ``pkg/distribution/types/config.go``), KitOps ModelKits
(kitops-ml/kitops ``pkg/lib/constants/mediaType.go``, ``pkg/artifact/spec.md``), RamaLama
(containers/ramalama ``docs/ramalama-oci.5.md``, ``ramalama/annotations.py``).
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
MEDIA_TYPE_DOCKER_IMAGE_CONFIG = "application/vnd.docker.container.image.v1+json"

# cosign (specs/SIGNATURE_SPEC.md in sigstore/cosign): a signature image's layer is a simple signing payload
MEDIA_TYPE_COSIGN_SIMPLESIGNING = "application/vnd.dev.cosign.simplesigning.v1+json"

# lemonpack's recipe artifact (``lemonpack publish RECIPE.json``): artifact type and layer type
MEDIA_TYPE_LEMONPACK_RECIPE = "application/vnd.lemonpack.recipe.v1+json"

# CNCF ModelPack (modelpack/model-spec specs-go/v1/mediatype.go): the artifact type of a model
# manifest, its config, and its layers (raw: the file itself; tar: an archive of files)
MEDIA_TYPE_MODELPACK_MANIFEST = "application/vnd.cncf.model.manifest.v1+json"
MEDIA_TYPE_MODELPACK_CONFIG = "application/vnd.cncf.model.config.v1+json"
MEDIA_TYPE_MODELPACK_WEIGHT_RAW = "application/vnd.cncf.model.weight.v1.raw"
MEDIA_TYPE_MODELPACK_WEIGHT_TAR = "application/vnd.cncf.model.weight.v1.tar"
MEDIA_TYPE_MODELPACK_WEIGHT_TAR_GZIP = "application/vnd.cncf.model.weight.v1.tar+gzip"
MEDIA_TYPE_MODELPACK_WEIGHT_TAR_ZSTD = "application/vnd.cncf.model.weight.v1.tar+zstd"
MEDIA_TYPE_MODELPACK_WEIGHT_CONFIG_RAW = "application/vnd.cncf.model.weight.config.v1.raw"
MEDIA_TYPE_MODELPACK_WEIGHT_CONFIG_TAR = "application/vnd.cncf.model.weight.config.v1.tar"
MEDIA_TYPE_MODELPACK_WEIGHT_CONFIG_TAR_GZIP = "application/vnd.cncf.model.weight.config.v1.tar+gzip"
MEDIA_TYPE_MODELPACK_WEIGHT_CONFIG_TAR_ZSTD = "application/vnd.cncf.model.weight.config.v1.tar+zstd"
MEDIA_TYPE_MODELPACK_DOC_RAW = "application/vnd.cncf.model.doc.v1.raw"
MEDIA_TYPE_MODELPACK_DOC_TAR = "application/vnd.cncf.model.doc.v1.tar"
MEDIA_TYPE_MODELPACK_DOC_TAR_GZIP = "application/vnd.cncf.model.doc.v1.tar+gzip"
MEDIA_TYPE_MODELPACK_DOC_TAR_ZSTD = "application/vnd.cncf.model.doc.v1.tar+zstd"
MEDIA_TYPE_MODELPACK_CODE_RAW = "application/vnd.cncf.model.code.v1.raw"
MEDIA_TYPE_MODELPACK_CODE_TAR = "application/vnd.cncf.model.code.v1.tar"
MEDIA_TYPE_MODELPACK_CODE_TAR_GZIP = "application/vnd.cncf.model.code.v1.tar+gzip"
MEDIA_TYPE_MODELPACK_CODE_TAR_ZSTD = "application/vnd.cncf.model.code.v1.tar+zstd"
MEDIA_TYPE_MODELPACK_DATASET_RAW = "application/vnd.cncf.model.dataset.v1.raw"
MEDIA_TYPE_MODELPACK_DATASET_TAR = "application/vnd.cncf.model.dataset.v1.tar"
MEDIA_TYPE_MODELPACK_DATASET_TAR_GZIP = "application/vnd.cncf.model.dataset.v1.tar+gzip"
MEDIA_TYPE_MODELPACK_DATASET_TAR_ZSTD = "application/vnd.cncf.model.dataset.v1.tar+zstd"
#: ModelPack layer media type -> (role, archive): role ``weight``, ``weight-config``, ``doc``,
#: ``code``, ``dataset``; archive ``None`` (the layer is the file), ``tar``, ``tar+gzip``, ``tar+zstd``.
MODELPACK_LAYER_TYPES: dict[str, tuple[str, str | None]] = {
    MEDIA_TYPE_MODELPACK_WEIGHT_RAW: ("weight", None), MEDIA_TYPE_MODELPACK_WEIGHT_TAR: ("weight", "tar"),
    MEDIA_TYPE_MODELPACK_WEIGHT_TAR_GZIP: ("weight", "tar+gzip"),
    MEDIA_TYPE_MODELPACK_WEIGHT_TAR_ZSTD: ("weight", "tar+zstd"),
    MEDIA_TYPE_MODELPACK_WEIGHT_CONFIG_RAW: ("weight-config", None),
    MEDIA_TYPE_MODELPACK_WEIGHT_CONFIG_TAR: ("weight-config", "tar"),
    MEDIA_TYPE_MODELPACK_WEIGHT_CONFIG_TAR_GZIP: ("weight-config", "tar+gzip"),
    MEDIA_TYPE_MODELPACK_WEIGHT_CONFIG_TAR_ZSTD: ("weight-config", "tar+zstd"),
    MEDIA_TYPE_MODELPACK_DOC_RAW: ("doc", None), MEDIA_TYPE_MODELPACK_DOC_TAR: ("doc", "tar"),
    MEDIA_TYPE_MODELPACK_DOC_TAR_GZIP: ("doc", "tar+gzip"), MEDIA_TYPE_MODELPACK_DOC_TAR_ZSTD: ("doc", "tar+zstd"),
    MEDIA_TYPE_MODELPACK_CODE_RAW: ("code", None), MEDIA_TYPE_MODELPACK_CODE_TAR: ("code", "tar"),
    MEDIA_TYPE_MODELPACK_CODE_TAR_GZIP: ("code", "tar+gzip"), MEDIA_TYPE_MODELPACK_CODE_TAR_ZSTD: ("code", "tar+zstd"),
    MEDIA_TYPE_MODELPACK_DATASET_RAW: ("dataset", None), MEDIA_TYPE_MODELPACK_DATASET_TAR: ("dataset", "tar"),
    MEDIA_TYPE_MODELPACK_DATASET_TAR_GZIP: ("dataset", "tar+gzip"),
    MEDIA_TYPE_MODELPACK_DATASET_TAR_ZSTD: ("dataset", "tar+zstd"),
}
# ModelPack layer annotations (specs-go/v1/annotations.go)
ANNOTATION_MODELPACK_FILEPATH = "org.cncf.model.filepath"
ANNOTATION_MODELPACK_FILE_METADATA = "org.cncf.model.file.metadata+json"
ANNOTATION_MODELPACK_MEDIATYPE_UNTESTED = "org.cncf.model.file.mediatype.untested"

# Docker Model Runner (docker/model-runner pkg/distribution/types/config.go): config v0.1 (files
# found by layer media type) and v0.2 (one layer per file, named by org.cncf.model.filepath)
MEDIA_TYPE_DOCKER_AI_CONFIG_V01 = "application/vnd.docker.ai.model.config.v0.1+json"
MEDIA_TYPE_DOCKER_AI_CONFIG_V02 = "application/vnd.docker.ai.model.config.v0.2+json"
MEDIA_TYPE_DOCKER_AI_GGUF = "application/vnd.docker.ai.gguf.v3"
MEDIA_TYPE_DOCKER_AI_SAFETENSORS = "application/vnd.docker.ai.safetensors"
MEDIA_TYPE_DOCKER_AI_VLLM_CONFIG_TAR = "application/vnd.docker.ai.vllm.config.tar"
MEDIA_TYPE_DOCKER_AI_DIR_TAR = "application/vnd.docker.ai.dir.tar"
MEDIA_TYPE_DOCKER_AI_DDUF = "application/vnd.docker.ai.dduf"
MEDIA_TYPE_DOCKER_AI_LICENSE = "application/vnd.docker.ai.license"
MEDIA_TYPE_DOCKER_AI_MMPROJ = "application/vnd.docker.ai.mmproj"
MEDIA_TYPE_DOCKER_AI_CHAT_TEMPLATE = "application/vnd.docker.ai.chat.template.jinja"
MEDIA_TYPE_DOCKER_AI_MODEL_FILE = "application/vnd.docker.ai.model.file"
#: Docker Model Runner layer media type -> (role, archive), as :data:`MODELPACK_LAYER_TYPES`
#: (roles ``weight``, ``mmproj``, ``license``, ``chat-template``, ``weight-config``, ``other``).
DOCKER_AI_LAYER_TYPES: dict[str, tuple[str, str | None]] = {
    MEDIA_TYPE_DOCKER_AI_GGUF: ("weight", None), MEDIA_TYPE_DOCKER_AI_SAFETENSORS: ("weight", None),
    MEDIA_TYPE_DOCKER_AI_DDUF: ("weight", None), MEDIA_TYPE_DOCKER_AI_MMPROJ: ("mmproj", None),
    MEDIA_TYPE_DOCKER_AI_LICENSE: ("license", None), MEDIA_TYPE_DOCKER_AI_CHAT_TEMPLATE: ("chat-template", None),
    MEDIA_TYPE_DOCKER_AI_MODEL_FILE: ("other", None), MEDIA_TYPE_DOCKER_AI_VLLM_CONFIG_TAR: ("weight-config", "tar"),
    MEDIA_TYPE_DOCKER_AI_DIR_TAR: ("other", "tar"),
}

# KitOps ModelKit (kitops-ml/kitops pkg/lib/constants/mediaType.go): the Kitfile as config, tar layers
MEDIA_TYPE_KITOPS_CONFIG = "application/vnd.kitops.modelkit.config.v1+json"
#: KitOps layer media type -> (role, archive): ``application/vnd.kitops.modelkit.<kind>.v1.tar``
#: with ``+gzip`` or ``+zstd`` compression, ``<kind>`` one of model, modelpart, dataset, code, docs.
KITOPS_LAYER_TYPES: dict[str, tuple[str, str | None]] = {
    f"application/vnd.kitops.modelkit.{kind}.v1.tar{comp}": (role, "tar" + comp)
    for kind, role in (("model", "weight"), ("modelpart", "weight"), ("dataset", "dataset"), ("code", "code"),
                       ("docs", "doc"))
    for comp in ("", "+gzip", "+zstd")
}

# RamaLama (containers/ramalama docs/ramalama-oci.5.md): a model as an ordinary image whose config
# carries this label, the GGUF at /models/model.file; its artifacts (podman artifact add) are
# ModelPack-typed manifests whose layers carry org.cncf.model.filepath.
LABEL_RAMALAMA_TYPE = "org.containers.type"
RAMALAMA_TYPE_RAW = "ai.image.model.raw"
RAMALAMA_TYPE_CAR = "ai.image.model.car"
#: Where a RamaLama model image holds its model files, and the name of its main one there.
RAMALAMA_MODELS_DIR = "models/"
RAMALAMA_MODEL_FILE = "model.file"
#: An image config, in either family (a RamaLama model image has one).
IMAGE_CONFIG_TYPES = (MEDIA_TYPE_IMAGE_CONFIG, MEDIA_TYPE_DOCKER_IMAGE_CONFIG)

#: lemonpack's own manifest annotation: the model's context length (tokens) as read from its
#: GGUF header (``<arch>.context_length``); ModelPack's config has no such field.
ANNOTATION_LEMONPACK_CONTEXT_LENGTH = "dev.lemonpack.model.context-length"

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
    "IMAGE_MANIFEST_TYPES", "IMAGE_INDEX_TYPES", "MANIFEST_MEDIA_TYPES", "GZIP_LAYER_TYPES", "TAR_LAYER_TYPES",
    "LAYER_TYPES", "EMPTY_JSON", "EMPTY_DIGEST", "EMPTY_SIZE", "ANNOTATION_REF_NAME", "ANNOTATION_CREATED",
    "ANNOTATION_TITLE", "ANNOTATION_SOURCE", "ANNOTATION_REVISION", "ANNOTATION_VERSION", "OCI_LAYOUT_VERSION",
    "MEDIA_TYPE_MODELPACK_MANIFEST", "MEDIA_TYPE_MODELPACK_CONFIG", "MEDIA_TYPE_MODELPACK_WEIGHT_RAW",
    "MODELPACK_LAYER_TYPES", "ANNOTATION_MODELPACK_FILEPATH", "ANNOTATION_MODELPACK_FILE_METADATA",
    "ANNOTATION_MODELPACK_MEDIATYPE_UNTESTED", "MEDIA_TYPE_DOCKER_AI_CONFIG_V01", "MEDIA_TYPE_DOCKER_AI_CONFIG_V02",
    "MEDIA_TYPE_DOCKER_AI_GGUF", "MEDIA_TYPE_DOCKER_AI_MMPROJ", "DOCKER_AI_LAYER_TYPES", "MEDIA_TYPE_KITOPS_CONFIG",
    "KITOPS_LAYER_TYPES", "LABEL_RAMALAMA_TYPE", "RAMALAMA_TYPE_RAW", "RAMALAMA_TYPE_CAR", "RAMALAMA_MODELS_DIR", "RAMALAMA_MODEL_FILE",
    "MEDIA_TYPE_DOCKER_IMAGE_CONFIG", "IMAGE_CONFIG_TYPES",
    "ANNOTATION_LEMONPACK_CONTEXT_LENGTH",
]
