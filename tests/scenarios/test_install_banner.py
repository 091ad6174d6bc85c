"""``lemonpack install oci://...``: what the user gave (reference with a digest, key file,
--registry-config) is checked before the consent banner; the banner says the signature
*will be* checked. Against a real registry (the reference itself is never fetched when
refused)."""

from __future__ import annotations

import os
import subprocess
import sys

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec


def cli(*args: str, cache) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lemonpack.cli", *args], capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL,
                          env={**os.environ, "LEMONPACK_CACHE_DIR": str(cache)})


def test_bad_input_fails_before_the_banner(registry, tmp_path):
    key = tmp_path / "k.pub"
    key.write_bytes(ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    digest = "sha256:" + "0" * 64
    cases = [
        (["install", f"oci://{registry.host}/banner/x:v1", "--yes"], "needs a digest"),
        (["install", f"oci://{registry.host}/banner/x:v1", "--yes", "--key", str(key)], "needs a digest"),
        (["install", f"oci://{registry.host}/banner/x@{digest}", "--yes", "--key", str(tmp_path / "none.pub")],
         f"cannot read key file {tmp_path / 'none.pub'}: no such file"),
        (["install", f"oci://{registry.host}/banner/x@{digest}", "--yes", "--registry-config", str(tmp_path)],
         f"cannot read registry config {tmp_path}: is a directory"),
        (["install", "oci://not a reference", "--yes"], "not a reference"),
    ]
    for argv, message in cases:
        r = cli(*argv, cache=tmp_path / "cache")
        assert r.returncode == 1, (argv, r.stderr)
        assert "source:" not in r.stderr and "WARNING" not in r.stderr and "signature:" not in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
        if message != "not a reference":
            assert message in r.stderr


def test_the_banner_says_the_signature_will_be_checked(registry, tmp_path):
    key = tmp_path / "k.pub"
    key.write_bytes(ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    ref = f"oci://{registry.host}/banner/absent@sha256:{'0' * 64}"
    r = cli("install", ref, "--yes", "--key", str(key), cache=tmp_path / "cache")
    assert f"signature:      will be checked with {key}\n" in r.stderr
    assert r.returncode != 0  # nothing there: the signature is what fails
