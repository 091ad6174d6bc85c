"""lemonpack pin against the real registry: tags become digests, the rest of the file is untouched."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest

from lemonpack.oci.reference import parse_registry_reference

from lemonpack.registry import RegistryClient
from lemonpack.registry.transfer import publish_layout
from support.registry import layout_tags, lemonpack

pytestmark = pytest.mark.slow

SEED = Path(__file__).resolve().parents[1] / "fixtures" / "seed-examples" / "walkthrough_toolbox_llamacpp.json"


def test_pin_rewrites_only_the_image_strings_and_lint_accepts(registry, example_layout, tmp_path):
    repo = f"reg-{secrets.token_hex(3)}/toolboxes"
    image_tag = next(t for t in layout_tags(example_layout) if "." in t)
    with RegistryClient(registry.host) as client:
        for tag in ("vulkan-radv", "rocm-10.0"):
            publish_layout(example_layout, parse_registry_reference(f"{registry.host}/{repo}:{tag}"), client, tag=image_tag)
    digest = layout_tags(example_layout)[image_tag]
    original = SEED.read_text().replace("docker.io/kyuz0/amd-strix-halo-toolboxes", f"{registry.host}/{repo}")
    recipe = tmp_path / "toolbox.json"
    recipe.write_text(original)

    assert lemonpack("pin", str(recipe), "--check", check=False).returncode == 1
    assert lemonpack("lint", str(recipe), check=False).returncode != 0
    out = json.loads(lemonpack("pin", str(recipe), "--json").stdout)
    assert {p["new"] for p in out["pinned"]} == {f"{registry.host}/{repo}:vulkan-radv@{digest}",
                                                  f"{registry.host}/{repo}:rocm-10.0@{digest}"}
    pinned = recipe.read_text()
    # byte for byte the same file, but for the two image strings
    assert pinned.replace(f"@{digest}", "") == original
    lemonpack("lint", str(recipe))
    assert lemonpack("pin", str(recipe), "--check").returncode == 0
    again = json.loads(lemonpack("pin", str(recipe), "--json").stdout)
    assert again["pinned"] == [] and recipe.read_text() == pinned


def test_pin_fails_on_a_missing_tag_and_leaves_the_file(registry, tmp_path):
    original = SEED.read_text().replace("docker.io/kyuz0/amd-strix-halo-toolboxes",
                                        f"{registry.host}/reg-{secrets.token_hex(3)}/missing")
    recipe = tmp_path / "toolbox.json"
    recipe.write_text(original)
    r = lemonpack("pin", str(recipe), check=False)
    assert r.returncode != 0 and "not found" in r.stderr
    assert recipe.read_text() == original and [p.name for p in tmp_path.iterdir()] == ["toolbox.json"]


def test_pin_resolves_arch_alias_per_alias_then_says_why_it_cannot_write_it(registry, example_layout, tmp_path):
    repo = f"reg-{secrets.token_hex(3)}/alias"
    image_tag = next(t for t in layout_tags(example_layout) if "." in t)
    with RegistryClient(registry.host) as client:
        publish_layout(example_layout, parse_registry_reference(f"{registry.host}/{repo}:strix"), client, tag=image_tag)
    doc = json.loads(SEED.read_text())
    doc["arch_aliases"] = {"gfx1151": "strix", "gfx1100": "rdna3"}
    args = doc["platforms"]["linux"]["rocm"]["args"]
    i = next(k for k, a in enumerate(args) if "toolboxes" in a)
    args[i] = f"{registry.host}/{repo}:{{arch_alias}}"
    recipe = tmp_path / "alias.json"
    recipe.write_text(json.dumps(doc, indent=2))
    before = recipe.read_bytes()
    r = lemonpack("pin", str(recipe), check=False)
    assert r.returncode == 1
    assert "arch gfx1151 (alias strix)" in r.stderr and layout_tags(example_layout)[image_tag] in r.stderr
    assert "arch gfx1100 (alias rdna3): cannot resolve" in r.stderr
    assert recipe.read_bytes() == before


@pytest.mark.parametrize("content", [
    "[1, 2]\n",  # a JSON array
    json.dumps({"default": [{"type": "insecureAcceptAnything"}],
                "transports": {"docker": {"r.example": [{"type": "sigstoreSigned", "keyPath": "/k.pub"}]}}}),
    "{not json\n",
])
@pytest.mark.parametrize("check", [True, False])
def test_pin_refuses_a_file_that_is_not_a_recipe(tmp_path, content, check):
    """A wrong path in CI (an array, a containers-policy.json, broken JSON) must fail, exit 2,
    never pass as "every container image is pinned" / "nothing to pin"; rules named as lint names them."""
    f = tmp_path / "not-a-recipe.json"
    f.write_text(content)
    r = lemonpack("pin", str(f), *(["--check"] if check else []), check=False)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert f"{f}: not a recipe" in r.stderr and "pinned" not in r.stdout and "nothing to pin" not in r.stdout
    lint = lemonpack("lint", str(f), check=False)
    rules = {line.rsplit("[", 1)[1] for line in lint.stdout.splitlines() + lint.stderr.splitlines() if "[" in line}
    assert rules and all(f"[{rule}" in r.stderr for rule in rules)
    assert "[json]" not in r.stderr
    assert f.read_text() == content
