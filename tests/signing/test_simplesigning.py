"""Cosign's simple-signing format as bytes, without a registry
(lemonpack/signing/simplesigning.py): the payload and signature against a published signature,
payload parsing, the signature tag and manifest."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from lemonpack.digest import Digest
from lemonpack.signing import keys, simplesigning as ss


FIX = Path(__file__).resolve().parent.parent / "fixtures" / "cosign"
VECTOR = json.loads((FIX / "busybox-signature.json").read_text())


def test_payload_bytes_equal_the_published_ones_and_the_published_signature_verifies():
    payload = ss.make_payload(VECTOR["docker_reference"], VECTOR["image_digest"])
    assert payload == VECTOR["payload"].encode()
    public = keys.decode_public_key(VECTOR["public_key"].encode())
    assert ss.verify_payload(public, payload, VECTOR["signature"])
    claims = ss.parse_payload(payload)
    assert (claims.docker_reference, claims.image_digest, claims.optional) == \
        (VECTOR["docker_reference"], VECTOR["image_digest"], None)


def test_published_signature_fails_for_a_changed_payload_or_another_key():
    public = keys.decode_public_key(VECTOR["public_key"].encode())
    other = ss.make_payload(VECTOR["docker_reference"], "sha256:" + "0" * 64)
    assert not ss.verify_payload(public, other, VECTOR["signature"])
    stranger = ec.generate_private_key(ec.SECP256R1()).public_key()
    assert not ss.verify_payload(stranger, VECTOR["payload"].encode(), VECTOR["signature"])
    assert not ss.verify_payload(public, VECTOR["payload"].encode(), "not base64!")
    assert not ss.verify_payload(public, VECTOR["payload"].encode(), base64.b64encode(b"\x30\x00").decode())


def test_our_signature_is_der_ecdsa_sha256_that_cryptography_checks_directly():
    private = ec.generate_private_key(ec.SECP256R1())
    payload = ss.make_payload("127.0.0.1:5000/x", "sha256:" + "a" * 64, {"commit": "abc", "b": "<&>"})
    assert payload.endswith(b'"optional":{"b":"\\u003c\\u0026\\u003e","commit":"abc"}}')  # Go's json.Marshal
    sig = base64.b64decode(ss.sign_payload(private, payload))
    assert sig[0] == 0x30  # ASN.1 SEQUENCE
    private.public_key().verify(sig, payload, ec.ECDSA(hashes.SHA256()))


@pytest.mark.parametrize("doc,field", [
    ({"critical": {"type": "other"}}, "critical.type"),
    ({"critical": {"type": ss.PAYLOAD_TYPE, "identity": {"docker-reference": "x"}, "image": {}}},
     "critical.image.docker-manifest-digest"),
    ({"critical": {"type": ss.PAYLOAD_TYPE, "image": {"docker-manifest-digest": "sha256:" + "1" * 64}}},
     "critical.identity.docker-reference"),
    ([], "critical"),
])
def test_payload_parsing_names_the_field(doc, field):
    with pytest.raises(ss.PayloadError, match=field.replace(".", r"\.")):
        ss.parse_payload(json.dumps(doc).encode())


def test_signature_tag_and_manifest():
    digest = "sha256:" + "ab" * 32
    assert ss.signature_tag(digest) == "sha256-" + "ab" * 32 + ".sig"
    with pytest.raises(ValueError):
        ss.signature_tag("sha512:00")
    layers = [ss.SignatureLayer("sha256:" + "1" * 64, 10, "MEU=", {ss.SIGNATURE_ANNOTATION: "MEU="}),
              ss.SignatureLayer("sha256:" + "2" * 64, 11, "MEY=", {ss.SIGNATURE_ANNOTATION: "MEY="})]
    manifest, config = ss.build_signature_manifest(layers)
    doc = json.loads(manifest)
    assert doc["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert doc["config"]["digest"] == str(Digest.of_bytes(config)) and doc["config"]["size"] == len(config)
    assert [l["mediaType"] for l in doc["layers"]] == [ss.SIMPLESIGNING_MEDIA_TYPE] * 2
    assert json.loads(config)["rootfs"]["diff_ids"] == [l.digest for l in layers]
    assert ss.parse_signature_manifest(manifest) == layers


def test_the_signature_manifest_and_config_are_the_bytes_cosign_writes():
    # go-containerregistry's structs through Go's json.Marshal: struct field order, compact,
    # map keys sorted, HTML escaped; the config of mutate.Append on cosign's empty.Signatures()
    payload_digest = "sha256:" + "1" * 64
    layer = ss.SignatureLayer(payload_digest, 243, "MEU=", {ss.SIGNATURE_ANNOTATION: "MEU=", "a<b": "x&y"})
    manifest, config = ss.build_signature_manifest([layer])
    assert config == (b'{"architecture":"","created":"0001-01-01T00:00:00Z","history":[{"created":'
                      b'"0001-01-01T00:00:00Z"}],"os":"","rootfs":{"type":"layers","diff_ids":["'
                      + payload_digest.encode() + b'"]},"config":{}}')
    config_digest = str(Digest.of_bytes(config))
    assert manifest == (b'{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":'
                        b'{"mediaType":"application/vnd.oci.image.config.v1+json","size":' + str(len(config)).encode()
                        + b',"digest":"' + config_digest.encode() + b'"},"layers":[{"mediaType":'
                        b'"application/vnd.dev.cosign.simplesigning.v1+json","size":243,"digest":"'
                        + payload_digest.encode() + b'","annotations":{"a\\u003cb":"x\\u0026y",'
                        b'"dev.cosignproject.cosign/signature":"MEU="}}]}')
