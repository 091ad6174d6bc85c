"""Hash encodings checked against the nix tools installed on this machine."""

from __future__ import annotations

import hashlib
import os
import subprocess

import pytest

from lemonpack.nix.hashes import NIX32_ALPHABET, hex_from_sri, nix32_from_hex, sri_from_hex

needs_nix = pytest.mark.usefixtures("nix_installed")

# Fixed vector: sha256("") in Nix's encodings (as printed by nix-hash 2.8).
EMPTY = hashlib.sha256(b"").hexdigest()


def test_known_vector():
    assert sri_from_hex(EMPTY) == "sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="
    assert nix32_from_hex(EMPTY) == "0mdqa9w1p6cmli6976v4wi0sw9r4p5prkj7lzfd1877wk11c9c73"


def test_shapes_and_round_trip():
    for _ in range(50):
        h = os.urandom(32).hex()
        n32 = nix32_from_hex(h)
        assert len(n32) == 52 and set(n32) <= set(NIX32_ALPHABET)
        assert hex_from_sri(sri_from_hex(h)) == h


@pytest.mark.parametrize("bad", ["", "abc", "G" * 64, "A" * 64, "a" * 63, "a" * 65])
def test_rejects_non_digests(bad):
    with pytest.raises(ValueError):
        nix32_from_hex(bad)
    with pytest.raises(ValueError):
        sri_from_hex(bad)


@needs_nix
def test_matches_nix_hash_to_base32():
    digests = [EMPTY, "00" * 32, "ff" * 32] + [os.urandom(32).hex() for _ in range(20)]
    out = subprocess.run(["nix-hash", "--type", "sha256", "--to-base32", *digests],
                         check=True, capture_output=True, text=True).stdout.split()
    assert out == [nix32_from_hex(h) for h in digests]


@needs_nix
def test_matches_nix_hash_to_sri():
    digests = [os.urandom(32).hex() for _ in range(5)]
    out = subprocess.run(["nix", "--extra-experimental-features", "nix-command", "hash", "to-sri",
                          "--type", "sha256", *digests],
                         check=True, capture_output=True, text=True).stdout.split()
    assert out == [sri_from_hex(h) for h in digests]
