"""The trust check's I/O against a real registry: a tag resolved once and the reference used by
the digest judged (a tag moved afterwards changes nothing), container argvs judged image by
image, the refusal's one line, and no policy at all said once."""

from __future__ import annotations

import json

import pytest

from lemonpack.errors import TrustError
from lemonpack.registry import RegistryClient
from lemonpack.trust import check as chk
from lemonpack.trust.check import Trust, enforce_argv, enforce_reference
from support.trust import key_data, push_image, write_policy


def _policy(world, tmp_path, scopes=None):
    doc = {"default": [{"type": "reject"}], "transports": {"docker": scopes or {
        f"{world.host}/ns/team": [{"type": "sigstoreSigned", "keyData": key_data(world.keys["a"]),
                                   "signedIdentity": {"type": "matchRepository"}}]}}}
    return write_policy(tmp_path / "policy.json", doc)


@pytest.mark.slow
def test_the_reference_is_used_by_the_digest_judged_even_when_the_tag_moves(trust_world, tmp_path):
    w = trust_world
    policy = _policy(w, tmp_path)
    with RegistryClient(w.host) as c:
        signed = push_image(c, "ns/team/moving", "latest", b"signed moving image")
        from lemonpack.signing.remote import sign_image

        sign_image(f"{w.host}/ns/team/moving@{signed}", w.keys["a"], client=c)
        trust = Trust.load(policy, w.registries["on"])
        use = trust.enforce(f"{w.host}/ns/team/moving:latest", use="pull")
        assert use == f"{w.host}/ns/team/moving@{signed}"
        unsigned = push_image(c, "ns/team/moving", "latest", b"an unsigned image under the same tag")
        assert c.get_manifest("ns/team/moving", "latest")[2] == unsigned != signed
        # what was checked is what is used: the digest, not the tag
        assert use.endswith(signed)
        with pytest.raises(TrustError) as exc:
            trust.enforce(f"{w.host}/ns/team/moving:latest", use="pull")
    line = str(exc.value)
    assert "\n" not in line and line.startswith(f"pull: {w.host}/ns/team/moving:latest: rejected by the trust "
                                                f"policy {policy} (scope transports.docker[")
    assert "no signature exists" in line and exc.value.exit_code == 3
    assert exc.value.to_json()["verdict"]["scope"] == f'transports.docker["{w.host}/ns/team"]'


@pytest.mark.slow
def test_a_container_argv_is_judged_image_by_image(trust_world, tmp_path):
    w = trust_world
    trust = Trust.load(_policy(w, tmp_path), w.registries["on"])
    good = f"{w.host}/ns/team/app@{w.digests[f'{w.host}/ns/team/app:v1']}"
    argv = ("podman", "run", "--rm", "--name", "x", good, "serve")
    assert enforce_argv(argv, trust) == argv
    tagged = ("podman", "run", "--rm", f"{w.host}/ns/team/app:v1")
    assert enforce_argv(tagged, trust)[-1] == good
    bad = f"{w.host}/ns/team/unsigned@{w.digests[f'{w.host}/ns/team/unsigned:v1']}"
    with pytest.raises(TrustError, match="no signature exists"):
        enforce_argv(("podman", "run", "--mount", f"type=image,source={bad},target=/m", good), trust)
    assert enforce_argv(("/usr/bin/llama-server", "-m", "x.gguf"), trust) == ("/usr/bin/llama-server", "-m", "x.gguf")


def test_no_policy_anywhere_is_said_once(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(chk, "policy_candidates", lambda: (tmp_path / "a.json", tmp_path / "b.json"))
    monkeypatch.setattr("lemonpack.trust.policy.SYSTEM_POLICY", tmp_path / "b.json")
    monkeypatch.setattr(chk, "_SAID", set())
    ref = "127.0.0.1:1/ns/app:v1"
    assert enforce_reference(ref) == ref and enforce_reference(ref) == ref
    err = capsys.readouterr().err
    assert err.count("no containers-policy.json") == 1 and str(tmp_path / "b.json") in err


def test_a_rejecting_scope_asks_no_registry(tmp_path):
    policy = write_policy(tmp_path / "p.json", {"default": [{"type": "reject"}]})
    # port 1 has no registry: a verdict that needed one would fail to connect
    verdict = Trust.load(policy, tmp_path / "rd").check("127.0.0.1:1/ns/app:v1")
    assert not verdict.allowed and json.dumps(verdict.to_json())


@pytest.mark.parametrize("ref", ["127.0.0.1:1/ns/app@sha256:" + "a" * 64, "127.0.0.1:1/ns/app:v1"])
def test_a_sigstore_key_that_cannot_be_read_is_named_with_the_policy_file(tmp_path, ref):
    """A missing keyPath file refuses the image naming the key and the policy file (not
    "sigstore attachments are off"), before any registry is asked (port 1 has none)."""
    missing = tmp_path / "no-such.pub"
    policy = write_policy(tmp_path / "p.json", {"default": [{"type": "reject"}], "transports": {"docker": {
        "127.0.0.1:1/ns": [{"type": "sigstoreSigned", "keyPath": str(missing),
                            "signedIdentity": {"type": "matchRepository"}}]}}})
    verdict = Trust.load(policy, tmp_path / "rd").check(ref)
    assert not verdict.allowed
    assert "keyPath" in verdict.reason and str(missing) in verdict.reason and str(policy) in verdict.reason
    assert "No such file" in verdict.reason and "attachments" not in verdict.reason
    with pytest.raises(TrustError, match="keyPath"):
        Trust.load(policy, tmp_path / "rd").enforce(ref)


def test_named_is_none_without_options_and_reads_a_named_file_at_once(tmp_path):
    from lemonpack.errors import PolicyFileError

    assert Trust.named(None, None) is None  # each use then reads the default places when it needs them
    missing = tmp_path / "nope.json"
    with pytest.raises(PolicyFileError, match=str(missing)):
        Trust.named(missing, None)
    good = write_policy(tmp_path / "p.json", {"default": [{"type": "reject"}]})
    trust = Trust.named(good, None)
    assert trust is not None and trust.policy is not None and trust.policy.file == str(good)


def test_enforce_reports_every_verdict_reached(tmp_path):
    seen = []
    trust = Trust.load(write_policy(tmp_path / "p.json", {"default": [{"type": "reject"}]}), tmp_path)
    with pytest.raises(TrustError):
        enforce_argv(["podman", "run", "r.example/a/b@sha256:" + "cd" * 32], trust, on_verdict=seen.append)
    assert [(v.allowed, v.scope) for v in seen] == [(False, "default")]
