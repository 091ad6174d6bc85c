"""Images, keys, policies and skopeo's verdict for the trust-policy tests (:mod:`lemonpack.trust`).

- :func:`push_image`: a one-layer image pushed under a tag, its manifest digest returned;
- :func:`write_policy`, :func:`write_registries_d`: a containers-policy.json and a
  containers-registries.d directory in a test's directory;
- :func:`skopeo_verdict`: what real ``skopeo copy --policy FILE --registries.d DIR`` decides
  for a reference in the local registry (the oracle for scopes, ``reject``,
  ``insecureAcceptAnything``, malformed files: the environment notes of this project says which).
"""

from __future__ import annotations

import base64
import json
import subprocess
import tempfile
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from lemonpack.canonical import canonical_json
from lemonpack.digest import Digest
from lemonpack.oci.mediatypes import MEDIA_TYPE_IMAGE_CONFIG, MEDIA_TYPE_IMAGE_MANIFEST, MEDIA_TYPE_LAYER_TAR
from lemonpack.signing.keys import encode_public_key


def push_image(client, repo: str, tag: str, content: bytes) -> str:
    """Push a one-layer image whose layer is ``content`` under ``repo:tag``; return its digest."""
    def digest_of(data: bytes) -> str:
        return str(Digest.of_bytes(data))

    config = canonical_json({"architecture": "amd64", "os": "linux",
                             "rootfs": {"type": "layers", "diff_ids": [digest_of(content)]}})
    for blob in (content, config):
        client.push_blob(repo, blob, digest_of(blob), len(blob))
    manifest = canonical_json({"schemaVersion": 2, "mediaType": MEDIA_TYPE_IMAGE_MANIFEST,
                               "config": {"mediaType": MEDIA_TYPE_IMAGE_CONFIG, "digest": digest_of(config),
                                          "size": len(config)},
                               "layers": [{"mediaType": MEDIA_TYPE_LAYER_TAR, "digest": digest_of(content),
                                           "size": len(content)}]})
    return client.put_manifest(repo, tag, manifest, MEDIA_TYPE_IMAGE_MANIFEST)


def new_key() -> ec.EllipticCurvePrivateKey:
    """A fresh ECDSA P-256 key (cosign's key type)."""
    return ec.generate_private_key(ec.SECP256R1())


def key_data(key: ec.EllipticCurvePrivateKey) -> str:
    """The policy's ``keyData`` of ``key``'s public half: base64 of its PEM."""
    return base64.b64encode(encode_public_key(key.public_key())).decode("ascii")


def write_policy(path: Path, doc: dict | str) -> Path:
    """Write ``doc`` (a dict, or raw text for a malformed file) as a policy file at ``path``."""
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def write_registries_d(directory: Path, doc: dict | None) -> Path:
    """A registries.d directory holding ``doc`` as ``lemonpack.yaml`` (None: an empty one)."""
    import yaml

    directory.mkdir(parents=True, exist_ok=True)
    if doc is not None:
        (directory / "lemonpack.yaml").write_text(yaml.safe_dump(doc))
    return directory


def skopeo_verdict(ref: str, policy: Path, registries_d: Path) -> tuple[bool, str]:
    """``(accepted, stderr)`` of ``skopeo copy --policy P --registries.d D docker://REF dir:TMP``
    against the local (plain http) registry."""
    with tempfile.TemporaryDirectory(prefix="lp-skopeo-") as out:
        proc = subprocess.run(["skopeo", "copy", "--quiet", "--policy", str(policy), "--registries.d",
                               str(registries_d), "--src-tls-verify=false", f"docker://{ref}", f"dir:{out}"],
                              capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    return proc.returncode == 0, proc.stderr.strip()


class TrustWorld:
    """A local registry with signed and unsigned images, three keys and three registries.d
    directories, shared by a module's table of cases.

    ``host``; images (``ref`` text → digest in ``digests``): ``{host}/ns/team/app:v1`` signed
    with ``keys["a"]``, ``{host}/ns/team/app:v2`` unsigned, ``{host}/ns/team/unsigned:v1``
    unsigned, ``{host}/ns/mirror/app:v1`` signed with ``keys["a"]``; ``keys``: ``a``, ``b``,
    ``c``; ``registries``: ``on`` (attachments on for the host), ``off`` (no setting),
    ``repo-off`` (on in ``default-docker``, off for ``ns/team/app``)."""

    def __init__(self, root: Path, registry) -> None:
        from lemonpack.registry import RegistryClient
        from lemonpack.signing.remote import sign_image

        self.root, self.host = root, registry.host
        self.keys = {name: new_key() for name in "abc"}
        self.digests: dict[str, str] = {}
        with RegistryClient(self.host) as client:
            for repo, tag, signed in (("ns/team/app", "v1", True), ("ns/team/app", "v2", False),
                                      ("ns/team/unsigned", "v1", False), ("ns/mirror/app", "v1", True)):
                ref = f"{self.host}/{repo}:{tag}"
                self.digests[ref] = push_image(client, repo, tag, f"layer of {ref}".encode())
                if signed:
                    sign_image(ref, self.keys["a"], client=client)
        self.registries = {
            "on": write_registries_d(root / "rd-on", {"docker": {self.host: {"use-sigstore-attachments": True}}}),
            "off": write_registries_d(root / "rd-off", None),
            "repo-off": write_registries_d(root / "rd-repo-off", {
                "default-docker": {"use-sigstore-attachments": True},
                "docker": {f"{self.host}/ns/team/app": {"use-sigstore-attachments": False}}}),
        }


@pytest.fixture(scope="module")
def trust_world(tmp_path_factory):
    """A :class:`TrustWorld` on its own running local registry (module-scoped)."""
    from support.registry import LocalRegistry

    root = tmp_path_factory.mktemp("trust")
    with LocalRegistry(root / "registry") as reg:
        yield TrustWorld(root, reg)
