"""containers-policy.json(5) read strictly: what is accepted, what rejects the whole file (naming
the file and the field), and where the file is found (containers/image's policy_config.go)."""

from __future__ import annotations

import json

import pytest

from lemonpack.errors import PolicyFileError
from lemonpack.trust import policy as pol
from lemonpack.trust.policy import (Identity, InsecureAcceptAnything, Reject, SigstoreSigned, Unsupported,
                                    find_policy_file, parse_policy)

KEY = "LS0tLS1CRUdJTiBQVUJMSUMgS0VZLS0tLS0K"  # base64 of a PEM header: parsed, read only when evaluated


def parse(doc) -> pol.Policy:
    return parse_policy(doc if isinstance(doc, str) else json.dumps(doc), "p.json")


def refused(doc) -> str:
    with pytest.raises(PolicyFileError) as exc:
        parse(doc)
    assert exc.value.exit_code == 3
    return str(exc.value)


def test_a_full_policy_reads_into_typed_requirements():
    p = parse({"default": [{"type": "reject"}], "transports": {
        "docker": {"": [{"type": "insecureAcceptAnything"}],
                   "r.example:5000/ns": [{"type": "sigstoreSigned", "keyData": KEY}],
                   "r.example:5000/ns/app": [{"type": "sigstoreSigned", "keyPaths": ["/a.pub", "/b.pub"],
                                              "signedIdentity": {"type": "matchRepository"}}],
                   "*.example.com": [{"type": "signedBy", "keyType": "GPGKeys", "keyPath": "/k.gpg"}]},
        "dir": {"": [{"type": "insecureAcceptAnything"}]}}})
    assert p.default == (Reject(),) and p.transports == ("docker", "dir")
    assert p.docker[""] == (InsecureAcceptAnything(),)
    req = p.docker["r.example:5000/ns"][0]
    assert isinstance(req, SigstoreSigned) and req.identity == Identity("matchRepoDigestOrExact")
    assert [k.field for k in req.keys] == ["keyData"] and req.keys[0].data.startswith(b"-----BEGIN")
    paths = p.docker["r.example:5000/ns/app"][0]
    assert [k.path for k in paths.keys] == ["/a.pub", "/b.pub"] and paths.identity.type == "matchRepository"
    assert p.docker["*.example.com"] == (Unsupported("signedBy", "GPG signatures (signedBy)"),)


@pytest.mark.parametrize("identity", [
    {"type": "matchExact"}, {"type": "matchRepoDigestOrExact"}, {"type": "matchRepository"},
    {"type": "exactReference", "dockerReference": "r.example/app:v1"},
    {"type": "exactRepository", "dockerRepository": "r.example/app"},
    {"type": "remapIdentity", "prefix": "mirror.example/vendor", "signedPrefix": "vendor.example"},
])
def test_every_signed_identity_form_reads(identity):
    p = parse({"default": [{"type": "sigstoreSigned", "keyData": KEY, "signedIdentity": identity}]})
    assert p.default[0].identity.to_json() == identity


@pytest.mark.parametrize("doc, message", [
    ('{"default": [{"type": "reject"}], "default": []}', "duplicate"),
    ({"default": [{"type": "reject"}], "transport": {}}, "p.json: transport: unknown field"),
    ({"transports": {}}, '"default" policy is missing'),
    ({"default": []}, "p.json: default: the list of requirements must not be empty"),
    ({"default": {"type": "reject"}}, "default: expected an array of requirements"),
    ({"default": [{"type": "reject", "x": 1}]}, "default[0].x: unknown field"),
    ({"default": [{}]}, "default[0].type: missing"),
    ({"default": [{"type": "sigstoreSigned"}]}, "exactly one of keyPath, keyPaths, keyData, keyDatas"),
    ({"default": [{"type": "sigstoreSigned", "keyPath": "/a", "keyPaths": ["/b"]}]}, "(found keyPath, keyPaths)"),
    ({"default": [{"type": "sigstoreSigned", "keyData": "%%%"}]}, "default[0].keyData: not valid base64"),
    ({"default": [{"type": "sigstoreSigned", "keyDatas": []}]}, "default[0].keyDatas: must not be empty"),
    ({"default": [{"type": "sigstoreSigned", "keyPaths": ["/a", 3]}]}, "keyPaths[1]: expected a string"),
    ({"default": [{"type": "sigstoreSigned", "keyData": KEY, "signedIdentity": {"type": "matchAll"}}]},
     "unknown policy reference match type 'matchAll'"),
    ({"default": [{"type": "sigstoreSigned", "keyData": KEY,
                   "signedIdentity": {"type": "exactReference", "dockerReference": "r.example/app"}}]},
     "contains neither a tag nor digest"),
    ({"default": [{"type": "sigstoreSigned", "fulcio": {"caPath": "/c"}}]}, "rekorPublicKey"),
    ({"default": [{"type": "signedBy", "keyType": "X509", "keyPath": "/k"}]}, "invalid keyType"),
    ({"default": [{"type": "reject"}], "transports": {"docker": {"example*.*.com": [{"type": "reject"}]}}},
     'transports.docker["example*.*.com"]'),
    ({"default": [{"type": "reject"}], "transports": {"docker": {"*.example.com:5000": [{"type": "reject"}]}}},
     "no port"),
    ({"default": [{"type": "reject"}], "transports": {"docker": {"r.example/App": [{"type": "reject"}]}}},
     "lowercase"),
    ({"default": [{"type": "reject"}], "transports": {"docker": {"busybox/x": [{"type": "reject"}]}}},
     "names no registry host"),
    ({"default": [{"type": "reject"}], "transports": {"dir": {"/x": []}}}, 'transports.dir["/x"]'),
])
def test_an_invalid_field_rejects_the_whole_file_naming_it(doc, message):
    text = refused(doc)
    assert message in text and "p.json" in text


def test_the_file_is_found_as_podman_finds_it(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(pol, "SYSTEM_POLICY", tmp_path / "etc-policy.json")
    assert find_policy_file() is None
    (tmp_path / "etc-policy.json").write_text("{}")
    assert find_policy_file() == tmp_path / "etc-policy.json"
    user = tmp_path / ".config" / "containers" / "policy.json"
    user.parent.mkdir(parents=True)
    user.write_text("{}")
    assert find_policy_file() == user
    assert find_policy_file(tmp_path / "etc-policy.json") == tmp_path / "etc-policy.json"
    with pytest.raises(PolicyFileError, match="policy file not found"):
        find_policy_file(tmp_path / "missing.json")
