"""builder/attest.py: the statements of what a build used, from a real build of two recipes
(a variant_of engine on a base image, a passthrough engine that runs a pinned container image).

The provenance's shape is checked against in-toto/attestation's own validators, written here
from their Go source (in-toto/attestation@051624ce, ``go/v1/statement.go`` ``Statement.Validate``,
``go/v1/resource_descriptor.go`` ``ResourceDescriptor.Validate``,
``go/predicates/provenance/v1/provenance.go`` ``Provenance.Validate``) and the field names of
``protos/in_toto_attestation/predicates/provenance/v1/provenance.proto`` (JSON names are the
proto's lowerCamelCase). The SBOM is judged by spdx-tools' parser and validator (SPDX 2.3).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from pathlib import Path

import pytest

from lemonpack import __version__
from lemonpack.builder.attest import BUILDER_ID, BUILD_TYPE, attest_build, statements
from lemonpack.builder.plan import plan_build, write_build
from lemonpack.fetch import ArtifactCache
from lemonpack.signing import dsse, keys
from lemonpack.signing.attestations import (PREDICATE_SLSA_PROVENANCE_V1, PREDICATE_SPDX, attestation_tag,
                                            verify_attestations)
from support.helpers import serve_directory
from support.oci_base import make_base
from support.recipes import recipe_doc, write_recipe
from support.registry import engine_tar, layout_tags

IMAGE = "ghcr.io/example/engine:1.0@sha256:" + "c" * 64
PRIVATE = keys.decode_private_key(keys.encode_key_pair(
    keys.ec.derive_private_key(1234567, keys.ec.SECP256R1()), b"").private_pem, b"")

# --- the in-toto/attestation validators (see the module doc) ---------------------------------
_HEX_LENGTHS = {"sha256": 32, "sha512": 64, "sha1": 20, "sha384": 48, "sha224": 28, "md5": 16}


def _resource_descriptor(rd: dict, where: str) -> None:
    """ResourceDescriptor.Validate: one of name/uri/digest at least; digests hex of the algorithm's length."""
    assert isinstance(rd, dict), where
    assert set(rd) <= {"name", "uri", "digest", "content", "downloadLocation", "mediaType", "annotations"}, where
    assert any(rd.get(k) for k in ("name", "uri", "digest")), f"{where}: at least one of name, URI, or digest"
    for algo, value in (rd.get("digest") or {}).items():
        assert algo in _HEX_LENGTHS and re.fullmatch(r"[0-9a-f]+", value) and len(value) == 2 * _HEX_LENGTHS[algo], \
            f"{where}: digest {algo}={value}"


def _statement(doc: dict) -> None:
    """Statement.Validate (v1): _type, non-empty subject each with a digest, predicateType, predicate."""
    assert set(doc) == {"_type", "subject", "predicateType", "predicate"}
    assert doc["_type"] == "https://in-toto.io/Statement/v1"
    assert doc["subject"], "at least one subject required"
    for i, s in enumerate(doc["subject"]):
        _resource_descriptor(s, f"subject[{i}]")
        assert s["digest"], "at least one digest required"
    assert doc["predicateType"]
    assert isinstance(doc["predicate"], dict)


def _provenance(p: dict) -> None:
    """Provenance.Validate (SLSA Build L1) with provenance.proto's field names."""
    assert set(p) == {"buildDefinition", "runDetails"}
    bd, rd = p["buildDefinition"], p["runDetails"]
    assert set(bd) <= {"buildType", "externalParameters", "internalParameters", "resolvedDependencies"}
    assert bd["buildType"], "buildDefinition.buildType required"
    assert isinstance(bd["externalParameters"], dict) and bd["externalParameters"], "externalParameters required"
    for i, dep in enumerate(bd.get("resolvedDependencies", [])):
        _resource_descriptor(dep, f"resolvedDependencies[{i}]")
    assert set(rd) <= {"builder", "metadata", "byproducts"}
    assert set(rd["builder"]) <= {"id", "version", "builderDependencies"}
    assert rd["builder"].get("id"), "runDetails.builder.id required"
    assert all(isinstance(v, str) for v in rd["builder"].get("version", {}).values())  # map<string, string>
    assert set(rd.get("metadata", {})) <= {"invocationId", "startedOn", "finishedOn"}
    for key in ("startedOn", "finishedOn"):  # google.protobuf.Timestamp in JSON: RFC 3339
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", rd["metadata"][key])


def _protos(doc: dict) -> None:
    """in-toto's own Python bindings (PyPI ``in-toto-attestation``): the statement and the
    predicate parsed strictly into their protobuf messages (an unknown field or a bad timestamp
    is refused), and the bindings' ``Statement.validate``."""
    from google.protobuf import json_format
    from in_toto_attestation.predicates.provenance.v1 import provenance_pb2
    from in_toto_attestation.v1 import statement, statement_pb2

    pb = json_format.Parse(json.dumps(doc), statement_pb2.Statement())
    statement.Statement.copy_from_pb(pb).validate()
    json_format.Parse(json.dumps(doc["predicate"]), provenance_pb2.Provenance())


def _spdx_problems(doc: dict) -> list:
    from spdx_tools.spdx.parser.jsonlikedict.json_like_dict_parser import JsonLikeDictParser
    from spdx_tools.spdx.validation.document_validator import validate_full_spdx_document

    return validate_full_spdx_document(JsonLikeDictParser().parse(doc), "SPDX-2.3")


# --- a real build ------------------------------------------------------------------------------

def _build(tmp: Path, out: str, epoch: int = 1700000000):
    mirror = tmp / "mirror"
    art = mirror / "example.invalid" / "eng" / "engine-1.tar"
    if not art.exists():
        art.parent.mkdir(parents=True)
        art.write_bytes(engine_tar("1"))
        make_base(tmp / "base")
    engine = write_recipe(tmp / "eng.json", recipe_doc(
        "attested-engine", variant_of="llamacpp", binary="engine", source="https://example.invalid/eng/engine-1.tar",
        sha256="sha256:" + hashlib.sha256(art.read_bytes()).hexdigest(), version_policy="pinned"))
    boxed = write_recipe(tmp / "boxed.json", recipe_doc("boxed-engine", command="podman",
                                                        args=["run", "--rm", IMAGE, "--port", "{port}"]))
    child = write_recipe(tmp / "child.json", recipe_doc("boxed-child", extends="boxed-engine", command="podman",
                                                        args=["run", "--rm", IMAGE, "--port", "{port}", "-v"]))
    with serve_directory(mirror) as url:
        plan = plan_build([engine, boxed, child], out=tmp / out, mirror=url, base=f"oci:{tmp / 'base'}:base", epoch=epoch,
                          cache=ArtifactCache(tmp / "cache" / "artifacts"))
        result = write_build(plan, progress=False)
    return plan, result


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("attest")
    plan, result = _build(tmp, "out")
    return tmp, plan, result


def _payloads(layout: Path, digest: str) -> list[dict]:
    tags = layout_tags(layout)
    manifest = json.loads((layout / "blobs" / "sha256" / tags[attestation_tag(digest)][7:]).read_bytes())
    out = []
    for layer in manifest["layers"]:
        env = json.loads((layout / "blobs" / "sha256" / layer["digest"][7:]).read_bytes())
        out.append(json.loads(base64.b64decode(env["payload"])))
    return out


def test_provenance_names_the_recipe_every_artifact_the_base_and_lemonpack(built):
    tmp, plan, result = built
    by_recipe = {a.recipe: a for a in statements(plan, result)}
    engine = by_recipe["attested-engine"]
    doc = json.loads(engine.provenance)
    _statement(doc)
    _provenance(doc["predicate"])
    _protos(doc)
    assert doc["predicateType"] == PREDICATE_SLSA_PROVENANCE_V1
    target = next(t for t in result.targets if t.recipe == "attested-engine")
    assert {s["name"]: "sha256:" + s["digest"]["sha256"] for s in doc["subject"]} == {
        "attested-engine": result.indexes["attested-engine"], target.tag: target.digest}
    bd = doc["predicate"]["buildDefinition"]
    assert bd["buildType"] == BUILD_TYPE
    recipe = plan.recipes[0]
    assert bd["externalParameters"]["recipe"]["digest"] == {"sha256": hashlib.sha256(recipe.canonical).hexdigest()}
    assert "base" not in bd["externalParameters"]  # a local layout's path is not a parameter of the bytes
    manifest = json.loads((result.out / "blobs" / "sha256" / target.digest[7:]).read_bytes())
    base_digest = manifest["annotations"]["org.opencontainers.image.base.digest"]
    deps = bd["resolvedDependencies"]
    assert {"name": target.tag, "uri": "https://example.invalid/eng/engine-1.tar",
            "digest": {"sha256": target.sha256}} in deps
    assert {"name": "base", "digest": {"sha256": base_digest[7:]}} in deps
    assert {"name": "lemonpack", "uri": f"pkg:pypi/lemonpack@{__version__}"} in deps
    run = doc["predicate"]["runDetails"]
    assert run["builder"] == {"id": BUILDER_ID, "version": {"lemonpack": __version__}}
    assert run["metadata"]["startedOn"] == "2023-11-14T22:13:20Z"  # SOURCE_DATE_EPOCH 1700000000
    boxed = json.loads(by_recipe["boxed-engine"].provenance)
    _provenance(boxed["predicate"])
    assert {"name": "ghcr.io/example/engine", "uri": "oci://ghcr.io/example/engine@sha256:" + "c" * 64,
            "digest": {"sha256": "c" * 64}} in boxed["predicate"]["buildDefinition"]["resolvedDependencies"]
    # a recipe that extends another: the base recipe it carries is a dependency
    child = json.loads(by_recipe["boxed-child"].provenance)
    _protos(child)
    base_recipe = next(r for r in plan.recipes if r.recipe == "boxed-engine")
    assert {"name": "boxed-engine.json", "digest": {"sha256": hashlib.sha256(base_recipe.canonical).hexdigest()},
            "mediaType": "application/vnd.lemonpack.recipe.v1+json"} in \
        child["predicate"]["buildDefinition"]["resolvedDependencies"]


def test_shape_checks_reject_what_in_totos_validators_reject(built):
    """The checks above can fail: each mutation is one in-toto's Validate() refuses."""
    tmp, plan, result = built
    good = json.loads(statements(plan, result)[0].provenance)
    for mutate in (lambda d: d.update(_type="https://in-toto.io/Statement/v0.2"),
                   lambda d: d.update(subject=[]),
                   lambda d: d["subject"][0].update(digest={"sha256": "abc"}),
                   lambda d: d["predicate"]["buildDefinition"].update(externalParameters={}),
                   lambda d: d["predicate"]["runDetails"]["builder"].pop("id"),
                   lambda d: d["predicate"]["buildDefinition"]["resolvedDependencies"].append({"mediaType": "x"})):
        doc = json.loads(json.dumps(good))
        mutate(doc)
        with pytest.raises(AssertionError):
            _statement(doc)
            _provenance(doc["predicate"])
    from google.protobuf.json_format import ParseError

    for mutate in (lambda d: d["predicate"]["buildDefinition"].update(resolvedDeps=[]),
                   lambda d: d["predicate"]["runDetails"]["metadata"].update(startedOn="yesterday")):
        doc = json.loads(json.dumps(good))
        mutate(doc)
        with pytest.raises(ParseError):
            _protos(doc)


def test_the_sbom_passes_spdx_tools_validator(built):
    tmp, plan, result = built
    for att in statements(plan, result):
        doc = json.loads(att.sbom)
        _statement(doc)
        assert doc["predicateType"] == PREDICATE_SPDX
        assert _spdx_problems(doc["predicate"]) == []
    spdx = json.loads(statements(plan, result)[0].sbom)["predicate"]
    purposes = {p["primaryPackagePurpose"] for p in spdx["packages"]}
    assert purposes == {"CONTAINER", "APPLICATION", "SOURCE"}
    target = next(t for t in result.targets if t.recipe == "attested-engine")
    artifact = next(p for p in spdx["packages"] if p["primaryPackagePurpose"] == "APPLICATION")
    assert artifact["downloadLocation"] == "https://example.invalid/eng/engine-1.tar"
    assert artifact["checksums"] == [{"algorithm": "SHA256", "checksumValue": target.sha256}]
    kinds = {r["relationshipType"] for r in spdx["relationships"]}
    assert kinds == {"DESCRIBES", "CONTAINS", "DESCENDANT_OF"}
    # the validator can fail: a checksum that is no sha256
    spdx["packages"][0]["checksums"][0]["checksumValue"] = "xyz"
    assert _spdx_problems(spdx)


def test_two_builds_give_byte_identical_envelopes_and_verify(built):
    tmp, plan, result = built
    attest_build(plan, result, PRIVATE)
    plan2, result2 = _build(tmp, "out2")
    attest_build(plan2, result2, PRIVATE)
    one, two = layout_tags(result.out), layout_tags(result2.out)
    assert one == two and sum(t.endswith(".att") for t in one) == len(result.targets) + len(result.indexes)
    assert sorted(p.name for p in (result.out / "blobs" / "sha256").iterdir()) == \
        sorted(p.name for p in (result2.out / "blobs" / "sha256").iterdir())
    for tag in one:
        done = verify_attestations(f"oci:{result.out}:{tag}", PRIVATE.public_key()) if not tag.endswith(".att") \
            else None
        if done:
            assert sorted(v["predicate_type"] for v in done["verified"]) == [PREDICATE_SLSA_PROVENANCE_V1,
                                                                             PREDICATE_SPDX]
    payloads = _payloads(result.out, result.indexes["attested-engine"])
    assert [p["predicateType"] for p in payloads] == [PREDICATE_SLSA_PROVENANCE_V1, PREDICATE_SPDX]
    # another SOURCE_DATE_EPOCH is another statement (the time is in it)
    plan3, result3 = _build(tmp, "out3", epoch=1700000001)
    assert statements(plan3, result3)[0].provenance != statements(plan, result)[0].provenance


def test_the_envelope_is_dsse_over_the_statement(built):
    tmp, plan, result = built
    att = statements(plan, result)[0]
    signed = att.signed(PRIVATE)
    env = dsse.parse_envelope(signed[0].envelope)
    assert env.payload == att.provenance and env.payload_type == "application/vnd.in-toto+json"
    assert dsse.verify_envelope(PRIVATE.public_key(), env)


@pytest.mark.slow
def test_publish_attestations_interrupted_part_way_say_how_far_and_resume(built, registry):
    """Ctrl-C while attaching (raised from the second manifest PUT) names what was attested;
    attaching again adds only what is missing."""
    import secrets

    from lemonpack.errors import Interrupted
    from lemonpack.oci.reference import parse_registry_reference
    from lemonpack.registry import RegistryClient
    from lemonpack.registry.transfer import publish_layout

    from lemonpack.builder.attest import attest_published

    tmp, plan, result = built
    repo = f"att-{secrets.token_hex(3)}/engines"

    class CutClient(RegistryClient):
        puts = 0

        def put_manifest(self, *args, **kw):
            if args[1].endswith(".att"):
                CutClient.puts += 1
                if CutClient.puts == 2:
                    raise KeyboardInterrupt
            return super().put_manifest(*args, **kw)

    with RegistryClient(registry.host) as client:  # the images only (the layout also holds .att tags)
        for rid in result.indexes:
            publish_layout(result.out, parse_registry_reference(f"{registry.host}/{repo}:{rid}"), client, tag=rid)
    with CutClient(registry.host) as client:
        with pytest.raises(Interrupted, match=r"interrupted while attaching attestations to sha256:\w+ \(1 of 2 "):
            attest_published(plan, result, PRIVATE, client, repo)
    with RegistryClient(registry.host) as client:
        done = attest_published(plan, result, PRIVATE, client, repo)
        assert [a["attestations"] for d in done for a in d["attached"]] == [2] * (len(result.targets) + len(result.indexes))
        for d in done:
            for digest in d["subjects"].values():
                assert verify_attestations(f"{registry.host}/{repo}@{digest}", PRIVATE.public_key(),
                                           client=client)["checked"] == 2
