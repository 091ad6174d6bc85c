"""Sign and verify images in a registry, cosign's key-based way, through the tag fallback.

``sign_image`` resolves the reference to its manifest digest, writes the simple-signing
payload for it, signs it, and pushes the signature manifest under ``sha256-<hex>.sig``
(:mod:`lemonpack.signing.simplesigning`), appending to the signatures already there.
``verify_image`` reads that manifest back and accepts the image when at least one layer's
signature verifies with the key *and* its payload names the image's digest; otherwise it
raises :class:`SignatureError` saying why for each signature found.

Spec: sigstore/cosign ``specs/SIGNATURE_SPEC.md``; OCI distribution-spec v1.1 (the tag
schema fallback when the registry has no referrers API, as Debian's distribution 2.8).
"""

from __future__ import annotations

import io
import os
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric import ec

from lemonpack.digest import Digest, names_sha256
from lemonpack.errors import RegistryError, SignatureError
from lemonpack.oci.mediatypes import MEDIA_TYPE_IMAGE_MANIFEST
from lemonpack.oci.reference import parse_registry_reference
from lemonpack.registry import RegistryClient
from lemonpack.signing import simplesigning as ss

#: A simple-signing payload is a few hundred bytes; anything much larger is refused unread.
MAX_PAYLOAD_BYTES = 1 << 20


def _client(host: str, insecure: bool, client: RegistryClient | None, registry_config=None) -> RegistryClient:
    return client if client is not None else RegistryClient(host, insecure=insecure, registry_config=registry_config)


def resolve_digest(client: RegistryClient, repository: str, ref: str) -> str:
    """The manifest digest ``ref`` (tag or digest) names in ``repository``, read from the
    manifest body (verified by the client). Raises
    :class:`lemonpack.registry.answers.ImageNotFoundError` (exit 1) when the registry has no
    manifest by ``ref`` (404), as ``pull`` does, other registry refusals as ``FetchError``."""
    from lemonpack.registry.answers import ImageNotFoundError, RegistryAnswerError

    try:
        _, _, digest = _manifest(client, repository, ref)
    except RegistryAnswerError as exc:
        if exc.status != 404:
            raise
        sep = "@" if names_sha256(ref) else ":"
        raise ImageNotFoundError.of(f"{client.host}/{repository}{sep}{ref}", exc) from None
    return digest


def _manifest(client: RegistryClient, repo: str, ref: str) -> tuple[bytes, str, str]:
    """:meth:`RegistryClient.get_manifest` without ``missing_ok``: a missing manifest raises."""
    got = client.get_manifest(repo, ref)
    assert got is not None, "get_manifest returns None only with missing_ok"
    return got


def _existing_layers(client: RegistryClient, repo: str, tag: str) -> list[ss.SignatureLayer]:
    if client.head_manifest(repo, tag) is None:
        return []
    data, _, _ = _manifest(client, repo, tag)
    import json

    doc = json.loads(data)
    layers = ss.parse_signature_manifest(data)
    if len(layers) != len(doc.get("layers", [])):
        raise RegistryError(f"{client.host}/{repo}:{tag} holds layers that are not simple-signing payloads; "
                            "refusing to rewrite it (their content would be lost)")
    return layers


def sign_image(reference: str, private: ec.EllipticCurvePrivateKey, *, insecure: bool = False,
               annotations: Mapping[str, str] | None = None, client: RegistryClient | None = None,
               registry_config: str | os.PathLike[str] | None = None) -> dict:
    """Sign the image ``reference`` (``HOST[:PORT]/REPO[:TAG|@sha256:...]``) with ``private``.
    ``registry_config``: an auth file read first (:func:`lemonpack.registry.auth.load_credentials`).

    Returns ``{"reference", "digest", "signature_tag", "signatures", "signature_manifest",
    "payload_digest"}`` (``signatures``: how many the manifest now holds). Signatures already
    under the tag are kept (a new layer is appended). Raises FetchError / IntegrityError from
    the registry client, LemonpackError for a reference without tag or digest."""
    ref = parse_registry_reference(reference)
    if ref.ref is None:
        raise RegistryError(f"{reference}: give a tag or a digest to sign")
    c = _client(ref.host, insecure, client, registry_config)
    try:
        digest = resolve_digest(c, ref.repository, ref.ref)
        payload = ss.make_payload(f"{ref.host}/{ref.repository}", digest, annotations or None)
        signature = ss.sign_payload(private, payload)
        tag = ss.signature_tag(digest)
        layer = ss.SignatureLayer(str(Digest.of_bytes(payload)), len(payload), signature,
                                  {ss.SIGNATURE_ANNOTATION: signature})
        layers = _existing_layers(c, ref.repository, tag) + [layer]
        manifest, config = ss.build_signature_manifest(layers)
        for blob in (payload, config):
            blob_digest = str(Digest.of_bytes(blob))
            if not c.has_blob(ref.repository, blob_digest, len(blob)):
                c.push_blob(ref.repository, blob, blob_digest, len(blob))
        manifest_digest = c.put_manifest(ref.repository, tag, manifest, MEDIA_TYPE_IMAGE_MANIFEST)
    finally:
        if client is None:
            c.close()
    return {"reference": str(ref.with_ref(digest=digest)), "digest": digest, "signature_tag": tag,
            "signatures": len(layers), "signature_manifest": manifest_digest, "payload_digest": layer.digest}


def sign_published(result, private: ec.EllipticCurvePrivateKey, *, insecure: bool = False,
                   client: RegistryClient | None = None) -> list[dict[str, Any]]:
    """Sign every manifest a publish pushed (``result``: a
    :class:`lemonpack.registry.transfer.PublishResult`; each distinct digest once, in push
    order) as :func:`sign_image` does; returns their results. Ctrl-C part way raises
    :class:`~lemonpack.errors.Interrupted` saying that every tag was pushed and how many
    digests were signed (``lemonpack publish --sign``)."""
    from lemonpack.errors import Interrupted

    digests = list(dict.fromkeys(p.digest for p in result.pushed))
    signed: list[dict[str, Any]] = []
    for digest in digests:
        try:
            signed.append(sign_image(f"{result.reference}@{digest}", private, insecure=insecure, client=client))
        except KeyboardInterrupt:
            tags = ", ".join(f"{p.tag}@{p.digest}" for p in result.pushed)
            raise Interrupted(f"publish to {result.reference}: every tag was pushed ({tags}); "
                              f"interrupted while signing {digest} ({len(signed)} of {len(digests)} signed)") from None
    return signed


def verify_image(reference: str, public: ec.EllipticCurvePublicKey, *, insecure: bool = False,
                 client: RegistryClient | None = None, registry_config: str | os.PathLike[str] | None = None) -> dict:
    """Verify the image ``reference`` against ``public`` (``registry_config``: as for :func:`sign_image`).

    Returns ``{"reference", "digest", "signature_tag", "verified": [{"payload_digest",
    "docker_reference", "optional"}], "checked"}`` when at least one signature holds.
    Raises :class:`SignatureError` (see its ``reason``) otherwise; FetchError /
    IntegrityError from the registry client."""
    ref = parse_registry_reference(reference)
    if ref.ref is None:
        raise RegistryError(f"{reference}: give a tag or a digest to verify")
    c = _client(ref.host, insecure, client, registry_config)
    where = f"{ref.host}/{ref.repository}"
    try:
        digest = resolve_digest(c, ref.repository, ref.ref)
        tag = ss.signature_tag(digest)
        if c.head_manifest(ref.repository, tag) is None:
            raise SignatureError(f"no signature for {where}@{digest} (no tag {tag})", "no-signature")
        data, _, _ = _manifest(c, ref.repository, tag)
        try:
            layers = ss.parse_signature_manifest(data)
        except ss.PayloadError as exc:
            raise SignatureError(f"{where}:{tag}: {exc}", "no-signature") from None
        if not layers:
            raise SignatureError(f"no signature for {where}@{digest} ({tag} holds no simple-signing layer)",
                                 "no-signature")
        verified, details, reasons = [], [], set()
        for i, layer in enumerate(layers):
            label = f"signature {i + 1} (payload {layer.digest[:19]}...)"
            if layer.signature is None:
                details.append(f"{label}: no {ss.SIGNATURE_ANNOTATION} annotation")
                reasons.add("bad-signature")
                continue
            if layer.size > MAX_PAYLOAD_BYTES:
                details.append(f"{label}: payload of {layer.size} bytes is too large")
                reasons.add("bad-payload")
                continue
            buf = io.BytesIO()
            c.read_blob(ref.repository, layer.digest, buf, size=layer.size)
            payload = buf.getvalue()
            if not ss.verify_payload(public, payload, layer.signature):
                details.append(f"{label}: does not verify with this key (another key, or the payload "
                               "or signature annotation was changed)")
                reasons.add("bad-signature")
                continue
            try:
                claims = ss.parse_payload(payload)
            except ss.PayloadError as exc:
                details.append(f"{label}: verifies, but the payload is not simple-signing: {exc}")
                reasons.add("bad-payload")
                continue
            if claims.image_digest != digest:
                details.append(f"{label}: verifies, but signs {claims.image_digest}, not this image's {digest}")
                reasons.add("digest-mismatch")
                continue
            verified.append({"payload_digest": layer.digest, "docker_reference": claims.docker_reference,
                             "optional": dict(claims.optional) if claims.optional is not None else None})
    finally:
        if client is None:
            c.close()
    if not verified:
        reason = next(r for r in ("digest-mismatch", "bad-payload", "bad-signature") if r in reasons)
        raise SignatureError(f"no valid signature for {where}@{digest} with this key "
                             f"({len(layers)} checked)", reason, details)
    return {"reference": f"{where}@{digest}", "digest": digest, "signature_tag": tag, "verified": verified,
            "checked": len(layers)}


def fetch_signatures(client: RegistryClient, repository: str, digest: str) -> tuple[str, list[tuple[ss.SignatureLayer, bytes | None]], int]:
    """The signatures stored for the image ``digest`` in ``repository`` under the tag fallback,
    read but not judged (a trust policy decides which key and identity it accepts:
    :mod:`lemonpack.trust.requirements`). Returns ``(signature tag, [(layer, payload bytes or
    None when larger than MAX_PAYLOAD_BYTES)], other layers)``: ``other`` counts layers of
    other media types. No tag: an empty list. Raises :class:`SignatureError`
    (``no-signature``) for a signature manifest that is not one; FetchError / IntegrityError
    from the client (every blob is checked against its digest)."""
    import json

    tag = ss.signature_tag(digest)
    if client.head_manifest(repository, tag) is None:
        return tag, [], 0
    data, _, _ = _manifest(client, repository, tag)
    try:
        layers = ss.parse_signature_manifest(data)
        total = len(json.loads(data).get("layers") or [])
    except (ss.PayloadError, ValueError, AttributeError) as exc:
        raise SignatureError(f"{client.host}/{repository}:{tag}: {exc}", "no-signature") from None
    out: list[tuple[ss.SignatureLayer, bytes | None]] = []
    for layer in layers:
        if layer.size > MAX_PAYLOAD_BYTES:
            out.append((layer, None))
            continue
        buf = io.BytesIO()
        client.read_blob(repository, layer.digest, buf, size=layer.size)
        out.append((layer, buf.getvalue()))
    return tag, out, total - len(layers)
