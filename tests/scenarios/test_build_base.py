"""``lemonpack build --base``: engine images on a base image (small synthetic bases).

The bases here are OCI layouts written by the test itself with ``tarfile`` + ``gzip`` and
hand-written JSON (not lemonpack's writer), so what lemonpack reads is independent of what
it writes. The runnable images on a real Debian base are in ``test_build_base_run.py``.
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
from pathlib import Path

import secrets

import pytest

from support.containers import podman_conf  # noqa: F401 (fixture)
from support.oci_base import make_base, put_blob as _put
from support.buildkit import RECIPE_ID, artifact_for, blob, blob_json, need, tags, variant_recipe

pytestmark = pytest.mark.usefixtures("home")  # a private cache and config for every test

@pytest.fixture
def recipe(site, tmp_path):
    return variant_recipe(tmp_path / "recipes" / "llamacpp-variant.json", site)


def _image(layout: Path, tag: str) -> tuple[dict, dict]:
    desc = tags(layout)[tag]
    manifest = blob_json(layout, desc["digest"])
    return manifest, blob_json(layout, manifest["config"]["digest"])


def _first_image_tag(layout: Path) -> str:
    return next(t for t, d in tags(layout).items() if d["mediaType"].endswith("manifest.v1+json")
                and "." in t)


def test_image_on_a_base_starts_with_its_layers_byte_for_byte(lp, site, recipe, tmp_path):
    base = tmp_path / "base"
    made = make_base(base)
    out = tmp_path / "out"
    r = lp("build", recipe, "--out", out, "--mirror", site.base, "--os", "linux", "--accelerator", "cpu",
           "--cpu-arch", "amd64", "--base", f"oci:{base}:base")
    assert r.code == 0, r
    tag = _first_image_tag(out)
    manifest, config = _image(out, tag)
    got = [l["digest"] for l in manifest["layers"]]
    assert got[:2] == made["layers"] and len(got) == 4
    for d in made["layers"]:  # unchanged bytes, same media type
        assert blob(out, d) == (base / "blobs" / "sha256" / d.split(":")[1]).read_bytes()
    cfg = config["config"]
    prefix = "/opt/lemonpack/llamacpp-variant"
    assert cfg["Entrypoint"][0].startswith(prefix + "/") and cfg["Cmd"] == []
    assert cfg["Env"][0] == f"PATH={prefix}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    assert "LANG=C.UTF-8" in cfg["Env"]
    assert cfg["User"] == "65532:65532"  # the base sets no User: the engine runs as non-root
    assert manifest["annotations"]["org.opencontainers.image.created"] == config["created"]
    assert len(config["history"]) == 4 and config["history"][0] == {"created_by": "layer 0"}
    assert manifest["annotations"]["org.opencontainers.image.base.digest"] == made["manifests"]["amd64"]
    assert "org.opencontainers.image.base.name" not in manifest["annotations"]  # a path is not a reference
    # same inputs, same digests; the base's directory does not matter
    shutil.copytree(base, tmp_path / "elsewhere")
    r2 = lp("build", recipe, "--out", tmp_path / "out2", "--mirror", site.base, "--os", "linux",
            "--accelerator", "cpu", "--cpu-arch", "amd64", "--base", f"oci:{tmp_path / 'elsewhere'}", "--json")
    assert r2.code == 0, r2
    assert (out / "index.json").read_bytes() == (tmp_path / "out2" / "index.json").read_bytes()
    # the image is checked by independent tools
    skopeo = need("skopeo")
    res = subprocess.run([skopeo, "inspect", "--config", f"oci:{out}:{tag}"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["config"]["Entrypoint"] == cfg["Entrypoint"]
    umoci = need("umoci")
    bundle = tmp_path / "bundle"
    res = subprocess.run([umoci, "unpack", "--rootless", "--image", f"{out}:{tag}", str(bundle)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert (bundle / "rootfs" / "usr/lib/libfake.so").is_file()
    assert (bundle / "rootfs" / cfg["Entrypoint"][0].lstrip("/")).is_file()


def test_index_base_gives_the_targets_platform(lp, site, recipe, tmp_path):
    base = tmp_path / "base"
    made = make_base(base, index_archs=["arm64", "amd64"])
    out = tmp_path / "out"
    r = lp("build", recipe, "--out", out, "--mirror", site.base, "--os", "linux", "--accelerator", "cpu",
           "--cpu-arch", "amd64", "--base", f"oci:{base}:base")
    assert r.code == 0, r
    manifest, config = _image(out, _first_image_tag(out))
    assert manifest["annotations"]["org.opencontainers.image.base.digest"] == made["manifests"]["amd64"]
    assert config["architecture"] == "amd64"
    r = lp("build", recipe, "--out", tmp_path / "out-s390x", "--mirror", site.base, "--os", "linux",
           "--accelerator", "cpu", "--cpu-arch", "s390x", "--base", f"oci:{base}:base")
    assert r.code == 1, r
    assert "offers linux/arm64, linux/amd64" in r.text and "linux/s390x" in r.text
    assert not (tmp_path / "out-s390x").exists()


def _fails(lp, site, recipe, tmp_path, base_arg: str, code: int, *needles: str) -> None:
    out = tmp_path / "out-bad"
    r = lp("build", recipe, "--out", out, "--mirror", site.base, "--os", "linux", "--accelerator", "cpu",
           "--cpu-arch", "amd64", "--base", base_arg)
    assert r.code == code, r
    line = r.err.strip().splitlines()[-1]
    assert f"base {base_arg}" in r.text, r
    for n in needles:
        assert n in r.text, r
    assert not out.exists(), "nothing is written"
    assert line


def test_base_not_a_layout(lp, site, recipe, tmp_path):
    (tmp_path / "empty").mkdir()
    _fails(lp, site, recipe, tmp_path, f"oci:{tmp_path / 'empty'}", 1, "no oci-layout file")
    _fails(lp, site, recipe, tmp_path, f"oci:{tmp_path / 'missing'}:x", 1, "no such directory")


def test_base_by_tag_or_bare_name_refused(lp, site, recipe, tmp_path):
    _fails(lp, site, recipe, tmp_path, "127.0.0.1:5000/debian:12", 1, "not pinned")
    _fails(lp, site, recipe, tmp_path, "debian:12", 1, "HOST/REPO@sha256")


def test_base_unknown_tag(lp, site, recipe, tmp_path):
    make_base(tmp_path / "base")
    _fails(lp, site, recipe, tmp_path, f"oci:{tmp_path / 'base'}:nope", 1, "no tag 'nope'", "tags: base")


def test_base_for_another_arch_or_os(lp, site, recipe, tmp_path):
    make_base(tmp_path / "arm", arch="arm64")
    _fails(lp, site, recipe, tmp_path, f"oci:{tmp_path / 'arm'}", 1, "is linux/arm64", "linux/amd64")
    make_base(tmp_path / "win", os_name="windows")
    _fails(lp, site, recipe, tmp_path, f"oci:{tmp_path / 'win'}", 1, "is windows/amd64", "linux/amd64")


def test_base_blob_not_matching_its_digest(lp, site, recipe, tmp_path):
    made = make_base(tmp_path / "base")
    victim = tmp_path / "base" / "blobs" / "sha256" / made["layers"][1].split(":")[1]
    victim.write_bytes(gzip.compress(b"tampered" * 100, mtime=0))
    _fails(lp, site, recipe, tmp_path, f"oci:{tmp_path / 'base'}", 3, "sha256 mismatch", made["layers"][1])


def test_base_config_tampered(lp, site, recipe, tmp_path):
    made = make_base(tmp_path / "base")
    manifest = json.loads((tmp_path / "base" / "blobs" / "sha256" / made["manifests"]["amd64"].split(":")[1]).read_text())
    cfg = tmp_path / "base" / "blobs" / "sha256" / manifest["config"]["digest"].split(":")[1]
    cfg.write_bytes(cfg.read_bytes().replace(b'"amd64"', b'"amd64" '))
    _fails(lp, site, recipe, tmp_path, f"oci:{tmp_path / 'base'}", 3, "image config", "sha256 mismatch")


@pytest.mark.parametrize("members,needle", [
    ([("opt", "dir", b""), ("opt/.wh.lemonpack", "file", b"")], "whiteout /opt/.wh.lemonpack hides /opt/lemonpack"),
    ([("opt", "dir", b""), ("opt/.wh..wh..opq", "file", b"")], "whiteout /opt/.wh..wh..opq hides /opt"),
    ([(".wh.opt", "file", b"")], "whiteout /.wh.opt hides /opt"),
    ([("opt", "symlink", b"/srv")], "/opt is a symlink"),
    ([("opt", "dir", b""), ("opt/lemonpack", "dir", b""), ("opt/lemonpack/llamacpp-variant", "dir", b""),
      ("opt/lemonpack/llamacpp-variant/llama-server", "file", b"#!evil\n")], "already holds"),
])
def test_base_shadowing_the_engine_path(lp, site, recipe, tmp_path, members, needle):
    make_base(tmp_path / "base", layers=[[("bin", "dir", b"")], members])
    _fails(lp, site, recipe, tmp_path, f"oci:{tmp_path / 'base'}", 5, needle)


def test_base_diff_id_mismatch(lp, site, recipe, tmp_path):
    base = tmp_path / "base"
    made = make_base(base)
    mpath = base / "blobs" / "sha256" / made["manifests"]["amd64"].split(":")[1]
    manifest = json.loads(mpath.read_text())
    cpath = base / "blobs" / "sha256" / manifest["config"]["digest"].split(":")[1]
    config = json.loads(cpath.read_text())
    config["rootfs"]["diff_ids"][0] = "sha256:" + "0" * 64
    manifest["config"].update(_put(base, json.dumps(config).encode()))
    new = _put(base, json.dumps(manifest).encode())
    index = json.loads((base / "index.json").read_text())
    index["manifests"][0].update(new)
    (base / "index.json").write_text(json.dumps(index))
    _fails(lp, site, recipe, tmp_path, f"oci:{base}", 3, "uncompressed", "0" * 64)


def test_a_base_user_is_kept(lp, site, recipe, tmp_path):
    base = tmp_path / "base"
    make_base(base, user="1000:1000")
    out = tmp_path / "out"
    r = lp("build", recipe, "--out", out, "--mirror", site.base, "--os", "linux", "--accelerator", "cpu",
           "--cpu-arch", "amd64", "--base", f"oci:{base}:base")
    assert r.code == 0, r
    assert _image(out, _first_image_tag(out))[1]["config"]["User"] == "1000:1000"


def test_without_base_the_image_is_the_engine_alone(lp, site, recipe, tmp_path):
    out = tmp_path / "out"
    r = lp("build", recipe, "--out", out, "--mirror", site.base, "--os", "linux", "--accelerator", "cpu")
    assert r.code == 0, r
    manifest, config = _image(out, _first_image_tag(out))
    assert len(manifest["layers"]) == 2
    assert "org.opencontainers.image.base.digest" not in (manifest.get("annotations") or {})
    assert config["config"]["User"] == "65532:65532"


def test_registry_base_pulled_by_digest(lp, site, recipe, tmp_path, registry):
    base = tmp_path / "base"
    made = make_base(base)
    skopeo = need("skopeo")
    dest = f"{registry.host}/bases/fake"
    res = subprocess.run([skopeo, "copy", "--dest-tls-verify=false", f"oci:{base}:base", f"docker://{dest}:v1"],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    digest = made["manifests"]["amd64"]
    out = tmp_path / "out"
    r = lp("build", recipe, "--out", out, "--mirror", site.base, "--os", "linux", "--accelerator", "cpu",
           "--cpu-arch", "amd64", "--base", f"{dest}@{digest}")
    assert r.code == 0, r
    manifest, _ = _image(out, _first_image_tag(out))
    assert manifest["annotations"]["org.opencontainers.image.base.name"] == f"{dest}@{digest}"
    assert [l["digest"] for l in manifest["layers"]][:2] == made["layers"]
    _fails(lp, site, recipe, tmp_path, f"{dest}:v1", 1, "not pinned")


def test_recorded_base_facts_do_not_excuse_a_changed_blob(lp, site, recipe, tmp_path):
    """The second build takes the layer facts from the cache; a blob whose stat facts are no
    longer the ones recorded when it was hashed is hashed again, and refused."""
    made = make_base(tmp_path / "base")
    r = lp("build", recipe, "--out", tmp_path / "ok", "--mirror", site.base, "--os", "linux", "--accelerator", "cpu",
           "--cpu-arch", "amd64", "--base", f"oci:{tmp_path / 'base'}")
    assert r.code == 0, r
    victim = tmp_path / "base" / "blobs" / "sha256" / made["layers"][0].split(":")[1]
    victim.write_bytes(victim.read_bytes() + b"\0")
    _fails(lp, site, recipe, tmp_path, f"oci:{tmp_path / 'base'}", 3, "sha256 mismatch", made["layers"][0])


@pytest.mark.parametrize("edit", ["none", "same-size-old-mtime"])
def test_an_unchanged_base_blob_is_trusted_by_its_stat_facts(lp, site, recipe, tmp_path, home, edit):
    """A base blob hashed once has its stat facts in its layer's record; a later build copies it
    unhashed while they hold (the same image), and hashes it again after a same-size edit that
    puts the mtime back (the ctime moved), refusing it."""
    import os

    from lemonpack.digest import FileDigests

    made = make_base(tmp_path / "base")
    args = ("--mirror", site.base, "--os", "linux", "--accelerator", "cpu", "--cpu-arch", "amd64",
            "--base", f"oci:{tmp_path / 'base'}")
    first = lp("build", recipe, "--out", tmp_path / "a", *args, "--json")
    assert first.code == 0, first
    hex_ = made["layers"][0].split(":")[1]
    victim = tmp_path / "base" / "blobs" / "sha256" / hex_
    record = json.loads((home.cache / "layers" / "bases" / f"{hex_}.json").read_text())
    assert record["diff_id"].startswith("sha256:")
    assert FileDigests(home.cache / "layers" / "digests" / "blobs.json").known(victim) == made["layers"][0]
    if edit == "none":
        again = lp("build", recipe, "--out", tmp_path / "b", *args, "--json")
        assert again.code == 0, again
        assert again.json()["indexes"] == first.json()["indexes"]
        assert (tmp_path / "b" / "blobs" / "sha256" / hex_).read_bytes() == victim.read_bytes()
        return
    st = victim.stat()
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.chmod(0o644)
    with open(victim, "r+b") as f:
        f.seek(len(data) // 2)
        f.write(data[len(data) // 2:len(data) // 2 + 1])
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))
    victim.chmod(st.st_mode & 0o777)
    assert victim.stat().st_size == st.st_size and victim.stat().st_mtime_ns == st.st_mtime_ns
    _fails(lp, site, recipe, tmp_path, f"oci:{tmp_path / 'base'}", 3, "sha256 mismatch", made["layers"][0])


def test_zstd_layers_are_read_by_skopeo_and_podman(lp, site, recipe, tmp_path, podman_conf):  # noqa: F811
    out = tmp_path / "out"
    r = lp("build", recipe, "--out", out, "--mirror", site.base, "--os", "linux", "--accelerator", "cpu",
           "--compression", "zstd", "--json")
    assert r.code == 0, r
    again = lp("build", recipe, "--out", tmp_path / "again", "--mirror", site.base, "--os", "linux",
               "--accelerator", "cpu", "--compression", "zstd", "--json")
    assert again.json()["indexes"] == r.json()["indexes"]
    gz = lp("build", recipe, "--out", tmp_path / "gz", "--mirror", site.base, "--os", "linux", "--accelerator", "cpu",
            "--json")
    assert gz.json()["indexes"] != r.json()["indexes"]
    tag = _first_image_tag(out)
    manifest, config = _image(out, tag)
    assert {l["mediaType"] for l in manifest["layers"]} == {"application/vnd.oci.image.layer.v1.tar+zstd"}
    _, gz_config = _image(tmp_path / "gz", tag)
    assert config["rootfs"] == gz_config["rootfs"], "the same tars: the same diff_ids"
    skopeo = need("skopeo")
    dest = tmp_path / "copied"
    res = subprocess.run([skopeo, "copy", f"oci:{out}:{tag}", f"dir:{dest}"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr  # skopeo checks every blob's digest while copying
    # podman's storage decompresses the zstd layers and checks them against the diff_ids
    name = f"localhost/images-zstd-{secrets.token_hex(4)}:t"
    res = subprocess.run([skopeo, "copy", "-q", f"oci:{out}:{tag}", f"containers-storage:{name}"],
                         capture_output=True, text=True, env=podman_conf["env"])
    try:
        assert res.returncode == 0, res.stderr
        res = subprocess.run([need("podman"), "image", "inspect", name], capture_output=True, text=True,
                             env=podman_conf["env"])
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout)[0]["RootFS"]["Layers"] == config["rootfs"]["diff_ids"]
    finally:
        subprocess.run(["podman", "rmi", "-f", name], capture_output=True, env=podman_conf["env"])


def test_publish_recipe_on_a_base(lp, site, recipe, tmp_path, registry):
    base = tmp_path / "base"
    made = make_base(base)
    dest = f"{registry.host}/engines/on-base"
    r = lp("publish", recipe, "--to", dest, "--mirror", site.base, "--base", f"oci:{base}", "--json")
    assert r.code == 0, r
    pushed = {p["tag"]: p["digest"] for p in r.json()["pushed"]}
    tag = next(t for t in pushed if t.endswith(".linux-cpu"))
    res = subprocess.run([need("skopeo"), "inspect", "--raw", "--tls-verify=false", f"docker://{dest}:{tag}"],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    manifest = json.loads(res.stdout)
    assert [l["digest"] for l in manifest["layers"]][:2] == made["layers"]
    assert manifest["annotations"]["org.opencontainers.image.base.digest"] == made["manifests"]["amd64"]
    r = lp("publish", tmp_path / "base", "--to", dest, "--base", f"oci:{base}")
    assert r.code == 2 and "--base applies when publishing a RECIPE.json" in r.text, r


def test_passthrough_recipe_on_a_base_runs_its_command(lp, tmp_path):
    """A passthrough recipe (an engine the base itself provides) becomes an image whose
    Entrypoint is the recipe's command; without a base it stays a recipe artifact."""
    src = Path(__file__).resolve().parents[1] / "fixtures/seed-examples/13_llamacpp-vulkan-custom.json"
    made = make_base(tmp_path / "base")
    out = tmp_path / "out"
    r = lp("build", src, "--out", out, "--cpu-arch", "amd64", "--base", f"oci:{tmp_path / 'base'}", "--json")
    assert r.code == 0, r
    (target,) = r.json()["targets"]
    assert target["kind"] == "image"
    manifest, config = _image(out, target["tag"])
    assert config["config"]["Entrypoint"] == ["/opt/lemonade/bin/llamacpp/vulkan/llama-server"]
    assert [l["digest"] for l in manifest["layers"]][:2] == made["layers"] and len(manifest["layers"]) == 3
    plain = lp("build", src, "--out", tmp_path / "plain", "--json")
    assert plain.json()["targets"][0]["kind"] == "recipe"


def test_built_without_base_tells_artifact_images_apart(lp, site, recipe, tmp_path):
    from lemonpack.oci.base import built_without_base

    make_base(tmp_path / "base")
    common = ["--mirror", site.base, "--os", "linux", "--accelerator", "cpu", "--cpu-arch", "amd64"]
    assert lp("build", recipe, "--out", tmp_path / "plain", *common).code == 0
    assert lp("build", recipe, "--out", tmp_path / "based", *common, "--base", f"oci:{tmp_path / 'base'}").code == 0
    tag = _first_image_tag(tmp_path / "plain")
    assert built_without_base(tmp_path / "plain", tag) is True
    assert built_without_base(tmp_path / "based", tag) is False
    assert built_without_base(tmp_path / "plain", RECIPE_ID) is False  # an index
    assert built_without_base(tmp_path / "base", "base") is False  # not lemonpack's
    assert built_without_base(tmp_path / "missing", tag) is False


def test_two_targets_share_the_base_blobs(lp, site, tmp_path):
    url2 = "https://example.invalid/engines/llama-server-vulkan.tar.gz"
    path = variant_recipe(tmp_path / "recipes" / "two.json", site)
    doc = json.loads(path.read_text())
    sha = site.put(url2, artifact_for(url2, "llama-server"))
    doc["platforms"]["linux"]["vulkan"] = {**doc["platforms"]["linux"]["cpu"], "source": url2, "sha256": f"sha256:{sha}"}
    path.write_text(json.dumps(doc))
    made = make_base(tmp_path / "base")
    out = tmp_path / "out"
    r = lp("build", path, "--out", out, "--mirror", site.base, "--cpu-arch", "amd64", "--base",
           f"oci:{tmp_path / 'base'}", "--json")
    assert r.code == 0, r
    tags_ = [t["tag"] for t in r.json()["targets"]]
    assert len(tags_) == 2
    for tag in tags_:
        manifest, _ = _image(out, tag)
        assert [l["digest"] for l in manifest["layers"]][:2] == made["layers"]
    blobs = {p.name for p in (out / "blobs" / "sha256").iterdir()}
    assert {d.split(":")[1] for d in made["layers"]} <= blobs
