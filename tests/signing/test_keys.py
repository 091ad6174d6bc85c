"""Cosign's key-based format as bytes, without a registry: key files (against keys cosign
wrote, published as sigstore-rs test fixtures), the simple-signing payload and signature
(against a published signature), the signature manifest; and `lemonpack keygen`."""

from __future__ import annotations

import base64
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import nacl.secret
import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

from lemonpack.signing import keys, simplesigning as ss

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "cosign"
VECTOR = json.loads((FIX / "busybox-signature.json").read_text())


def pem_body(pem: bytes) -> bytes:
    lines = pem.decode().strip().splitlines()
    return base64.b64decode("".join(lines[1:-1]))


# ---------------------------------------------------------------- key files

@pytest.mark.parametrize("name,password,n", [("cosign_generated_encrypted_empty_private.key", b"", 65536),
                                             ("ecdsa_encrypted_private.key", b"123", 32768)])
def test_keys_written_by_cosign_open(name, password, n):
    data = (FIX / name).read_bytes()
    assert json.loads(pem_body(data))["kdf"]["params"]["N"] == n
    key = keys.decode_private_key(data, password)
    assert key.curve.name == "secp256r1"
    # and the opened key signs what the public half verifies
    sig = ss.sign_payload(key, b"x")
    assert ss.verify_payload(key.public_key(), b"x", sig)


def test_wrong_password_is_refused_by_name():
    with pytest.raises(keys.KeyFileError, match="wrong password"):
        keys.decode_private_key((FIX / "ecdsa_encrypted_private.key").read_bytes(), b"124")


def test_our_key_file_has_cosigns_shape_and_opens_with_the_documented_algorithm():
    pair = keys.generate_key_pair(b"s3cret")
    text = pair.private_pem.decode()
    assert text.startswith("-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\n")
    assert text.endswith("-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n")
    assert all(len(line) <= 64 for line in text.splitlines())
    ours = json.loads(pem_body(pair.private_pem))
    theirs = json.loads(pem_body((FIX / "cosign_generated_encrypted_empty_private.key").read_bytes()))
    # same keys in the same order at every level, same parameters and sizes as cosign's file
    assert list(ours) == list(theirs) == ["kdf", "cipher", "ciphertext"]
    assert list(ours["kdf"]) == list(theirs["kdf"]) and ours["kdf"]["params"] == theirs["kdf"]["params"]
    assert list(ours["cipher"]) == list(theirs["cipher"]) and ours["cipher"]["name"] == theirs["cipher"]["name"]
    assert len(base64.b64decode(ours["kdf"]["salt"])) == len(base64.b64decode(theirs["kdf"]["salt"])) == 32
    assert len(base64.b64decode(ours["cipher"]["nonce"])) == 24
    # the first 60 base64 characters (the fixed JSON prefix) are cosign's, byte for byte
    assert text.splitlines()[1] == (FIX / "cosign_generated_encrypted_empty_private.key").read_text().splitlines()[1]
    # Decrypt by hand, from the specification: scrypt -> 32-byte key -> secretbox -> PKCS #8 DER
    p = ours["kdf"]["params"]
    box_key = Scrypt(salt=base64.b64decode(ours["kdf"]["salt"]), length=32, n=p["N"], r=p["r"], p=p["p"]) \
        .derive(b"s3cret")
    der = nacl.secret.SecretBox(box_key).decrypt(base64.b64decode(ours["ciphertext"]),
                                                 base64.b64decode(ours["cipher"]["nonce"]))
    private = serialization.load_der_private_key(der, None)
    assert private.public_key().public_bytes(serialization.Encoding.PEM,
                                             serialization.PublicFormat.SubjectPublicKeyInfo) == pair.public_pem
    assert pair.public_pem.startswith(b"-----BEGIN PUBLIC KEY-----\n")


def test_fixed_salt_and_nonce_give_fixed_bytes_and_round_trip():
    private = ec.generate_private_key(ec.SECP256R1())
    a = keys.encode_key_pair(private, b"pw", salt=b"\1" * 32, nonce=b"\2" * 24)
    b = keys.encode_key_pair(private, b"pw", salt=b"\1" * 32, nonce=b"\2" * 24)
    assert a == b
    back = keys.decode_private_key(a.private_pem, b"pw")
    assert back.private_numbers() == private.private_numbers()


@pytest.mark.parametrize("mutate,message", [
    (lambda d: d["kdf"].update(name="pbkdf2"), "kdf.name"),
    (lambda d: d["cipher"].update(name="aes"), "cipher.name"),
    (lambda d: d["kdf"]["params"].update(N=1 << 30), "kdf.params"),
    (lambda d: d.update(ciphertext="!!"), "ciphertext"),
])
def test_malformed_envelopes_name_the_field(mutate, message):
    pair = keys.generate_key_pair(b"")
    doc = json.loads(pem_body(pair.private_pem))
    mutate(doc)
    pem = keys._pem(keys.SIGSTORE_PEM_TYPE, json.dumps(doc).encode())
    with pytest.raises(keys.KeyFileError, match=message.replace(".", r"\.")):
        keys.decode_private_key(pem, b"")


def test_public_key_decoding_refuses_other_pem_blocks():
    pair = keys.generate_key_pair(b"")
    with pytest.raises(keys.KeyFileError, match="is not a 'PUBLIC KEY'"):
        keys.decode_public_key(pair.private_pem)
    assert keys.decode_public_key(pair.public_pem).curve.name == "secp256r1"


# ---------------------------------------------------------------- payload and signature

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
    assert doc["config"]["digest"] == ss.sha256_digest(config) and doc["config"]["size"] == len(config)
    assert [l["mediaType"] for l in doc["layers"]] == [ss.SIMPLESIGNING_MEDIA_TYPE] * 2
    assert json.loads(config)["rootfs"]["diff_ids"] == [l.digest for l in layers]
    assert ss.parse_signature_manifest(manifest) == layers


# ---------------------------------------------------------------- lemonpack keygen

def keygen(cwd: Path, *args: str, password: str | None = "pw") -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "LEMONPACK_PASSWORD"}
    if password is not None:
        env["LEMONPACK_PASSWORD"] = password
    return subprocess.run([sys.executable, "-c", "from lemonpack.cli import main; main()", "keygen", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def test_keygen_writes_cosign_files_with_private_modes(tmp_path):
    r = keygen(tmp_path)
    assert r.returncode == 0, r.stderr
    key, pub = tmp_path / "cosign.key", tmp_path / "cosign.pub"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE(pub.stat().st_mode) == 0o644
    private = keys.decode_private_key(key.read_bytes(), b"pw")
    assert keys.encode_public_key(private.public_key()) == pub.read_bytes()
    assert "pw" not in r.stdout + r.stderr
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp files left


def test_keygen_refuses_to_overwrite_without_force(tmp_path):
    assert keygen(tmp_path, "--out", "k").returncode == 0
    before = (tmp_path / "k.key").read_bytes()
    r = keygen(tmp_path, "--out", "k")
    assert r.returncode == 1 and "already exist" in r.stderr and "--force" in r.stderr
    assert (tmp_path / "k.key").read_bytes() == before
    r = keygen(tmp_path, "--out", "k", "--force", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"private_key": "k.key", "public_key": "k.pub"}
    assert (tmp_path / "k.key").read_bytes() != before


def test_keygen_without_password_source_fails_and_writes_nothing(tmp_path):
    r = keygen(tmp_path, password=None)
    assert r.returncode == 1 and "LEMONPACK_PASSWORD" in r.stderr
    assert list(tmp_path.iterdir()) == []
