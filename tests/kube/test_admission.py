"""``kube generate --admission FILE``: the trust policy's rules for the file's images as sigstore
policy-controller ClusterImagePolicy objects, checked against the shape of policy-controller's
CRD (``config/300-clusterimagepolicy.yaml`` of sigstore/policy-controller, read at commit
d0ac6a35: the properties lemonpack writes, transcribed below with no others allowed)."""

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

    def generate(capsys, scopes: dict, image: str) -> tuple[int, str, list[dict]]:
        (conf / "policy.json").write_text(json.dumps({"default": [{"type": "reject"}],
                                                      "transports": {"docker": scopes}}))
        adm = tmp_path / "admission.yaml"
        code = main(["kube", "generate", "user.qwen", "--accelerator", "cuda:sm_89", "--image",
                     f"llamacpp-gpu={image}", "--out", str(tmp_path / "engines.yaml"), "--admission", str(adm)])
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
