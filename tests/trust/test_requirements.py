"""The pure half of the trust policy: scope candidates in containers/image's order
(docker/policyconfiguration/naming.go), signedIdentity matching case by case
(signature/policy_reference_match.go), and a verdict from given evidence."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from lemonpack.oci.reference import parse_registry_reference
from lemonpack.signing import simplesigning as ss
from lemonpack.signing.keys import encode_public_key
from lemonpack.trust.policy import Identity, parse_policy
from lemonpack.trust.requirements import (Evidence, FoundSignature, evaluate, identity_matches, normalize,
                                          policy_reference, scope_candidates)

D = "sha256:" + "a" * 64
E = "sha256:" + "b" * 64


def judged(text: str):
    return policy_reference(parse_registry_reference(text))


def test_scope_candidates_most_specific_first():
    assert scope_candidates(judged("reg.b.example.com:5000/ns/team/app:v1")) == [
        "reg.b.example.com:5000/ns/team/app:v1", "reg.b.example.com:5000/ns/team/app",
        "reg.b.example.com:5000/ns/team", "reg.b.example.com:5000/ns", "reg.b.example.com:5000",
        "*.b.example.com", "*.example.com", "*.com", ""]
    assert scope_candidates(judged(f"localhost:5000/app@{D}"))[:3] == [f"localhost:5000/app@{D}",
                                                                         "localhost:5000/app", "localhost:5000"]


def test_references_are_judged_normalised():
    assert str(judged("docker.io/busybox")) == "docker.io/library/busybox:latest"
    assert str(judged(f"r.example/app:v1@{D}")) == f"r.example/app@{D}"  # judged and used by the digest
    assert str(normalize("busybox:1")) == "docker.io/library/busybox:1"


@pytest.mark.parametrize("identity, image, signed, ok", [
    # cosign signatures name only the repository
    (Identity("matchRepoDigestOrExact"), "r.example/app:v1", "r.example/app", False),
    (Identity("matchRepoDigestOrExact"), f"r.example/app@{D}", "r.example/app", False),
    (Identity("matchRepoDigestOrExact"), "r.example/app:v1", "r.example/app:v1", True),
    (Identity("matchRepoDigestOrExact"), "r.example/app:v1", "r.example/app:v2", False),
    (Identity("matchRepoDigestOrExact"), f"r.example/app@{D}", "r.example/app:v9", True),
    (Identity("matchExact"), "r.example/app:v1", "r.example/app", False),
    (Identity("matchExact"), "r.example/app:v1", "r.example/app:v1", True),
    (Identity("matchExact"), f"r.example/app@{D}", "r.example/app:v1", False),
    (Identity("matchRepository"), "r.example/app:v1", "r.example/app", True),
    (Identity("matchRepository"), "r.example/app:v1", "r.example/other", False),
    (Identity("exactReference", reference="up.example/app:v1"), "r.example/app:v1", "up.example/app:v1", True),
    (Identity("exactReference", reference="up.example/app:v1"), "r.example/app:v1", "up.example/app", False),
    (Identity("exactRepository", reference="up.example/app"), "r.example/app:v1", "up.example/app", True),
    (Identity("exactRepository", reference="up.example/app"), "r.example/app:v1", "r.example/app", False),
    (Identity("remapIdentity", prefix="r.example/mirror", signed_prefix="vendor.example"),
     "r.example/mirror/app:v1", "vendor.example/app:v1", True),
    (Identity("remapIdentity", prefix="r.example/mirror", signed_prefix="vendor.example"),
     "r.example/mirrors/app:v1", "vendor.example/app:v1", False),
    (Identity("matchRepository"), "docker.io/library/busybox:1", "busybox", True),
])
def test_signed_identity(identity, image, signed, ok):
    assert identity_matches(identity, judged(image), signed) is ok


def _policy(identity: str = "matchRepository") -> tuple:
    key = ec.generate_private_key(ec.SECP256R1())
    import base64
    import json

    data = base64.b64encode(encode_public_key(key.public_key())).decode()
    p = parse_policy(json.dumps({"default": [{"type": "sigstoreSigned", "keyData": data,
                                              "signedIdentity": {"type": identity}}]}), "p.json")
    return p, key


def _evidence(p, key, *, signs: str = D, repo: str = "r.example/app", digest: str = D) -> Evidence:
    payload = ss.make_payload(repo, signs)
    source = p.default[0].keys[0]
    return Evidence(digest, True, "on", (FoundSignature(payload, ss.sign_payload(key, payload)),), "t",
                    {source: key.public_key()})


def test_a_good_cosign_signature_is_accepted_and_says_what_it_saw():
    p, key = _policy()
    v = evaluate(p, judged(f"r.example/app@{D}"), _evidence(p, key))
    assert v.allowed and v.scope == "default" and "verifies with keyData" in v.results[0].saw


def test_a_signature_of_another_digest_is_refused():
    p, key = _policy()
    v = evaluate(p, judged(f"r.example/app@{D}"), _evidence(p, key, signs=E))
    assert not v.allowed and f"signs {E}, not this image's {D}" in v.reason


def test_a_tampered_payload_is_refused():
    p, key = _policy()
    ev = _evidence(p, key)
    bad = Evidence(ev.digest, True, "on", (FoundSignature(ev.signatures[0].payload + b" ", ev.signatures[0].signature),),
                   "t", ev.keys)
    v = evaluate(p, judged(f"r.example/app@{D}"), bad)
    assert not v.allowed and "made by none of the 1 expected keys" in v.reason


def test_the_default_identity_explains_cosign_signatures():
    p, key = _policy("matchRepoDigestOrExact")
    v = evaluate(p, judged(f"r.example/app@{D}"), _evidence(p, key))
    assert not v.allowed and "cosign signatures carry only a repository" in v.reason
    assert v.line().startswith(f"r.example/app@{D}: rejected by the trust policy p.json (scope default): ")
