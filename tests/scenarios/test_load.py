"""`lemonpack load`: an image `lemonpack build` wrote goes into podman (podman-py against a
`podman system service` the command starts itself) and into a Docker-API engine (the Docker
SDK against podman's compatible API) with its digest kept; then `lemonpack run` launches it
by digest. A layout with a corrupted blob loads nothing.

slow: real podman + runc and a busybox image built by `lemonpack build` under a unique
recipe name (so its config, hence its image ID, is new to podman's storage), removed at the end.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from support.containers import TestImage, lemonpack_built_image, remove_image
from support.helpers import RunProcess, free_port

from lemonpack.oci.layout_reader import read_layout
from lemonpack.builder.load import podman_service

pytestmark = pytest.mark.slow


def podman(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=120)


def lemonpack(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from lemonpack.cli import main; main()", *args],
                          capture_output=True, text=True, timeout=300, env=env, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def built(podman_conf):
    """``(layout, tag, image)``: a fresh lemonpack-built layout, absent from podman's storage."""
    d = podman_conf["dir"]
    recipe = f"bb-load-{secrets.token_hex(3)}"
    image = lemonpack_built_image(d, dict(os.environ), recipe=recipe)
    remove_image(image)  # the helper loads it with skopeo; we want `lemonpack load` to do it
    layout = d / "layout"
    tag = next(t for t, desc in read_layout(layout).items() if desc.media_type.endswith("manifest.v1+json"))
    config_id = image_config_id(layout, tag)
    assert podman("image", "exists", config_id).returncode == 1, "the test image is already in podman's storage"
    names: list[str] = []
    try:
        yield layout, tag, image, names
    finally:
        for n in names:
            podman("rmi", "-f", n)


def image_config_id(layout: Path, tag: str) -> str:
    desc = read_layout(layout)[tag]
    manifest = json.loads((layout / "blobs" / "sha256" / desc.hex).read_bytes())
    return manifest["config"]["digest"].split(":", 1)[1]


def test_load_into_podman_keeps_the_digest_and_lemonpack_run_launches_it_by_digest(built, tmp_path):
    layout, tag, image, names = built
    name = f"localhost/lemonpack-load-{secrets.token_hex(3)}"
    r = lemonpack("load", f"{layout}:{tag}", "--name", name, "--json")
    assert r.returncode == 0, r.stderr
    names.append(f"{name}:{tag}")
    done = json.loads(r.stdout)
    manifest_digest = read_layout(layout)[tag].digest
    assert done["manifest_digest"] == manifest_digest
    assert done["image_id"] == done["config_digest"] == "sha256:" + image_config_id(layout, tag)
    assert done["reference"] == f"{name}@{manifest_digest}"
    # podman itself (not our SDK client) sees the image by digest with the same ID
    inspect = podman("image", "inspect", "--format", "{{.Id}} {{.Digest}}", done["reference"])
    assert inspect.returncode == 0, inspect.stderr
    assert inspect.stdout.split() == [image_config_id(layout, tag), manifest_digest]
    # no service left behind
    assert not any(p.name.startswith("lemonpack-podman-") for p in Path("/tmp").iterdir()
                   if (p / "podman.sock").exists())
    # lemonpack run launches the loaded image by digest (a container recipe, health-probed)
    loaded = TestImage(done["reference"], image.shell, image.bb, image.www, image.ready, "lemonpack load")
    recipe = tmp_path / "loaded.json"
    recipe.write_text(json.dumps({
        "recipe": "bb-loaded", "display_name": "busybox loaded by lemonpack load", "api_contract_version": "1",
        "capabilities": ["chat_completion"],
        "health_probe": {"type": "http", "endpoint": "/cgi-bin/health", "expected_status": 200,
                         "timeout_seconds": 60, "poll_interval_ms": 100},
        "platforms": {"linux": {"cpu": {
            "command": "podman",
            "args": ["run", "--rm", "--name", "lemonpack-{recipe}-{port}", "--network", "host", loaded.ref,
                     *loaded.shell, loaded.command("{port}", 0, "{host}")],
            "stop_command": "podman", "stop_command_args": ["rm", "-f", "-t", "0", "lemonpack-{recipe}-{port}"]}}}}))
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    port = free_port()
    run = RunProcess([str(recipe), "--model", str(model), "--port", str(port)],
                     {"LEMONPACK_CACHE_DIR": str(tmp_path / "c"), "LEMONPACK_CONFIG_DIR": str(tmp_path / "f")})
    try:
        assert run.wait_line("ready: ", timeout=90), "".join(run.stderr)
    finally:
        run.proc.send_signal(signal.SIGINT)
        assert run.finish() == 130
    assert podman("container", "exists", f"lemonpack-bb-loaded-{port}").returncode == 1


def test_load_through_the_docker_api_of_podman(built):
    import docker

    layout, tag, image, names = built
    name = f"localhost/lemonpack-load-docker-{secrets.token_hex(3)}"
    with podman_service() as url:
        r = lemonpack("load", f"{layout}:{tag}", "--engine", "docker", "--url", url, "--name", name, "--json")
        assert r.returncode == 0, r.stderr
        names.append(f"{name}:{tag}")
        done = json.loads(r.stdout)
        assert done["image_id"] == "sha256:" + image_config_id(layout, tag)
        client = docker.DockerClient(base_url=url)
        try:
            assert client.images.get(done["reference"]).id == done["image_id"]
            out = client.containers.run(done["reference"], [image.bb, "echo", "loaded-by-digest"], remove=True)
            assert out == b"loaded-by-digest\n"
        finally:
            client.close()
    # DOCKER_HOST is the default socket for --engine docker; without one it says so
    env = {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"}
    r = lemonpack("load", f"{layout}:{tag}", "--engine", "docker", env=env)
    assert r.returncode == 1 and "DOCKER_HOST" in r.stderr


def test_a_corrupted_blob_loads_nothing(built, tmp_path):
    import shutil

    layout, tag, image, names = built
    bad = tmp_path / "bad"
    shutil.copytree(layout, bad)
    desc = read_layout(bad)[tag]
    manifest = json.loads((bad / "blobs" / "sha256" / desc.hex).read_bytes())
    biggest = max(manifest["layers"], key=lambda l: l["size"])
    blob = bad / "blobs" / "sha256" / biggest["digest"].split(":", 1)[1]
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF
    blob.write_bytes(bytes(data))
    name = f"localhost/lemonpack-load-bad-{secrets.token_hex(3)}"
    r = lemonpack("load", f"{bad}:{tag}", "--name", name)
    assert r.returncode == 3 and "sha256 mismatch" in r.stderr, r.stderr
    assert podman("image", "exists", f"{name}:{tag}").returncode == 1
    r = lemonpack("load", f"{bad}:no-such-tag")
    assert r.returncode == 1 and "no tag 'no-such-tag'" in r.stderr and tag in r.stderr


def test_layout_tags_written_as_full_names_load_under_those_names(built, tmp_path):
    """skopeo and podman write ref.name as a full name (docker.io/x/a:1): `load DIR:NAME:TAG`
    finds it (the split is at the first ':' after the layout directory, even one with a ':' in
    its name) and the image keeps that name (podman#25322)."""
    from support.tools import need

    need("skopeo")
    layout, tag, image, names = built
    made = tmp_path / "two"
    wanted = [f"docker.io/lpdist{secrets.token_hex(3)}/a:1", f"ghcr.io/lpdist{secrets.token_hex(3)}/b:2"]
    for n in wanted:
        subprocess.run(["skopeo", "copy", "-q", f"oci:{layout}:{tag}", f"oci:{made}:{n}"], check=True,
                       capture_output=True)
    two = made.rename(tmp_path / "two:layouts")
    for n in wanted:
        r = lemonpack("load", f"{two}:{n}", "--json")
        assert r.returncode == 0, r.stderr
        names.append(n)
        done = json.loads(r.stdout)
        assert f"{done['name']}:{done['tag']}" == n
        assert podman("image", "exists", n).returncode == 0
    r = lemonpack("load", f"{two}:docker.io/x/absent:1")
    assert r.returncode == 1 and "no tag 'docker.io/x/absent:1'" in r.stderr and wanted[0] in r.stderr
