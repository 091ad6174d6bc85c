"""``lemonpack publish RECIPE.json --to HOST/REPO[:TAG]`` against the real docker-registry, with
skopeo as the oracle: a tag names the recipe's image index (one manifest per target), no tag
pushes every tag of the build under its own name."""

from __future__ import annotations

import hashlib
import json
import secrets
import subprocess
from pathlib import Path

import pytest

from lemonpack.examples import EXAMPLE_RECIPE, serve_mirror
from support.registry import lemonpack
from support.tools import need

pytestmark = pytest.mark.slow


@pytest.fixture
def multi_recipe(tmp_path):
    """The shipped example with a second platform block (linux rocm): two targets."""
    r = json.loads(EXAMPLE_RECIPE.read_text())
    r["recipe"] = "trial-multi"
    r["platforms"]["linux"]["rocm"] = dict(r["platforms"]["linux"]["cpu"])
    path = tmp_path / "trial-multi.json"
    path.write_text(json.dumps(r, indent=2))
    return path


def _raw(ref: str) -> bytes:
    return subprocess.run(["skopeo", "inspect", "--raw", "--tls-verify=false", f"docker://{ref}"],
                          capture_output=True, check=True).stdout


def _publish(registry, recipe: Path, tag: str | None) -> tuple[str, list[dict]]:
    """Publish ``recipe`` to a fresh repository (``:tag`` when given); (repo, the ``pushed`` list)."""
    need("skopeo")
    repo = f"trial-{secrets.token_hex(3)}/multi"
    with serve_mirror() as mirror:
        out = lemonpack("publish", str(recipe), "--to", f"{registry.host}/{repo}" + (f":{tag}" if tag else ""),
                        "--mirror", mirror, "--json", "--no-progress")
    return repo, json.loads(out.stdout)["pushed"]


def test_a_multi_target_recipe_publishes_its_index_under_the_tag(registry, multi_recipe):
    repo, pushed = _publish(registry, multi_recipe, "v1")
    assert [(p["tag"], p["source"], p["mediaType"]) for p in pushed] == [
        ("v1", "trial-multi", "application/vnd.oci.image.index.v1+json")]
    raw = _raw(f"{registry.host}/{repo}:v1")
    assert "sha256:" + hashlib.sha256(raw).hexdigest() == pushed[0]["digest"]
    index = json.loads(raw)
    assert index["mediaType"] == "application/vnd.oci.image.index.v1+json"
    children = index["manifests"]
    assert sorted(m["annotations"]["dev.lemonpack.target"] for m in children) == ["linux-cpu", "linux-rocm"]
    for m in children:
        assert m["platform"]["os"] == "linux" and m["platform"]["architecture"]
        child = _raw(f"{registry.host}/{repo}@{m['digest']}")  # every manifest the index names is there
        assert "sha256:" + hashlib.sha256(child).hexdigest() == m["digest"]
        assert json.loads(child)["mediaType"] == m["mediaType"]


def test_without_a_tag_every_tag_of_the_build_is_pushed(registry, multi_recipe):
    repo, listed = _publish(registry, multi_recipe, None)
    pushed = {p["tag"]: p["digest"] for p in listed}
    assert sorted(pushed) == ["trial-multi", "trial-multi.linux-cpu", "trial-multi.linux-rocm"]
    for tag, digest in pushed.items():
        assert "sha256:" + hashlib.sha256(_raw(f"{registry.host}/{repo}:{tag}")).hexdigest() == digest
    index = json.loads(_raw(f"{registry.host}/{repo}:trial-multi"))
    assert sorted(m["digest"] for m in index["manifests"]) == sorted(
        pushed[t] for t in ("trial-multi.linux-cpu", "trial-multi.linux-rocm"))
