"""sha256 digests, parsed once: the one place that knows their text forms.

A digest is ``algorithm ":" encoded`` (OCI image-spec v1.1 ``descriptor.md``, "Digests");
lemonpack writes and accepts the registered ``sha256`` algorithm only, encoded as 64 lowercase
hex digits, and also uses the bare hex form (cache file names, Nix's ``sha256`` attribute).
Every check of either form goes through this module (``tests/test_architecture.py`` fails on a
hex-64 pattern anywhere else), so "what is a digest" has one answer. The general reference
grammar (any algorithm, for parsing what others wrote) stays in :mod:`lemonpack.oci.reference`.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

#: Length of a sha256 digest's encoded part (hex digits).
SHA256_HEX_LENGTH = 64
_HEX = re.compile(r"[0-9a-f]{64}")
_DIGEST = re.compile(r"sha256:([0-9a-f]{64})")


def is_sha256_hex(text: object) -> bool:
    """Whether ``text`` is a string of exactly 64 lowercase hex digits (a bare sha256)."""
    return isinstance(text, str) and _HEX.fullmatch(text) is not None


def is_sha256_digest(text: object) -> bool:
    """Whether ``text`` is a string ``sha256:<64 lowercase hex>`` (nothing before or after)."""
    return isinstance(text, str) and _DIGEST.fullmatch(text) is not None


@dataclass(frozen=True, slots=True)
class Digest:
    """A sha256 digest. ``str(d)`` is ``sha256:<hex>``; ``d.hex`` the 64 hex digits.

    Build one with :meth:`parse` (text from a file, a registry, a user), :meth:`from_hex`
    (a bare hex string) or :meth:`of_bytes` (hash some bytes)."""

    hex: str

    def __post_init__(self) -> None:
        if not is_sha256_hex(self.hex):
            raise ValueError(f"not 64 lowercase hex digits: {self.hex!r}")

    @property
    def algorithm(self) -> str:
        """Always ``"sha256"`` (the only algorithm lemonpack accepts)."""
        return "sha256"

    @classmethod
    def parse(cls, text: object) -> "Digest":
        """The digest ``text`` spells (``sha256:<64 lowercase hex>``). Raises ``ValueError``
        naming what was given for anything else (another algorithm, upper case, a bare hex)."""
        m = _DIGEST.fullmatch(text) if isinstance(text, str) else None
        if m is None:
            raise ValueError(f"a digest must be 'sha256:<64 lowercase hex>', got {text!r}")
        return cls(m.group(1))

    @classmethod
    def from_hex(cls, hex_digest: object) -> "Digest":
        """The digest whose encoded part is ``hex_digest``. Raises ``ValueError``."""
        if not is_sha256_hex(hex_digest):
            raise ValueError(f"not a sha256 hex digest (64 lowercase hex digits): {hex_digest!r}")
        return cls(hex_digest)  # type: ignore[arg-type]

    @classmethod
    def of_bytes(cls, data: bytes) -> "Digest":
        """The sha256 digest of ``data``."""
        return cls(hashlib.sha256(data).hexdigest())

    def __str__(self) -> str:
        return f"sha256:{self.hex}"


__all__ = ["Digest", "SHA256_HEX_LENGTH", "is_sha256_digest", "is_sha256_hex"]
