"""Cosign's key-based image signatures, as bytes: payload, signature, signature manifest.

Pure functions (no registry, no files) following cosign's published format
(``specs/SIGNATURE_SPEC.md`` in sigstore/cosign; ``pkg/oci/static``, ``pkg/cosign/payload``):

- The payload is the "simple signing" JSON that Go's ``json.Marshal`` writes for cosign's
  ``payload.SimpleContainerImage``::

    {"critical":{"identity":{"docker-reference":"HOST/REPO"},
                 "image":{"docker-manifest-digest":"sha256:<hex>"},
                 "type":"cosign container image signature"},
     "optional":null}

  compact, keys in this order (which is also sorted order), and Go's HTML escaping of
  ``<``, ``>``, ``&`` (``\\u003c`` ...). ``optional`` is ``null`` or an object of annotations.
- The signature is ECDSA P-256 with SHA-256 over the payload bytes, ASN.1 DER, standard
  base64: the layer annotation ``dev.cosignproject.cosign/signature``.
- Signatures of the image ``sha256:<hex>`` live in an OCI image manifest tagged
  ``sha256-<hex>.sig`` in the image's repository (the tag fallback: no referrers API);
  each signature is one layer of media type ``application/vnd.dev.cosign.simplesigning.v1+json``
  whose blob is the payload. The config lists the layers' digests as ``rootfs.diff_ids``
  (the payload layers are uncompressed, so diff_id = digest), as go-containerregistry's
  ``mutate.AppendLayers`` on ``empty.Image`` writes it.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:  # imported where a signature is made or checked: a pull without one needs none (~6 MiB)
    from cryptography.hazmat.primitives.asymmetric import ec

from lemonpack.digest import Digest, is_sha256_digest
from lemonpack.oci.mediatypes import MEDIA_TYPE_COSIGN_SIMPLESIGNING, MEDIA_TYPE_IMAGE_CONFIG, MEDIA_TYPE_IMAGE_MANIFEST

SIMPLESIGNING_MEDIA_TYPE = MEDIA_TYPE_COSIGN_SIMPLESIGNING
SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"
PAYLOAD_TYPE = "cosign container image signature"
#: Go's json.Marshal escapes these inside strings (HTMLEscape); structural JSON never holds them.
_GO_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def signature_tag(image_digest: str) -> str:
    """The tag holding the signatures of ``image_digest``: ``sha256-<hex>.sig``.
    Raises ValueError for anything but a ``sha256:<64 hex>`` digest."""
    if not is_sha256_digest(image_digest):
        raise ValueError(f"not a sha256 digest: {image_digest!r}")
    d = Digest.parse(image_digest)
    return f"{d.algorithm}-{d.hex}.sig"


def _go_json(obj: Any) -> bytes:
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    for ch, esc in _GO_ESCAPES.items():
        text = text.replace(ch, esc)
    return text.encode("utf-8")


def make_payload(docker_reference: str, image_digest: str, optional: Mapping[str, Any] | None = None) -> bytes:
    """The simple-signing payload bytes for ``image_digest`` in repository
    ``docker_reference`` (``HOST[:PORT]/REPO``, no tag), with ``optional`` annotations
    (``None`` → ``"optional":null``, as cosign writes it without ``-a``). Keys of
    ``optional`` are sorted, as Go marshals a map."""
    if not is_sha256_digest(image_digest):
        raise ValueError(f"not a sha256 digest: {image_digest!r}")
    doc = {"critical": {"identity": {"docker-reference": docker_reference},
                        "image": {"docker-manifest-digest": image_digest},
                        "type": PAYLOAD_TYPE},
           "optional": None if optional is None else {k: optional[k] for k in sorted(optional)}}
    return _go_json(doc)


@dataclass(frozen=True)
class Claims:
    """What a payload asserts: ``docker_reference``, ``image_digest``, ``optional`` (dict or None)."""

    docker_reference: str
    image_digest: str
    optional: Mapping[str, Any] | None


class PayloadError(ValueError):
    """A payload is not a cosign simple-signing document; ``args[0]`` names the field."""


def parse_payload(payload: bytes) -> Claims:
    """Read the claims of a simple-signing payload. Raises :class:`PayloadError` naming the
    JSON path when it is not JSON, lacks ``critical.image.docker-manifest-digest`` or
    ``critical.identity.docker-reference``, or ``critical.type`` is not
    ``cosign container image signature``."""
    try:
        doc = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        raise PayloadError("payload: not JSON") from None
    crit = doc.get("critical") if isinstance(doc, dict) else None
    if not isinstance(crit, dict):
        raise PayloadError("critical: missing")
    if crit.get("type") != PAYLOAD_TYPE:
        raise PayloadError(f"critical.type: {crit.get('type')!r} is not {PAYLOAD_TYPE!r}")
    image, ident = crit.get("image"), crit.get("identity")
    digest = image.get("docker-manifest-digest") if isinstance(image, dict) else None
    ref = ident.get("docker-reference") if isinstance(ident, dict) else None
    if not isinstance(digest, str) or not is_sha256_digest(digest):
        raise PayloadError("critical.image.docker-manifest-digest: missing or not a sha256 digest")
    if not isinstance(ref, str):
        raise PayloadError("critical.identity.docker-reference: missing")
    optional = doc.get("optional")
    return Claims(ref, digest, optional if isinstance(optional, dict) else None)


def sign_payload(private: ec.EllipticCurvePrivateKey, payload: bytes) -> str:
    """ECDSA P-256 / SHA-256 signature of ``payload``: ASN.1 DER, standard base64 (the
    annotation value cosign writes, and cosign ``sign-blob``'s output). Nonces are
    deterministic (RFC 6979), so the same key and bytes give the same signature: image
    signatures and catalogue index and entry signatures alike are reproducible. The one
    ECDSA signing function of lemonpack; :func:`verify_payload` checks it."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    return base64.b64encode(private.sign(payload, ec.ECDSA(hashes.SHA256(), deterministic_signing=True))).decode("ascii")


def verify_payload(public: ec.EllipticCurvePublicKey, payload: bytes, signature_b64: str) -> bool:
    """Whether ``signature_b64`` (base64 DER ECDSA) is ``public``'s signature over ``payload``
    (SHA-256). Malformed base64 or DER is ``False``, never an exception."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    try:
        sig = base64.b64decode(signature_b64.encode("ascii"), validate=True)
        public.verify(sig, payload, ec.ECDSA(hashes.SHA256()))
    except (InvalidSignature, ValueError, binascii.Error, UnicodeEncodeError):
        return False
    return True


@dataclass(frozen=True)
class SignatureLayer:
    """One signature in a signature manifest: the payload blob ``digest`` / ``size`` and
    the base64 ``signature``; ``annotations`` holds every annotation of the layer;
    ``media_type`` the layer's (simple signing; a cosign attestation's layer is a DSSE
    envelope, :mod:`lemonpack.signing.attestations`)."""

    digest: str
    size: int
    signature: str | None
    annotations: Mapping[str, str]
    media_type: str = SIMPLESIGNING_MEDIA_TYPE


def parse_signature_manifest(manifest: bytes, media_type: str = SIMPLESIGNING_MEDIA_TYPE) -> list[SignatureLayer]:
    """The layers of ``media_type`` (default simple signing) of a signature manifest, in
    order (layers of other media types are skipped). Raises :class:`PayloadError` when it is
    not an image manifest."""
    try:
        doc = json.loads(manifest)
    except (ValueError, UnicodeDecodeError):
        raise PayloadError("signature manifest: not JSON") from None
    layers = doc.get("layers") if isinstance(doc, dict) else None
    if not isinstance(layers, list):
        raise PayloadError("signature manifest: layers: missing")
    out = []
    for i, layer in enumerate(layers):
        if not isinstance(layer, dict) or layer.get("mediaType") != media_type:
            continue
        digest, size = layer.get("digest"), layer.get("size")
        if not isinstance(digest, str) or not is_sha256_digest(digest) or not isinstance(size, int):
            raise PayloadError(f"signature manifest: layers[{i}]: digest/size missing or malformed")
        raw = layer.get("annotations")
        ann: dict[str, Any] = raw if isinstance(raw, dict) else {}
        sig = ann.get(SIGNATURE_ANNOTATION)
        out.append(SignatureLayer(digest, size, sig if isinstance(sig, str) else None, dict(ann), media_type))
    return out


def build_signature_manifest(layers: list[SignatureLayer]) -> tuple[bytes, bytes]:
    """The signature manifest holding ``layers`` (in order) and its config: returns
    ``(manifest_bytes, config_bytes)``, byte for byte what cosign writes for the same
    signatures: Go's ``json.Marshal`` of go-containerregistry's structs (``v1.Manifest``,
    ``v1.Descriptor``, ``v1.ConfigFile``, ``v1.History``), so compact, keys in struct field
    order (``schemaVersion, mediaType, config, layers``; ``mediaType, size, digest,
    annotations``; ``architecture, created, history, os, rootfs, config``), map keys (the
    annotations) sorted, and Go's HTML escaping. The config is the one ``mutate.Append`` on
    cosign's ``empty.Signatures()`` gives: empty ``architecture`` / ``os``, zero ``created``,
    one zero-``created`` history entry per layer, ``rootfs.diff_ids`` = the layers' digests
    (the payloads are uncompressed), an empty ``config``.
    Each layer has its own ``media_type``: cosign writes attestations (``sha256-<hex>.att``)
    the same way, with DSSE envelope layers."""
    created = "0001-01-01T00:00:00Z"
    config = {"architecture": "", "created": created, "history": [{"created": created} for _ in layers],
              "os": "", "rootfs": {"type": "layers", "diff_ids": [l.digest for l in layers]}, "config": {}}
    config_bytes = _go_json(config)
    manifest = {"schemaVersion": 2, "mediaType": MEDIA_TYPE_IMAGE_MANIFEST,
                "config": {"mediaType": MEDIA_TYPE_IMAGE_CONFIG, "size": len(config_bytes),
                           "digest": str(Digest.of_bytes(config_bytes))},
                "layers": [_go_descriptor(l) for l in layers]}
    return _go_json(manifest), config_bytes


def _go_descriptor(layer: SignatureLayer) -> dict[str, Any]:
    doc: dict[str, Any] = {"mediaType": layer.media_type, "size": layer.size, "digest": layer.digest}
    if layer.annotations:  # omitempty; a Go map is written with its keys sorted
        doc["annotations"] = {k: layer.annotations[k] for k in sorted(layer.annotations)}
    return doc
