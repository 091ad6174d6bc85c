"""The six reference recipes and the RFC section 13 examples through ``lemonpack lint``
and ``lemonpack build`` against a real mirror on 127.0.0.1."""

from __future__ import annotations

import json

import pytest

from support.buildkit import LEMONADE, SEED, blob, blob_json, tags, tree_files

pytestmark = pytest.mark.usefixtures("home")  # a private cache and config for every test

RECIPE_ARTIFACT_TYPE = "application/vnd.lemonpack.recipe.v1+json"
EMPTY_CONFIG = "application/vnd.oci.empty.v1+json"
IMAGE_MANIFEST = "application/vnd.oci.image.manifest.v1+json"

VARIANTS = ["llamacpp_arch_overrides.json", "llamacpp_per_platform.json"]
PASSING_LINT = VARIANTS + ["llamacpp_rocm_nightly.json", "llamacpp_vulkan_custom.json"]

#: recipe file -> (recipe id, every tag of a full build except the index tag)
EXPECTED_TAGS = {
    "llamacpp_arch_overrides.json": ("llamacpp-arch-overrides",
                                     {"linux-rocm", "linux-rocm-gfx1151", "linux-rocm-gfx115x", "windows-cuda"}),
    "llamacpp_per_platform.json": ("llamacpp-per-platform",
                                   {"linux-rocm", "linux-cuda", "linux-cpu", "windows-cuda"}),
    "llamacpp_rocm_nightly.json": ("llamacpp-rocm-nightly", {"linux-rocm"}),
    "llamacpp_vulkan_custom.json": ("llamacpp-vulkan-custom", {"linux-vulkan"}),
}


# ---------------------------------------------------------------- lint

@pytest.mark.parametrize("name", PASSING_LINT)
def test_reference_lint_passes(lp, name):
    r = lp("lint", LEMONADE / name)
    assert r.code == 0, r


def test_dflash_lint_names_62_digit_digest(lp):
    r = lp("lint", LEMONADE / "dflash_rocm.json")
    assert r.code != 0, r
    assert "62 hex digits" in r.text and "platforms.linux.rocm.args[18]" in r.text, r


def test_toolbox_lint_rejects_token_in_image(lp):
    r = lp("lint", LEMONADE / "toolbox_arch_alias.json")
    assert r.code != 0, r
    assert "platforms.linux.vulkan.args[17]" in r.text and "token" in r.text, r


@pytest.mark.parametrize("name", ["13_dflash-rocm.json", "13_llamacpp-arch-overrides.json",
                                  "13_toolbox-arch-alias.json"])
def test_seed_abridged_examples_miss_display_name(lp, name):
    r = lp("lint", SEED / name)
    assert r.code != 0, r
    assert "missing-field" in r.text and "display_name" in r.text, r


@pytest.mark.parametrize("name", ["13_llamacpp-per-platform.json", "13_llamacpp-rocm-nightly.json",
                                  "13_llamacpp-vulkan-custom.json"])
def test_seed_complete_examples_pass(lp, name):
    assert lp("lint", SEED / name).code == 0


def test_seed_walkthrough_fails_pinning_on_both_blocks(lp, tmp_path):
    r = lp("lint", SEED / "walkthrough_toolbox_llamacpp.json")
    assert r.code != 0, r
    assert r.text.count("[digest-pinning]") == 2, r
    assert "platforms.linux.vulkan.args[" in r.text and "platforms.linux.rocm.args[" in r.text, r
    out = tmp_path / "out"
    b = lp("build", SEED / "walkthrough_toolbox_llamacpp.json", "--out", out)
    assert b.code != 0 and not out.exists(), b
    assert b.text.count("not pinned by digest") == 2, b
    assert "platforms.linux.vulkan.args[17]" in b.text and "platforms.linux.rocm.args[21]" in b.text, b


# ---------------------------------------------------------------- build failures

def test_dflash_build_fails_pinning(lp, tmp_path):
    out = tmp_path / "out"
    r = lp("build", LEMONADE / "dflash_rocm.json", "--out", out)
    assert r.code != 0 and not out.exists(), r
    assert "62 hex digits" in r.text and "platforms.linux.rocm.args[18]" in r.text, r


def test_toolbox_build_fails_pinning(lp, tmp_path):
    out = tmp_path / "out"
    r = lp("build", LEMONADE / "toolbox_arch_alias.json", "--out", out)
    assert r.code != 0 and not out.exists(), r
    assert "token" in r.text and "args[17]" in r.text, r


@pytest.mark.parametrize("name", VARIANTS)
def test_placeholder_hashes_stop_with_mismatch(lp, site, tmp_path, home, name):
    served = site.serve_recipe(LEMONADE / name)
    published = {h.removeprefix("sha256:") for h in _published(LEMONADE / name)}
    out = tmp_path / "out"
    r = lp("build", LEMONADE / name, "--out", out, "--mirror", site.base)
    assert r.code == 3, r
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith((".out", "out"))], list(tmp_path.iterdir())
    # both digests named, for one and the same artifact: its published placeholder and
    # the served file's actual hash
    pairs = _published_by_url(LEMONADE / name)
    assert any(url in r.text and pairs[url] in r.text and served[url] in r.text for url in pairs), r
    assert published >= set(pairs.values())
    assert tree_files(home.cache / "artifacts") == set()
    assert tree_files(home.cache / "layers") == set()


def _published_by_url(path):
    """``{source url: published sha256 hex}`` of a recipe's platform blocks and overrides."""
    doc = json.loads(path.read_text())
    found = {}

    def walk(n):
        if isinstance(n, dict):
            if isinstance(n.get("sha256"), str) and isinstance(n.get("source"), str):
                found[n["source"]] = n["sha256"].removeprefix("sha256:")
            for v in n.values():
                walk(v)
    walk(doc)
    return found


def _published(path):
    doc = json.loads(path.read_text())
    found = []

    def walk(n):
        if isinstance(n, dict):
            if isinstance(n.get("sha256"), str):
                found.append(n["sha256"])
            for v in n.values():
                walk(v)
    walk(doc)
    return found


# ---------------------------------------------------------------- successful builds

@pytest.mark.parametrize("name", sorted(EXPECTED_TAGS))
def test_full_build_of_pinned_copy(lp, site, tmp_path, name):
    src = LEMONADE / name
    recipe = src if name == "llamacpp_rocm_nightly.json" or name == "llamacpp_vulkan_custom.json" else \
        site.pinned(src, tmp_path / "recipes")
    if recipe is src:
        site.serve_recipe(src)
    out = tmp_path / "out"
    r = lp("build", recipe, "--out", out, "--mirror", site.base, "--json")
    assert r.code == 0, r
    rid, targets = EXPECTED_TAGS[name]
    t = tags(out)
    assert set(t) == {rid} | {f"{rid}.{x}" for x in targets}
    index = blob_json(out, t[rid]["digest"])
    assert {m["digest"] for m in index["manifests"]} == {t[f"{rid}.{x}"]["digest"] for x in targets}
    doc = r.json()
    assert doc["indexes"] == {rid: t[rid]["digest"]}
    assert {x["tag"] for x in doc["targets"]} == {f"{rid}.{x}" for x in targets}
    for x in doc["targets"]:
        m = blob_json(out, x["digest"])
        if x["source"]:
            _check_image(out, m, x, site)
        else:
            _check_recipe_artifact(out, m, rid)
    if any(x["source"] for x in doc["targets"]):
        assert doc["nix"] == [f"nix/{rid}"]
        sources = json.loads((out / "nix" / rid / "sources.json").read_text())
        assert {s["hash"] for s in sources["sources"].values()} == \
            {_sri(x["sha256"].removeprefix("sha256:")) for x in doc["targets"] if x["source"]}
        assert (out / "nix" / rid / "default.nix").is_file()
    else:
        assert not (out / "nix").exists()


def _sri(hex_digest):
    import base64
    return "sha256-" + base64.b64encode(bytes.fromhex(hex_digest)).decode()


def _check_image(out, manifest, target, site):
    import gzip
    import io
    import tarfile
    assert manifest["mediaType"] == IMAGE_MANIFEST
    ann = manifest["annotations"]
    assert ann["dev.lemonpack.sha256"] == target["sha256"]
    assert ann["dev.lemonpack.source"] == target["source"]
    assert target["sha256"] == "sha256:" + site.hashes[target["source"]]
    config = blob_json(out, manifest["config"]["digest"])
    entry = config["config"]["Entrypoint"][0]
    assert len(manifest["layers"]) == 2
    layer = tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob(out, manifest["layers"][0]["digest"]))))
    names = {m.name: m for m in layer.getmembers()}
    binary = entry.lstrip("/")
    assert binary in names and names[binary].mode & 0o111, sorted(names)
    payload = layer.extractfile(names[binary]).read()
    assert payload.startswith(b"#!/bin/sh\necho ")


def _check_recipe_artifact(out, manifest, rid):
    assert manifest["artifactType"] == RECIPE_ARTIFACT_TYPE
    assert manifest["config"]["mediaType"] == EMPTY_CONFIG
    assert manifest["config"]["size"] == 2
    assert [layer["mediaType"] for layer in manifest["layers"]] == [RECIPE_ARTIFACT_TYPE]
    recipe = json.loads(blob(out, manifest["layers"][0]["digest"]))
    assert recipe["recipe"] == rid


def test_roll_forward_records_observed_hash(lp, site, tmp_path):
    served = site.serve_recipe(LEMONADE / "llamacpp_rocm_nightly.json")
    (observed,) = served.values()
    out = tmp_path / "out"
    r = lp("build", LEMONADE / "llamacpp_rocm_nightly.json", "--out", out, "--mirror", site.base, "--json")
    assert r.code == 0, r
    (target,) = r.json()["targets"]
    assert target["policy"] == "roll_forward" and target["sha256"] == "sha256:" + observed
    m = blob_json(out, target["digest"])
    assert m["annotations"]["dev.lemonpack.sha256"] == f"sha256:{observed}"
    assert m["annotations"]["dev.lemonpack.version-policy"] == "roll_forward"
    desc = tags(out)["llamacpp-rocm-nightly.linux-rocm"]
    assert desc["annotations"]["dev.lemonpack.sha256"] == f"sha256:{observed}"
    sources = json.loads((out / "nix" / "llamacpp-rocm-nightly" / "sources.json").read_text())
    (src,) = sources["sources"].values()
    assert src["hash"] == _sri(observed)
    # the human output says so too
    r2 = lp("build", LEMONADE / "llamacpp_rocm_nightly.json", "--out", tmp_path / "out2", "--mirror", site.base)
    assert r2.code == 0 and f"observed sha256:{observed}" in r2.text, r2


@pytest.mark.parametrize("flags,expected", [
    (["--arch", "gfx1151"], {"linux-rocm-gfx1151", "windows-cuda"}),
    # the target is named after the concrete arch asked for (contract.targets); its
    # artifact is the gfx115* override's
    (["--arch", "gfx1150"], {"linux-rocm-gfx1150", "windows-cuda"}),
    (["--os", "linux", "--arch", "gfx1151"], {"linux-rocm-gfx1151"}),
    (["--os", "windows"], {"windows-cuda"}),
    (["--accelerator", "rocm"], {"linux-rocm", "linux-rocm-gfx1151", "linux-rocm-gfx115x"}),
])
def test_narrowing_arch_overrides(lp, site, tmp_path, flags, expected):
    recipe = site.pinned(LEMONADE / "llamacpp_arch_overrides.json", tmp_path / "recipes")
    out = tmp_path / "out"
    r = lp("build", recipe, "--out", out, "--mirror", site.base, "--json", *flags)
    assert r.code == 0, r
    rid = "llamacpp-arch-overrides"
    assert set(tags(out)) == {rid} | {f"{rid}.{x}" for x in expected}
    by_tag = {x["target"]: x for x in r.json()["targets"]}
    if "linux-rocm-gfx1151" in by_tag:
        assert by_tag["linux-rocm-gfx1151"]["source"].endswith("/gfx1151.tar.gz")
        assert by_tag["linux-rocm-gfx1151"]["gpu_arch"] == "gfx1151"
    if "linux-rocm-gfx1150" in by_tag:
        assert by_tag["linux-rocm-gfx1150"]["source"].endswith("/gfx115x.tar.gz")
    if "linux-rocm-gfx115x" in by_tag:
        assert by_tag["linux-rocm-gfx115x"]["source"].endswith("/gfx115x.tar.gz")
    if "linux-rocm" in by_tag:
        assert by_tag["linux-rocm"]["source"] is None and by_tag["linux-rocm"]["kind"] == "recipe"


def test_narrowing_per_platform(lp, site, tmp_path):
    recipe = site.pinned(LEMONADE / "llamacpp_per_platform.json", tmp_path / "recipes")
    out = tmp_path / "out"
    r = lp("build", recipe, "--out", out, "--mirror", site.base, "--os", "linux", "--accelerator", "cuda")
    assert r.code == 0, r
    assert set(tags(out)) == {"llamacpp-per-platform", "llamacpp-per-platform.linux-cuda"}
    # only the selected artifact was downloaded
    assert [p for p in site.requests if p.endswith(".tar.gz") or p.endswith(".zip")] == \
        ["/example.invalid/llamacpp-fork/linux-cuda.tar.gz"]


def test_narrowing_to_nothing_fails(lp, site, tmp_path):
    recipe = site.pinned(LEMONADE / "llamacpp_per_platform.json", tmp_path / "recipes")
    out = tmp_path / "out"
    r = lp("build", recipe, "--out", out, "--mirror", site.base, "--accelerator", "vulkan")
    assert r.code != 0 and not out.exists(), r


def test_windows_zip_artifact_layer(lp, site, tmp_path):
    recipe = site.pinned(LEMONADE / "llamacpp_per_platform.json", tmp_path / "recipes")
    out = tmp_path / "out"
    r = lp("build", recipe, "--out", out, "--mirror", site.base, "--os", "windows", "--json")
    assert r.code == 0, r
    (t,) = r.json()["targets"]
    m = blob_json(out, t["digest"])
    config = blob_json(out, m["config"]["digest"])
    assert config["os"] == "windows"
    assert config["config"]["Entrypoint"] == ["/opt/lemonpack/llamacpp-per-platform/llama-server.exe"]


def test_several_recipes_in_one_layout(lp, site, tmp_path):
    a = site.pinned(LEMONADE / "llamacpp_per_platform.json", tmp_path / "recipes")
    site.serve_recipe(LEMONADE / "llamacpp_rocm_nightly.json")
    out = tmp_path / "out"
    r = lp("build", a, LEMONADE / "llamacpp_rocm_nightly.json", LEMONADE / "llamacpp_vulkan_custom.json",
           "--out", out, "--mirror", site.base, "--json")
    assert r.code == 0, r
    assert set(r.json()["indexes"]) == {"llamacpp-per-platform", "llamacpp-rocm-nightly", "llamacpp-vulkan-custom"}
    assert sorted(p.name for p in (out / "nix").iterdir()) == ["llamacpp-per-platform", "llamacpp-rocm-nightly"]
    assert len(tags(out)) == 3 + 4 + 1 + 1


PINNED_IMAGE = "localhost/lemonpack-test@sha256:" + "ab" * 32


def test_passthrough_with_pinned_image_records_digest(lp, tmp_path):
    doc = json.loads((LEMONADE / "dflash_rocm.json").read_text())
    args = doc["platforms"]["linux"]["rocm"]["args"]
    args[18] = PINNED_IMAGE
    recipe = tmp_path / "dflash_pinned.json"
    recipe.write_text(json.dumps(doc))
    assert lp("lint", recipe).code == 0
    out = tmp_path / "out"
    r = lp("build", recipe, "--out", out, "--json")
    assert r.code == 0, r
    (t,) = r.json()["targets"]
    assert t["kind"] == "recipe" and t["images"] == [PINNED_IMAGE]
    m = blob_json(out, t["digest"])
    _check_recipe_artifact(out, m, "dflash-rocm")
    assert m["annotations"]["dev.lemonpack.images"] == PINNED_IMAGE
    assert tags(out)["dflash-rocm.linux-rocm"]["annotations"]["dev.lemonpack.images"] == PINNED_IMAGE
