"""publish / pull against the real docker-registry, judged by skopeo and podman."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import subprocess
import threading

import pytest

from lemonpack.errors import FetchError
from lemonpack.oci.layout import LayoutWriter
from lemonpack.oci.layout_reader import verify_layout
from lemonpack.oci.reference import parse_registry_reference
from lemonpack.registry import RegistryClient
from lemonpack.registry.transfer import publish_layout
from support.registry import layout_tags, lemonpack
from support.tools import need

pytestmark = pytest.mark.slow


def _blobs(layout):
    return sorted(p.name for p in (layout / "blobs" / "sha256").iterdir())


def _reachable(layout, digest):
    """Blob names reachable from ``digest`` in ``layout`` (manifests, configs, layers)."""
    seen, todo = set(), [digest]
    while todo:
        hexd = todo.pop().split(":")[1]
        if hexd in seen:
            continue
        seen.add(hexd)
        try:
            doc = json.loads((layout / "blobs" / "sha256" / hexd).read_bytes())
        except ValueError:
            continue
        if isinstance(doc, dict) and "schemaVersion" in doc:
            todo += [d["digest"] for d in doc.get("manifests", []) + doc.get("layers", [])]
            todo += [doc["config"]["digest"]] if "config" in doc else []
    return sorted(seen)


def test_publish_then_pull_gives_the_same_digests_and_skopeo_agrees(registry, example_layout, tmp_path):
    repo = f"reg-{secrets.token_hex(3)}/hello"
    out = lemonpack("publish", str(example_layout), "--to", f"{registry.host}/{repo}", "--json", "--no-progress")
    pushed = {p["tag"]: p["digest"] for p in json.loads(out.stdout)["pushed"]}
    assert pushed == layout_tags(example_layout)

    # skopeo sees exactly our manifest bytes (its digest is the local one)
    need("skopeo")
    for tag, digest in pushed.items():
        raw = subprocess.run(["skopeo", "inspect", "--raw", "--tls-verify=false",
                              f"docker://{registry.host}/{repo}:{tag}"], capture_output=True, check=True).stdout
        assert "sha256:" + hashlib.sha256(raw).hexdigest() == digest
        assert raw == (example_layout / "blobs" / "sha256" / digest.split(":")[1]).read_bytes()

    # pull the index back (by tag) and the image (by digest): same digests, same blobs, verified
    lemonpack("pull", f"{registry.host}/{repo}:hello-engine", "--out", str(tmp_path / "back"))
    assert layout_tags(tmp_path / "back") == {"hello-engine": pushed["hello-engine"]}
    assert _blobs(tmp_path / "back") == _reachable(example_layout, pushed["hello-engine"])
    verify_layout(tmp_path / "back")
    image = pushed["hello-engine.linux-cpu"]
    lemonpack("pull", f"{registry.host}/{repo}@{image}", "--out", str(tmp_path / "img"), "--tag", "x")
    assert layout_tags(tmp_path / "img") == {"x": image}

    # a second publish sends no blob bytes and no manifests
    again = json.loads(lemonpack("publish", str(example_layout), "--to", f"{registry.host}/{repo}", "--json",
                                 "--no-progress").stdout)
    assert again["bytes_sent"] == 0 and again["blobs_uploaded"] == 0 and again["manifests_sent"] == 0

    # one tag under another name, blobs mounted from the first repository: still no bytes
    other = json.loads(lemonpack("publish", f"{example_layout}:hello-engine", "--to",
                                 f"{registry.host}/{repo}-copy:v1", "--mount-from", repo, "--json",
                                 "--no-progress").stdout)
    assert other["bytes_sent"] == 0 and other["blobs_mounted"] > 0
    assert other["pushed"] == [{"tag": "v1", "digest": pushed["hello-engine"], "source": "hello-engine",
                                "mediaType": "application/vnd.oci.image.index.v1+json",
                                "size": other["pushed"][0]["size"]}]


def test_published_image_runs_in_podman(registry, podman_env, tmp_path):
    """The busybox image ``lemonpack build`` wrote for the container tests: published, copied by
    skopeo from the registry into containers-storage (same digest), run by podman."""
    need("skopeo")
    env = podman_env["env"]
    layout = podman_env["dir"] / "layout"
    tag = next(t for t in layout_tags(layout) if "." in t)  # <recipe>.<target>: the image
    repo = f"reg-{secrets.token_hex(3)}/run"
    lemonpack("publish", f"{layout}:{tag}", "--to", f"{registry.host}/{repo}:v1")
    name = f"localhost/lemonpack-reg-test-{secrets.token_hex(4)}:v1"
    subprocess.run(["skopeo", "copy", "--src-tls-verify=false", f"docker://{registry.host}/{repo}:v1",
                    f"containers-storage:{name}"], check=True, capture_output=True, env=env, timeout=300)
    try:
        digest = subprocess.run(["podman", "image", "inspect", "--format", "{{.Digest}}", name], check=True,
                                capture_output=True, text=True, env=env).stdout.strip()
        assert digest == layout_tags(layout)[tag]
        bb = "/opt/lemonpack/bb-artifact/busybox"
        run = subprocess.run(["podman", "run", "--rm", "--network", "none", "--entrypoint", bb, name,
                              "echo", "published"], capture_output=True, text=True, env=env, timeout=120)
        assert run.returncode == 0, run.stderr
        assert run.stdout.strip() == "published"
    finally:
        subprocess.run(["podman", "rmi", "-f", name], capture_output=True, env=env)


def _big_layout(path, size):
    blob = path.parent / "big.bin"
    with open(blob, "wb") as f:
        for _ in range(size >> 20):
            f.write(os.urandom(1 << 20))
    with LayoutWriter(path) as lw:
        layer = lw.add_blob_file("application/vnd.oci.image.layer.v1.tar", blob)
        art = lw.add_artifact_manifest("application/vnd.lemonpack.test.v1", [layer])
        lw.set_tags({"big": art})
    return path


def test_interrupted_push_fails_cleanly_and_a_rerun_succeeds(registry, tmp_path):
    layout = _big_layout(tmp_path / "layout", 48 << 20)
    dest = parse_registry_reference(f"{registry.host}/reg-{secrets.token_hex(3)}/big:v1")
    client = RegistryClient(registry.host, retries=1, backoff=0.05, chunk_size=4 << 20)
    killed = threading.Event()

    def watch():
        while not killed.is_set():
            if client.stats.bytes_sent > 12 << 20:
                registry.stop(hard=True)
                killed.set()
            killed.wait(0.005)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    with pytest.raises(FetchError):
        publish_layout(layout, dest, client)
    killed.set()
    watcher.join()
    registry.start()
    assert RegistryClient(registry.host).head_manifest(dest.repository, "v1") is None  # nothing tagged
    result = publish_layout(layout, dest, RegistryClient(registry.host, chunk_size=4 << 20))
    assert result.pushed[0].digest == layout_tags(layout)["big"]
    out = lemonpack("pull", str(dest), "--out", str(tmp_path / "back"))
    assert out.returncode == 0 and _blobs(tmp_path / "back") == _blobs(layout)


def test_auth_from_a_config_file(auth_registry, example_layout, tmp_path):
    (user, password), = auth_registry.users.items()
    dest = f"{auth_registry.host}/reg-{secrets.token_hex(3)}/auth"
    denied = lemonpack("publish", str(example_layout), "--to", dest, check=False,
                       env={"REGISTRY_AUTH_FILE": str(tmp_path / "none.json"), "HOME": str(tmp_path)})
    assert denied.returncode == 4 and "needs credentials" in denied.stderr
    cfg = tmp_path / "auth.json"
    cfg.write_text(json.dumps({"auths": {auth_registry.host: {
        "auth": base64.b64encode(f"{user}:{password}".encode()).decode()}}}))
    ok = lemonpack("publish", str(example_layout), "--to", dest, "--json", env={"REGISTRY_AUTH_FILE": str(cfg)})
    assert password not in ok.stdout + ok.stderr
    pushed = {p["tag"]: p["digest"] for p in json.loads(ok.stdout)["pushed"]}
    assert pushed == layout_tags(example_layout)
    lemonpack("pull", f"{dest}:hello-engine", "--out", str(tmp_path / "back"), "--registry-config", str(cfg),
              env={"HOME": str(tmp_path)})
    cfg.write_text(json.dumps({"auths": {auth_registry.host: {
        "auth": base64.b64encode(f"{user}:wrong".encode()).decode()}}}))
    bad = lemonpack("pull", f"{dest}:hello-engine", "--out", str(tmp_path / "bad"), check=False,
                    env={"REGISTRY_AUTH_FILE": str(cfg)})
    assert bad.returncode == 4 and "access denied" in bad.stderr and not (tmp_path / "bad").exists()
