"""The sha256 digest type (lemonpack/digest.py; OCI image-spec v1.1 ``descriptor.md``, "Digests"):
one text form written and accepted, the bare hex form, and everything else refused by name."""

from __future__ import annotations

import hashlib

import pytest

from lemonpack.digest import SHA256_HEX_LENGTH, Digest, is_sha256_digest, is_sha256_hex

HEX = hashlib.sha256(b"lemonpack").hexdigest()


def test_parse_from_hex_and_of_bytes_agree_and_print_the_one_text_form():
    d = Digest.of_bytes(b"lemonpack")
    assert d == Digest.parse(f"sha256:{HEX}") == Digest.from_hex(HEX)
    assert str(d) == f"sha256:{HEX}" and d.hex == HEX and d.algorithm == "sha256"
    assert len(d.hex) == SHA256_HEX_LENGTH
    assert {d: 1}[Digest.from_hex(HEX)] == 1  # frozen and hashable: usable as a key


@pytest.mark.parametrize("text", [
    HEX,                                 # a bare hex is not a digest's text form
    f"sha256:{HEX.upper()}",             # upper case
    f"sha512:{HEX}", f"SHA256:{HEX}",    # another algorithm, or its name in capitals
    f"sha256:{HEX[:-1]}", f"sha256:{HEX}0", f" sha256:{HEX}", f"sha256:{HEX}\n",
    "", None, 7,
])
def test_anything_but_sha256_and_64_lowercase_hex_is_refused_naming_it(text):
    assert not is_sha256_digest(text)
    with pytest.raises(ValueError) as e:
        Digest.parse(text)
    assert repr(text) in str(e.value)


@pytest.mark.parametrize("text", [f"sha256:{HEX}", HEX.upper(), HEX[:-1], HEX + "0", "", None])
def test_the_bare_form_is_64_lowercase_hex_digits_only(text):
    assert not is_sha256_hex(text)
    with pytest.raises(ValueError):
        Digest.from_hex(text)
    with pytest.raises(ValueError):
        Digest(text)  # type: ignore[arg-type]
    assert is_sha256_hex(HEX)
