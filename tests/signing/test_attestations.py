"""signing/attestations.py: cosign's ``sha256-<hex>.att`` in a layout and a registry, and
what ``verify --attestation`` accepts and refuses (each tampering an attacker with write access
to the layout or the repository could do)."""

from __future__ import annotations

import base64
import json
import secrets
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from lemonpack.canonical import canonical_json
from lemonpack.errors import SignatureError, UsageError
from lemonpack.oci.layout import LayoutWriter
from lemonpack.registry import RegistryClient
from lemonpack.signing import attestations as at
from lemonpack.signing import dsse
from lemonpack.signing import simplesigning as ss
from support.registry import layout_tags

KEY = ec.derive_private_key(99991, ec.SECP256R1())
OTHER = ec.derive_private_key(31337, ec.SECP256R1())


def _layout(root: Path) -> tuple[Path, str]:
    out = root / "layout"
    with LayoutWriter(out) as lw:
        layer = lw.add_blob_bytes("application/vnd.oci.image.layer.v1.tar", b"\0" * 1024)
        image = lw.add_image_manifest({"architecture": "amd64", "os": "linux"}, [layer], created=0)
        lw.set_tags({"img": image})
    return out, image.digest


def _statement(digest: str, predicate_type: str = at.PREDICATE_SLSA_PROVENANCE_V1) -> bytes:
    return canonical_json({"_type": at.STATEMENT_TYPE, "predicateType": predicate_type, "predicate": {"x": 1},
                           "subject": [{"name": "img", "digest": {"sha256": digest.split(":")[1]}}]})


def _attest(layout: Path, digest: str, *atts: at.Attestation) -> None:
    at.write_layout_attestations(layout, {digest: list(atts)})


def _good(digest: str) -> list[at.Attestation]:
    return [at.sign_statement(KEY, _statement(digest), at.PREDICATE_SLSA_PROVENANCE_V1),
            at.sign_statement(KEY, _statement(digest, at.PREDICATE_SPDX), at.PREDICATE_SPDX)]


def test_tags_and_types():
    assert at.attestation_tag("sha256:" + "a" * 64) == "sha256-" + "a" * 64 + ".att"
    with pytest.raises(ValueError):
        at.attestation_tag("latest")
    assert at.predicate_type_uri("slsaprovenance") == at.predicate_type_uri("slsaprovenance1") == \
        "https://slsa.dev/provenance/v1"
    assert at.predicate_type_uri("spdx") == "https://spdx.dev/Document"
    assert at.predicate_type_uri("https://example.org/p/v1") == "https://example.org/p/v1"
    with pytest.raises(UsageError):
        at.predicate_type_uri("cyclonedx")


def test_a_layout_holds_cosigns_att_manifest_and_it_verifies(tmp_path):
    layout, digest = _layout(tmp_path)
    _attest(layout, digest, *_good(digest))
    tags = layout_tags(layout)
    assert set(tags) == {"img", at.attestation_tag(digest)}
    manifest = json.loads((layout / "blobs" / "sha256" / tags[at.attestation_tag(digest)][7:]).read_bytes())
    assert [(l["mediaType"], l["annotations"]) for l in manifest["layers"]] == [
        ("application/vnd.dsse.envelope.v1+json", {"dev.cosignproject.cosign/signature": "",
                                                   "predicateType": "https://slsa.dev/provenance/v1"}),
        ("application/vnd.dsse.envelope.v1+json", {"dev.cosignproject.cosign/signature": "",
                                                   "predicateType": "https://spdx.dev/Document"})]
    done = at.verify_attestations(f"oci:{layout}:img", KEY.public_key())
    assert done["digest"] == digest and done["checked"] == 2
    assert [v["predicate_type"] for v in done["verified"]] == [at.PREDICATE_SLSA_PROVENANCE_V1, at.PREDICATE_SPDX]
    only = at.verify_attestations(f"oci:{layout}:img", KEY.public_key(), predicate_type=at.PREDICATE_SPDX)
    assert [v["predicate_type"] for v in only["verified"]] == [at.PREDICATE_SPDX]


def _forged(att: at.Attestation, change: str, digest: str) -> at.Attestation:
    doc = json.loads(att.envelope)
    if change == "payload byte":
        raw = bytearray(base64.b64decode(doc["payload"]))
        raw[raw.index(b'"x":1') + 4] = ord("2")
        doc["payload"] = base64.b64encode(bytes(raw)).decode()
    elif change == "signature":
        raw = bytearray(base64.b64decode(doc["signatures"][0]["sig"]))
        raw[-1] ^= 1
        doc["signatures"][0]["sig"] = base64.b64encode(bytes(raw)).decode()
    elif change == "subject digest":  # the old signature over a statement naming another image
        doc["payload"] = base64.b64encode(_statement("sha256:" + "e" * 64)).decode()
    elif change == "subject digest, re-signed":  # a valid signature, but about another image
        return at.sign_statement(KEY, _statement("sha256:" + "e" * 64), att.predicate_type)
    elif change == "another key":
        return at.sign_statement(OTHER, _statement(digest), att.predicate_type)
    elif change == "payload type":
        return at.Attestation(dsse.sign_envelope(KEY, _statement(digest), "application/json"), att.predicate_type)
    elif change == "statement type":
        bad = json.loads(_statement(digest))
        bad["_type"] = "https://in-toto.io/Statement/v0.1"
        return at.sign_statement(KEY, canonical_json(bad), att.predicate_type)
    elif change == "predicateType annotation":
        return at.Attestation(att.envelope, at.PREDICATE_SPDX)
    return at.Attestation(canonical_json(doc), att.predicate_type)


@pytest.mark.parametrize("change, reason", [
    ("payload byte", "bad-signature"), ("signature", "bad-signature"), ("subject digest", "bad-signature"),
    ("subject digest, re-signed", "digest-mismatch"), ("another key", "bad-signature"),
    ("payload type", "bad-payload"), ("statement type", "bad-payload"), ("predicateType annotation", "bad-payload"),
])
def test_every_tampering_is_refused_naming_the_envelope(tmp_path, change, reason):
    layout, digest = _layout(tmp_path)
    good = _good(digest)
    _attest(layout, digest, _forged(good[0], change, digest), good[1])
    with pytest.raises(SignatureError) as exc:
        at.verify_attestations(f"oci:{layout}:img", KEY.public_key())
    assert exc.value.reason == reason and exc.value.exit_code == 3
    assert "attestation 1 (envelope sha256:" in str(exc.value) and "1 of 2 failed" in str(exc.value)


def test_no_attestation_or_none_of_the_type(tmp_path):
    layout, digest = _layout(tmp_path)
    with pytest.raises(SignatureError, match="no attestation for") as exc:
        at.verify_attestations(f"oci:{layout}:img", KEY.public_key())
    assert exc.value.reason == "no-signature"
    _attest(layout, digest, _good(digest)[0])
    with pytest.raises(SignatureError, match="no attestation of type https://spdx.dev/Document"):
        at.verify_attestations(f"oci:{layout}:img", KEY.public_key(), predicate_type=at.PREDICATE_SPDX)


@pytest.mark.slow
def test_attach_to_a_registry_appends_once_and_verifies(registry, tmp_path):
    layout, digest = _layout(tmp_path)
    repo = f"att-{secrets.token_hex(3)}/img"
    with RegistryClient(registry.host) as client:
        from lemonpack.oci.reference import parse_registry_reference
        from lemonpack.registry.transfer import publish_layout

        publish_layout(layout, parse_registry_reference(f"{registry.host}/{repo}"), client, tag="img")
        good = _good(digest)
        first = at.attach_attestations(client, repo, digest, good[:1])
        again = at.attach_attestations(client, repo, digest, good)  # the first is there already
        assert (first["attestations"], again["attestations"]) == (1, 2)
        assert at.attach_attestations(client, repo, digest, good)["manifest"] == again["manifest"]
        done = at.verify_attestations(f"{registry.host}/{repo}:img", KEY.public_key(), client=client)
        assert done["checked"] == 2 and done["attestation_tag"] == at.attestation_tag(digest)
        # a signature tag holds simple-signing layers: never rewritten as attestations
        payload = ss.make_payload(f"{registry.host}/{repo}", digest)
        sig_layer = ss.SignatureLayer(ss.Digest.of_bytes(payload).__str__(), len(payload), "x", {})
        manifest, config = ss.build_signature_manifest([sig_layer])
        for blob in (payload, config):
            client.push_blob(repo, blob, str(ss.Digest.of_bytes(blob)), len(blob))
        client.put_manifest(repo, at.attestation_tag(digest), manifest, "application/vnd.oci.image.manifest.v1+json")
        from lemonpack.errors import RegistryError

        with pytest.raises(RegistryError, match="not DSSE envelopes"):
            at.attach_attestations(client, repo, digest, good)
