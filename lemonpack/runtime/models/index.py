"""The one model artifact of an image index (``models pull`` of a reference naming an OCI image
index, or Docker's manifest list): pure over the index bytes and what each manifest it names
turned out to be.

An index may hold a model artifact beside runtime images (a modelcar's engine, one per
platform) and build attestations (Docker buildx's ``attestation-manifest`` entries); a pull takes
the one manifest that is a model artifact in a format
:func:`lemonpack.runtime.models.artifact.detect_format` reads, or, of several, the one whose
``platform`` is this machine's (image-spec ``image-index.md``: ``platform`` ``os`` and
``architecture``), and refuses anything else, naming each candidate. Read by
:func:`lemonpack.runtime.models.pull.pull_model` (and everything that reads a model's manifest
through it: ``models inspect``, the GGUF header for the memory estimate).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from lemonpack.errors import LayoutError
from lemonpack.oci import mediatypes as mt
from lemonpack.oci.descriptor import Descriptor
from lemonpack.runtime.models.artifact import ModelArtifactError


def is_index(manifest: bytes) -> bool:
    """Whether ``manifest`` (bytes, as the registry answered) is an image index (OCI, or Docker's
    manifest list) rather than one manifest: its ``mediaType`` says so, or, without one, it has
    ``manifests`` and neither ``config`` nor ``layers``."""
    try:
        doc = json.loads(manifest)
    except (ValueError, UnicodeDecodeError):
        return False
    if not isinstance(doc, dict):
        return False
    if "mediaType" in doc:
        return doc["mediaType"] in mt.IMAGE_INDEX_TYPES
    return "manifests" in doc and "layers" not in doc and "config" not in doc


def index_manifests(index: bytes) -> list[Descriptor]:
    """The image manifests the image index ``index`` names, in index order (nested indexes and
    other media types left out). Raises :class:`ModelArtifactError` for an index that is not a
    JSON object with a ``manifests`` list of descriptors."""
    try:
        doc = json.loads(index)
    except (ValueError, UnicodeDecodeError):
        raise ModelArtifactError("model index is not JSON") from None
    entries = doc.get("manifests") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise ModelArtifactError("model index has no manifests list")
    out = []
    for i, entry in enumerate(entries):
        try:
            out.append(Descriptor.from_json(entry))
        except (LayoutError, ValueError, TypeError, AttributeError, KeyError):
            raise ModelArtifactError(f"model index manifests[{i}] is not a descriptor with mediaType, "
                                     "sha256 digest and size") from None
    return [d for d in out if d.media_type in mt.IMAGE_MANIFEST_TYPES]


def _platform_text(d: Descriptor) -> str:
    p = d.platform or {}
    return "/".join(str(p[k]) for k in ("os", "architecture", "variant") if p.get(k)) or "no platform"


def pick_index_manifest(what: str, formats: Sequence[tuple[Descriptor, str | None]],
                        platform: tuple[str, str]) -> Descriptor:
    """The one manifest of an image index a model pull takes: of ``formats`` (each manifest the
    index names, with its format as :func:`lemonpack.runtime.models.artifact.detect_format` read
    it, None when it is no model artifact: a runtime image, a build attestation), the only model
    artifact; of several, the only one whose ``platform`` is ``platform`` (``(os,
    architecture)``: this machine's); an entry without a platform matches none. ``what`` names
    the index in errors. Raises :class:`ModelArtifactError` when no manifest is a model artifact
    (naming each manifest and its platform), or several are and the platform does not single one
    out (naming each candidate: digest, format, platform)."""
    models = [(d, f) for d, f in formats if f is not None]
    if len(models) == 1:
        return models[0][0]
    if not models:
        seen = "; ".join(f"{d.digest} ({_platform_text(d)})" for d, _ in formats) or "none"
        raise ModelArtifactError(f"{what} is an image index with no model artifact among its manifests ({seen}): "
                                 "lemonpack reads CNCF ModelPack, Docker Model Runner, KitOps and RamaLama artifacts")
    os_name, arch = platform
    here = [(d, f) for d, f in models
            if (d.platform or {}).get("os") == os_name and (d.platform or {}).get("architecture") == arch]
    if len(here) == 1:
        return here[0][0]
    named = "; ".join(f"{d.digest} ({f}, {_platform_text(d)})" for d, f in models)
    why = f"none for {os_name}/{arch}" if not here else f"{len(here)} for {os_name}/{arch}"
    raise ModelArtifactError(f"{what} is an image index with {len(models)} model artifacts and {why}: {named}; "
                             "pull the one you mean by its digest")


__all__ = ["index_manifests", "is_index", "pick_index_manifest"]
