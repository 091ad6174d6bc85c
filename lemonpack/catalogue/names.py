"""Names and checks shared by the build and the readers of an index (kept light: ``catalogue
search`` imports only this, :mod:`.search`, :mod:`.fits` and :mod:`.index`)."""

from __future__ import annotations

import re

from lemonpack.errors import CatalogueError

SCHEMA = 1
INDEX_NAME = "catalogue.json"
SIG_NAME = "catalogue.json.sig"
#: The compact search index beside ``catalogue.json`` (:func:`lemonpack.catalogue.search.search_file_bytes`).
SEARCH_NAME = "catalogue-search.json"


def entry_filename(entry_id: str) -> str:
    """``recipe:hello-engine`` -> ``recipe.hello-engine.json`` (kinds have no '.', ids no ':')."""
    if not isinstance(entry_id, str) or not re.fullmatch(r"(recipe|extension|model):[a-z0-9][a-z0-9_.-]{0,99}", entry_id):
        raise CatalogueError(f"not a catalogue entry id: {entry_id!r}")
    kind, name = entry_id.split(":", 1)
    return f"{kind}.{name}.json"


def verify_bytes(public_pem: str | bytes, data: bytes, signature_b64: str) -> bool:
    """Whether ``signature_b64`` is the PEM key's signature over ``data`` (never raises for
    a malformed signature; :func:`lemonpack.signing.simplesigning.verify_payload`)."""
    from lemonpack.signing.keys import decode_public_key
    from lemonpack.signing.simplesigning import verify_payload

    pem = public_pem.encode() if isinstance(public_pem, str) else public_pem
    return verify_payload(decode_public_key(pem), data, signature_b64.strip())
