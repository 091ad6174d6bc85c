"""The empty descriptor constants of lemonpack/oci/mediatypes.py (image-spec "Guidance for an empty
descriptor"): the canonical JSON of {} and its digest."""

import hashlib

from lemonpack.oci.mediatypes import EMPTY_DIGEST, EMPTY_JSON
from lemonpack.canonical import canonical_json


def test_empty_descriptor_constants():
    assert canonical_json({}) == EMPTY_JSON
    assert "sha256:" + hashlib.sha256(EMPTY_JSON).hexdigest() == EMPTY_DIGEST
