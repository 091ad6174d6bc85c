"""registry.transfer's pull as the user sees it, against the real registry: a tag the registry
does not have is "no such image" (exit 1, as every not-found), and what a merge kept is counted
in good English."""

from __future__ import annotations

import json
import secrets
import time

import pytest

from lemonpack.digest import Digest
from lemonpack.oci.reference import parse_registry_reference
from lemonpack.registry import RegistryClient
from lemonpack.registry.transfer import publish_layout
from support.registry import layout_tags, lemonpack
from support.trust import key_data, new_key, write_policy, write_registries_d

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("args", [("pull", "docker.io", "--out", "x"), ("publish", "docker.io", "--to", "docker.io"),
                                  ("install", "oci://docker.io"), ("policy", "check", "docker.io"),
                                  ("models", "pull", "docker.io"), ("models", "inspect", "docker.io"),
                                  ("models", "pin", "oci://docker.io")])
def test_a_bare_registry_host_is_said_to_name_no_repository_by_every_command(args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = lemonpack(*args, check=False)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "'docker.io' is a registry host with no repository; write docker.io/NAMESPACE/REPO[:TAG]" in r.stderr
    assert "library/docker.io" not in r.stderr and "Traceback" not in r.stderr


def test_pulling_a_tag_the_registry_does_not_have_is_no_such_image(registry, tmp_path):
    ref = f"{registry.host}/nope-{secrets.token_hex(3)}/app:v1"
    out = tmp_path / "out"
    r = lemonpack("pull", ref, "--out", str(out), "--insecure", check=False)
    assert r.returncode == 1, (r.stdout, r.stderr)  # NotFoundError's code (lemonpack.errors), not fetch's 4
    assert f"no such image: {ref} (the registry answered MANIFEST_UNKNOWN)" in r.stderr
    assert "HTTP 404" not in r.stderr and "Traceback" not in r.stderr and not out.exists()
    doc = json.loads(lemonpack("pull", ref, "--out", str(out), "--insecure", "--json", check=False).stdout)
    assert doc["error"] == "not-found" and ref in doc["message"]


def test_a_missing_tag_is_no_such_image_when_the_trust_policy_asks_for_a_signature_first(registry, tmp_path):
    # the trust check resolves the tag before the pull does: its 404 is the same "no such image"
    ref = f"{registry.host}/nope-{secrets.token_hex(3)}/app:v1"
    policy = write_policy(tmp_path / "policy.json", {"default": [{"type": "reject"}], "transports": {"docker": {
        registry.host: [{"type": "sigstoreSigned", "keyData": key_data(new_key()),
                         "signedIdentity": {"type": "matchRepository"}}]}}})
    registries_d = write_registries_d(tmp_path / "rd", {"docker": {registry.host: {"use-sigstore-attachments": True}}})
    r = lemonpack("pull", ref, "--out", str(tmp_path / "out"), "--insecure", "--policy", str(policy),
                  "--registries.d", str(registries_d), check=False)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert f"no such image: {ref} (the registry answered MANIFEST_UNKNOWN)" in r.stderr, r.stderr
    assert "HTTP 404" not in r.stderr and "Traceback" not in r.stderr and not (tmp_path / "out").exists()


def test_a_pull_into_a_layout_counts_the_tags_it_kept(registry, example_layout, tmp_path):
    repo = f"kept-{secrets.token_hex(3)}/app"
    image_tag = next(t for t in layout_tags(example_layout) if "." in t)
    with RegistryClient(registry.host) as client:
        for tag in ("a", "b", "c"):
            publish_layout(example_layout, parse_registry_reference(f"{registry.host}/{repo}:{tag}"), client, tag=image_tag)
    out = tmp_path / "out"
    lines = [lemonpack("pull", f"{registry.host}/{repo}:{tag}", "--out", str(out), "--insecure").stdout
             for tag in ("a", "b", "c")]
    assert "(1 other tag kept)" in lines[1] and "tags kept" not in lines[1]
    assert "(2 other tags kept)" in lines[2]


def test_a_pulled_layout_blob_is_recorded_with_the_facts_from_before_its_hash(tmp_path, monkeypatch):
    """registry.transfer: a blob found in the layout is recorded under the facts taken before
    _holds hashed it, so one changed before the pull's end is hashed again next time."""
    from lemonpack.oci.descriptor import Descriptor
    from lemonpack.registry import transfer

    monkeypatch.setenv("LEMONPACK_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "layout"
    data = b"layer bytes"
    desc = Descriptor("application/octet-stream", str(Digest.of_bytes(data)), len(data))
    blob = out / "blobs" / "sha256" / desc.hex
    blob.parent.mkdir(parents=True)
    blob.write_bytes(data)
    checked = transfer._Checked(out)
    assert transfer._holds(blob, desc, checked)
    time.sleep(0.03)
    blob.write_bytes(b"LAYER BYTES")  # changed after it was hashed, before the pull ends
    checked.save([])
    again = transfer._Checked(out)
    assert not again.unchanged(blob, desc) and not transfer._holds(blob, desc, again)
    blob.write_bytes(data)
    assert transfer._holds(blob, desc, again) and again.unchanged(blob, desc)
