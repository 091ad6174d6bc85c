"""What lemonpack build writes, checked by independent tools (slow: real nix-build,
skopeo, umoci, podman + runc). A missing tool fails the test naming its apt package."""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess

import pytest

from support.buildkit import LEMONADE, blob_json, need, podman_env, tags, tar_gz

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("home")]


def run(argv, **kw):
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    kw.setdefault("timeout", 300)
    return subprocess.run([str(a) for a in argv], **kw)


# ---------------------------------------------------------------- nix

def test_nix_build_realises_the_artifact_and_rejects_tampering(lp, site, tmp_path):
    need("nix-build")
    recipe = site.pinned(LEMONADE / "llamacpp_arch_overrides.json", tmp_path / "recipes")
    out = tmp_path / "out"
    r = lp("build", recipe, "--out", out, "--mirror", site.base, "--os", "linux")
    assert r.code == 0, r
    rid = "llamacpp-arch-overrides"
    nix = out / "nix" / rid / "default.nix"
    sources = json.loads((out / "nix" / rid / "sources.json").read_text())["sources"]
    assert set(sources) == {"linux-rocm-gfx1151", "linux-rocm-gfx115x"}

    def nix_build(attr):
        return run(["nix-build", nix, "--argstr", "mirror", site.base, "-A", attr,
                    "--option", "substituters", "", "--no-out-link"], cwd=tmp_path)

    # tamper first (the served file no longer matches the pinned hash): nix refuses it
    url = sources["linux-rocm-gfx115x"]["url"]
    good = site.path_of(url).read_bytes()
    site.path_of(url).write_bytes(good + secrets.token_bytes(16))
    bad = nix_build("linux-rocm-gfx115x")
    assert bad.returncode != 0, bad
    assert "hash mismatch" in bad.stderr, bad.stderr[-2000:]
    site.path_of(url).write_bytes(good)

    for attr, src in sources.items():
        built = nix_build(attr)
        assert built.returncode == 0, built.stderr[-3000:]
        store_path = built.stdout.strip().splitlines()[-1]
        assert store_path.startswith("/nix/store/")
        with open(store_path, "rb") as f:
            assert f.read() == site.path_of(src["url"]).read_bytes()


# ---------------------------------------------------------------- skopeo, umoci

def test_skopeo_and_umoci_accept_every_tag(lp, site, tmp_path):
    need("skopeo")
    need("umoci")
    recipes = [site.pinned(LEMONADE / n, tmp_path / "recipes")
               for n in ("llamacpp_arch_overrides.json", "llamacpp_per_platform.json")]
    site.serve_recipe(LEMONADE / "llamacpp_rocm_nightly.json")
    out = tmp_path / "out"
    r = lp("build", *recipes, LEMONADE / "llamacpp_rocm_nightly.json", LEMONADE / "llamacpp_vulkan_custom.json",
           "--out", out, "--mirror", site.base, "--json")
    assert r.code == 0, r
    kinds = {t["tag"]: t["kind"] for t in r.json()["targets"]}
    all_tags = tags(out)
    assert set(kinds) | set(r.json()["indexes"]) == set(all_tags)
    assert "image" in kinds.values() and "recipe" in kinds.values()

    listed = run(["umoci", "ls", "--layout", out])
    assert listed.returncode == 0, listed.stderr
    assert set(listed.stdout.split()) == set(all_tags)

    for tag, desc in all_tags.items():
        raw = run(["skopeo", "inspect", "--raw", f"oci:{out}:{tag}"])
        assert raw.returncode == 0, (tag, raw.stderr)
        assert json.loads(raw.stdout) == blob_json(out, desc["digest"])
        if kinds.get(tag) != "image":
            continue
        info = run(["skopeo", "inspect", f"oci:{out}:{tag}"])
        assert info.returncode == 0, (tag, info.stderr)
        doc = json.loads(info.stdout)
        assert doc["Digest"] == desc["digest"]
        assert doc["Labels"]["dev.lemonpack.recipe"] == tag.split(".", 1)[0]
        stat = run(["umoci", "stat", "--image", f"{out}:{tag}"])
        assert stat.returncode == 0, (tag, stat.stderr)


# ---------------------------------------------------------------- podman

def test_busybox_artifact_runs_in_podman(lp, site, tmp_path):
    busybox = need("busybox")
    need("skopeo")
    need("podman")
    need("runc")
    url = "https://example.invalid/busybox/busybox-static.tar.gz"
    with open(busybox, "rb") as f:
        sha = site.put(url, tar_gz([("busybox", f.read(), 0o755)]))
    doc = {"recipe": "lemonpack-busybox", "display_name": "busybox as a lemonpack artifact",
           "api_contract_version": "1", "variant_of": "llamacpp", "capabilities": ["completion"],
           "platforms": {"linux": {"cpu": {"binary": "busybox", "source": url, "sha256": f"sha256:{sha}"}}}}
    recipe = tmp_path / "busybox.json"
    recipe.write_text(json.dumps(doc))
    out = tmp_path / "out"
    r = lp("build", recipe, "--out", out, "--mirror", site.base)
    assert r.code == 0, r
    tag = "lemonpack-busybox.linux-cpu"
    digest = tags(out)[tag]["digest"]

    env, podman, store, cleanup = podman_env(tmp_path)
    ref = f"localhost/lemonpack-busybox:{tag}"
    try:
        copied = run(["skopeo", "copy", f"oci:{out}:{tag}", f"containers-storage:{store}{ref}"], env=env)
        assert copied.returncode == 0, copied.stderr
        ran = run([*podman, "run", "--rm", "--network", "none", ref, "echo", "lemonpack-ok"], env=env)
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.strip() == "lemonpack-ok"
        inspected = run([*podman, "image", "inspect", "--format", "{{.Digest}}", ref], env=env)
        assert inspected.stdout.strip() == digest
    finally:
        run([*podman, "rmi", "-f", ref], env=env)
        gone = run([*podman, "image", "exists", ref], env=env)
        cleanup()
        shutil.rmtree(tmp_path / "storage", ignore_errors=True)
    assert gone.returncode == 1, "image still present after rmi"
