"""Trust that holds between a layout and a registry, against the real docker-registry (through
a recording proxy, tests/support/registry_proxy.py, where a registry must behave as distribution
does not): a corrupt layout blob is never committed, the registry's error codes reach the user,
a manifest answer without Docker-Content-Digest is hashed, a 202 mount continues in its session,
layout tags written as full names are read as the containers tools read them, a pull adds to an
existing layout, and Ctrl-C says what it interrupted."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from lemonpack.errors import FetchError
from lemonpack.oci.layout_reader import read_layout, verify_layout
from lemonpack.oci.reference import parse_registry_reference
from lemonpack.registry import RegistryClient
from lemonpack.registry.transfer import publish_layout

from support.helpers import wait_for
from support.interrupt import popen_interruptible
from support.recipes import http_probe, recipe_doc
from support.registry import layout_tags, lemonpack
from support.registry_proxy import RegistryProxy

pytestmark = pytest.mark.slow


def _repo() -> str:
    return f"dist-{secrets.token_hex(3)}/app"


def _tags(host: str, repo: str) -> list[str]:
    try:
        with urllib.request.urlopen(f"http://{host}/v2/{repo}/tags/list", timeout=10) as r:
            return json.loads(r.read()).get("tags") or []
    except urllib.error.HTTPError as e:
        assert e.code == 404
        return []


def _image(layout: Path) -> tuple[str, dict]:
    """The image manifest (tag, JSON) of a layout."""
    tag, desc = next((t, d) for t, d in read_layout(layout).items() if d.media_type.endswith("manifest.v1+json"))
    return tag, json.loads((layout / "blobs" / "sha256" / desc.hex).read_bytes())


@pytest.fixture
def copy_layout(example_layout, tmp_path):
    out = tmp_path / "layout"
    shutil.copytree(example_layout, out)
    return out


# --- publish hashes what it sends --------------------------------------------------------

def test_a_corrupt_layout_blob_is_refused_before_the_registry_commits_it(registry, copy_layout):
    _tag, manifest = _image(copy_layout)
    layer = manifest["layers"][0]["digest"]
    path = copy_layout / "blobs" / "sha256" / layer[7:]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    repo = _repo()
    with RegistryProxy(registry) as proxy:
        r = lemonpack("publish", str(copy_layout), "--to", f"{proxy.host}/{repo}", "--no-progress", check=False)
        # the registry never got the request that would make it store the blob: a registry that
        # does not re-hash uploads would have nothing to store either
        closing = [e for e in proxy.requests("PUT", "/blobs/uploads/") if layer in urllib.parse.unquote(e["query"])]
        manifest_puts = proxy.requests("PUT", "/manifests/")
    assert r.returncode == 3, r.stderr
    assert layer[7:] in r.stderr and "not committed" in r.stderr
    assert closing == [] and manifest_puts == []
    assert _tags(registry.host, repo) == []


# --- the registry's error codes ----------------------------------------------------------

def test_a_refused_put_shows_the_registrys_error_code(registry, example_layout):
    _tag, manifest = _image(example_layout)
    repo = _repo()
    desc = read_layout(example_layout)[_tag]
    data = (example_layout / "blobs" / "sha256" / desc.hex).read_bytes()
    with RegistryClient(registry.host) as c:
        c.push_blob(repo, example_layout / "blobs" / "sha256" / manifest["config"]["digest"][7:],
                    manifest["config"]["digest"], manifest["config"]["size"])
        with pytest.raises(FetchError) as e:  # the layers are missing: MANIFEST_BLOB_UNKNOWN
            c.put_manifest(repo, "v1", data, desc.media_type)
    assert "PUT" in str(e.value) and "HTTP 400" in str(e.value) and "MANIFEST_BLOB_UNKNOWN" in str(e.value)
    assert any(layer["digest"] in str(e.value) for layer in manifest["layers"])  # distribution's detail


# --- Docker-Content-Digest is not guaranteed ---------------------------------------------

def test_pin_and_head_without_docker_content_digest_hash_the_manifest(registry, example_layout, tmp_path):
    repo = _repo()
    tags = layout_tags(example_layout)
    index_tag = next(t for t in tags if "." not in t)
    with RegistryClient(registry.host) as c:
        publish_layout(example_layout, parse_registry_reference(f"{registry.host}/{repo}:vk"), c, tag=index_tag)
    recipe = tmp_path / "r.json"
    with RegistryProxy(registry, dcd="none") as proxy:
        recipe.write_text(json.dumps(_recipe(f"{proxy.host}/{repo}:vk"), indent=1))
        out = lemonpack("pin", str(recipe), "--json")
        assert json.loads(out.stdout)["pinned"][0]["new"] == f"{proxy.host}/{repo}:vk@{tags[index_tag]}"
        with RegistryClient(proxy.host) as c:
            assert c.head_manifest(repo, "vk")[0] == tags[index_tag]
            assert c.head_manifest(repo, tags[index_tag])[0] == tags[index_tag]
            assert c.head_manifest(repo, "absent") is None
    with RegistryProxy(registry, dcd="wrong") as proxy:
        recipe.write_text(json.dumps(_recipe(f"{proxy.host}/{repo}:vk"), indent=1))
        before = recipe.read_bytes()
        r = lemonpack("pin", str(recipe), check=False)
        assert r.returncode == 3 and "Docker-Content-Digest" in r.stderr, r.stderr
        assert recipe.read_bytes() == before


def _recipe(image: str) -> dict:
    """A Vulkan recipe running ``image`` under podman (what ``pin`` rewrites)."""
    return recipe_doc("dist-pin", display_name="t", accelerator="vulkan", command="podman",
                      args=["run", "--rm", "--network", "host", image, "llama-server", "--port", "{port}"],
                      health_probe=http_probe(timeout=30, poll_ms=500))


# --- a mount answered 202 -------------------------------------------------------------------

def test_a_mount_answered_202_uploads_through_the_session_it_opened(registry, example_layout, tmp_path):
    src, dst = _repo(), _repo()
    lemonpack("publish", str(example_layout), "--to", f"{registry.host}/{src}", "--no-progress")
    with RegistryProxy(registry, mount_202=True) as proxy:
        out = lemonpack("publish", str(example_layout), "--to", f"{proxy.host}/{dst}", "--mount-from", src,
                        "--json", "--no-progress")
        mounts = proxy.requests("POST", "/blobs/uploads/")
        puts = proxy.requests("PUT", "/blobs/uploads/")
        deletes = proxy.requests("DELETE")
    result = json.loads(out.stdout)
    assert mounts and all(e["mount"] and e["status"] == 202 for e in mounts)  # no second, plain POST
    assert deletes == [] and len(puts) == len(mounts) == result["blobs_uploaded"]
    assert all(e["status"] == 201 for e in puts)
    assert {p["tag"]: p["digest"] for p in result["pushed"]} == layout_tags(example_layout)
    lemonpack("pull", f"{registry.host}/{dst}:{next(iter(layout_tags(example_layout)))}",
              "--out", str(tmp_path / "back"), "--no-progress")
    verify_layout(tmp_path / "back")


# --- layout tags written as full names -----------------------------------------------------

@pytest.fixture
def full_name_layout(example_layout, tmp_path):
    """The example layout with its image tagged docker.io/x/a:1 and ghcr.io/y/b:2 (as skopeo and
    podman write ref.name), written by skopeo."""
    from support.tools import need

    need("skopeo")
    tag, _ = _image(example_layout)
    out = tmp_path / "full"
    for name in ("docker.io/x/a:1", "ghcr.io/y/b:2"):
        subprocess.run(["skopeo", "copy", "-q", f"oci:{example_layout}:{tag}", f"oci:{out}:{name}"], check=True,
                       capture_output=True)
    assert set(read_layout(out)) == {"docker.io/x/a:1", "ghcr.io/y/b:2"}
    return out


def test_publish_refuses_a_full_name_tag_before_sending_a_byte_and_takes_one_named(registry, full_name_layout):
    repo = _repo()
    with RegistryProxy(registry) as proxy:
        r = lemonpack("publish", str(full_name_layout), "--to", f"{proxy.host}/{repo}", check=False)
        assert r.returncode == 1 and "'docker.io/x/a:1'" in r.stderr and "nothing was sent" in r.stderr
        assert proxy.log == []
        out = lemonpack("publish", f"{full_name_layout}:docker.io/x/a:1", "--to", f"{proxy.host}/{repo}:v1",
                        "--json", "--no-progress")
    assert json.loads(out.stdout)["pushed"][0]["source"] == "docker.io/x/a:1"
    assert _tags(registry.host, repo) == ["v1"]


# --- pull into an existing layout ----------------------------------------------------------

def test_pull_adds_its_tag_to_an_existing_layout_and_keeps_everything_else(registry, copy_layout, tmp_path):
    repo = _repo()
    tags = layout_tags(copy_layout)
    image_tag, _ = _image(copy_layout)
    index_tag = next(t for t in tags if t != image_tag)
    lemonpack("publish", f"{copy_layout}:{image_tag}", "--to", f"{registry.host}/{repo}:v1", "--no-progress")
    lemonpack("publish", f"{copy_layout}:{index_tag}", "--to", f"{registry.host}/{repo}:v2", "--no-progress")
    (copy_layout / "nix").mkdir(exist_ok=True)
    (copy_layout / "nix" / "NOTES.txt").write_text("mine\n")
    files = {p.relative_to(copy_layout): p.read_bytes() for p in copy_layout.rglob("*")
             if p.is_file() and p.name != "index.json"}

    out = json.loads(lemonpack("pull", f"{registry.host}/{repo}:v1", "--out", str(copy_layout), "--json").stdout)
    assert out["merged"] is True and out["replaced"] is None and out["kept_tags"] == len(tags)
    assert layout_tags(copy_layout) == {**tags, "v1": tags[image_tag]}
    assert all((copy_layout / p).read_bytes() == b for p, b in files.items())
    verify_layout(copy_layout)

    # the same tag again, now naming another manifest: replaced, and said so
    out = lemonpack("pull", f"{registry.host}/{repo}:v2", "--out", str(copy_layout), "--tag", "v1")
    assert f"replacing its tag v1 (was {tags[image_tag]}" in out.stdout
    assert layout_tags(copy_layout) == {**tags, "v1": tags[index_tag]}
    verify_layout(copy_layout)

    # the containers tools read the result
    from support.tools import need

    need("skopeo")
    subprocess.run(["skopeo", "inspect", "--raw", f"oci:{copy_layout}:v1"], check=True, capture_output=True)

    # a failed pull changes nothing; a directory that is no layout is refused
    before = (copy_layout / "index.json").read_bytes()
    r = lemonpack("pull", f"{registry.host}/{repo}:absent", "--out", str(copy_layout), check=False)
    assert r.returncode == 1 and "no such image" in r.stderr and (copy_layout / "index.json").read_bytes() == before
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "todo.txt").write_text("x")
    r = lemonpack("pull", f"{registry.host}/{repo}:v1", "--out", str(notes), check=False)
    assert r.returncode == 1 and "not an OCI image layout" in r.stderr
    assert sorted(p.name for p in notes.iterdir()) == ["todo.txt"]


# --- Ctrl-C --------------------------------------------------------------------------------

def _interrupt(argv: list[str], proxy: RegistryProxy) -> subprocess.CompletedProcess:
    p = popen_interruptible([sys.executable, "-m", "lemonpack.cli", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(proxy.held.is_set, timeout=60), "the command never reached the held request"
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return subprocess.CompletedProcess(argv, p.returncode, out, err)


@pytest.mark.parametrize("json_out", [False, True])
def test_ctrl_c_during_publish_says_what_it_interrupted_and_that_nothing_was_tagged(registry, example_layout,
                                                                                   json_out):
    repo = _repo()
    with RegistryProxy(registry, hold={"PATCH"}) as proxy:
        r = _interrupt(["publish", str(example_layout), "--to", f"{proxy.host}/{repo}", "--no-progress"]
                       + (["--json"] if json_out else []), proxy)
    assert r.returncode == 130
    if json_out:
        event = json.loads(r.stdout.strip().splitlines()[-1])
        assert event["error"] == "interrupted"
        message = event["message"]
    else:
        message = r.stderr
        assert message.startswith("aborted: ")
    assert "interrupted while uploading blob" in message and "nothing was tagged" in message
    assert _tags(registry.host, repo) == []


def test_ctrl_c_while_publish_signs_says_every_tag_was_pushed(registry, example_layout, tmp_path):
    from lemonpack.signing import keys

    pair = keys.generate_key_pair(b"pw")
    (tmp_path / "k.key").write_bytes(pair.private_pem)
    repo = _repo()
    with RegistryProxy(registry, hold={"GET", "HEAD"}, hold_path=".sig") as proxy:
        p = popen_interruptible([sys.executable, "-m", "lemonpack.cli", "publish", str(example_layout), "--to",
                                 f"{proxy.host}/{repo}", "--sign", str(tmp_path / "k.key"), "--no-progress"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "LEMONPACK_PASSWORD": "pw"})
        try:
            assert wait_for(proxy.held.is_set, timeout=60), "publish never reached the signature"
            p.send_signal(signal.SIGINT)
            _out, err = p.communicate(timeout=60)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert p.returncode == 130 and "every tag was pushed" in err and "interrupted while signing" in err, err
    assert sorted(_tags(registry.host, repo)) == sorted(layout_tags(example_layout))


def test_ctrl_c_during_pull_leaves_no_layout(registry, example_layout, tmp_path):
    repo = _repo()
    tag = next(iter(layout_tags(example_layout)))
    lemonpack("publish", f"{example_layout}:{tag}", "--to", f"{registry.host}/{repo}:v1", "--no-progress")
    with RegistryProxy(registry, hold={"GET"}) as proxy:
        r = _interrupt(["pull", f"{proxy.host}/{repo}:v1", "--out", str(tmp_path / "out"), "--no-progress"], proxy)
    assert r.returncode == 130 and "pull of" in r.stderr and "nothing was written" in r.stderr, r.stderr
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_in_any_other_command_still_says_it_was_interrupted(registry, tmp_path):
    recipe = tmp_path / "r.json"
    with RegistryProxy(registry, hold={"GET"}) as proxy:
        recipe.write_text(json.dumps(_recipe(f"{proxy.host}/{_repo()}:vk")))
        r = _interrupt(["pin", str(recipe)], proxy)
    assert r.returncode == 130 and r.stderr.startswith("aborted: lemonpack pin interrupted"), r.stderr
