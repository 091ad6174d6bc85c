"""``lemonpack catalogue sign ENTRY --key KEY``: a publisher's signature for a community entry.

The signed bytes are what ``catalogue build`` verifies (:mod:`.signatures`): the fetched file
(an https recipe), the archive (an https extension) or the tree listing (a git source,
:func:`lemonpack.catalogue.fetching.tree_digest`). The source is fetched and its digest
checked exactly as the build does, then signed with the cosign key file ``KEY`` (``lemonpack
keygen``; ECDSA P-256 / SHA-256, base64 DER, cosign ``sign-blob`` format, deterministic
nonces) and written into the entry file as its ``[signature]`` table (``value``, plus ``key``
= the PEM public key when the publisher file next to the entries does not list that key).
An existing ``[signature]`` table is replaced; the rest of the file is kept byte for byte.
The file is replaced atomically, and only when the result is still a valid entry.
OCI entries are signed in their registry instead (``lemonpack sign REF --key KEY``).
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from lemonpack.errors import CatalogueError, ManifestError

_TABLE = re.compile(r"^\s*\[")
_SIGNATURE = re.compile(r"^\s*\[\s*signature\s*\]\s*(#.*)?$")


def without_signature(text: str) -> str:
    """``text`` (an entry's TOML) without its ``[signature]`` table (header to the next table
    header or the end)."""
    out, skipping = [], False
    for line in text.splitlines(keepends=True):
        if _SIGNATURE.match(line):
            skipping = True
            continue
        if skipping and _TABLE.match(line):
            skipping = False
        if not skipping:
            out.append(line)
    return "".join(out)


def sign_entry(entry: Path, key: Path, password: bytes, *, mirror=None, cache=None) -> dict:
    """Sign the entry file ``entry`` with the cosign private key file ``key`` (see the module
    docstring). Returns ``{"entry", "digest", "signature", "fingerprint", "publisher_key"}``
    (``publisher_key``: the key is one of the publisher's). Raises ManifestError (the entry
    is invalid), IntegrityError (the source no longer matches its digest), FetchError,
    KeyFileError, LemonpackError."""
    from lemonpack.catalogue.build import load_private_key, public_pem_of
    from lemonpack.signing.simplesigning import sign_payload
    from lemonpack.catalogue.fetching import fetch_source
    from lemonpack.catalogue.sources import check_entry, check_publisher, key_fingerprint
    from lemonpack.files import read_user_file, replace_file

    entry = Path(entry)
    ent, problems = check_entry(entry)
    if ent is None:
        raise ManifestError(problems)
    if ent.source["type"] == "oci":
        raise CatalogueError(f"{entry}: an OCI entry is signed in its registry: lemonpack sign "
                             f"{ent.source['ref']} --key {key}")
    private = load_private_key(key, password)
    pem = public_pem_of(private)
    fp = key_fingerprint(pem)
    with tempfile.TemporaryDirectory(prefix="lemonpack-catalogue-sign-") as tmp:
        got = fetch_source(ent.kind, ent.source, Path(tmp), mirror=mirror, cache=cache)
    signature = sign_payload(private, got.subject)
    pub_file = entry.absolute().parent.parent.parent / "publishers" / f"{ent.publisher}.toml"
    listed = False
    if pub_file.is_file():
        pub, _ = check_publisher(pub_file)
        listed = pub is not None and any(k.fingerprint == fp for k in pub.keys)
    text = read_user_file(entry, "entry file").decode("utf-8")
    body = without_signature(text).rstrip("\n") + "\n\n[signature]\n" + f'value = "{signature}"\n'
    if not listed:
        body += f'key = """{pem.strip()}\n"""\n'
    with tempfile.TemporaryDirectory(prefix="lemonpack-catalogue-sign-") as tmp:
        probe = Path(tmp) / ent.publisher / entry.name
        probe.parent.mkdir()
        probe.write_text(body, encoding="utf-8")
        _, problems = check_entry(probe)
    if problems:
        raise ManifestError(problems)
    replace_file(entry, body.encode("utf-8"))
    return {"entry": str(entry), "digest": got.digest, "signature": signature, "fingerprint": fp,
            "publisher_key": listed}
