"""Hash encodings Nix understands, from a sha256 hex digest.

Nix names a content hash three ways: base-16 (``sha256sum``'s hex), the SRI form
``sha256-<base64>`` (W3C Subresource Integrity, https://www.w3.org/TR/SRI/, the form the
``hash`` attribute of fixed-output derivations takes), and Nix's own base-32 (the form
store paths and ``nix-hash --type sha256 --to-base32`` print). Nix's base-32 is not
RFC 4648: it uses the alphabet ``0123456789abcdfghijklmnpqrsvwxyz`` (no e, o, u, t) and
emits the digits from the most significant 5-bit group of the *last* byte downwards,
following ``printHash32`` in Nix's ``src/libutil/hash.cc``.
"""

from __future__ import annotations

import base64

from lemonpack.digest import is_sha256_hex

NIX32_ALPHABET = "0123456789abcdfghijklmnpqrsvwxyz"
"""Nix's base-32 digits (``src/libutil/hash.cc``: ``base32Chars``)."""



def _digest(hex_digest: str) -> bytes:
    """Bytes of a sha256 hex digest (64 lowercase hex characters); ValueError otherwise."""
    if not isinstance(hex_digest, str) or not is_sha256_hex(hex_digest):
        raise ValueError(f"not a sha256 hex digest (64 lowercase hex characters): {hex_digest!r}")
    return bytes.fromhex(hex_digest)


def sri_from_hex(hex_digest: str) -> str:
    """SRI form of a sha256 digest: ``"sha256-" + base64(32 bytes)`` (44 characters after the dash).

    ``hex_digest`` is 64 lowercase hex characters; raises ``ValueError`` otherwise.
    Follows the W3C SRI "integrity metadata" grammar and the Nix manual's description of
    the ``hash`` attribute of fixed-output derivations.
    """
    return "sha256-" + base64.b64encode(_digest(hex_digest)).decode("ascii")


def nix32_from_hex(hex_digest: str) -> str:
    """Nix base-32 form of a sha256 digest: 52 characters of :data:`NIX32_ALPHABET`.

    ``hex_digest`` is 64 lowercase hex characters; raises ``ValueError`` otherwise. Same
    output as ``nix-hash --type sha256 --to-base32 <hex>`` (``printHash32`` in Nix's
    ``src/libutil/hash.cc``: 5-bit groups taken little-endian across the bytes, printed
    most significant group first).
    """
    raw = _digest(hex_digest)
    length = (len(raw) * 8 - 1) // 5 + 1
    out = []
    for n in range(length - 1, -1, -1):
        bit = n * 5
        i, j = divmod(bit, 8)
        c = raw[i] >> j
        if i + 1 < len(raw):
            c |= raw[i + 1] << (8 - j)
        out.append(NIX32_ALPHABET[c & 0x1F])
    return "".join(out)


def hex_from_sri(sri: str) -> str:
    """Inverse of :func:`sri_from_hex`: ``"sha256-<base64>"`` to 64 hex characters.

    Raises ``ValueError`` for any other algorithm or a digest that is not 32 bytes.
    """
    algo, sep, b64 = sri.partition("-")
    if algo != "sha256" or not sep:
        raise ValueError(f"not a sha256 SRI hash: {sri!r}")
    try:
        raw = base64.b64decode(b64, validate=True)
    except ValueError as exc:
        raise ValueError(f"not a sha256 SRI hash: {sri!r}") from exc
    if len(raw) != 32:
        raise ValueError(f"not a sha256 SRI hash (digest is {len(raw)} bytes): {sri!r}")
    return raw.hex()


__all__ = ["NIX32_ALPHABET", "sri_from_hex", "nix32_from_hex", "hex_from_sri"]
