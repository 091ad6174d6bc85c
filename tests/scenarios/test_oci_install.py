"""`lemonpack install oci://HOST/REPO@sha256:...` from a real registry (what `lemonpack build`
wrote and publish_layout pushed): round trip with a receipt, signature required with --key,
a failure mid-way (a corrupted blob in the registry's storage; a failing swap) leaves the
previous install intact; `lemonpack uninstall`; a system descriptor is refused."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from support.registry import engine_tar, variant_layout

from lemonpack import files
from lemonpack.oci.reference import parse_registry_reference
from lemonpack.registry import RegistryClient
from lemonpack.registry.transfer import publish_layout
from lemonpack.builder import ociinstall
from lemonpack.signing import keys
from lemonpack.signing.remote import sign_image


@pytest.fixture
def published(registry, tmp_path, monkeypatch):
    """``{version: reference@digest}`` of two builds of one recipe pushed to the registry, and a private cache."""
    monkeypatch.setenv("LEMONPACK_CACHE_DIR", str(tmp_path / "cache"))
    recipe = f"oci-inst-{secrets.token_hex(3)}"
    repo = f"signing/{recipe}"
    refs = {}
    with RegistryClient(registry.host) as client:
        for version in ("1", "2"):
            layout = variant_layout(tmp_path, recipe, version)
            res = publish_layout(layout, parse_registry_reference(f"{registry.host}/{repo}:v{version}"), client, tag=recipe)
            refs[version] = f"oci://{registry.host}/{repo}@{res.pushed[0].digest}"
    return recipe, refs, tmp_path


def cli(*args: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from lemonpack.cli import main; main()", *args],
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
                          env={**os.environ, **(env_extra or {})})


def installed(recipe: str, tmp: Path) -> tuple[str, dict]:
    ext = tmp / "cache" / "external"
    return (ext / recipe / "VERSION").read_text(), json.loads((ext / f"{recipe}.install.json").read_text())


def test_install_round_trip_receipt_and_uninstall(published):
    recipe, refs, tmp = published
    r = cli("install", refs["1"], "--yes", "--json")
    assert r.returncode == 0, r.stderr
    done = json.loads(r.stdout)
    version, receipt = installed(recipe, tmp)
    assert version == "1" and receipt == done
    assert receipt["from"]["reference"] == refs["1"].removeprefix("oci://")
    assert receipt["from"]["digest"] == refs["1"].rsplit("@", 1)[1]
    assert receipt["sha256"] == "sha256:" + hashlib.sha256(engine_tar("1")).hexdigest()
    engine = tmp / "cache" / "external" / recipe / "engine"
    assert subprocess.run([str(engine)], capture_output=True, text=True).stdout == "engine 1\n"
    # upgrade in place
    assert cli("install", refs["2"], "--yes").returncode == 0
    assert installed(recipe, tmp)[0] == "2"
    assert [p.name for p in (tmp / "cache" / "external").iterdir() if p.name.startswith(".")] == []
    # uninstall removes both; a second time says it is not installed
    r = cli("uninstall", recipe, "--json")
    assert r.returncode == 0, r.stderr
    assert not (tmp / "cache" / "external" / recipe).exists()
    assert not (tmp / "cache" / "external" / f"{recipe}.install.json").exists()
    r = cli("uninstall", recipe)
    assert r.returncode == 1 and "is not installed" in r.stderr


def test_install_with_key_requires_a_valid_signature(published, registry):
    recipe, refs, tmp = published
    pair = keys.generate_key_pair(b"")
    (tmp / "k.pub").write_bytes(pair.public_pem)
    r = cli("install", refs["1"], "--yes", "--key", str(tmp / "k.pub"))
    assert r.returncode == 3 and "no signature" in r.stderr
    assert not (tmp / "cache" / "external" / recipe).exists()
    sign_image(refs["1"], keys.decode_private_key(pair.private_pem, b""))
    r = cli("install", refs["1"], "--yes", "--key", str(tmp / "k.pub"), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["from"]["signature"] == {"verified": 1, "checked": 1}
    other = keys.generate_key_pair(b"")
    (tmp / "other.pub").write_bytes(other.public_pem)
    r = cli("install", refs["1"], "--yes", "--key", str(tmp / "other.pub"))
    assert r.returncode == 3 and "does not verify with this key" in r.stderr


def test_corrupted_blob_in_the_registry_leaves_the_previous_install(published, registry):
    recipe, refs, tmp = published
    assert cli("install", refs["1"], "--yes").returncode == 0
    before = installed(recipe, tmp)
    # corrupt every blob of the registry's storage that only the second build has (its layers)
    store = registry.storage / "docker" / "registry" / "v2" / "blobs" / "sha256"
    datas = {p.parent.name: p for p in store.glob("*/*/data")}
    layout1 = tmp / "layout-1" / "blobs" / "sha256"
    changed = 0
    for hexd, p in datas.items():
        # not the manifests: the registry parses those itself (a corrupt one is its HTTP 500, not bytes
        # for lemonpack to check; a size bound no longer told them apart once manifests carried annotations)
        if not (layout1 / hexd).exists() and b'"schemaVersion"' not in p.read_bytes():
            data = bytearray(p.read_bytes())
            data[len(data) // 2] ^= 0xFF
            p.write_bytes(bytes(data))
            changed += 1
    assert changed
    r = cli("install", refs["2"], "--yes")
    assert r.returncode == 3 and "sha256 mismatch" in r.stderr, r.stderr
    assert installed(recipe, tmp) == before
    assert [p.name for p in (tmp / "cache").iterdir() if p.name.startswith(".")] == []


def test_a_failing_swap_leaves_the_previous_install(published, monkeypatch):
    recipe, refs, tmp = published
    assert cli("install", refs["1"], "--yes").returncode == 0
    before = installed(recipe, tmp)

    def broken(a, b):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(files, "exchange", broken)  # the one renameat2 exchange replace_directory makes
    with pytest.raises(Exception) as e:
        ociinstall.install_from_registry(refs["2"])
    assert e.value.exit_code == 1 and "No space left" in str(e.value)
    assert installed(recipe, tmp) == before
    assert [p.name for p in (tmp / "cache" / "external").iterdir() if p.name.startswith(".")] == []


def test_install_needs_a_digest_and_uninstall_refuses_a_system_descriptor(published, tmp_path):
    recipe, refs, tmp = published
    tagged = refs["1"].rsplit("@", 1)[0] + ":v1"
    r = cli("install", tagged, "--yes")
    assert r.returncode == 1 and "needs a digest" in r.stderr
    system = tmp_path / "system-backends"
    system.mkdir()
    doc = {"recipe": "sys-engine", "display_name": "system", "api_contract_version": "1",
           "capabilities": ["chat_completion"], "platforms": {"linux": {"cpu": {"command": "/bin/true", "args": []}}}}
    (system / "sys-engine.json").write_text(json.dumps(doc))
    os.chmod(system / "sys-engine.json", 0o644)
    kept = tmp / "cache" / "external" / "sys-engine"
    kept.mkdir(parents=True)
    r = cli("uninstall", "sys-engine", env_extra={"LEMONPACK_BACKENDS_PATH": f"system:{system}"})
    assert r.returncode == 1 and "system descriptor" in r.stderr, r.stderr
    assert kept.is_dir()


def test_install_refuses_an_image_for_another_cpu(published):
    """Issue 29: the published image is amd64 (its config's architecture); an arm64 host (host
    facts) is refused naming both, and nothing is installed."""
    recipe, refs, tmp = published
    r = cli("install", refs["1"], "--yes", env_extra={"LEMONPACK_HOST_FACTS": json.dumps(
        {"os": "linux", "cpu_arch": "arm64"})})
    assert r.returncode == 1
    assert "the image of target linux-cpu is for amd64, not this host's CPU arm64" in " ".join(r.stderr.split())
    assert not (tmp / "cache" / "external" / recipe).exists()
