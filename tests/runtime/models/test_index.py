"""The one model artifact of an image index (lemonpack/runtime/models/index.py): the only model
manifest, else the one for this machine's platform, else a refusal naming every candidate; the
pull through a real registry is tests/scenarios/test_model_artifacts.py's."""

from __future__ import annotations

import pytest

from lemonpack.canonical import canonical_json
from lemonpack.digest import Digest
from lemonpack.oci import mediatypes as mt
from lemonpack.oci.descriptor import Descriptor
from lemonpack.runtime.models.artifact import ModelArtifactError
from lemonpack.runtime.models.index import index_manifests, is_index, pick_index_manifest


def test_an_index_gives_its_one_model_manifest_or_a_refusal_naming_the_candidates():
    def entry(data: bytes, platform=None, media_type=mt.MEDIA_TYPE_IMAGE_MANIFEST):
        return Descriptor(media_type, str(Digest.of_bytes(data)), len(data), platform=platform)

    amd, arm = {"os": "linux", "architecture": "amd64"}, {"os": "linux", "architecture": "arm64"}
    runtime, attest, a, b = entry(b"runtime", amd), entry(b"attestation"), entry(b"a"), entry(b"b", arm)
    nested = entry(b"nested", media_type=mt.MEDIA_TYPE_IMAGE_INDEX)
    index = canonical_json({"schemaVersion": 2, "mediaType": mt.MEDIA_TYPE_IMAGE_INDEX,
                            "manifests": [d.to_json() for d in (runtime, nested, a)]})
    assert is_index(index) and not is_index(canonical_json({"schemaVersion": 2, "config": {}, "layers": []}))
    assert index_manifests(index) == [runtime, a]  # a nested index is no manifest to pull
    here = ("linux", "amd64")
    assert pick_index_manifest("r", [(runtime, None), (attest, None), (a, "modelpack")], here) == a
    assert pick_index_manifest("r", [(a, "modelpack"), (entry(b"c", amd), "docker-v0.1")], here) == entry(b"c", amd)
    with pytest.raises(ModelArtifactError, match=r"r is an image index with 2 model artifacts and none for "
                                                 r"linux/amd64: sha256:\w+ \(modelpack, no platform\); "
                                                 r"sha256:\w+ \(docker-v0.2, linux/arm64\)"):
        pick_index_manifest("r", [(a, "modelpack"), (b, "docker-v0.2")], here)
    with pytest.raises(ModelArtifactError, match=r"no model artifact among its manifests \(sha256:\w+ \(linux/amd64\)"):
        pick_index_manifest("r", [(runtime, None)], here)
    with pytest.raises(ModelArtifactError, match="no manifests list"):
        index_manifests(b'{"mediaType": "application/vnd.oci.image.index.v1+json"}')
