"""signing/dsse.py: DSSE v1 envelopes (secure-systems-lab/dsse protocol.md, envelope.md)."""

from __future__ import annotations

import base64
import json

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from lemonpack.signing import dsse

KEY = ec.derive_private_key(424242, ec.SECP256R1())
OTHER = ec.derive_private_key(7, ec.SECP256R1())
STATEMENT = b'{"_type":"https://in-toto.io/Statement/v1"}'


def test_pae_is_the_protocols_encoding():
    # protocol.md's example: PAE("http://example.com/HelloWorld", "hello world")
    assert dsse.pae("http://example.com/HelloWorld", b"hello world") == \
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    assert dsse.pae("", b"") == b"DSSEv1 0  0 "
    assert dsse.pae("t\u00e9", b"x") == "DSSEv1 3 t\u00e9 1 x".encode()  # lengths in bytes


def test_the_envelope_is_signed_over_the_pae_and_reproducible():
    data = dsse.sign_envelope(KEY, STATEMENT)
    assert data == dsse.sign_envelope(KEY, STATEMENT)  # RFC 6979: same key and bytes, same envelope
    doc = json.loads(data)
    assert list(doc) == ["payload", "payloadType", "signatures"]
    assert doc["payloadType"] == "application/vnd.in-toto+json"
    assert base64.b64decode(doc["payload"]) == STATEMENT
    sig = base64.b64decode(doc["signatures"][0]["sig"])
    # an independent check with cryptography: ECDSA P-256 / SHA-256 over the PAE, DER
    KEY.public_key().verify(sig, dsse.pae(doc["payloadType"], STATEMENT), ec.ECDSA(hashes.SHA256()))
    env = dsse.parse_envelope(data)
    assert env.payload == STATEMENT and dsse.verify_envelope(KEY.public_key(), env)
    assert not dsse.verify_envelope(OTHER.public_key(), env)


@pytest.mark.parametrize("change", ["payload byte", "payload type", "signature", "signature base64"])
def test_any_change_breaks_the_signature(change):
    env = dsse.parse_envelope(dsse.sign_envelope(KEY, STATEMENT))
    if change == "payload byte":
        env = dsse.Envelope(env.payload_type, env.payload.replace(b"v1", b"v2"), env.signatures)
    elif change == "payload type":
        env = dsse.Envelope("application/vnd.in-toto.other+json", env.payload, env.signatures)
    elif change == "signature":
        raw = bytearray(base64.b64decode(env.signatures[0]))
        raw[-1] ^= 1
        env = dsse.Envelope(env.payload_type, env.payload, (base64.b64encode(bytes(raw)).decode(),))
    else:
        env = dsse.Envelope(env.payload_type, env.payload, ("not base64!",))
    assert not dsse.verify_envelope(KEY.public_key(), env)


def test_one_good_signature_of_several_is_enough():
    env = dsse.parse_envelope(dsse.sign_envelope(KEY, STATEMENT))
    other = dsse.parse_envelope(dsse.sign_envelope(OTHER, STATEMENT))
    both = dsse.Envelope(env.payload_type, env.payload, other.signatures + env.signatures)
    assert dsse.verify_envelope(KEY.public_key(), both)


@pytest.mark.parametrize("data, field", [
    (b"not json", "envelope"), (b"[]", "envelope"),
    (b'{"payload":"e30=","signatures":[{"sig":"AA=="}]}', "payloadType"),
    (b'{"payloadType":"t","signatures":[{"sig":"AA=="}]}', "payload"),
    (b'{"payloadType":"t","payload":"***","signatures":[{"sig":"AA=="}]}', "payload"),
    (b'{"payloadType":"t","payload":"e30=","signatures":[]}', "signatures"),
    (b'{"payloadType":"t","payload":"e30=","signatures":[{"keyid":"k"}]}', "signatures[0].sig"),
])
def test_a_malformed_envelope_names_the_field(data, field):
    with pytest.raises(dsse.EnvelopeError) as exc:
        dsse.parse_envelope(data)
    assert str(exc.value).startswith(field)


def test_securesystemslib_verifies_our_envelope_and_refuses_a_changed_one():
    """An independent DSSE implementation (secure-systems-lab's securesystemslib) as the oracle.
    It matches signatures to keys by ``keyid`` (its own note: not DSSE-compliant, issue #416),
    so the key's id is put into the copy it reads; ``keyid`` is outside what is signed."""
    from securesystemslib.dsse import Envelope
    from securesystemslib.exceptions import VerificationError
    from securesystemslib.signer import SSlibKey

    key = SSlibKey.from_crypto(KEY.public_key(), scheme="ecdsa-sha2-nistp256")
    doc = json.loads(dsse.sign_envelope(KEY, STATEMENT))
    for s in doc["signatures"]:
        s["keyid"] = key.keyid
    env = Envelope.from_dict(json.loads(json.dumps(doc)))
    assert env.pae() == dsse.pae(doc["payloadType"], STATEMENT)
    assert list(env.verify([key], 1)) == [key.keyid]
    doc["payload"] = base64.b64encode(STATEMENT.replace(b"v1", b"v2")).decode()
    with pytest.raises(VerificationError):
        Envelope.from_dict(doc).verify([key], 1)
