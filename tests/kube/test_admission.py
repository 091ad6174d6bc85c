"""``kube generate --admission FILE``: the trust policy's rules for the file's images as sigstore
policy-controller ClusterImagePolicy objects, checked against the shape of policy-controller's
CRD (``config/300-clusterimagepolicy.yaml`` of sigstore/policy-controller, read at commit
d0ac6a35: the properties lemonpack writes, transcribed below with no others allowed), and
``--admission-format kyverno``: a Kyverno ClusterPolicy checked against Kyverno's CRD
(``config/crds/kyverno/kyverno.io_clusterpolicies.yaml`` of kyverno/kyverno, read at commit
111e07bb: version v1's openAPIV3Schema, the path lemonpack writes transcribed below with the
CRD's types, enums, defaults, ``maxLength``/``minimum`` and ``required``;
``additionalProperties: false`` is ours, so a misspelt field fails). kubernetes-validate knows
only the built-in kinds, not ClusterPolicy: the CRD schema is the oracle here."""

from __future__ import annotations

import json

import jsonschema
import pytest
import yaml

from lemonpack.cli import main
from lemonpack.signing.keys import encode_public_key
from support.kube import GPU_FORK
from support.trust import key_data

_KEY = {"type": "object", "additionalProperties": False, "properties": {
    "data": {"type": "string"}, "hashAlgorithm": {"type": "string"}, "kms": {"type": "string"},
    "secretRef": {"type": "object"}}}
#: The CRD's openAPIV3Schema (v1beta1) for what lemonpack writes; additionalProperties is ours.
CIP = {"type": "object", "required": ["apiVersion", "kind", "metadata", "spec"], "properties": {
    "apiVersion": {"const": "policy.sigstore.dev/v1beta1"}, "kind": {"const": "ClusterImagePolicy"},
    "metadata": {"type": "object", "required": ["name"]},
    "spec": {"type": "object", "additionalProperties": False, "properties": {
        "mode": {"enum": ["enforce", "warn"]},
        "images": {"type": "array", "items": {"type": "object", "additionalProperties": False,
                                              "properties": {"glob": {"type": "string"}}}},
        "authorities": {"type": "array", "items": {"type": "object", "additionalProperties": False, "properties": {
            "name": {"type": "string"}, "key": _KEY, "static": {
                "type": "object", "additionalProperties": False,
                "properties": {"action": {"enum": ["pass", "fail"]}}},
            "ctlog": {"type": "object"}, "keyless": {"type": "object"}, "source": {"type": "array"},
            "attestations": {"type": "array"}}}},
        "match": {"type": "array"}, "policy": {"type": "object"}}}}}


_KYVERNO_KEYS = {"type": "object", "additionalProperties": False, "properties": {
    "ctlog": {"type": "object", "additionalProperties": False, "properties": {
        "ignoreSCT": {"type": "boolean"}, "pubkey": {"type": "string"}, "tsaCertChain": {"type": "string"}}},
    "kms": {"type": "string"}, "publicKeys": {"type": "string"},
    "rekor": {"type": "object", "additionalProperties": False, "properties": {
        "ignoreTlog": {"type": "boolean"}, "pubkey": {"type": "string"}, "url": {"type": "string"}}},
    "secret": {"type": "object", "required": ["name", "namespace"]},
    "signatureAlgorithm": {"type": "string"}}}
#: Kyverno's CRD (v1) for what lemonpack writes: spec.rules[].{name, match.any[].resources.kinds,
#: verifyImages[].{imageReferences, failureAction, mutateDigest, verifyDigest, required,
#: attestors[].{count, entries[].keys}}}.
KYVERNO = {"type": "object", "required": ["apiVersion", "kind", "metadata", "spec"], "properties": {
    "apiVersion": {"const": "kyverno.io/v1"}, "kind": {"const": "ClusterPolicy"},
    "metadata": {"type": "object", "required": ["name"]},
    "spec": {"type": "object", "additionalProperties": False, "properties": {
        "validationFailureAction": {"enum": ["audit", "enforce", "Audit", "Enforce"], "type": "string"},
        "background": {"type": "boolean"},
        "rules": {"type": "array", "items": {
            "type": "object", "required": ["match", "name"], "additionalProperties": False, "properties": {
                "name": {"type": "string", "maxLength": 63},
                "match": {"type": "object", "additionalProperties": False, "properties": {
                    "any": {"type": "array", "items": {"type": "object", "additionalProperties": False, "properties": {
                        "resources": {"type": "object", "additionalProperties": False, "properties": {
                            "kinds": {"type": "array", "items": {"type": "string"}}}}}}}}},
                "verifyImages": {"type": "array", "items": {
                    "type": "object", "additionalProperties": False, "properties": {
                        "imageReferences": {"type": "array", "items": {"type": "string"}},
                        "failureAction": {"enum": ["Audit", "Enforce"], "type": "string"},
                        "mutateDigest": {"type": "boolean"}, "verifyDigest": {"type": "boolean"},
                        "required": {"type": "boolean"},
                        "type": {"enum": ["Cosign", "SigstoreBundle", "Notary"], "type": "string"},
                        "attestors": {"type": "array", "items": {
                            "type": "object", "additionalProperties": False, "properties": {
                                "count": {"type": "integer", "minimum": 1},
                                "entries": {"type": "array", "items": {
                                    "type": "object", "additionalProperties": False, "properties": {
                                        "keys": _KYVERNO_KEYS}}}}}}}}}}}}}}}}


@pytest.fixture
def setup(trust_world, kube_env, tmp_path, monkeypatch):
    w = trust_world
    home = tmp_path / "home"
    conf = home / ".config" / "containers"
    conf.mkdir(parents=True)
    (conf / "registries.d").symlink_to(w.registries["on"])
    monkeypatch.setenv("HOME", str(home))
    kube_env.descriptor(GPU_FORK)
    kube_env.register("user.qwen", "llamacpp-gpu", "qwen.gguf")

    def generate(capsys, scopes: dict, image: str, *more: str) -> tuple[int, str, list[dict]]:
        (conf / "policy.json").write_text(json.dumps({"default": [{"type": "reject"}],
                                                      "transports": {"docker": scopes}}))
        adm = tmp_path / "admission.yaml"
        code = main(["kube", "generate", "user.qwen", "--accelerator", "cuda:sm_89", "--image",
                     f"llamacpp-gpu={image}", "--out", str(tmp_path / "engines.yaml"), "--admission", str(adm),
                     *more])
        err = capsys.readouterr().err
        return code, err, list(yaml.safe_load_all(adm.read_text())) if adm.exists() else []
    return w, generate


@pytest.mark.slow
def test_a_key_requirement_becomes_a_key_authority_for_exactly_that_image(setup, capsys):
    w, generate = setup
    image = f"{w.host}/ns/team/app@{w.digests[f'{w.host}/ns/team/app:v1']}"
    scopes = {f"{w.host}/ns/team": [{"type": "sigstoreSigned", "keyData": key_data(w.keys["a"]),
                                     "signedIdentity": {"type": "matchRepository"}}]}
    code, err, docs = generate(capsys, scopes, image)
    assert code == 0, err
    assert len(docs) == 1
    jsonschema.validate(docs[0], CIP)
    spec = docs[0]["spec"]
    assert spec["mode"] == "enforce" and spec["images"] == [{"glob": image}]
    assert spec["authorities"] == [{"name": "key-1", "key": {
        "data": encode_public_key(w.keys["a"].public_key()).decode(), "hashAlgorithm": "sha256"}}]
    assert docs[0]["metadata"]["annotations"]["lemonpack.dev/scope"] == f'transports.docker["{w.host}/ns/team"]'


@pytest.mark.slow
def test_an_accepting_scope_is_a_static_pass(setup, capsys):
    w, generate = setup
    image = f"{w.host}/ns/mirror/app@{w.digests[f'{w.host}/ns/mirror/app:v1']}"
    code, err, docs = generate(capsys, {f"{w.host}/ns/mirror": [{"type": "insecureAcceptAnything"}]}, image)
    assert code == 0, err
    jsonschema.validate(docs[0], CIP)
    assert docs[0]["spec"]["authorities"] == [{"name": "accept", "static": {"action": "pass"}}]


@pytest.mark.slow
def test_a_rule_policy_controller_cannot_say_writes_nothing(setup, capsys, tmp_path):
    w, generate = setup
    image = f"{w.host}/ns/team/app@{w.digests[f'{w.host}/ns/team/app:v1']}"
    req = {"type": "sigstoreSigned", "keyData": key_data(w.keys["a"]), "signedIdentity": {"type": "matchRepository"}}
    code, err, docs = generate(capsys, {f"{w.host}/ns/team": [req, req]}, image)
    assert code == 1 and "2 signature requirements" in err and docs == []
    assert not (tmp_path / "engines.yaml").exists()


def _pem(key) -> str:
    return encode_public_key(key.public_key()).decode()


@pytest.mark.slow
def test_kyverno_format_is_a_verify_images_rule_with_any_one_of_the_keys(setup, capsys):
    w, generate = setup
    image = f"{w.host}/ns/team/app@{w.digests[f'{w.host}/ns/team/app:v1']}"
    scopes = {f"{w.host}/ns/team": [{"type": "sigstoreSigned", "keyDatas": [key_data(w.keys["b"]), key_data(w.keys["a"])],
                                     "signedIdentity": {"type": "matchRepository"}}]}
    code, err, docs = generate(capsys, scopes, image, "--admission-format", "kyverno")
    assert code == 0, err
    assert len(docs) == 1
    jsonschema.validate(docs[0], KYVERNO)
    (rule,) = docs[0]["spec"]["rules"]
    assert docs[0]["spec"]["validationFailureAction"] == "Enforce"  # mutateDigest is refused under Audit
    assert rule["match"] == {"any": [{"resources": {"kinds": ["Pod"]}}]}
    (vi,) = rule["verifyImages"]
    assert vi["imageReferences"] == [image]
    assert (vi["mutateDigest"], vi["verifyDigest"], vi["required"], vi["failureAction"]) == (True, True, True, "Enforce")
    (attestor,) = vi["attestors"]
    assert attestor["count"] == 1  # any one key, as keyDatas
    assert [e["keys"]["publicKeys"] for e in attestor["entries"]] == [_pem(w.keys["b"]), _pem(w.keys["a"])]
    assert all(e["keys"]["rekor"] == {"ignoreTlog": True} and e["keys"]["ctlog"] == {"ignoreSCT": True}
               for e in attestor["entries"])
    assert f'transports.docker["{w.host}/ns/team"]' in docs[0]["metadata"]["annotations"]["lemonpack.dev/scopes"]


def test_the_kyverno_schema_transcription_catches_a_misspelt_field():
    """The transcribed CRD part is not vacuous: a field the CRD does not have fails."""
    doc = {"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "x"}, "spec": {"rules": [
        {"name": "r", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
         "verifyImages": [{"imageReferences": ["a/b@sha256:0"], "mutateDigests": True}]}]}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, KYVERNO)
    doc["spec"]["rules"][0]["verifyImages"][0] = {"imageReferences": ["a/b"], "attestors": [{"count": 0}]}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, KYVERNO)


def test_kubernetes_validate_does_not_know_the_kyverno_kind():
    """Why the CRD transcription is the oracle: kubernetes-validate has the built-in kinds only."""
    import kubernetes_validate

    with pytest.raises(kubernetes_validate.SchemaNotFoundError):
        kubernetes_validate.validate({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
                                      "metadata": {"name": "x"}, "spec": {}}, "1.30", strict=True)


@pytest.mark.slow
def test_kyverno_format_writes_no_rule_for_an_accepting_scope(setup, capsys, tmp_path):
    w, generate = setup
    image = f"{w.host}/ns/mirror/app@{w.digests[f'{w.host}/ns/mirror/app:v1']}"
    code, err, docs = generate(capsys, {f"{w.host}/ns/mirror": [{"type": "insecureAcceptAnything"}]}, image,
                               "--admission-format", "kyverno")
    assert code == 0, err
    assert docs == [] and "nothing to enforce" in (tmp_path / "admission.yaml").read_text()


@pytest.mark.slow
def test_kyverno_format_refuses_what_kyverno_cannot_say_and_an_unknown_format(setup, capsys, tmp_path):
    w, generate = setup
    image = f"{w.host}/ns/team/app@{w.digests[f'{w.host}/ns/team/app:v1']}"
    req = {"type": "sigstoreSigned", "keyData": key_data(w.keys["a"]), "signedIdentity": {"type": "matchRepository"}}
    code, err, docs = generate(capsys, {f"{w.host}/ns/team": [req, req]}, image, "--admission-format", "kyverno")
    assert code == 1 and "2 signature requirements" in err and docs == [], err
    assert not (tmp_path / "engines.yaml").exists()
    code, err, docs = generate(capsys, {f"{w.host}/ns/team": [req]}, image, "--admission-format", "gatekeeper")
    assert code == 2 and "--admission-format" in err and docs == [] and not (tmp_path / "engines.yaml").exists()
