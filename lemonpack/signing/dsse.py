"""DSSE envelopes signed with a cosign key: the form of every attestation lemonpack writes.

Pure functions over bytes, following the DSSE v1 protocol (secure-systems-lab/dsse
``protocol.md``, ``envelope.md``) as in-toto's attestation framework uses it
(in-toto/attestation ``spec/v1/envelope.md``):

- The signature is over the pre-authentication encoding ``PAE(type, body) = "DSSEv1" SP
  LEN(type) SP type SP LEN(body) SP body`` (``LEN``: the byte length in ASCII decimal, no
  leading zeros), never over the JSON of the envelope, so the envelope needs no
  canonicalization to be checked.
- The envelope is ``{"payload": B64, "payloadType": TYPE, "signatures": [{"sig": B64}]}``:
  standard base64 with padding, keys in sorted order, compact (what cosign writes today,
  ``json.Marshal`` of the protobuf ``Envelope`` with an empty ``keyid`` left out; ``keyid``
  is optional in ``envelope.md``). Written by :func:`lemonpack.canonical.canonical_json`,
  so the same statement and key give the same bytes.
- The signature is ECDSA P-256 / SHA-256, ASN.1 DER, with RFC 6979 nonces
  (:func:`lemonpack.signing.simplesigning.sign_payload`: the one signing function), so
  envelopes are reproducible.

``payloadType`` is ``application/vnd.in-toto+json`` for an in-toto statement
(:data:`~lemonpack.oci.mediatypes.MEDIA_TYPE_IN_TOTO`).
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric import ec

from lemonpack.canonical import canonical_json
from lemonpack.oci.mediatypes import MEDIA_TYPE_IN_TOTO
from lemonpack.signing.simplesigning import sign_payload, verify_payload

PAYLOAD_TYPE_IN_TOTO = MEDIA_TYPE_IN_TOTO


class EnvelopeError(ValueError):
    """Bytes that are not a DSSE envelope; ``args[0]`` names the field."""


@dataclass(frozen=True)
class Envelope:
    """A parsed envelope: ``payload_type``, the decoded ``payload`` bytes and the base64
    ``signatures`` (each a ``sig`` value, in order)."""

    payload_type: str
    payload: bytes
    signatures: tuple[str, ...]


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1's pre-authentication encoding of ``payload`` of ``payload_type`` (module doc)."""
    t = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


def sign_envelope(private: ec.EllipticCurvePrivateKey, payload: bytes,
                  payload_type: str = PAYLOAD_TYPE_IN_TOTO) -> bytes:
    """The envelope bytes (module doc) holding ``payload`` signed by ``private``."""
    sig = sign_payload(private, pae(payload_type, payload))
    return canonical_json({"payload": base64.b64encode(payload).decode("ascii"), "payloadType": payload_type,
                           "signatures": [{"sig": sig}]})


def parse_envelope(data: bytes) -> Envelope:
    """Read an envelope. Raises :class:`EnvelopeError` naming the field when ``data`` is not
    JSON, ``payload``/``payloadType`` are not strings, ``payload`` is not base64, or
    ``signatures`` is not a non-empty list of objects with a string ``sig``."""
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise EnvelopeError("envelope: not JSON") from None
    if not isinstance(doc, dict):
        raise EnvelopeError("envelope: not a JSON object")
    payload_type, payload, sigs = doc.get("payloadType"), doc.get("payload"), doc.get("signatures")
    if not isinstance(payload_type, str):
        raise EnvelopeError("payloadType: missing or not a string")
    if not isinstance(payload, str):
        raise EnvelopeError("payload: missing or not a string")
    try:
        raw = base64.b64decode(payload.encode("ascii"), validate=True)
    except (binascii.Error, ValueError, UnicodeEncodeError):
        raise EnvelopeError("payload: not base64") from None
    if not isinstance(sigs, list) or not sigs:
        raise EnvelopeError("signatures: missing or empty")
    out = []
    for i, s in enumerate(sigs):
        if not isinstance(s, dict) or not isinstance(s.get("sig"), str):
            raise EnvelopeError(f"signatures[{i}].sig: missing or not a string")
        out.append(s["sig"])
    return Envelope(payload_type, raw, tuple(out))


def verify_envelope(public: ec.EllipticCurvePublicKey, envelope: Envelope) -> bool:
    """Whether one of ``envelope``'s signatures is ``public``'s over the PAE of its type and
    payload (a changed payload byte, type or signature makes it ``False``)."""
    signed = pae(envelope.payload_type, envelope.payload)
    return any(verify_payload(public, signed, sig) for sig in envelope.signatures)


__all__ = ["Envelope", "EnvelopeError", "PAYLOAD_TYPE_IN_TOTO", "pae", "parse_envelope", "sign_envelope",
           "verify_envelope"]
