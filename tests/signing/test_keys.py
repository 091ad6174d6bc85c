"""Cosign's key files as bytes (lemonpack/signing/keys.py), against keys cosign wrote (published
as sigstore-rs test fixtures): opening them, wrong passwords, our files' shape and algorithm,
fixed salt and nonce, malformed envelopes, public key decoding."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import nacl.secret
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

from lemonpack.signing import keys, simplesigning as ss

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "cosign"


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


def test_the_password_is_read_from_cosign_password_as_cosign_reads_it(tmp_path):
    assert keys.password_from_env({}) is None  # then a prompt, or an error without a terminal
    assert keys.password_from_env({"COSIGN_PASSWORD": ""}) == ("COSIGN_PASSWORD", b"")  # set and empty: the password
    assert keys.password_from_env({"COSIGN_PASSWORD": "pässword"}) == ("COSIGN_PASSWORD", "pässword".encode())
    assert keys.password_from_env({"COSIGN_PASSWORD": "c", "LEMONPACK_PASSWORD": "l"}) == ("LEMONPACK_PASSWORD", b"l")


def test_sign_opens_an_encrypted_key_with_cosign_password(tmp_path):
    import os
    import subprocess
    import sys

    pair = keys.generate_key_pair(b"from-cosign-env")
    (tmp_path / "k.key").write_bytes(pair.private_pem)
    env = {k: v for k, v in os.environ.items() if k not in ("LEMONPACK_PASSWORD", "COSIGN_PASSWORD")}
    # sign needs the key before any registry is contacted: a wrong password fails first, a right
    # one gets as far as the (unreachable) registry
    base = [sys.executable, "-m", "lemonpack.cli", "sign", "127.0.0.1:9/x@sha256:" + "a" * 64, "--key",
            str(tmp_path / "k.key")]
    wrong = subprocess.run(base, env={**env, "COSIGN_PASSWORD": "nope"}, capture_output=True, text=True,
                           timeout=120, stdin=subprocess.DEVNULL)
    assert wrong.returncode != 0 and "wrong password" in wrong.stderr
    right = subprocess.run(base, env={**env, "COSIGN_PASSWORD": "from-cosign-env"}, capture_output=True, text=True,
                           timeout=120, stdin=subprocess.DEVNULL)
    assert "wrong password" not in right.stderr and "127.0.0.1:9" in right.stderr, right.stderr
