"""`lemonpack sign` / `verify` against a real registry (Debian's docker-registry, tag fallback):
signing twice keeps both signatures, skopeo reads back exactly what we pushed, and every
tampering case fails with its reason."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from lemonpack.oci.mediatypes import MEDIA_TYPE_IMAGE_MANIFEST
from lemonpack.registry import RegistryClient
from lemonpack.signing import simplesigning as ss
from lemonpack.errors import SignatureError
from lemonpack.signing.remote import sign_image, verify_image
from lemonpack.digest import Digest


def digest_of(data: bytes) -> str:
    """``sha256:<hex>`` of ``data``."""
    return str(Digest.of_bytes(data))


from support.trust import push_image  # noqa: E402 (one one-layer image pusher for the suite)

PASSWORD = "correct horse"




@pytest.fixture
def image(registry):
    """``(client, repo, ref, digest)``: a pushed image in a repository of its own."""
    repo = f"signing/test-{secrets.token_hex(4)}"
    client = RegistryClient(registry.host)
    digest = push_image(client, repo, "v1", b"layer of " + repo.encode())
    try:
        yield client, repo, f"{registry.host}/{repo}:v1", digest
    finally:
        client.close()


def new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def cli(*args: str, cwd: Path, password: str | None = PASSWORD) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "LEMONPACK_PASSWORD"}
    if password is not None:
        env["LEMONPACK_PASSWORD"] = password
    return subprocess.run([sys.executable, "-c", "from lemonpack.cli import main; main()", *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def rewrite_signatures(client, repo, tag, edit) -> None:
    """Replace the signature manifest under ``tag`` with ``edit(layers) -> layers`` (blobs pushed)."""
    data, _, _ = client.get_manifest(repo, tag)
    layers = edit(ss.parse_signature_manifest(data))
    manifest, config = ss.build_signature_manifest(layers)
    client.push_blob(repo, config, digest_of(config), len(config))
    client.put_manifest(repo, tag, manifest, MEDIA_TYPE_IMAGE_MANIFEST)


def push_payload(client, repo, payload: bytes) -> tuple[str, int]:
    client.push_blob(repo, payload, digest_of(payload), len(payload))
    return digest_of(payload), len(payload)


# ---------------------------------------------------------------- the CLI, end to end

def test_keygen_sign_verify_with_the_cli_and_skopeo_sees_our_bytes(image, tmp_path, registry):
    client, repo, ref, digest = image
    assert cli("keygen", "--out", "me", cwd=tmp_path).returncode == 0
    r = cli("sign", ref, "--key", "me.key", "-a", "commit=abc", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    done = json.loads(r.stdout)
    assert done["digest"] == digest and done["signature_tag"] == ss.signature_tag(digest)
    for key in ("me.pub", "me.key"):  # a public key PEM, or the private key file (password needed)
        r = cli("verify", ref, "--key", key, "--json", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert out["digest"] == digest
        assert out["verified"] == [{"payload_digest": done["payload_digest"],
                                    "docker_reference": f"{registry.host}/{repo}", "optional": {"commit": "abc"}}]
    # an independent tool reads back the signature manifest byte for byte, and the payload layer
    raw = subprocess.run(["skopeo", "inspect", "--raw", "--tls-verify=false",
                          f"docker://{registry.host}/{repo}:{done['signature_tag']}"],
                         capture_output=True, check=True, timeout=60).stdout
    assert digest_of(raw) == done["signature_manifest"]
    layer, = json.loads(raw)["layers"]
    assert layer["mediaType"] == "application/vnd.dev.cosign.simplesigning.v1+json"
    assert set(layer["annotations"]) == {"dev.cosignproject.cosign/signature"}
    payload_doc = {"critical": {"identity": {"docker-reference": f"{registry.host}/{repo}"},
                                "image": {"docker-manifest-digest": digest},
                                "type": "cosign container image signature"}, "optional": {"commit": "abc"}}
    assert layer["digest"] == digest_of(json.dumps(payload_doc, separators=(",", ":")).encode())


def test_cli_verify_failures_exit_3_naming_why(image, tmp_path):
    client, repo, ref, digest = image
    assert cli("keygen", "--out", "a", cwd=tmp_path).returncode == 0
    assert cli("keygen", "--out", "b", cwd=tmp_path).returncode == 0
    r = cli("verify", ref, "--key", "a.pub", cwd=tmp_path)
    assert r.returncode == 3 and "no signature" in r.stderr and ss.signature_tag(digest) in r.stderr
    assert cli("sign", ref, "--key", "a.key", cwd=tmp_path).returncode == 0
    r = cli("verify", ref, "--key", "b.pub", "--json", cwd=tmp_path)
    assert r.returncode == 3
    err = json.loads(r.stdout)
    assert err["error"] == "signature" and err["reason"] == "bad-signature"
    assert "does not verify with this key" in err["details"][0]
    r = cli("sign", ref, "--key", "a.key", cwd=tmp_path, password="wrong")
    assert r.returncode == 1 and "wrong password" in r.stderr and "wrong" not in r.stderr.replace("wrong password", "")
    assert "Traceback" not in r.stderr


# ---------------------------------------------------------------- the library, case by case

def test_signing_twice_keeps_both_signatures(image):
    client, repo, ref, digest = image
    k1, k2 = new_key(), new_key()
    assert sign_image(ref, k1, client=client)["signatures"] == 1
    assert sign_image(ref, k2, client=client)["signatures"] == 2
    assert sign_image(ref, k1, client=client)["signatures"] == 3
    for k in (k1, k2):
        assert verify_image(ref, k.public_key(), client=client)["checked"] == 3
    assert len(verify_image(ref, k1.public_key(), client=client)["verified"]) == 2


def test_missing_signature(image):
    client, repo, ref, digest = image
    with pytest.raises(SignatureError) as e:
        verify_image(ref, new_key().public_key(), client=client)
    assert e.value.reason == "no-signature" and e.value.exit_code == 3


def test_another_key(image):
    client, repo, ref, digest = image
    sign_image(ref, new_key(), client=client)
    with pytest.raises(SignatureError) as e:
        verify_image(ref, new_key().public_key(), client=client)
    assert e.value.reason == "bad-signature"


def test_modified_payload(image):
    client, repo, ref, digest = image
    key = new_key()
    sign_image(ref, key, client=client)
    forged = ss.make_payload("evil.example/x", digest)  # same image, another identity, old signature kept
    d, n = push_payload(client, repo, forged)
    rewrite_signatures(client, repo, ss.signature_tag(digest),
                       lambda ls: [ss.SignatureLayer(d, n, ls[0].signature, ls[0].annotations)])
    with pytest.raises(SignatureError) as e:
        verify_image(ref, key.public_key(), client=client)
    assert e.value.reason == "bad-signature"


def test_modified_annotation(image):
    client, repo, ref, digest = image
    key = new_key()
    sign_image(ref, key, client=client)
    other = ss.sign_payload(key, b"something else")  # a genuine signature, over other bytes

    def swap(ls):
        return [ss.SignatureLayer(ls[0].digest, ls[0].size, other, {ss.SIGNATURE_ANNOTATION: other})]
    rewrite_signatures(client, repo, ss.signature_tag(digest), swap)
    with pytest.raises(SignatureError) as e:
        verify_image(ref, key.public_key(), client=client)
    assert e.value.reason == "bad-signature"


def test_signature_for_another_image(image, registry):
    client, repo, ref, digest = image
    key = new_key()
    other_digest = push_image(client, repo, "v2", b"another layer")
    sign_image(f"{registry.host}/{repo}:v2", key, client=client)
    # copy v2's signature manifest to v1's signature tag: it verifies, but signs v2
    data, media_type, _ = client.get_manifest(repo, ss.signature_tag(other_digest))
    client.put_manifest(repo, ss.signature_tag(digest), data, media_type)
    with pytest.raises(SignatureError) as e:
        verify_image(ref, key.public_key(), client=client)
    assert e.value.reason == "digest-mismatch"
    assert other_digest in str(e.value) and digest in str(e.value)


def test_manifest_changed_after_signing(image, registry):
    client, repo, ref, digest = image
    key = new_key()
    sign_image(ref, key, client=client)
    assert verify_image(ref, key.public_key(), client=client)["digest"] == digest
    new_digest = push_image(client, repo, "v1", b"replaced behind the signer's back")
    with pytest.raises(SignatureError) as e:
        verify_image(ref, key.public_key(), client=client)
    assert e.value.reason == "no-signature" and new_digest in str(e.value)
    # the signed digest itself still verifies
    assert verify_image(f"{registry.host}/{repo}@{digest}", key.public_key(), client=client)["digest"] == digest
