"""Attestations stored the way cosign stores them, in a registry or beside an image in a layout.

cosign's key-based ``cosign attest`` (``cmd/cosign/cli/attest/attest.go``, ``pkg/oci/static``,
``pkg/oci/mutate``) attaches an in-toto statement to the image ``sha256:<hex>`` as one layer of
the image manifest tagged ``sha256-<hex>.att`` in the image's repository (the tag fallback, as
signatures' ``.sig``): the layer's media type is ``application/vnd.dsse.envelope.v1+json``, its
blob the DSSE envelope (:mod:`lemonpack.signing.dsse`), its annotations
``dev.cosignproject.cosign/signature`` (empty: the signature is inside the envelope) and
``predicateType`` (the statement's, a hint for readers). The manifest and its config are those
of a signature manifest (:func:`lemonpack.signing.simplesigning.build_signature_manifest`).
Attestations already under the tag are kept and an identical envelope is not added twice
(cosign's duplicate detector).

In an OCI image layout (``lemonpack build --attest``) the same manifest is a tag of the
layout's ``index.json``, ``sha256-<hex>.att``, written with the layout writer's merge
(:class:`lemonpack.oci.layout.LayoutWriter`): publishing the layout's tags pushes it as the tag
cosign reads.

Verification (:func:`verify_attestations`): every envelope considered (all of them, or those
whose ``predicateType`` annotation is the asked type) must have a signature that verifies with
the key over its PAE, ``payloadType`` ``application/vnd.in-toto+json``, a statement of
``_type`` ``https://in-toto.io/Statement/v1`` whose ``predicateType`` is the annotation's, and a
subject whose ``sha256`` digest is the image's; otherwise :class:`SignatureError` (exit 3)
names each envelope and why.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec

from lemonpack.digest import Digest, is_sha256_digest
from lemonpack.errors import LayoutError, RegistryError, SignatureError, UsageError
from lemonpack.oci.descriptor import Descriptor
from lemonpack.oci.layout import LayoutWriter
from lemonpack.oci.layout_reader import read_blob, read_layout, split_layout_arg
from lemonpack.oci.mediatypes import (ANNOTATION_COSIGN_PREDICATE_TYPE, MEDIA_TYPE_DSSE_ENVELOPE,
                                      MEDIA_TYPE_IMAGE_CONFIG, MEDIA_TYPE_IMAGE_MANIFEST)
from lemonpack.oci.reference import parse_registry_reference
from lemonpack.registry import RegistryClient
from lemonpack.signing import dsse
from lemonpack.signing import simplesigning as ss
from lemonpack.signing.remote import resolve_digest

#: in-toto/attestation ``spec/v1/statement.md``.
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
#: SLSA provenance v1 (in-toto/attestation ``spec/predicates/provenance.md``).
PREDICATE_SLSA_PROVENANCE_V1 = "https://slsa.dev/provenance/v1"
#: SPDX 2 documents (in-toto/attestation ``spec/predicates/spdx2.md``; cosign's ``spdx``/``spdxjson``).
PREDICATE_SPDX = "https://spdx.dev/Document"
#: ``verify --attestation --type`` names: cosign's (``cmd/cosign/cli/options/predicate.go``), where
#: ``slsaprovenance`` is v0.2; lemonpack writes v1 only, so here both names mean v1.
PREDICATE_TYPES = {"slsaprovenance": PREDICATE_SLSA_PROVENANCE_V1, "slsaprovenance1": PREDICATE_SLSA_PROVENANCE_V1,
                   "spdx": PREDICATE_SPDX, "spdxjson": PREDICATE_SPDX}
#: An envelope holds a statement of a few kB; anything much larger is refused unread.
MAX_ENVELOPE_BYTES = 4 << 20


def attestation_tag(image_digest: str) -> str:
    """``sha256-<hex>.att``, the tag of ``image_digest``'s attestations. ValueError for a non-digest."""
    if not is_sha256_digest(image_digest):
        raise ValueError(f"not a sha256 digest: {image_digest!r}")
    d = Digest.parse(image_digest)
    return f"{d.algorithm}-{d.hex}.att"


def predicate_type_uri(name: str) -> str:
    """The predicate URI of a ``--type`` value: a name of :data:`PREDICATE_TYPES` or a URI
    itself. Raises :class:`UsageError` (exit 2) otherwise."""
    if name in PREDICATE_TYPES:
        return PREDICATE_TYPES[name]
    if name.startswith("https://"):
        return name
    raise UsageError(f"{name!r} is not one of {', '.join(PREDICATE_TYPES)} (or a predicate type URI)",
                     param="--type")


@dataclass(frozen=True)
class Attestation:
    """One signed attestation: the DSSE ``envelope`` bytes and the statement's ``predicate_type``."""

    envelope: bytes
    predicate_type: str

    def layer(self) -> ss.SignatureLayer:
        """Its layer in an ``.att`` manifest (module doc)."""
        return ss.SignatureLayer(str(Digest.of_bytes(self.envelope)), len(self.envelope), "",
                                 {ss.SIGNATURE_ANNOTATION: "", ANNOTATION_COSIGN_PREDICATE_TYPE: self.predicate_type},
                                 MEDIA_TYPE_DSSE_ENVELOPE)


def sign_statement(private: ec.EllipticCurvePrivateKey, statement: bytes, predicate_type: str) -> Attestation:
    """``statement`` (the in-toto statement's JSON bytes) in a DSSE envelope signed by ``private``."""
    return Attestation(dsse.sign_envelope(private, statement), predicate_type)


def _merged_layers(existing: Sequence[ss.SignatureLayer], new: Sequence[Attestation]) -> list[ss.SignatureLayer]:
    have = {layer.digest for layer in existing}
    out = list(existing)
    for a in new:
        layer = a.layer()
        if layer.digest not in have:
            have.add(layer.digest)
            out.append(layer)
    return out


def write_layout_attestations(layout: str | os.PathLike[str], attached: Mapping[str, Sequence[Attestation]]) -> dict:
    """Add ``attached`` (image digest -> its attestations) to the OCI layout ``layout``: per
    digest the ``.att`` manifest (replacing a tag of that name) with its envelope blobs and
    config, through :class:`LayoutWriter` ``merge`` (blobs first, ``index.json`` replaced
    atomically last). Returns ``{tag: manifest digest}``. Raises :class:`LayoutError` for a
    directory that is no layout, or a digest that is none of its manifests."""
    tags = read_layout(layout)
    known = {d.digest for d in tags.values()}
    written: dict[str, str] = {}
    with LayoutWriter(layout, merge=True) as lw:
        for digest, atts in sorted(attached.items()):
            if digest not in known and not (Path(layout) / "blobs" / "sha256" / Digest.parse(digest).hex).is_file():
                raise LayoutError(f"{layout}: {digest} is not a manifest of this layout")
            layers = _merged_layers([], atts)
            for a in atts:
                lw.add_blob_bytes(MEDIA_TYPE_DSSE_ENVELOPE, a.envelope)
            manifest, config = ss.build_signature_manifest(layers)
            lw.add_blob_bytes(MEDIA_TYPE_IMAGE_CONFIG, config)
            desc = lw.add_blob_bytes(MEDIA_TYPE_IMAGE_MANIFEST, manifest)
            tag = attestation_tag(digest)
            lw.set_tags({tag: desc})
            written[tag] = desc.digest
    return written


def attach_attestations(client: RegistryClient, repository: str, image_digest: str,
                        attestations: Sequence[Attestation]) -> dict:
    """Push ``attestations`` of ``image_digest`` into ``repository`` under its ``.att`` tag,
    keeping those already there (an identical envelope is not added twice). Returns
    ``{"digest", "attestation_tag", "attestations", "manifest"}``. Raises
    :class:`RegistryError` when the tag holds layers that are not DSSE envelopes (they would
    be lost), and what the client raises."""
    tag = attestation_tag(image_digest)
    existing: list[ss.SignatureLayer] = []
    if client.head_manifest(repository, tag) is not None:
        got = client.get_manifest(repository, tag)
        assert got is not None, "get_manifest returns None only with missing_ok"
        existing = ss.parse_signature_manifest(got[0], MEDIA_TYPE_DSSE_ENVELOPE)
        if len(existing) != len(json.loads(got[0]).get("layers", [])):
            raise RegistryError(f"{client.host}/{repository}:{tag} holds layers that are not DSSE envelopes; "
                                "refusing to rewrite it (their content would be lost)")
    layers = _merged_layers(existing, attestations)
    manifest, config = ss.build_signature_manifest(layers)
    for blob in [a.envelope for a in attestations] + [config]:
        blob_digest = str(Digest.of_bytes(blob))
        if not client.has_blob(repository, blob_digest, len(blob)):
            client.push_blob(repository, blob, blob_digest, len(blob))
    manifest_digest = client.put_manifest(repository, tag, manifest, MEDIA_TYPE_IMAGE_MANIFEST)
    return {"digest": image_digest, "attestation_tag": tag, "attestations": len(layers), "manifest": manifest_digest}


# -- verification ------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Store:
    """Where an image and its ``.att`` manifest are read from: ``where`` (for messages),
    ``digest`` (the image's), ``att`` (the ``.att`` manifest's bytes, or None) and
    ``blob(digest, size)`` (bytes, verified by the reader)."""

    where: str
    digest: str
    att: bytes | None
    blob: Callable[[str, int], bytes]


class _NotBound(ValueError):
    """A verified statement that is about another image: ``args[0]`` says which."""


def _check_statement(payload: bytes, digest: str, predicate_type: str | None) -> dict[str, Any]:
    """The statement's facts when it binds ``digest``; raises ValueError saying why not
    (:class:`_NotBound` when no subject is ``digest``)."""
    try:
        doc = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        raise ValueError("the payload is not JSON") from None
    if not isinstance(doc, dict) or doc.get("_type") != STATEMENT_TYPE:
        raise ValueError(f"_type is not {STATEMENT_TYPE!r}")
    pt = doc.get("predicateType")
    if not isinstance(pt, str) or (predicate_type is not None and pt != predicate_type):
        raise ValueError(f"predicateType {pt!r} is not the annotation's {predicate_type!r}")
    subjects = doc.get("subject")
    if not isinstance(subjects, list) or not subjects:
        raise ValueError("subject: missing or empty")
    hexes = [s.get("digest", {}).get("sha256") for s in subjects if isinstance(s, dict) and
             isinstance(s.get("digest"), dict)]
    if Digest.parse(digest).hex not in hexes:
        raise _NotBound(f"no subject is {digest} (the statement is about {', '.join(map(str, hexes))})")
    return {"predicate_type": pt, "subjects": [s.get("name") for s in subjects if isinstance(s, dict)]}


def _verify(store: _Store, public: ec.EllipticCurvePublicKey, predicate_type: str | None) -> dict:
    tag = attestation_tag(store.digest)
    if store.att is None:
        raise SignatureError(f"no attestation for {store.where}@{store.digest} (no tag {tag})", "no-signature")
    try:
        layers = ss.parse_signature_manifest(store.att, MEDIA_TYPE_DSSE_ENVELOPE)
    except ss.PayloadError as exc:
        raise SignatureError(f"{store.where}:{tag}: {exc}", "no-signature") from None
    considered = [l for l in layers if predicate_type is None
                  or l.annotations.get(ANNOTATION_COSIGN_PREDICATE_TYPE) == predicate_type]
    if not considered:
        kind = f" of type {predicate_type}" if predicate_type else ""
        raise SignatureError(f"no attestation{kind} for {store.where}@{store.digest} ({tag} holds "
                             f"{len(layers)} DSSE envelope(s))", "no-signature")
    verified, details, reasons = [], [], set()
    for i, layer in enumerate(considered):
        label = f"attestation {i + 1} (envelope {layer.digest[:19]}...)"
        if layer.size > MAX_ENVELOPE_BYTES:
            details.append(f"{label}: envelope of {layer.size} bytes is too large")
            reasons.add("bad-payload")
            continue
        try:
            env = dsse.parse_envelope(store.blob(layer.digest, layer.size))
        except dsse.EnvelopeError as exc:
            details.append(f"{label}: not a DSSE envelope: {exc}")
            reasons.add("bad-payload")
            continue
        if not dsse.verify_envelope(public, env):
            details.append(f"{label}: does not verify with this key (another key, or the payload, its type "
                           "or the signature was changed)")
            reasons.add("bad-signature")
            continue
        if env.payload_type != dsse.PAYLOAD_TYPE_IN_TOTO:
            details.append(f"{label}: verifies, but payloadType is {env.payload_type!r}, not "
                           f"{dsse.PAYLOAD_TYPE_IN_TOTO!r}")
            reasons.add("bad-payload")
            continue
        try:
            facts = _check_statement(env.payload, store.digest, layer.annotations.get(ANNOTATION_COSIGN_PREDICATE_TYPE))
        except ValueError as exc:
            details.append(f"{label}: verifies, but {exc}")
            reasons.add("digest-mismatch" if isinstance(exc, _NotBound) else "bad-payload")
            continue
        verified.append({"payload_digest": layer.digest, **facts})
    if details:
        reason = next(r for r in ("digest-mismatch", "bad-payload", "bad-signature") if r in reasons)
        raise SignatureError(f"attestations of {store.where}@{store.digest} do not hold with this key "
                             f"({len(details)} of {len(considered)} failed)", reason, details)
    return {"reference": f"{store.where}@{store.digest}", "digest": store.digest, "attestation_tag": tag,
            "verified": verified, "checked": len(considered)}


def _layout_store(spec: str) -> _Store:
    directory, tag = split_layout_arg(spec)
    tags = read_layout(directory)
    if tag is None or tag not in tags:
        raise LayoutError(f"{directory}: give the image's tag, one of {', '.join(sorted(tags))} (oci:DIR:TAG)")
    digest = tags[tag].digest
    att_desc = tags.get(attestation_tag(digest))
    root = Path(directory)
    att = read_blob(root, att_desc, f"{directory}:{attestation_tag(digest)}", limit=MAX_ENVELOPE_BYTES) \
        if att_desc is not None else None
    return _Store(f"oci:{directory}", digest, att,
                  lambda d, size: read_blob(root, Descriptor(MEDIA_TYPE_DSSE_ENVELOPE, d, size), f"{directory} blob {d}",
                                            limit=MAX_ENVELOPE_BYTES))


def verify_attestations(reference: str, public: ec.EllipticCurvePublicKey, *, predicate_type: str | None = None,
                        insecure: bool = False, client: RegistryClient | None = None,
                        registry_config: str | os.PathLike[str] | None = None) -> dict:
    """Verify the attestations of ``reference`` (``HOST[:PORT]/REPO[:TAG|@sha256:...]``, or
    ``oci:DIR:TAG`` for a layout ``lemonpack build --attest`` wrote) with ``public``; only those of
    ``predicate_type`` (a URI) when given. Returns ``{"reference", "digest", "attestation_tag",
    "verified": [{"payload_digest", "predicate_type", "subjects"}], "checked"}``. Raises
    :class:`SignatureError` (module doc), LayoutError / FetchError / IntegrityError from the readers."""
    if reference.startswith("oci:"):
        return _verify(_layout_store(reference[len("oci:"):]), public, predicate_type)
    ref = parse_registry_reference(reference)
    if ref.ref is None:
        raise RegistryError(f"{reference}: give a tag or a digest to verify")
    c = client if client is not None else RegistryClient(ref.host, insecure=insecure, registry_config=registry_config)
    try:
        digest = resolve_digest(c, ref.repository, ref.ref)
        tag = attestation_tag(digest)
        att = None
        if c.head_manifest(ref.repository, tag) is not None:
            got = c.get_manifest(ref.repository, tag)
            assert got is not None, "get_manifest returns None only with missing_ok"
            att = got[0]

        def blob(d: str, size: int) -> bytes:
            buf = io.BytesIO()
            c.read_blob(ref.repository, d, buf, size=size)
            return buf.getvalue()
        return _verify(_Store(f"{ref.host}/{ref.repository}", digest, att, blob), public, predicate_type)
    finally:
        if client is None:
            c.close()


__all__ = ["Attestation", "MAX_ENVELOPE_BYTES", "PREDICATE_SLSA_PROVENANCE_V1", "PREDICATE_SPDX", "PREDICATE_TYPES",
           "STATEMENT_TYPE", "attach_attestations", "attestation_tag", "predicate_type_uri", "sign_statement",
           "verify_attestations", "write_layout_attestations"]
