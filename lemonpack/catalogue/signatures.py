"""An entry's signature status: what the catalogue could establish, never an abort and never a
claim it could not check.

``{"status": S, "fingerprint": FP, "detail": TEXT}`` (``detail`` only where it adds something):

- ``verified``: the signature verifies with one of the publisher's reviewed keys (FP that key);
- ``unknown-key``: it verifies only with the key the entry names (FP that key);
- ``unsigned``: there is no signature (no ``[signature]`` and, for an OCI entry, the registry
  answered that no signature tag exists);
- ``unavailable``: the signature could not be looked at: its URL or the registry failed
  (``detail``: ``signature unavailable (HTTP 503)``, ``signature unavailable (unreachable)``).
  A registry error is not "unsigned" (artifacthub#4007);
- ``in-tree``: an official entry of an unsigned index: it is part of the source tree the index
  was built from, and carries that tree's trust (``detail``: ``official, in-tree``; readers
  add the digest of the index they read, :func:`describe`).

An invalid signature (verifies with no key) is not a status: the entry is rejected
(:class:`InvalidSignature`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from lemonpack.digest import Digest
from lemonpack.errors import FetchError, LemonpackError
from lemonpack.files import read_user_file

_HTTP = re.compile(r"\bHTTP (\d{3})\b")
IN_TREE = {"status": "in-tree", "fingerprint": None, "detail": "official, in-tree"}
UNSIGNED = {"status": "unsigned", "fingerprint": None}


class InvalidSignature(Exception):
    """The entry's signature verifies with no key it could be checked with."""


def unavailable(exc: Exception) -> dict:
    """The ``unavailable`` status for a failed lookup ``exc`` (its HTTP status when it has one)."""
    m = _HTTP.search(str(exc))
    why = f"HTTP {m.group(1)}" if m else "unreachable"
    return {"status": "unavailable", "fingerprint": None, "detail": f"signature unavailable ({why})"}


def official_status(private, publishers: dict) -> dict:
    """Official entries are covered by the index signature: verified when the index key
    (``private``) is one of the ``lemonpack`` publisher's keys, unknown-key for another key,
    and :data:`IN_TREE` for an unsigned index."""
    if private is None:
        return dict(IN_TREE)
    from lemonpack.catalogue.sources import key_fingerprint

    fp = key_fingerprint(public_pem_of(private))
    pub = publishers.get("lemonpack")
    known = pub is not None and any(k.fingerprint == fp for k in pub.keys)
    return {"status": "verified" if known else "unknown-key", "fingerprint": fp}


def oci_status(ref: str, keys, *, insecure: bool, registry_config) -> dict:
    """Status of the image ``ref`` (``HOST/REPO@sha256:..``) against the publisher ``keys``
    (cosign signatures in the registry, tag fallback)."""
    from lemonpack.signing.keys import decode_public_key
    from lemonpack.errors import SignatureError
    from lemonpack.signing.remote import verify_image

    failure: Exception | None = None
    for k in keys:
        try:
            verify_image(ref, decode_public_key(k.pem.encode()), insecure=insecure, registry_config=registry_config)
            return {"status": "verified", "fingerprint": k.fingerprint}
        except SignatureError as e:
            if e.reason == "no-signature":
                return dict(UNSIGNED)
            continue  # another key may hold
        except LemonpackError as e:  # the registry failed: not the same as "not signed"
            failure = e
    if failure is not None:
        return unavailable(failure)
    return dict(UNSIGNED)


def file_status(signature: dict | None, subject: bytes, keys, fetch_signature) -> dict:
    """Status of a ``[signature]`` table over ``subject`` (the fetched bytes or listing):
    ``keys`` are the publisher's; ``fetch_signature(url) -> bytes`` reads a signature URL
    (its FetchError becomes ``unavailable``). Raises :class:`InvalidSignature`."""
    from lemonpack.catalogue.names import verify_bytes
    from lemonpack.catalogue.sources import key_fingerprint

    if signature is None:
        return dict(UNSIGNED)
    if "value" in signature:
        sig = signature["value"]
    else:
        try:
            sig = fetch_signature(signature["url"])[:4096].decode("ascii", "replace")
        except FetchError as e:
            return unavailable(e)
    for k in keys:
        if verify_bytes(k.pem, subject, sig):
            return {"status": "verified", "fingerprint": k.fingerprint}
    other = signature.get("key")
    if other:
        try:
            ok = verify_bytes(other, subject, sig)
            fp = key_fingerprint(other)
        except (LemonpackError, ValueError):
            ok = False
        if ok:
            return {"status": "unknown-key", "fingerprint": fp}
    raise InvalidSignature("invalid signature: it verifies with no key of the publisher"
                           + (" nor with the key the entry names" if other else ""))


def index_digest(data: bytes) -> str:
    """``sha256:<hex>`` of an index's ``catalogue.json`` bytes."""
    return str(Digest.of_bytes(data))


def describe(sig: dict[str, Any], digest: str | None = None) -> str:
    """One line for a status: ``verified (sha256:..)``, ``signature unavailable (HTTP 503)``,
    ``official, in-tree, index digest sha256:..`` (``digest``: of the index being read)."""
    status = sig.get("status")
    if status == "in-tree":
        return "official, in-tree" + (f", index digest {digest}" if digest else "")
    if sig.get("detail"):
        return str(sig["detail"])
    return str(status) + (f" ({sig['fingerprint']})" if sig.get("fingerprint") else "")


def load_private_key(path: Path, password: bytes):
    """The ECDSA private key in cosign's key file ``path`` (raises KeyFileError)."""
    from lemonpack.signing.keys import decode_private_key

    return decode_private_key(read_user_file(path, "key file"), password, what=str(path))


def public_pem_of(private) -> str:
    """PEM text of ``private``'s public key."""
    from lemonpack.signing.keys import encode_public_key

    return encode_public_key(private.public_key()).decode()
