"""`lemonpack build --attest`, `publish --attest` and `verify --attestation`, as a user runs them:
the real CLI, the real registry (distribution 2.8, tag fallback), skopeo reading what was pushed."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import subprocess

import pytest

from lemonpack.canonical import canonical_json
from lemonpack.registry import RegistryClient
from lemonpack.signing import attestations as at
from lemonpack.signing import keys
from lemonpack.signing import simplesigning as ss
from support.helpers import serve_directory
from support.recipes import recipe_doc, write_recipe
from support.registry import engine_tar, layout_tags, lemonpack
from support.tools import need

pytestmark = pytest.mark.slow
ENV = {"LEMONPACK_PASSWORD": "pw", "SOURCE_DATE_EPOCH": "1700000000"}


@pytest.fixture
def key(tmp_path):
    pair = keys.generate_key_pair(b"pw")
    (tmp_path / "k.key").write_bytes(pair.private_pem)
    (tmp_path / "k.pub").write_bytes(pair.public_pem)
    return tmp_path / "k"


@pytest.fixture
def engine(tmp_path):
    """A variant_of recipe and the mirror that serves its artifact: (recipe file, mirror dir)."""
    mirror = tmp_path / "mirror"
    art = mirror / "example.invalid" / "eng" / "engine-2.tar"
    art.parent.mkdir(parents=True)
    art.write_bytes(engine_tar("2"))
    recipe = write_recipe(tmp_path / "eng.json", recipe_doc(
        "att-engine", variant_of="llamacpp", binary="engine", source="https://example.invalid/eng/engine-2.tar",
        sha256="sha256:" + hashlib.sha256(art.read_bytes()).hexdigest(), version_policy="pinned"))
    return recipe, mirror


def _att_blobs(layout, digest):
    tags = layout_tags(layout)
    manifest = json.loads((layout / "blobs" / "sha256" / tags[at.attestation_tag(digest)][7:]).read_bytes())
    return [(layout / "blobs" / "sha256" / l["digest"][7:]).read_bytes() for l in manifest["layers"]]


def test_build_attest_is_reproducible_and_verify_refuses_tampering(engine, key, tmp_path):
    recipe, mirror = engine
    outs = []
    with serve_directory(mirror) as url:
        for name in ("a", "b"):
            out = tmp_path / name
            r = lemonpack("build", str(recipe), "-o", str(out), "--mirror", url, "--no-progress", "--attest",
                          f"{key}.key", "--json", env={**ENV, "LEMONPACK_CACHE_DIR": str(tmp_path / f"cache-{name}")})
            outs.append((out, json.loads(r.stdout)))
    (a, doc), (b, _) = outs
    index = doc["indexes"]["att-engine"]
    assert doc["attestations"][0]["subjects"]["att-engine"] == index
    # two builds (separate caches), byte-identical envelopes and layouts
    assert _att_blobs(a, index) == _att_blobs(b, index)
    assert (a / "index.json").read_bytes() == (b / "index.json").read_bytes()
    for tag in ("att-engine", "att-engine.linux-cpu"):
        ok = lemonpack("verify", "--attestation", f"oci:{a}:{tag}", "--key", f"{key}.pub")
        assert "2 attestation(s) valid" in ok.stdout
    typed = json.loads(lemonpack("verify", "--attestation", "--type", "slsaprovenance", f"oci:{a}:att-engine",
                                 "--key", f"{key}.pub", "--json").stdout)
    assert [v["predicate_type"] for v in typed["verified"]] == ["https://slsa.dev/provenance/v1"]
    # skopeo reads the .att tag of the layout as an OCI image manifest
    raw = subprocess.run([need("skopeo"), "inspect", "--raw", f"oci:{a}:{at.attestation_tag(index)}"],
                         capture_output=True, text=True, check=True).stdout
    assert [l["mediaType"] for l in json.loads(raw)["layers"]] == ["application/vnd.dsse.envelope.v1+json"] * 2
    # tampering: each forged envelope replaces the first under the .att tag; verify exits 3 naming it
    good = [at.Attestation(e, p) for e, p in zip(_att_blobs(a, index), (at.PREDICATE_SLSA_PROVENANCE_V1,
                                                                          at.PREDICATE_SPDX))]
    private = keys.decode_private_key((tmp_path / "k.key").read_bytes(), b"pw")
    for change in ("payload byte", "signature", "subject digest"):
        env = json.loads(good[0].envelope)
        if change == "payload byte":
            raw_payload = base64.b64decode(env["payload"]).replace(b"engine-2.tar", b"engine-3.tar")
            env["payload"] = base64.b64encode(raw_payload).decode()
            forged = at.Attestation(canonical_json(env), good[0].predicate_type)
        elif change == "signature":
            sig = bytearray(base64.b64decode(env["signatures"][0]["sig"]))
            sig[-1] ^= 1
            env["signatures"][0]["sig"] = base64.b64encode(bytes(sig)).decode()
            forged = at.Attestation(canonical_json(env), good[0].predicate_type)
        else:  # a well-signed statement about another image
            stmt = json.loads(base64.b64decode(env["payload"]))
            for s in stmt["subject"]:
                s["digest"]["sha256"] = "e" * 64
            forged = at.sign_statement(private, canonical_json(stmt), good[0].predicate_type)
        at.write_layout_attestations(a, {index: [forged, good[1]]})
        r = lemonpack("verify", "--attestation", f"oci:{a}:att-engine", "--key", f"{key}.pub", check=False)
        assert r.returncode == 3, (change, r.stdout, r.stderr)
        assert "attestation 1 (envelope sha256:" in r.stderr and "Traceback" not in r.stderr
        want = "no subject is" if change == "subject digest" else "does not verify with this key"
        assert want in r.stderr, (change, r.stderr)
    # the other type still verifies alone; the wrong key fails everything
    assert lemonpack("verify", "--attestation", "--type", "spdx", f"oci:{a}:att-engine", "--key",
                     f"{key}.pub").returncode == 0
    other = tmp_path / "o.pub"
    other.write_bytes(keys.generate_key_pair(b"").public_pem)
    assert lemonpack("verify", "--attestation", f"oci:{b}:att-engine", "--key", str(other),
                     check=False).returncode == 3
    usage = lemonpack("verify", "--type", "spdx", f"oci:{b}:att-engine", "--key", str(other), check=False)
    assert usage.returncode == 2


def test_publish_attest_round_trip_in_cosigns_shape(registry, engine, key, tmp_path):
    recipe, mirror = engine
    repo = f"att-{secrets.token_hex(3)}/engine"
    with serve_directory(mirror) as url:
        r = lemonpack("publish", str(recipe), "--to", f"{registry.host}/{repo}:v1", "--mirror", url, "--no-progress",
                      "--attest", f"{key}.key", "--json", env={**ENV, "LEMONPACK_CACHE_DIR": str(tmp_path / "c")})
        built = lemonpack("build", str(recipe), "-o", str(tmp_path / "local"), "--mirror", url, "--no-progress",
                          "--attest", f"{key}.key", "--json",
                          env={**ENV, "LEMONPACK_CACHE_DIR": str(tmp_path / "c2")})
    doc = json.loads(r.stdout)
    subjects = doc["attested"][0]["subjects"]
    assert len(doc["attested"][0]["attached"]) == len(subjects) == 2
    v = json.loads(lemonpack("verify", "--attestation", f"{registry.host}/{repo}:v1", "--key", f"{key}.pub",
                             "--json").stdout)
    assert v["digest"] == subjects["att-engine"] and v["checked"] == 2
    with RegistryClient(registry.host) as client:
        assert sorted(t for t in client.list_tags(repo) if t.endswith(".att")) == \
            sorted(at.attestation_tag(d) for d in subjects.values())
        # the pushed envelopes are the bytes build --attest wrote into a layout
        got = client.get_manifest(repo, at.attestation_tag(subjects["att-engine"]))
        assert got is not None
        local = _att_blobs(tmp_path / "local", json.loads(built.stdout)["indexes"]["att-engine"])
        assert [l["digest"] for l in json.loads(got[0])["layers"]] == \
            ["sha256:" + hashlib.sha256(e).hexdigest() for e in local]
    # skopeo, an independent client, reads the .att manifest in cosign's shape
    raw = subprocess.run([need("skopeo"), "inspect", "--raw", "--tls-verify=false",
                          f"docker://{registry.host}/{repo}:{at.attestation_tag(subjects['att-engine'])}"],
                         capture_output=True, text=True, check=True).stdout
    manifest = json.loads(raw)
    assert manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert manifest["config"]["mediaType"] == "application/vnd.oci.image.config.v1+json"
    assert [(l["mediaType"], l["annotations"]) for l in manifest["layers"]] == [
        ("application/vnd.dsse.envelope.v1+json", {"dev.cosignproject.cosign/signature": "",
                                                   "predicateType": "https://slsa.dev/provenance/v1"}),
        ("application/vnd.dsse.envelope.v1+json", {"dev.cosignproject.cosign/signature": "",
                                                   "predicateType": "https://spdx.dev/Document"})]
    config = json.loads(subprocess.run(
        [need("skopeo"), "inspect", "--raw", "--config", "--tls-verify=false",
         f"docker://{registry.host}/{repo}:{at.attestation_tag(subjects['att-engine'])}"],
        capture_output=True, text=True, check=True).stdout)
    assert config["rootfs"]["diff_ids"] == [l["digest"] for l in manifest["layers"]]
    # publishing again attaches nothing twice
    with serve_directory(mirror) as url:
        again = json.loads(lemonpack("publish", str(recipe), "--to", f"{registry.host}/{repo}:v1", "--mirror", url,
                                     "--no-progress", "--attest", f"{key}.key", "--json",
                                     env={**ENV, "LEMONPACK_CACHE_DIR": str(tmp_path / "c")}).stdout)
    assert [a["attestations"] for a in again["attested"][0]["attached"]] == [2, 2]
    # a layout built with --attest carries its .att tags to a registry when published whole
    whole = f"att-{secrets.token_hex(3)}/whole"
    lemonpack("publish", str(tmp_path / "local"), "--to", f"{registry.host}/{whole}", "--no-progress")
    assert lemonpack("verify", "--attestation", f"{registry.host}/{whole}:att-engine.linux-cpu", "--key",
                     f"{key}.pub").returncode == 0
    # a signature tag and an attestation tag side by side
    lemonpack("sign", f"{registry.host}/{repo}:v1", "--key", f"{key}.key", env=ENV)
    assert lemonpack("verify", f"{registry.host}/{repo}:v1", "--key", f"{key}.pub").returncode == 0
    with RegistryClient(registry.host) as client:
        assert ss.signature_tag(subjects["att-engine"]) in client.list_tags(repo)


def test_publish_attest_refuses_a_layout_and_a_wrong_password_before_pushing(registry, key, tmp_path,
                                                                             example_layout):
    repo = f"att-{secrets.token_hex(3)}/none"
    r = lemonpack("publish", str(example_layout), "--to", f"{registry.host}/{repo}", "--attest", f"{key}.key",
                  env=ENV, check=False)
    assert r.returncode == 2 and "--attest needs a RECIPE.json" in r.stderr
    r = lemonpack("publish", str(example_layout), "--to", f"{registry.host}/{repo}", "--attest", f"{key}.key",
                  env={"LEMONPACK_PASSWORD": "wrong"}, check=False)
    assert r.returncode != 0 and "wrong password" in r.stderr
    out = tmp_path / "never"
    r = lemonpack("build", "--example", "-o", str(out), "--attest", f"{key}.key", env={"LEMONPACK_PASSWORD": "x"},
                  check=False)
    assert r.returncode != 0 and not out.exists()
    with RegistryClient(registry.host) as client:
        assert client.list_tags(repo) == []


def test_a_registry_base_is_a_resolved_dependency_by_reference_and_digest(registry, engine, key, tmp_path):
    from support.oci_base import make_base

    recipe, mirror = engine
    made = make_base(tmp_path / "base")
    repo = f"att-{secrets.token_hex(3)}/base"
    pushed = json.loads(lemonpack("publish", f"{tmp_path / 'base'}:base", "--to", f"{registry.host}/{repo}:v1",
                                  "--json", "--no-progress").stdout)
    base_ref = f"{registry.host}/{repo}@{pushed['pushed'][0]['digest']}"
    out = tmp_path / "out"
    with serve_directory(mirror) as url:
        doc = json.loads(lemonpack("build", str(recipe), "-o", str(out), "--mirror", url, "--no-progress", "--base",
                                   base_ref, "--attest", f"{key}.key", "--json",
                                   env={**ENV, "LEMONPACK_CACHE_DIR": str(tmp_path / "c")}).stdout)
    index = doc["indexes"]["att-engine"]
    prov, sbom = (json.loads(base64.b64decode(json.loads(e)["payload"])) for e in _att_blobs(out, index))
    bd = prov["predicate"]["buildDefinition"]
    assert bd["externalParameters"]["base"] == base_ref
    base_manifest = made["manifests"]["amd64"]
    dep = next(d for d in bd["resolvedDependencies"] if d["digest"] == {"sha256": base_manifest[7:]})
    assert dep["uri"] == f"oci://{dep['name']}" and dep["name"].startswith(f"{registry.host}/{repo}")
    base_pkg = next(p for p in sbom["predicate"]["packages"] if p["name"] == dep["name"])
    assert base_pkg["checksums"] == [{"algorithm": "SHA256", "checksumValue": base_manifest[7:]}]
    assert base_pkg["externalRefs"][0]["referenceLocator"].startswith("pkg:oci/base@sha256%3A")
    from spdx_tools.spdx.parser.jsonlikedict.json_like_dict_parser import JsonLikeDictParser
    from spdx_tools.spdx.validation.document_validator import validate_full_spdx_document

    assert validate_full_spdx_document(JsonLikeDictParser().parse(sbom["predicate"]), "SPDX-2.3") == []
    assert lemonpack("verify", "--attestation", f"oci:{out}:att-engine.linux-cpu", "--key",
                     f"{key}.pub").returncode == 0
